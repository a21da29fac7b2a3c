"""Resume after SIGKILL gives the uninterrupted run's metrics; divergence stops a run and keeps its checkpoint."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
import torch

from fedrun.cli import main as cli
from fedrun.config.schema import RunSpec
from fedrun.engines.sequential import SequentialEngine
from fedrun.host.interrupts import Interrupted
from fedrun.run.checkpoint import CHECKPOINT_FILE, load_checkpoint
from fedrun.run.loop import run
from fedrun.storage.atomic import TIMING_COLUMNS
from tests.conftest import REPO, compose_cfg
from tests.pause_worker import PAUSED
from tests.run.run_util import interrupted_copy

# A run of a few seconds: 600 Fashion-MNIST images, 4 clients, a 32-unit MLP, a checkpoint every round;
# dropout under vmap, so that an exact resume also needs torch's global RNG handled.
SMALL = [
    "experiment=smoke",
    "data.max_train_samples=600",
    "data.max_test_samples=200",
    "fl.clients=4",
    "fl.rounds=8",
    "model.hidden=[32]",
    "model.dropout=0.5",
    "hardware.threads=1",
    "hardware.engine=vectorised",  # pinned: auto times the engines, and dropout masks differ between them
    "output.plots=false",
    "output.quiet=true",
    "checkpoint.every=1",
]
TIMINGS = list(TIMING_COLUMNS)


def _metrics(run_dir: Path) -> pd.DataFrame:
    return pd.read_csv(run_dir / "metrics.csv").drop(columns=TIMINGS)


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def _start(args: list[str], tmp_path: Path) -> subprocess.Popen:
    """``fedrun ARGS`` in ``tmp_path``, paused in the middle of round 3 (tests/pause_worker.py)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "tests.pause_worker", "round:3", *args]
    return subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _kill_at_pause(proc: subprocess.Popen, cwd: Path) -> None:
    """SIGKILL once the run is at its pause: an event, so a loaded machine cannot let the run end first."""
    deadline = time.monotonic() + 600  # a bound, not a timing
    while not (cwd / PAUSED).exists():
        assert proc.poll() is None, "the run ended before its pause"
        assert time.monotonic() < deadline, "the run did not reach its pause"
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def test_sigkill_then_resume_gives_the_uninterrupted_metrics(tmp_path: Path, make_spec: Callable[..., RunSpec]) -> None:
    killed = tmp_path / "run"
    proc = _start([*SMALL, f"hydra.run.dir={killed}", f"cache_dir={tmp_path / 'cache'}"], tmp_path)
    _kill_at_pause(proc, tmp_path)
    assert _summary(killed)["status"] == "running"  # really killed mid-run, not after the end
    at_kill = load_checkpoint(killed / CHECKPOINT_FILE).round
    assert 1 <= at_kill < 8

    # ``fedrun resume=<dir>``, in-process; re-running the same command is tested in a sweep (test_sweep_faults)
    cli.resume(killed, [])
    resumed = _summary(killed)
    assert resumed["status"] == "completed"
    assert resumed["resumed_from_round"] >= at_kill

    reference = tmp_path / "reference"
    reference.mkdir()
    run(make_spec(*SMALL), reference)
    assert len(_metrics(reference)) == 8
    pd.testing.assert_frame_equal(_metrics(killed), _metrics(reference), check_exact=True)


def _interrupted_copy(
    tmp_path: Path, make_spec: Callable[..., RunSpec], monkeypatch: pytest.MonkeyPatch, at: int
) -> tuple[Path, Path]:
    """An uninterrupted run, and a run dir holding what a run killed after round ``at`` leaves behind."""
    return interrupted_copy(make_spec(*SMALL), tmp_path, monkeypatch, at)


