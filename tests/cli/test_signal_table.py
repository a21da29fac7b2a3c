"""The sweep-signal table against the real command: whatever the moment, a signal ends ``fedrun`` (a run or a
sweep) with 128 + its number and one line that fits what was started; a signal inherited as ignored (nohup,
``&`` in a script) stays ignored.

Before: SIGINT 0.5-1.4 s after launch landed inside ``import torch`` (a 33-line traceback, or exit 2 blaming
the input for a half-imported torch, or a segfault); SIGTERM 1 s into a sweep ended it with no line; a single
run's line talked about a sweep; ``nohup fedrun ... &`` ended at logout (exit 129).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedrun.run.checkpoint import CHECKPOINT_FILE
from tests.conftest import REPO
from tests.dispositions import foreground, inheriting
from tests.pause_worker import PAUSED
from tests.run.test_resume import SMALL

LONG = [*SMALL, "fl.rounds=400"]  # runs for many seconds: a signal at these moments always lands before its end
SWEEP = ["-m", *LONG, "seed=0,1"]
# (case, arguments, signal, seconds after launch, is a sweep): moments from Python's start to the first round
SWEEP_SIGNAL = [
    ("run-sigint-at-0.3s", LONG, signal.SIGINT, 0.3, False),
    ("run-sigint-at-0.9s", LONG, signal.SIGINT, 0.9, False),  # torch is being imported here on a 2-core CPU
    ("run-sigterm-at-1.5s", LONG, signal.SIGTERM, 1.5, False),
    ("sweep-sigterm-at-0.6s", SWEEP, signal.SIGTERM, 0.6, True),
    ("sweep-sigterm-at-1.2s", SWEEP, signal.SIGTERM, 1.2, True),
    ("sweep-sighup-at-2.5s", SWEEP, signal.SIGHUP, 2.5, True),
    # the red team's next round
    ("run-sigterm-at-0.6s", LONG, signal.SIGTERM, 0.6, False),  # while torch is imported
    ("run-sighup-at-1.2s", LONG, signal.SIGHUP, 1.2, False),  # logout while torch is imported
    ("sweep-sigint-at-0.4s", SWEEP, signal.SIGINT, 0.4, True),
]
CATEGORY = "sweep-signal"
CASES = SWEEP_SIGNAL


def _start(args: list[str], tmp_path: Path, ignored: tuple[int, ...] = ()) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    where = [f"hydra.run.dir={tmp_path / 'run'}", f"hydra.sweep.dir={tmp_path / 'sweep'}", f"cache_dir={tmp_path}/c"]
    return subprocess.Popen(
        [sys.executable, "-m", "fedrun.cli", *args, *where], cwd=tmp_path, env=env, preexec_fn=inheriting(ignored),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


@pytest.mark.parametrize(("case", "args", "sig", "after_s", "sweep"), SWEEP_SIGNAL, ids=[c[0] for c in SWEEP_SIGNAL])
def test_a_signal_at_any_moment_is_128_plus_n_and_one_line(
    tmp_path: Path, case: str, args: list[str], sig: signal.Signals, after_s: float, sweep: bool
) -> None:
    proc = _start(args, tmp_path)
    _wait_routed(proc, sig)  # before, a loaded machine could start Python so late that the signal killed it
    time.sleep(after_s)  # the moment: any moment from here on must end the same way, so this is no race
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 128 + sig, err
    assert "Traceback" not in err and "partially initialized" not in err
    last = [ln for ln in err.splitlines() if ln.startswith("fedrun: ") and sig.name in ln]
    assert len(last) == 1 and err.strip().splitlines()[-1] == last[0], err
    if sweep:
        in_job = "; resume the sweep with: fedrun -m " in last[0]  # the job's line: the command, pinned to its dir
        assert in_job or "resumes a sweep" in last[0] or last[0].endswith("nothing was started; run the command again")
    else:
        assert "sweep" not in last[0], err
    if not sweep or "job" not in last[0]:
        assert len(err.strip().splitlines()) == 1, err


def _wait_routed(proc: subprocess.Popen[str], sig: signal.Signals) -> None:
    """Until the process catches ``sig`` (its bit in /proc/<pid>/status's SigCgt): before that moment no program can
    answer a signal with a line, so the table's moments count from it."""
    deadline = time.monotonic() + 600  # a bound, not a timing
    status = Path(f"/proc/{proc.pid}/status")
    while not int(re.findall(r"^SigCgt:\s*([0-9a-f]+)", status.read_text(), re.M)[0], 16) >> (sig - 1) & 1:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.005)


def test_nohup_keeps_a_run_going_at_logout(tmp_path: Path) -> None:
    """SIGHUP (logout) and SIGINT, ignored when the run started, are ignored; the run completes (exit 0)."""
    proc = _start([*SMALL], tmp_path, ignored=(signal.SIGHUP, signal.SIGINT))
    deadline = time.monotonic() + 300
    while not (tmp_path / "run" / CHECKPOINT_FILE).is_file():
        assert proc.poll() is None and time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.01)
    proc.send_signal(signal.SIGHUP)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "completed"


def test_the_command_routes_signals_before_its_heavy_imports() -> None:
    """The ``fedrun`` script's entry (pyproject.toml) is fedrun/cli/__main__.py's ``main``, whose module imports
    nothing heavy: before, the script imported fedrun.cli.main (Hydra, pandas) before any handler was set."""
    entry = re.search(r'^fedrun = "([^"]+)"', (REPO / "pyproject.toml").read_text(), re.M)
    assert entry is not None and entry.group(1) == "fedrun.cli.__main__:main"
    code = (
        "import sys, fedrun.cli.__main__; print(sorted({'hydra', 'pandas', 'torch', 'omegaconf'} & set(sys.modules)))"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_a_sweep_stopped_mid_job_prints_one_line(tmp_path: Path, sig: signal.Signals) -> None:
    """sweep-signal: a signal inside a job (its first round recorded) ends the sweep with 128+n and one line that
    names the job's folder. Before: two more lines, the job's 'interrupted: ...' log line on stderr and its
    'job 0 [<every override>]: interrupted, last-k acc ...' line on stdout."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    sweep = tmp_path / "sweep"
    args = [*SWEEP, f"hydra.sweep.dir={sweep}", f"cache_dir={tmp_path}/c"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.pause_worker", "round:2", *args], cwd=tmp_path, env=env, preexec_fn=foreground,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 600  # a bound, not a timing: job 0 waits in round 2 for the signal
    while not (tmp_path / PAUSED).exists():
        assert proc.poll() is None and time.monotonic() < deadline, "job 0 did not reach round 2"
        time.sleep(0.02)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 128 + sig, err
    (job,) = [p.name for p in sweep.iterdir() if p.is_dir()]
    resume = shlex.join(
        ["fedrun", *[a for a in args if not a.startswith("hydra.sweep.dir=")], f"hydra.sweep.dir={sweep}"]
    )
    assert err.splitlines() == [f"fedrun: stopped by {sig.name} in job 0 [{job}]; resume the sweep with: {resume}"], err
    assert "interrupted" not in out and out.splitlines()[-1] == f"[1/2] {job}: started", out
