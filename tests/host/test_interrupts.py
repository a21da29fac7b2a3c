"""Signals end a run like Ctrl-C: status interrupted, last checkpoint kept, exit 128 + signum, one line; a sweep
stops (the KeyboardInterrupt is re-raised after the summary); a second signal exits at once in one line."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from fedrun.cli import main as cli
from fedrun.config.validate import validate
from fedrun.engines.sequential import SequentialEngine
from fedrun.host.interrupts import SIGNALS, Interrupted, interrupts, loading
from fedrun.run.checkpoint import CHECKPOINT_FILE, load_checkpoint
from fedrun.run.loop import run
from tests.conftest import REPO, compose_cfg
from tests.dispositions import foreground, inheriting
from tests.pause_worker import PAUSED
from tests.run.test_resume import SMALL, _metrics, _summary

# rounds 1-7 of 10 finished, the last checkpoint of round 5: an interrupt in round 8 saves round 7
BETWEEN = [*(a for a in SMALL if not a.startswith("checkpoint.every")), "fl.rounds=10", "checkpoint.every=5"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> pd.DataFrame:
    """The metrics of the run of :data:`BETWEEN` run through (make_spec's settings): what each interrupted run must
    resume to (read only, so the three signals share it)."""
    base = tmp_path_factory.mktemp("reference")
    quiet = ["output.quiet=true", "output.plots=false", f"cache_dir={base / 'cache'}"]
    reference = base / "run"
    reference.mkdir()
    run(validate(compose_cfg([*quiet, *BETWEEN])), reference)
    return _metrics(reference)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_mid_run_ends_it_as_interrupted_and_a_rerun_resumes_exactly(
    tmp_path: Path, uninterrupted: pd.DataFrame, sig: signal.Signals
) -> None:
    """The signal lands in the middle of round 8 (trained and aggregated, not yet recorded): the checkpoint then
    holds round 7, and the printed command resumes from it to the uninterrupted run's metrics."""
    run_dir = tmp_path / "run"
    args = [*BETWEEN, f"hydra.run.dir={run_dir}", f"cache_dir={tmp_path / 'cache'}"]
    err = tmp_path / "stderr.txt"
    proc = _popen(args, tmp_path, err, pause="round:8")
    _wait_paused(proc, tmp_path)
    proc.send_signal(sig)
    assert proc.wait(timeout=300) == 128 + sig
    lines = err.read_text().strip().splitlines()
    assert "Traceback" not in err.read_text()
    saved = f"interrupted by {sig.name} (checkpoint of round 7 saved)"
    assert lines[-1] == f"fedrun: {run_dir}: {saved}; resume it with: fedrun resume={run_dir}"
    s = _summary(run_dir)
    assert s["status"] == "interrupted" and s["signal"] == sig.name and s["rounds_completed"] == 7
    assert load_checkpoint(run_dir / CHECKPOINT_FILE).round == 7

    cli.resume(run_dir, [])
    assert _summary(run_dir)["status"] == "completed" and _summary(run_dir)["resumed_from_round"] == 7
    pd.testing.assert_frame_equal(_metrics(run_dir), uninterrupted, check_exact=True)


def _popen(args: list[str], tmp_path: Path, stderr: Path, pause: str) -> subprocess.Popen:
    """``fedrun ARGS`` in a subprocess in ``tmp_path``, paused at ``pause`` (tests/pause_worker.py), its stderr to the
    file ``stderr``."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with stderr.open("w") as f:
        cmd = [sys.executable, "-m", "tests.pause_worker", pause, *args]
        return subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=f, preexec_fn=foreground)


def _wait_paused(proc: subprocess.Popen, cwd: Path) -> None:
    """Until the run is at its pause (the file ``paused``): an event, not a time, so a loaded machine waits longer."""
    deadline = time.monotonic() + 600  # a bound for a broken run, not a timing
    while not (cwd / PAUSED).exists():
        assert proc.poll() is None and time.monotonic() < deadline, "the run ended before its pause"
        time.sleep(0.01)


def test_ctrl_c_during_start_up_is_one_line_and_its_command_starts_the_run(tmp_path: Path) -> None:
    """Ctrl-C once the run dir is started (config.yaml), before round 1: one line, exit 130, and the command it
    prints, pasted in a shell in another folder, runs the run in that directory (a folder name with a space: quoted).
    Before: the run sometimes ended (exit 0) before a signal sent when config.yaml appeared was handled."""
    run_dir = tmp_path / "my run"
    args = [*SMALL, f"hydra.run.dir='{run_dir}'", f"cache_dir={tmp_path / 'cache'}"]
    err = tmp_path / "stderr.txt"
    proc = _popen(args, tmp_path, err, pause="start-up")
    _wait_paused(proc, tmp_path)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=300) == 130
    text = err.read_text()
    assert "Traceback" not in text and len(text.strip().splitlines()) == 1, text
    how = "no round had finished; run it from round 1 with: fedrun"
    assert text.strip() == f"fedrun: {run_dir}: interrupted by SIGINT; {how} 'resume={run_dir}'"

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    pasted = text.strip().split("with: fedrun ", 1)[1]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    res = subprocess.run(
        f"{shlex.quote(sys.executable)} -m fedrun.cli {pasted}", shell=True, cwd=elsewhere, env=env,
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert _summary(run_dir)["status"] == "completed" and len(_metrics(run_dir)) == 8
    assert list(elsewhere.iterdir()) == []


@pytest.mark.usefixtures("foreground_signals")
def test_a_second_signal_exits_at_once_with_one_line(capsys: pytest.CaptureFixture) -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    with pytest.raises(SystemExit) as e, interrupts("job 3"):
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        except Interrupted as first:
            assert first.signum == signal.SIGINT
            os.kill(os.getpid(), signal.SIGTERM)  # while finishing up
            time.sleep(5)
    assert e.value.code == 128 + signal.SIGTERM
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fedrun: job 3: SIGTERM again: stopping now")
    assert {s: signal.getsignal(s) for s in before} == before  # the handlers are given back


class _InterruptedInRound3(SequentialEngine):
    def train_cohort(self, rnd, params, extras, clients, states, lr):  # noqa: ANN001, ANN201
        if rnd == 2:
            raise Interrupted(signal.SIGTERM)
        return super().train_cohort(rnd, params, extras, clients, states, lr)


@pytest.mark.parametrize("multirun", [False, True])
def test_an_interrupt_writes_the_summary_then_exits_or_stops_the_sweep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, multirun: bool
) -> None:
    monkeypatch.setattr("fedrun.run.experiment.select_engine", lambda spec, pinned=None: _InterruptedInRound3)
    run_dir = tmp_path / "run"
    cfg = compose_cfg([*SMALL, "hardware.engine=sequential", f"cache_dir={tmp_path / 'cache'}"])
    with pytest.raises(KeyboardInterrupt if multirun else SystemExit) as e:
        cli.execute(cfg, run_dir, multirun=multirun, label="job 0 [x=1]" if multirun else "")
    err = capsys.readouterr().err
    if multirun:  # for fedrun.cli.main.main, which prints the sweep's one line naming the job
        assert isinstance(e.value, Interrupted) and e.value.signum == signal.SIGTERM
        assert e.value.job == "job 0 [x=1]" and "resume it with" not in err  # its run log only
    else:
        assert e.value.code == 128 + signal.SIGTERM
        assert f"interrupted by SIGTERM (checkpoint of round 2 saved); resume it with: fedrun resume={run_dir}" in err
    s = json.loads((run_dir / "summary.json").read_text())
    assert s["status"] == "interrupted" and s["error"] == "interrupted by SIGTERM" and s["rounds_completed"] == 2
    assert load_checkpoint(run_dir / CHECKPOINT_FILE).round == 2


# A child that routes signals as fedrun does, then imports a slow module or works for a while; it tells the test
# (file ``ready``) when the moment has come.
CHILD = """
import pathlib, sys, time
from fedrun.host.interrupts import exit_code, interrupts, loading, signal_name
mode = sys.argv[1]
record = lambda signum: pathlib.Path("recorded").write_text(str(signum))
ctx = loading("run it again") if mode.startswith("loading") else interrupts("job 0", "run it again", record)
try:
    with ctx:
        if mode.endswith("import"):
            import slowmod
        else:
            pathlib.Path("ready").touch()
            end = time.monotonic() + 600  # until the test releases it (a bound, not a timing)
            while not pathlib.Path("release").exists() and time.monotonic() < end:
                time.sleep(0.01)
except KeyboardInterrupt as e:
    print("caught", signal_name(e), "slowmod" in sys.modules)  # True: the import was let finish
    sys.exit(exit_code(e))
print("finished")
"""
# A module whose import lasts until the test releases it; it says when a first signal was held back (the watcher
# thread that re-sends it runs), so that the test sends a second one only then (two SIGINTs pending merge into one).
SLOWMOD = """
import pathlib, threading, time
pathlib.Path("ready").touch()
end = time.monotonic() + 600
while not pathlib.Path("release").exists() and time.monotonic() < end:
    if any(t.name == "fedrun-interrupt" for t in threading.enumerate()):
        pathlib.Path("held").touch()
    time.sleep(0.01)
"""
HUP, INT, TERM = signal.SIGHUP, signal.SIGINT, signal.SIGTERM
AGAIN = "fedrun: job 0: {} again: stopping now, without finishing up; run it again"
# The sweep-signal table, moments and inheritances: (case, mode, ignored at start, sent, exit code, stderr, stdout).
# Before: a signal inside an import raised there (a 33-line traceback, a half-imported torch, crashes); SIGHUP
# under nohup and SIGINT in a job started with & by a script ended the run.
SWEEP_SIGNAL = [
    ("sigint-inside-an-import", "import", (), (INT,), 130, "", "caught SIGINT True"),
    ("sigterm-inside-an-import", "import", (), (TERM,), 143, "", "caught SIGTERM True"),
    ("sigint-twice-inside-an-import", "import", (), (INT, INT), 130, AGAIN.format("SIGINT"), ""),
    ("sigterm-then-sighup-inside-an-import", "import", (), (TERM, HUP), 129, AGAIN.format("SIGHUP"), ""),
    ("sighup-while-loading", "loading-import", (), (HUP,), 129, "fedrun: stopped by SIGHUP; run it again", ""),
    ("sigint-while-loading", "loading-import", (), (INT,), 130, "fedrun: stopped by SIGINT; run it again", ""),
    ("sigterm-mid-work", "work", (), (TERM,), 143, "", "caught SIGTERM False"),
    ("sighup-under-nohup", "work", (HUP,), (HUP,), 0, "", "finished"),
    ("sigint-under-&-from-a-script", "work", (INT,), (INT,), 0, "", "finished"),
    ("sighup-under-nohup-while-loading", "loading-import", (HUP,), (HUP,), 0, "", "finished"),
    ("sigterm-under-nohup", "work", (HUP, INT), (HUP, INT, TERM), 143, "", "caught SIGTERM False"),
]


@pytest.mark.parametrize(
    ("case", "mode", "ignored", "sent", "code", "err", "out"), SWEEP_SIGNAL, ids=[c[0] for c in SWEEP_SIGNAL]
)
def test_sweep_signal_table(
    tmp_path: Path, case: str, mode: str, ignored: tuple, sent: tuple, code: int, err: str, out: str
) -> None:
    (tmp_path / "child.py").write_text(CHILD)
    (tmp_path / "slowmod.py").write_text(SLOWMOD)
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{tmp_path}"}

    proc = subprocess.Popen(
        [sys.executable, str(tmp_path / "child.py"), mode], cwd=tmp_path, env=env, preexec_fn=inheriting(ignored),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    _wait_for(tmp_path / "ready", proc)
    for n, s in enumerate(sent):
        proc.send_signal(s)  # an ignored signal is dropped by the kernel before send_signal returns
        if n < len(sent) - 1 and mode == "import" and s not in ignored:
            _wait_for(tmp_path / "held", proc)  # the first is held back until the import ends: now the second
    if out:  # the child goes on until released (a signal that ends it at once needs no release)
        (tmp_path / "release").touch()
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == code, stderr
    assert stderr.strip() == err and stdout.strip() == out
    recorded = tmp_path / "recorded"  # on_exit: only when a second signal ends the process at once
    assert recorded.read_text() == str(int(sent[-1])) if len(sent) == 2 and not ignored else not recorded.exists()


def _wait_for(file: Path, proc: subprocess.Popen) -> None:
    """Until ``file`` appears (an event: a loaded machine only makes the wait longer)."""
    deadline = time.monotonic() + 600  # a bound for a broken child, not a timing
    while not file.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.005)


def test_a_signal_ignored_at_start_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    import fedrun.host.interrupts as mod

    monkeypatch.setattr(mod, "IGNORED_AT_START", frozenset({int(signal.SIGHUP)}))
    assert mod.handled_signals() == (signal.SIGINT, signal.SIGTERM)
    before = signal.getsignal(signal.SIGHUP)
    with interrupts("x"):
        assert signal.getsignal(signal.SIGHUP) is before
        assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN)


@pytest.mark.usefixtures("foreground_signals")
def test_a_second_signal_to_the_command_names_no_job(capsys: pytest.CaptureFixture) -> None:
    """fedrun.cli.main.main routes signals with no label (composing, between a sweep's jobs)."""
    with pytest.raises(SystemExit) as e, interrupts("", "the same command resumes a sweep"):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        except Interrupted:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
    assert e.value.code == 130
    err = capsys.readouterr().err
    assert err == "fedrun: SIGINT again: stopping now, without finishing up; the same command resumes a sweep\n"


@pytest.mark.usefixtures("foreground_signals")
def test_loading_hands_over_to_the_next_interrupts_with_no_moment_unrouted() -> None:
    """fedrun/cli/__main__.py: after its modules load, loading's handler stays until fedrun.cli.main.main's own
    routing replaces it, which puts back what was there before loading. Before, the moments in between (limits,
    Hydra's patches) were left to the default action: a SIGTERM 1.5 s in killed the process without a line."""
    before = {s: signal.getsignal(s) for s in SIGNALS}
    with loading("nothing was started", handover=True):
        pass
    between = {s: signal.getsignal(s) for s in SIGNALS}
    assert all(between[s] is not before[s] and between[s] not in (signal.SIG_DFL, signal.SIG_IGN) for s in SIGNALS)
    with interrupts("", "run it again"):
        assert all(signal.getsignal(s) is not between[s] for s in SIGNALS)
    assert {s: signal.getsignal(s) for s in SIGNALS} == before