def test_resume_dir_continues_then_skips_and_refuses_another_config(
    tmp_path: Path, make_spec: Callable[..., RunSpec], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    full, partial = _interrupted_copy(tmp_path, make_spec, monkeypatch, at=3)
    cli.resume(partial, [])
    assert _summary(partial)["resumed_from_round"] == 3
    pd.testing.assert_frame_equal(_metrics(partial), _metrics(full), check_exact=True)

    before = {p.name: p.stat().st_mtime_ns for p in partial.iterdir()}
    cli.resume(partial, [])  # finished: nothing is run again
    assert "already completed" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        cli.resume(partial, ["fl.lr=0.1"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "different config (fl.lr: 0.05 -> 0.1)" in err
    with pytest.raises(SystemExit) as e:
        cli.resume(partial, ["fl.lr=-1"])  # invalid *and* an earlier run there: reported, nothing wiped
    assert e.value.code == 2
    assert {p.name: p.stat().st_mtime_ns for p in partial.iterdir()} == before


class _PoisonRound3(SequentialEngine):
    """Client 2 of the cohort uploads NaNs in round 3 (index 2)."""

    cohorts: list[list[int]] = []

    def train_cohort(self, rnd, params, extras, clients, states, lr):  # noqa: ANN001, ANN201
        res = super().train_cohort(rnd, params, extras, clients, states, lr)
        if rnd == 2:
            type(self).cohorts.append(clients.tolist())
            first = next(iter(res.uploads["params"]))
            res.uploads["params"][first][2] = float("nan")
        return res


def test_divergence_stops_names_round_and_client_and_keeps_last_checkpoint(
    tmp_path: Path, make_spec: Callable[..., RunSpec], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("fedrun.run.experiment.select_engine", lambda spec, pinned=None: _PoisonRound3)
    summary = run(make_spec(*SMALL), tmp_path)
    assert summary["status"] == "diverged"
    assert summary["diverged_round"] == 3
    assert summary["diverged_client"] == _PoisonRound3.cohorts[-1][2]
    assert "round 3" in summary["error"]
    assert _summary(tmp_path)["status"] == "diverged"
    assert list(pd.read_csv(tmp_path / "metrics.csv")["round"]) == [1, 2]
    ck = load_checkpoint(tmp_path / CHECKPOINT_FILE)
    assert ck.round == 2 and all(bool(torch.isfinite(t).all()) for t in ck.params.values())


def test_huge_lr_diverges_with_nonzero_exit(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    cfg = compose_cfg([*SMALL, "fl.lr=1e10", f"cache_dir={tmp_path / 'cache'}"])
    with pytest.raises(SystemExit) as e:
        cli.execute(cfg, tmp_path / "run", multirun=False)
    assert e.value.code == 1
    s = _summary(tmp_path / "run")
    assert s["status"] == "diverged" and s["diverged_round"] == 1 and s["diverged_client"] is not None
    assert "diverged" in capsys.readouterr().err


def test_keep_final_false_removes_the_checkpoint_of_a_finished_run(
    tmp_path: Path, make_spec: Callable[..., RunSpec]
) -> None:
    summary = run(make_spec(*SMALL, "fl.rounds=2", "checkpoint.keep_final=false"), tmp_path)
    assert summary["status"] == "completed"
    assert not (tmp_path / CHECKPOINT_FILE).exists()


def _run_dir(tmp_path: Path, name: str, *overrides: str) -> Path:
    """A finished run of SMALL + ``overrides`` through the CLI path (config.yaml, summary.json, checkpoint)."""
    run_dir = tmp_path / name
    cli.execute(compose_cfg([*SMALL, *overrides, f"cache_dir={tmp_path / 'cache'}"]), run_dir, multirun=False)
    return run_dir


def test_a_finished_run_extended_with_more_rounds_equals_the_longer_run(
    tmp_path: Path, make_spec: Callable[..., RunSpec]
) -> None:
    short = _run_dir(tmp_path, "short", "fl.rounds=4", "eval.every=3")  # rows 3 and 4 (the last is evaluated)
    assert list(pd.read_csv(short / "metrics.csv")["round"]) == [3, 4]
    cli.resume(short, ["fl.rounds=8", "eval.train_acc=true"])  # an evaluation setting may change too
    s = _summary(short)
    assert s["status"] == "completed" and s["resumed_from_round"] == 4 and s["rounds_completed"] == 8
    reference = tmp_path / "reference"
    reference.mkdir()
    run(make_spec(*SMALL, "fl.rounds=8", "eval.every=3"), reference)
    extended = _metrics(short)
    assert list(extended["round"]) == [
        3,
        6,
        8,
    ]  # round 4, the short run's last, is not one the long run evaluates
    assert extended["train_acc"].isna().tolist() == [True, False, False]  # measured from the extension on
    pd.testing.assert_frame_equal(extended.drop(columns=["train_acc", "train_loss"]), _metrics(reference))


def test_extending_keeps_imas_start_round_or_is_refused(
    tmp_path: Path, make_spec: Callable[..., RunSpec], capsys: pytest.CaptureFixture
) -> None:
    short = _run_dir(tmp_path, "short", "fl.rounds=4", "ima.enabled=true", "ima.window=2")  # t_s = int(0.75 x 4) = 3
    with pytest.raises(SystemExit) as e:
        cli.resume(short, ["fl.rounds=8"])  # t_s would move to 6: rounds 4.. of the short run differ
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert "ima.start: its round moves from 3 to 6 (fl.rounds 4 -> 8)" in err and "(ima.start=0.375)" in err
    cli.resume(short, ["fl.rounds=8", "ima.start=0.375"])  # int(0.375 x 8) = 3: the same IMA run, longer
    reference = tmp_path / "reference"
    reference.mkdir()
    run(make_spec(*SMALL, "fl.rounds=8", "ima.enabled=true", "ima.window=2", "ima.start=0.375"), reference)
    pd.testing.assert_frame_equal(_metrics(short), _metrics(reference), check_exact=True)


def test_runs_that_cannot_be_extended_are_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    no_checkpoint = _run_dir(tmp_path, "a", "fl.rounds=2", "checkpoint.keep_final=false")
    finished = _run_dir(tmp_path, "b", "fl.rounds=3")
    capsys.readouterr()
    for run_dir, overrides, says in (
        (no_checkpoint, ["fl.rounds=4"], "kept no final checkpoint (checkpoint.keep_final=false)"),
        (finished, ["fl.rounds=2"], "holds a completed run of 3 rounds; valid: fl.rounds >= 3"),
        (finished, ["fl.rounds=4", "fl.lr=0.1"], "different config (fl.lr: 0.05 -> 0.1)"),
        (finished, ["fl.rounds=4", "eval.every=2"], "different config (eval.every: 1 -> 2)"),
    ):
        before = {p.name: p.stat().st_mtime_ns for p in run_dir.iterdir()}
        with pytest.raises(SystemExit) as e:
            cli.resume(run_dir, overrides)
        assert e.value.code == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and says in err, err
        assert {p.name: p.stat().st_mtime_ns for p in run_dir.iterdir()} == before


class _InterruptedInRound7(SequentialEngine):
    """Ctrl-C while round 7 (index 6) trains: rounds 1-6 have finished, the last checkpoint is of round 5."""

    def train_cohort(self, rnd, params, extras, clients, states, lr):  # noqa: ANN001, ANN201
        if rnd == 6:
            raise Interrupted(signal.SIGINT)
        return super().train_cohort(rnd, params, extras, clients, states, lr)


def _interrupt_in_round_7(monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """Interrupt round 7 while its cohort trains, or after it aggregated (in its evaluation): either way the
    round has not finished, and what it changed (client states, IMA's window, updated in place) must not be saved."""
    if where == "training":
        monkeypatch.setattr("fedrun.run.experiment.select_engine", lambda spec, pinned=None: _InterruptedInRound7)
        return
    import fedrun.run.rounds as rounds

    real, calls = rounds.evaluate, [0]

    def evaluate(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls[0] += 1
        if calls[0] == 7:  # eval.every=1, test split only: the 7th evaluation is round 7's
            raise Interrupted(signal.SIGINT)
        return real(*args, **kwargs)

    monkeypatch.setattr(rounds, "evaluate", evaluate)


@pytest.mark.parametrize(
    ("method", "where"),
    [
        (["algorithm=scaffold"], "training"),
        (["algorithm=scaffold"], "evaluation"),
        (["ima.enabled=true", "ima.start=0.25", "ima.window=3"], "evaluation"),
    ],
)
def test_an_interrupt_between_checkpoints_saves_its_last_finished_round_and_resumes_exactly(
    tmp_path: Path,
    make_spec: Callable[..., RunSpec],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
    method: list[str],
    where: str,
) -> None:
    args = [*(o for o in SMALL if not o.startswith("hardware.engine")), "hardware.engine=sequential", *method]
    args += ["checkpoint.every=5", "eval.every=1"]
    run_dir = tmp_path / "run"
    with monkeypatch.context() as patched:
        _interrupt_in_round_7(patched, where)
        with pytest.raises(SystemExit) as e:
            cli.execute(compose_cfg([*args, f"cache_dir={tmp_path / 'cache'}"]), run_dir, multirun=False)
    assert e.value.code == 130
    err = capsys.readouterr().err.strip().splitlines()
    saved = "interrupted by SIGINT (checkpoint of round 6 saved)"
    assert err[-1] == f"fedrun: {run_dir}: {saved}; resume it with: fedrun resume={run_dir}"
    assert load_checkpoint(run_dir / CHECKPOINT_FILE).round == 6  # not the every-5 checkpoint of round 5
    s = _summary(run_dir)
    assert s["status"] == "interrupted" and s["checkpoint_round"] == 6 and s["rounds_completed"] == 6
    assert len(_metrics(run_dir)) == 6  # round 7's row, written before its evaluation failed or not, is not kept

    cli.resume(run_dir, [])
    assert "resuming after round 6 of 8" in capsys.readouterr().err
    assert _summary(run_dir)["status"] == "completed" and _summary(run_dir)["resumed_from_round"] == 6
    reference = tmp_path / "reference"
    reference.mkdir()
    run(make_spec(*args), reference)
    pd.testing.assert_frame_equal(_metrics(run_dir), _metrics(reference), check_exact=True)
    got, want = load_checkpoint(run_dir / CHECKPOINT_FILE), load_checkpoint(reference / CHECKPOINT_FILE)
    for name in ("params", "server_state", "client_states"):
        mine, theirs = _flat(getattr(got, name)), _flat(getattr(want, name))
        assert mine.keys() == theirs.keys() and all(torch.equal(v, theirs[k]) for k, v in mine.items()), name


def _flat(tree: dict, prefix: str = "") -> dict[str, torch.Tensor]:
    """A tensor tree as ``{"a/b": tensor}``."""
    out: dict[str, torch.Tensor] = {}
    for k, v in tree.items():
        out.update(_flat(v, f"{prefix}{k}/") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


class _CtrlCInRound7(SequentialEngine):
    """A real Ctrl-C (SIGINT to this process) while round 7 trains."""

    def train_cohort(self, rnd, params, extras, clients, states, lr):  # noqa: ANN001, ANN201
        if rnd == 6:
            os.kill(os.getpid(), signal.SIGINT)
        return super().train_cohort(rnd, params, extras, clients, states, lr)


@pytest.mark.usefixtures("foreground_signals")
def test_a_second_ctrl_c_while_the_interrupted_run_saves_leaves_the_earlier_checkpoint_whole(
    tmp_path: Path, make_spec: Callable[..., RunSpec], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Ctrl-C in round 7, then a second one half way through writing the checkpoint of round 6: the process ends at
    once (130, one more line with the resume command), the checkpoint of round 5 is whole, no temp file is left, and
    resuming from it gives the uninterrupted metrics."""
    import fedrun.run.checkpoint as checkpoint
    from fedrun.storage.atomic import TEMP_SUFFIX, atomic_write_with

    args = [*(o for o in SMALL if not o.startswith("hardware.engine")), "hardware.engine=sequential"]
    args += ["checkpoint.every=5", "eval.every=1"]
    run_dir = tmp_path / "run"
    real, saves = checkpoint.atomic_write, [0]

    def second_signal_half_way(path: Path, data: bytes) -> None:
        saves[0] += 1
        if saves[0] == 1:  # the checkpoint of round 5
            real(path, data)
            return

        def write(tmp: Path) -> None:
            tmp.write_bytes(data[: len(data) // 2])
            os.kill(os.getpid(), signal.SIGINT)  # the second Ctrl-C: its handler raises here
            tmp.write_bytes(data)

        atomic_write_with(path, write)

    with monkeypatch.context() as patched:
        patched.setattr("fedrun.run.experiment.select_engine", lambda spec, pinned=None: _CtrlCInRound7)
        patched.setattr(checkpoint, "atomic_write", second_signal_half_way)
        with pytest.raises(SystemExit) as e:
            cli.execute(compose_cfg([*args, f"cache_dir={tmp_path / 'cache'}"]), run_dir, multirun=False)
    assert saves[0] == 2
    assert e.value.code == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"fedrun: {run_dir}: SIGINT again: stopping now, without finishing up; resume it with: fedrun resume={run_dir}"
    ]
    assert load_checkpoint(run_dir / CHECKPOINT_FILE).round == 5
    assert not [p for p in run_dir.iterdir() if TEMP_SUFFIX.search(p.name)]
    assert _summary(run_dir)["status"] == "interrupted"

    cli.resume(run_dir, [])
    assert _summary(run_dir)["resumed_from_round"] == 5
    reference = tmp_path / "reference"
    reference.mkdir()
    run(make_spec(*args), reference)
    pd.testing.assert_frame_equal(_metrics(run_dir), _metrics(reference), check_exact=True)
