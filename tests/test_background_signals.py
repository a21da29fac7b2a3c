"""``nohup make test > log 2>&1 &`` from a script passes: the tests that send SIGINT, SIGTERM or SIGHUP start
their target as a terminal would (tests/dispositions.py), so a signal inherited as ignored, which fedrun leaves
alone on purpose (fedrun/host/interrupts.py), does not swallow theirs.

Before (issue 51): the background suite took 1 h 20 min and failed 18 tests, every SIGINT/SIGHUP one, each
child paused until its 600 s limit waiting for a signal that never came.
"""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

# one test per way a test sends a signal, run with SIGINT and SIGHUP ignored as nohup and a script's & start it
UNDER_NOHUP = (
    # to its own process (the foreground_signals fixture)
    "tests/host/test_interrupts.py::test_a_second_signal_exits_at_once_with_one_line",
    # to a child that starts with its signals at their defaults, or some ignored on purpose (inheriting())
    "tests/host/test_interrupts.py::test_sweep_signal_table[sigint-twice-inside-an-import]",
    "tests/host/test_interrupts.py::test_sweep_signal_table[sighup-under-nohup]",
    # to the real command (SIGHUP during start-up)
    "tests/cli/test_signal_table.py::test_a_signal_at_any_moment_is_128_plus_n_and_one_line[run-sighup-at-1.2s]",
)
# the interpreter that runs them checks first that it did inherit both ignored
INNER = (
    "import signal, sys, pytest\n"
    "assert signal.getsignal(signal.SIGINT) == signal.getsignal(signal.SIGHUP) == signal.SIG_IGN\n"
    "sys.exit(pytest.main(['-p', 'no:cacheprovider', '-p', 'no:xdist', '-o', 'addopts=', '-q', *sys.argv[1:]]))\n"
)


def _nohup_and_ampersand() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


def test_signal_tests_pass_when_the_suite_starts_with_sigint_and_sighup_ignored(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("PYTEST_XDIST_WORKER", None)
    res = subprocess.run(
        [sys.executable, "-c", INNER, *UNDER_NOHUP, f"--basetemp={tmp_path / 'inner'}"], cwd=REPO, env=env,
        preexec_fn=_nohup_and_ampersand, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert f"{len(UNDER_NOHUP)} passed" in res.stdout, res.stdout[-2000:]


def _sent_signals(tree: ast.AST) -> tuple[bool, bool]:
    """(sends a signal other than SIGKILL to another process, to its own process) in a module's syntax tree."""
    other = own = False
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute) or not node.args:
            continue
        name, sig = node.func.attr, ast.unparse(node.args[-1])
        if sig.endswith("SIGKILL"):
            continue
        if name == "send_signal":
            other = True
        elif name == "kill" and ast.unparse(node.func.value) == "os":
            own = own or ast.unparse(node.args[0]) == "os.getpid()"
            other = other or ast.unparse(node.args[0]) != "os.getpid()"
    return other, own


def test_every_test_that_sends_a_signal_sets_its_targets_dispositions() -> None:
    """A test file that signals a child starts every child with a ``preexec_fn`` (tests/dispositions.py); one that
    signals its own process uses the ``foreground_signals`` fixture. (The other modules under tests/ are workers
    that a test starts: tests/forkserver.py's client ends itself by its child's signal, put back to the default.)"""
    checked = 0
    for path in sorted((REPO / "tests").rglob("test_*.py")):
        text = path.read_text()
        tree = ast.parse(text)
        other, own = _sent_signals(tree)
        if other:
            checked += 1
            popens = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n.func).endswith("Popen")]
            bare = [n.lineno for n in popens if not any(k.arg == "preexec_fn" for k in n.keywords)]
            assert not bare, f"{path.relative_to(REPO)}: Popen without preexec_fn at lines {bare}"
        if own:
            checked += 1
            assert "foreground_signals" in text, f"{path.relative_to(REPO)}: signals itself without the fixture"
    assert checked >= 5  # test_interrupts (both), test_signal_table, test_sweeps, test_resume
