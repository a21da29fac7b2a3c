"""Sweeps that can grow (job directories named by what varies, keyed by config), that show themselves while they
run (their directory, a live table or one line per job), and that stop on Ctrl-C."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from fedrun.cli import sweeps
from fedrun.cli.sweeps import varying_keys
from fedrun.config.identity import config_key
from fedrun.report.collect import load_runs
from fedrun.report.sweep_console import SweepConsole
from fedrun.run.job_dirs import LABEL_CHARS, find_job_dir, job_dir_name, job_label, new_folder_name
from fedrun.run.recorder import ROW_RECORD
from fedrun.run.sweep_index import find_jobs, read_index, record_job
from tests.conftest import REPO, compose_cfg, main_exit_code

TINY = [
    "experiment=smoke",
    "data.max_train_samples=300",
    "data.max_test_samples=100",
    "fl.clients=3",
    "fl.rounds=1",
    "model.hidden=[16]",
    "hardware.engine=sequential",
    "hardware.threads=1",
    "output.plots=false",
    "checkpoint.every=0",
]


def _key(overrides: list[str]) -> str:
    return config_key(OmegaConf.to_container(compose_cfg(overrides), resolve=True))  # type: ignore[arg-type]


def test_the_job_dir_is_what_varies_then_a_hash_of_the_result_relevant_config() -> None:
    """Before: the 12-hex hash alone (``382f9ed5382c``), which told a user nothing."""
    name = job_dir_name(compose_cfg(["seed=0"]), ["seed=0"])
    assert name == _key(["seed=0"])[:8]  # nothing varies: the hash alone
    assert job_dir_name(compose_cfg(["seed=0"]), ["algorithm=fedavg", "seed=0"], {"seed"}) == f"seed=0-{name}"
    jobs = ["algorithm=fedprox", "seed=1", "fl.rounds=2"]
    assert job_dir_name(compose_cfg(jobs), jobs, {"algorithm", "seed"}) == f"algorithm=fedprox,seed=1-{_key(jobs)[:8]}"
    # the same config however the command spells it; settings that do not change results do not count
    assert job_dir_name(compose_cfg([]), []) == name
    assert job_dir_name(compose_cfg(["output.plots=false", "checkpoint.every=1", "cache_dir=/x"]), []) == name
    assert job_dir_name(compose_cfg(["seed=1"]), []) != name
    assert job_dir_name(compose_cfg(["algorithm=fedprox"]), []) != job_dir_name(compose_cfg(["algorithm=fedavg"]), [])
    # a config that does not resolve is keyed by its overrides (validation then names the field in error.txt)
    bad = job_dir_name(compose_cfg(["fl.lr=${undefined.key}"]), ["fl.lr=${undefined.key}"])
    assert bad.startswith("unresolved-") and bad != job_dir_name(compose_cfg(["fl.lr=${x}"]), ["fl.lr=${x}"])


def test_folder_names_are_safe_and_bounded() -> None:
    """No '/', no quote or space, never hidden, at most LABEL_CHARS before the hash; the hash keeps them apart."""
    assert job_label(["++tags.method='FedProx(0.1)'", "seed=0"], {"tags.method"}) == "tags.method=FedProx(0.1)"
    assert job_label(["data.root=/data/a b", "seed=1"], {"data.root", "seed"}) == "data.root=%2Fdata%2Fa%20b,seed=1"
    assert job_label(["tags.x=ü;$(rm)"], {"tags.x"}) == "tags.x=%C3%BC%3B%24(rm)"
    assert job_label([".x=1"], {".x"}).startswith("%2E")
    long = "model.hidden=[" + ",".join(["512"] * 60) + "]"
    label = job_label([long, "seed=3"], {"model.hidden", "seed"})
    assert label.startswith("model.hidden=[512,512") and "...," in label and label.endswith("seed=3")
    many = [f"tags.k{i}={'v' * 30}" for i in range(10)]
    assert len(job_label(many, {f"tags.k{i}" for i in range(10)})) == LABEL_CHARS
    a = new_folder_name(None, job_label([long], {"model.hidden"}), "a" * 64)
    b = new_folder_name(None, job_label([long.replace("]", ",1]")], {"model.hidden"}), "b" * 64)
    assert a.rsplit("-", 1)[0] == b.rsplit("-", 1)[0] and a != b  # cut the same: the hash still tells them apart
    assert "/" not in a and len(a.encode()) < 255


def test_varying_keys_are_the_swept_ones_in_command_order() -> None:
    line = ["algorithm=fedavg,fedprox", "fl.rounds=2", "model.hidden=[16,16]", "seed=range(3)", "++tags.m='a,b'"]
    assert varying_keys(line) == ["algorithm", "seed"]
    assert varying_keys(["seed=0"], {"fl.lr": "tag(log, interval(1e-4, 1))", "fl.mu": "0.1"}) == ["fl.lr"]


def test_a_job_finds_its_folder_by_its_hash_whatever_the_rest_of_its_name(tmp_path: Path) -> None:
    """A grown sweep varies more keys (new names), and sweeps of older fedrun named folders by the 12-hex hash:
    either way a job finds its folder by the hash, and a short hash shared with another config is not taken."""
    key, other = _key(["seed=0"]), _key(["seed=1"])
    (tmp_path / "index.yaml").write_text("{}")
    assert find_job_dir(tmp_path, key) is None
    (tmp_path / key[:12]).mkdir()  # an old sweep's folder
    assert find_job_dir(tmp_path, key) == key[:12]
    (tmp_path / key[:12]).rmdir()
    (tmp_path / f"seed=0-{key[:8]}").mkdir()  # a sweep that varied only the seed
    assert find_job_dir(tmp_path, key) == f"seed=0-{key[:8]}"
    assert job_dir_name(compose_cfg(["seed=0"]), ["seed=0", "algorithm=fedavg"], {"seed", "algorithm"}, tmp_path) == (
        f"seed=0-{key[:8]}"
    )
    # another config's folder that ends in this key's short hash (a collision): not this job's
    clash = tmp_path / f"algorithm=x-{key[:8]}"
    (tmp_path / f"seed=0-{key[:8]}").rmdir()
    clash.mkdir()
    (clash / "config.yaml").write_text(yaml.safe_dump(OmegaConf.to_container(compose_cfg(["seed=1"]))))
    assert find_job_dir(tmp_path, key) is None
    assert find_job_dir(tmp_path, other) is None  # its hash is not other's either
    assert new_folder_name(tmp_path, "seed=0", key) == f"seed=0-{key[:12]}"


def test_the_index_maps_each_job_dir_to_the_overrides_that_last_ran_it(tmp_path: Path) -> None:
    record_job(tmp_path, "aaa", ["seed=0", "algorithm=fedavg"])
    record_job(tmp_path, "bbb", ["seed=1", "++tags.method='FedProx(0.1)'"])
    record_job(tmp_path, "aaa", ["algorithm=fedavg", "seed=0", "fl.rounds=3"])
    assert read_index(tmp_path) == {
        "aaa": "algorithm=fedavg seed=0 fl.rounds=3",
        "bbb": "seed=1 ++tags.method='FedProx(0.1)'",
    }
    assert find_jobs(tmp_path, "seed=0") == [tmp_path / "aaa"]
    assert find_jobs(tmp_path, "seed=1", "++tags.method='FedProx(0.1)'") == [tmp_path / "bbb"]
    assert (tmp_path / "index.yaml").read_text().startswith("# fedrun sweep: job directory")


def test_a_sweep_grows_by_its_new_jobs_only_and_the_report_sees_each_config_once(
    run_cli: Callable, tmp_path: Path
) -> None:
    """seed=0 -> seed=0,1 under two methods: with job-number directories the second command met other configs
    in jobs 1 and 2 (refused) and ran FedProx seed 0 again; keyed by config, it runs only the two new jobs."""
    sweep = tmp_path / "run"
    first = run_cli("-m", *TINY, "algorithm=fedavg,fedprox", "seed=0")
    assert first.returncode == 0, first.stderr
    done = {p: (p / "metrics.csv").stat().st_mtime_ns for p in find_jobs(sweep, "seed=0")}
    assert len(done) == 2

    second = run_cli("-m", *TINY, "algorithm=fedavg,fedprox", "seed=0,1")
    assert second.returncode == 0, second.stderr
    assert second.stdout.count("skipped (already done") == 2
    assert {p: (p / "metrics.csv").stat().st_mtime_ns for p in done} == done  # reused, not rerun
    jobs = [p for p in sweep.iterdir() if p.is_dir()]
    assert len(jobs) == 4 and sorted(p.name for p in jobs) == sorted(read_index(sweep))
    # the first command varied the method only, the second also the seed: the old folders keep their names
    assert sorted(p.name.rsplit("-", 1)[0] for p in jobs) == [
        "algorithm=fedavg",
        "algorithm=fedavg,seed=1",
        "algorithm=fedprox",
        "algorithm=fedprox,seed=1",
    ]
    for p in jobs:
        assert json.loads((p / "summary.json").read_text())["status"] == "completed"
    runs = load_runs([sweep])
    assert len(runs) == 4 and runs.groupby(["algorithm", "seed"]).size().tolist() == [1, 1, 1, 1]


def test_ctrl_c_stops_a_sweep(tmp_path: Path) -> None:
    """Ctrl-C in job 0 ends the sweep (exit 130, one line); before, the next job started and the sweep exited 0."""
    sweep = tmp_path / "sweep"
    long = [*TINY, "fl.rounds=400", "checkpoint.every=1"]
    job0 = sweep / job_dir_name(compose_cfg([*long, "seed=0"]), ["seed=0"], {"seed"})
    cmd = [sys.executable, "-m", "fedrun.cli", "-m", *long, "seed=0,1", f"hydra.sweep.dir={sweep}"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([*cmd, f"cache_dir={tmp_path / 'cache'}"], cwd=tmp_path, env=env, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    deadline = time.monotonic() + 180
    while not (job0 / "checkpoint.pt").is_file():
        assert proc.poll() is None and time.monotonic() < deadline, "job 0 wrote no checkpoint"
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "fedrun: stopped by SIGINT; the same command (same hydra.sweep.dir) resumes a sweep" in err
    assert "Traceback" not in err
    assert json.loads((job0 / "summary.json").read_text())["status"] == "interrupted"
    assert list(read_index(sweep)) == [job0.name]  # job 1 never started


def _sweep(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *args: str) -> object:
    where = [f"hydra.sweep.dir={tmp_path / 'sweep'}", f"cache_dir={tmp_path / 'cache'}"]
    return main_exit_code(monkeypatch, ["fedrun", "-m", *TINY, *args, *where])


def test_a_sweep_prints_its_dir_and_one_line_per_job_start_and_end_off_a_terminal(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Before: Hydra's '#0 : <every override>' lines, three log lines per job and round on stderr, each with every
    override, and neither the sweep's directory nor how to make its table."""
    monkeypatch.chdir(tmp_path)
    assert _sweep(monkeypatch, tmp_path, "algorithm=fedavg,fedprox", "seed=0,1") == 0
    out, err = capsys.readouterr()
    sweep = tmp_path / "sweep"
    names = [f"algorithm={a},seed={s}" for a in ("fedavg", "fedprox") for s in (0, 1)]
    folders = {p.name.rsplit("-", 1)[0]: p.name for p in sweep.iterdir() if p.is_dir()}
    assert sorted(folders) == names
    lines = out.splitlines()
    assert lines[0] == f"sweep of 4 jobs in {sweep}"
    for n, name in enumerate(names, 1):
        assert lines[2 * n - 1] == f"[{n}/4] {folders[name]}: started"
        assert re.fullmatch(
            rf"\[{n}/4\] {re.escape(folders[name])}: completed, acc \d+\.\d\d% \(\d+\.\d s\)", lines[2 * n]
        )
    assert lines[9] == f"sweep done (4 completed): {sweep}; its table: fedrun-report table {sweep}"
    assert len(lines) == 10 and err == ""

    # grown by a seed: the four are skipped (found by their hash), the two new ones run
    assert _sweep(monkeypatch, tmp_path, "algorithm=fedavg,fedprox", "seed=0,1,2") == 0
    out, err = capsys.readouterr()
    assert out.count("skipped (already done, acc ") == 4 and out.count(": started") == 2 and err == ""
    assert "sweep done (2 completed, 4 skipped)" in out
    assert len([p for p in sweep.iterdir() if p.is_dir()]) == 6


