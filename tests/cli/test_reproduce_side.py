"""A -smoke target's commands side by side in forked processes (fedrun/cli/reproduce_side.py): the jobs, folders,
numbers and metrics of the same commands run in one process; the choice of how many; a failure and a signal."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from fedrun.cli import reproduce, reproduce_side
from fedrun.cli.reproduce_side import choose, job_starts, run_side_by_side
from fedrun.cli.reproduce_sweep import run_commands
from fedrun.host.interrupts import Interrupted
from fedrun.papers.targets import BY_NAME
from fedrun.storage.atomic import TIMING_COLUMNS
from tests.dispositions import foreground
from tests.reproduce_child import COMMAND, env, started

REPO = Path(__file__).resolve().parents[2]


def _smoke(out: Path, methods: list[str], fractions: str = "0.0,1.0") -> list[list[str]]:
    """fedcos-table2's -smoke commands of ``methods`` (one per method), as fedrun-reproduce hands them over."""
    target = replace(BY_NAME["fedcos-table2"], sweep=(("partition.iid_fraction", fractions),))
    return [cmd[4:] for cmd in reproduce.commands(target, out, smoke=True, methods=methods)]


def _metrics(root: Path) -> dict[str, pd.DataFrame]:
    return {
        str(f.parent.relative_to(root)): pd.read_csv(f).drop(columns=list(TIMING_COLUMNS), errors="ignore")
        for f in sorted(root.rglob("metrics.csv"))
    }


