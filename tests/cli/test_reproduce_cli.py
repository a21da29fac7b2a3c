"""``fedrun-reproduce list`` / ``run TARGET``; ``--dry-run`` prints ``fedrun -m ...`` and ``fedrun-report ...`` lines
that a POSIX shell runs as they are (one is run through ``bash -c`` here, shrunk to one job)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fedrun.cli import report, reproduce
from fedrun.cli.reproduce_sweep import expand, split_command
from fedrun.papers.targets import BY_NAME
from tests.conftest import REPO
from tests.reproduce_child import started

BIN = Path(sys.executable).parent  # the venv's console scripts: fedrun, fedrun-report


def test_help_lists_the_subcommands(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as info:
        reproduce.main(["--help"])
    out = capsys.readouterr().out
    assert info.value.code == 0 and out.startswith("usage: fedrun-reproduce") and "list" in out and "run" in out
    with pytest.raises(SystemExit) as info:
        reproduce.main(["run", "--help"])
    out = capsys.readouterr().out
    assert info.value.code == 0 and "--dry-run" in out and "--smoke" in out and "TARGET" in out


def test_no_arguments_is_the_usage_and_exit_2(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as info:
        reproduce.main([])
    assert info.value.code == 2 and "SUBCOMMAND" in capsys.readouterr().err


def test_an_unknown_target_is_one_line_naming_the_valid_ones(capsys: pytest.CaptureFixture) -> None:
    assert reproduce.main(["run", "fedlaw-table99"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fedrun-reproduce: error: unknown target 'fedlaw-table99'; valid: ")
    assert "fedlaw-table3" in err


def test_the_module_runs_as_the_console_script_does() -> None:
    """pyproject.toml's ``fedrun-reproduce = fedrun.cli.console:reproduce`` (this main), through ``python -m``."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "fedrun.cli.reproduce", "--help"], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0 and "usage: fedrun-reproduce" in proc.stdout, proc.stderr
    scripts = (REPO / "pyproject.toml").read_text()
    assert 'fedrun-reproduce = "fedrun.cli.console:reproduce"' in scripts
    assert not (REPO / "scripts" / "reproduce.py").exists()


def test_quoting_is_readable_and_exact() -> None:
    words = ["fedrun", "-m", "++tags.method='FedAvg'", "a=$HOME", "b='x'$y", "c=1,2", "d=hello world"]
    line = reproduce.shell_line(words)
    assert line.startswith("""fedrun -m "++tags.method='FedAvg'" 'a=$HOME' """)
    assert shlex.split(line) == words