def test_the_live_table_follows_the_jobs_on_a_terminal(tmp_path: Path) -> None:
    """On a terminal the jobs are a live table: each job's status, round, accuracy so far; at the end the line."""
    from rich.console import Console

    buf = io.StringIO()
    term = Console(file=buf, force_terminal=True, force_interactive=True, width=120, color_system=None)
    console = SweepConsole("outputs/multirun/x", total=2, console=term)
    done, running = tmp_path / "a-1", tmp_path / "b-2"
    done.mkdir()
    (done / "summary.json").write_text(
        json.dumps({"status": "completed", "test_acc_last_k": 0.5, "rounds_completed": 3})
    )
    running.mkdir()
    log = logging.getLogger("fedrun")
    with sweeps.watching(console):
        assert sweeps.reporting() and sweeps.round_echo("job 0") is None
        first = console.job_started(0, "seed=0-1", 3, tmp_path / "new-0")
        log.info("round 2/3", extra={ROW_RECORD: {"round": 2, "test_acc": 0.4}})
        table = _render(console)
        assert re.search(r"│ 1 │ seed=0-1 +│ running +│ +2/3 │ +40\.00% │", table), table
        assert "0 done (0 failed), 1 running, 1 queued" in table
        console.job_ended(first, done)
        assert re.search(r"│ 1 │ seed=0-1 +│ completed +│ +3/3 │ +50\.00% │", _render(console))
        console.finish()
    assert not sweeps.reporting() and sweeps.round_echo("job 0") == "job 0"
    shown = buf.getvalue()
    assert "completed" in shown and shown.rstrip().endswith(
        "sweep done (1 completed): outputs/multirun/x; its table: fedrun-report table outputs/multirun/x"
    )


def _render(console: SweepConsole) -> str:
    from rich.console import Console

    out = Console(file=io.StringIO(), width=120, color_system=None)
    out.print(console.table())
    return out.file.getvalue()  # type: ignore[attr-defined]


def test_a_config_cannot_point_fedruns_callback_at_other_code(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    code = _sweep(monkeypatch, tmp_path, "seed=0,1", "hydra.callbacks.fedrun_sweep._target_=builtins.print")
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("fedrun: error: hydra.callbacks.fedrun_sweep: refused") and err.count("\n") == 1