def test_side_by_side_runs_the_jobs_of_one_process_into_the_same_folders_with_the_same_numbers(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    methods = ["FedAvg", "FedProx(0.1)", "FedCos(0.02)"]
    assert run_commands(_smoke(tmp_path / "one", methods)) == 0
    one = capfd.readouterr().out.splitlines()
    assert run_side_by_side(_smoke(tmp_path / "two", methods), 2, "--parallel 2") == 0
    two = capfd.readouterr().out.splitlines()
    assert two[:2] == [
        f"sweep of 6 jobs in {tmp_path / 'two' / 'fedcos_table2_fmnist_mlp'}",
        "side by side: commands 1-3 run in 2 processes (--parallel 2)",
    ]
    # each job's end line once, numbered as one process numbers it (the order is the workers')
    ends = lambda lines: sorted(re.sub(r" \(\d+\.\d s\)$", "", ln) for ln in lines if ln.startswith("["))  # noqa: E731
    assert ends(two) == ends(one) and len(ends(one)) == 6
    assert [ln[:5] for ln in sorted(ends(one))][:2] == ["[1/6]", "[2/6]"]
    a, b = _metrics(tmp_path / "one"), _metrics(tmp_path / "two")
    assert list(a) == list(b) and len(a) == 6
    for name in a:
        pd.testing.assert_frame_equal(a[name], b[name])
    # each run says how it ran (summary.json's parallel), as a job of `fedrun -m` side by side does
    ran = lambda root: [json.loads(f.read_text()).get("parallel") for f in root.rglob("summary.json")]  # noqa: E731
    assert ran(tmp_path / "two") == [{"workers": 2, "selection": "--parallel 2"}] * 6
    assert ran(tmp_path / "one") == [None] * 6


def test_a_command_that_fails_is_counted_and_the_others_run(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    good, bad = _smoke(tmp_path, ["FedAvg", "FedProx(0.1)"], "1.0")
    bad = [*bad[:-1], "fl.nonsense=1", bad[-1]]
    assert job_starts([good, bad]) == ([0, 1], 2)
    assert run_side_by_side([good, bad], 2, "--parallel 2") == 1
    out, err = capfd.readouterr()
    assert "fl.nonsense" in err and "completed" in out
    assert len(list(tmp_path.rglob("summary.json"))) == 1


def test_how_many_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    cmds = [["-m", "hardware.engine=sequential", f"hydra.sweep.dir=/x/{i}"] for i in range(3)]
    monkeypatch.setattr(reproduce_side, "measured", lambda: {"threads": 8, "cores": 8})
    assert choose("auto", cmds) == (3, "auto: 8 of 8 cores idle")  # never more than the commands
    assert choose("2", cmds) == (2, "--parallel 2")
    assert choose("off", cmds) == (1, "--parallel off")
    monkeypatch.setattr(reproduce_side, "measured", lambda: {"threads": 1, "cores": 2})
    assert choose("auto", cmds)[0] == 1
    stacking = [[*c, "hardware.engine=auto"] for c in cmds]  # the last setting counts: these may stack
    assert choose("4", stacking) == (1, "jobs that may stack train in one process")


@pytest.mark.parametrize(
    ("args", "word"), [(["--smoke", "--parallel", "two"], "not valid"), (["--parallel", "2"], "a --smoke option")]
)
def test_a_bad_parallel_is_one_line_and_exit_2(
    args: list[str], word: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert reproduce.main(["run", "fedcos-table2", *args, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fedrun-reproduce: error: --parallel:") and word in err[0]
    assert "valid: auto, off" in err[0] and not (tmp_path / "o").exists()


def test_a_signal_stops_every_worker_and_the_same_command_resumes(tmp_path: Path) -> None:
    """SIGINT to fedrun-reproduce (its workers are in a process group of their own): each worker's job stops as a
    run stops, the command ends 130 with one line; run again, every job ends completed (the stopped ones resume)."""
    args = ["run", "fedcos-table2", "--smoke", "--methods", "FedAvg,FedProx(0.1)"]
    args += ["--set", "partition.iid_fraction=1.0"]
    args += ["--parallel", "2", "--out", str(tmp_path / "o")]
    args += ["--override", "fl.rounds=400", "--override", "eval.every=1"]
    proc = started(args, tmp_path, runs=2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert err.strip().splitlines()[-1] == "fedrun-reproduce: stopped by SIGINT; the same command resumes the runs"
    status = [json.loads(f.read_text())["status"] for f in tmp_path.rglob("summary.json")]
    assert status == ["interrupted", "interrupted"], out
    again = subprocess.run([*COMMAND, *args], capture_output=True, text=True, env=env(), cwd=tmp_path, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stdout.count(": completed") == 2
    for metrics in tmp_path.rglob("metrics.csv"):
        assert pd.read_csv(metrics)["round"].tolist() == list(range(1, 401))


def test_workers_whose_parent_is_killed_stop_their_jobs_and_keep_their_rounds(tmp_path: Path) -> None:
    """SIGKILL to fedrun-reproduce: its workers (a process group of their own, so the kill does not reach them)
    see their life line end and stop their jobs as on SIGTERM, each run interrupted with its last round kept."""
    args = ["run", "fedcos-table2", "--smoke", "--methods", "FedAvg,FedProx(0.1)"]
    args += ["--set", "partition.iid_fraction=1.0", "--parallel", "2", "--out", str(tmp_path / "o")]
    args += ["--override", "fl.rounds=400", "--override", "eval.every=1", "--override", "checkpoint.every=1"]
    proc = started(args, tmp_path, runs=2, capture=False)
    deadline = time.monotonic() + 60
    proc.kill()
    proc.wait()
    status: list[str] = []
    while time.monotonic() < deadline:
        status = [json.loads(f.read_text()).get("status", "") for f in tmp_path.rglob("summary.json")]
        if status == ["interrupted", "interrupted"]:
            break
        time.sleep(0.2)
    assert status == ["interrupted", "interrupted"]
    for metrics in tmp_path.rglob("metrics.csv"):
        assert 0 < len(pd.read_csv(metrics)) < 400


@pytest.mark.usefixtures("foreground_signals")
def test_interrupted_is_raised_after_the_workers_end() -> None:
    """The parent's wait: a forwarded signal ends it with :class:`Interrupted`, its workers' codes counted."""
    pid = os.fork()
    if pid == 0:  # a worker that a signal stops as fedrun's would: 128 + SIGTERM
        signal.signal(signal.SIGTERM, lambda *_: os._exit(128 + signal.SIGTERM))
        time.sleep(30)
        os._exit(0)
    killer = subprocess.Popen(["sh", "-c", f"sleep 0.5; kill -TERM {os.getpid()}"], preexec_fn=foreground)
    with pytest.raises(Interrupted) as stopped:
        reproduce_side.wait_forwarding([pid])
    killer.wait()
    assert stopped.value.signum == signal.SIGTERM