@pytest.mark.parametrize("bad", ["it's", "a,b", "a=b", "x(1)"])
def test_an_out_hydra_cannot_read_back_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture, bad: str) -> None:
    assert reproduce.main(["run", "fedcos-table2", "--dry-run", "--out", str(tmp_path / bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fedrun-reproduce: error: --out: ")


def _dry_run(capsys: pytest.CaptureFixture, *args: str) -> list[str]:
    assert reproduce.main(["run", *args, "--dry-run"]) == 0
    return capsys.readouterr().out.splitlines()


def test_an_override_ends_every_command_and_a_hydra_key_is_refused(capsys: pytest.CaptureFixture) -> None:
    """``--override KEY=VALUE`` (``hardware.stack=off``: the jobs one after another) is each command's last setting,
    after the smoke shrink's; Hydra's own keys are fedrun-reproduce's and are refused in one line."""
    lines = _dry_run(capsys, "fedcos-table2", "--smoke", "--override", "hardware.stack=off", "--override", "seed=3")
    commands = [shlex.split(line) for line in lines if line.startswith("fedrun -m ")]
    assert len(commands) == 9 and all(words[-3:-1] == ["hardware.stack=off", "seed=3"] for words in commands)
    for bad in ("hydra.run.dir=x", "hardware.stack"):
        assert reproduce.main(["run", "fedcos-table2", "--dry-run", "--override", bad]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"fedrun-reproduce: error: --override: '{bad}' is not a run")


@pytest.mark.parametrize("smoke", [False, True])
def test_dry_run_lines_are_fedrun_and_fedrun_report_invocations(
    tmp_path: Path, capsys: pytest.CaptureFixture, smoke: bool
) -> None:
    out = tmp_path / "a dir with spaces"
    lines = _dry_run(capsys, "fedlaw-table3", "--out", str(out), *(["--smoke"] if smoke else []))
    target = BY_NAME["fedlaw-table3"]
    cmds = reproduce.commands(target, out, smoke)
    assert len(lines) == len(cmds) + (1 if smoke else 2)
    for line, cmd in zip(lines, cmds, strict=False):
        words = shlex.split(line)
        assert words[:2] == ["fedrun", "-m"] and words[1:] == cmd[3:], line
        assert "++tags.method='" in line and "\"++tags.method='" in line  # Hydra's quotes, readable in the shell
        sweep_dir, overrides = split_command(words[1:])
        assert sweep_dir.parent.parent == out and expand(overrides)  # every job's overrides parse
    report_lines = [shlex.split(line) for line in lines[len(cmds) :]]
    assert report_lines[0] == ["fedrun-report", *reproduce.report_args(target, out)]
    for words in report_lines:
        assert words[0] == "fedrun-report" and words[1] in report.SUBCOMMANDS
        args = report.parse_args(words[2:], words[1])
        assert Path(args.dirs[0]) == out


@pytest.mark.skipif(not (BIN / "fedrun").exists() or shutil.which("bash") is None, reason="needs the fedrun script")
def test_a_printed_smoke_line_runs_in_bash(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "a $dir here"  # what the shell would expand or split, too
    args = ["fedcos-table2", "--smoke", "--methods", "FedAvg", "--set", "partition.iid_fraction=1.0", "--out", str(out)]
    lines = _dry_run(capsys, *args)
    assert len(lines) == 2 and lines[0].startswith("fedrun -m ") and lines[1].startswith("fedrun-report table ")
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(REPO)}
    for line in lines:
        proc = subprocess.run(["bash", "-c", line], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
        assert proc.returncode == 0, f"{line}\n{proc.stderr[-2000:]}"
    (summary,) = out.rglob("summary.json")
    assert json.loads(summary.read_text())["status"] == "completed"
    assert [p.parent.name for p in out.rglob("report_fedcos.md")] == ["reports"]


def test_a_closed_stdout_ends_quietly(monkeypatch: pytest.MonkeyPatch) -> None:
    """``fedrun-reproduce list | head``: the reader went away; exit 0, no traceback, stdout pointed at devnull."""
    duped: list[int] = []

    def closed(argv: list[str]) -> int:
        raise BrokenPipeError

    monkeypatch.setattr(reproduce, "_main", closed)
    monkeypatch.setattr(reproduce.os, "dup2", lambda fd, fd2: duped.append(fd2))
    monkeypatch.setattr(sys, "stdout", type("Out", (), {"fileno": lambda self: 1, "flush": lambda self: None})())
    assert reproduce.main(["list"]) == 0 and duped == [1]


def test_a_signal_reaches_a_full_sweeps_fedrun_once_and_the_command_ends_130(tmp_path: Path) -> None:
    """A full sweep's ``fedrun -m`` runs in a session of its own: SIGINT to fedrun-reproduce (as Ctrl-C at the
    terminal, which then reaches it alone) is passed on once, the job stops as a run stops (its last round kept, not
    killed by a second signal), and the command ends 130 with one line and no table."""
    shrink = ["data.max_train_samples=300", "data.max_test_samples=100", "fl.clients=5", "fl.rounds=400"]
    shrink += ["fl.local_steps=1", "fl.batch_size=4", "eval.every=1", "hardware.threads=1"]
    shrink += ["hardware.engine=sequential"]
    args = ["run", "fedcos-table2", "--methods", "FedAvg", "--set", "partition.iid_fraction=1.0", "--out", "o"]
    args += [w for o in shrink for w in ("--override", o)]
    proc = started(args, tmp_path, runs=1)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert err.strip().splitlines()[-1] == "fedrun-reproduce: stopped by SIGINT; the same command resumes the runs"
    assert "| FedAvg" not in out  # no table of an unfinished sweep
    summaries = [json.loads(f.read_text()) for f in tmp_path.rglob("summary.json")]
    assert [s["status"] for s in summaries] == ["interrupted"] and 0 < summaries[0]["rounds_completed"] < 400
