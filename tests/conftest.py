"""Shared fixtures: compose a validated run spec in-process, run the CLI in a subprocess, tiny real data."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from fedrun.cli import hydra_patches
from fedrun.cli.main import CONF_DIR
from fedrun.config.schema import RunSpec
from fedrun.config.validate import validate

REPO = Path(__file__).resolve().parent.parent


def compose_cfg(overrides: list[str]):  # noqa: ANN201 - a DictConfig
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        return compose(config_name="config", overrides=overrides)


def dir_snapshot(folder: Path) -> dict[str, bytes | str]:
    """Every entry below ``folder``: file bytes, ``dir`` or the target of a symlink (a folder left byte for byte
    compares equal)."""
    out: dict[str, bytes | str] = {}
    for p in sorted(folder.rglob("*")):
        key = str(p.relative_to(folder))
        out[key] = f"-> {os.readlink(p)}" if p.is_symlink() else "dir" if p.is_dir() else p.read_bytes()
    return out


def main_exit_code(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> object:
    """Run ``fedrun`` in-process with ``sys.argv = argv`` (the console script's code path); its exit code (0 when
    it returned)."""
    from fedrun.cli import main as cli

    monkeypatch.setattr(sys, "argv", argv)
    GlobalHydra.instance().clear()
    try:
        cli.main()
    except SystemExit as e:
        return e.code
    finally:
        GlobalHydra.instance().clear()
    return 0


def refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, args: list[str], words: str
) -> None:
    """``fedrun *args`` (run in ``tmp_path``) exits 2 with one line holding ``words``, and writes no metrics."""
    monkeypatch.chdir(tmp_path)
    argv = ["fedrun", *args, f"hydra.run.dir={tmp_path / 'run'}", "output.plots=false"]
    assert main_exit_code(monkeypatch, argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err
    assert not (tmp_path / "run" / "metrics.csv").exists()


@pytest.fixture(autouse=True)
def _unchecked_composition() -> object:
    """Each test starts with Hydra's own composition: a test that ran ``fedrun`` in-process installed fedrun's
    compose checks (``compose_checks.install``) and error reporter for the whole worker, which would make later
    tests depend on the order xdist happens to run them in (fedrun/cli/hydra_patches.py puts both back)."""
    restore = hydra_patches.saved()
    yield
    restore()


@pytest.fixture
def foreground_signals(monkeypatch: pytest.MonkeyPatch) -> None:
    """For a test that signals its own process: fedrun routes SIGINT, SIGTERM and SIGHUP as in a command started
    at a terminal, even where this worker inherited some ignored (``nohup make test &``: tests/dispositions.py)."""
    import fedrun.host.interrupts as interrupts

    monkeypatch.setattr(interrupts, "IGNORED_AT_START", frozenset())


@pytest.fixture
def make_spec(tmp_path: Path) -> Callable[..., RunSpec]:
    """``make_spec("algorithm=fedprox", ...)`` -> a validated RunSpec (quiet, no plots, cache in tmp).

    The engine defaults to ``sequential`` here: ``auto`` decides by timing, so two specs compared bit for
    bit could otherwise run on different engines. Tests naming a hardware preset or engine get theirs.
    """

    def _make(*overrides: str) -> RunSpec:
        base = ["output.quiet=true", "output.plots=false", f"cache_dir={tmp_path / 'cache'}"]
        if not any(o.startswith(("hardware=", "hardware.engine=")) for o in overrides):
            base.append("hardware.engine=sequential")
        cfg = compose_cfg([*base, *overrides])
        return validate(cfg)

    return _make


@pytest.fixture(scope="session")
def cli_fork_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str | None]:
    """A fork server (tests/forkserver.py) for :func:`run_cli`, started once per worker on first use: each command is
    still a process of its own, forked from one that imported fedrun, torch and Hydra once, instead of a fresh
    interpreter that imports them again (~1.7 s each). Its socket, or None where it did not come up."""
    from tests import forkserver

    base = tmp_path_factory.mktemp("cli-forkserver")
    with forkserver.started(cli_env(), base, base / "log", warm=True) as sock:
        yield sock


def cli_env() -> dict[str, str]:
    """The environment of :func:`run_cli`'s commands: this one, the checkout first on the path, and the data root
    ``$FEDRUN_DATA`` as set, else the checkout's ``data/`` (not the test's folder: one root for every command, so
    the fork server's copy of the default experiment's data serves them all; a root without the files finds
    Fashion-MNIST where the run would anyway, in the Debian package's folder)."""
    return {**os.environ, "PYTHONPATH": str(REPO), "FEDRUN_DATA": os.environ.get("FEDRUN_DATA", str(REPO / "data"))}


@pytest.fixture
def run_cli(tmp_path: Path, cli_fork_server: str | None) -> Callable[..., subprocess.CompletedProcess]:
    """Run ``fedrun`` in a process of its own with its run dir at tmp_path/run (or a sweep dir for -m): forked from
    :func:`cli_fork_server`, or a fresh interpreter where the server declines (an environment the test changed,
    other signals ignored) or with ``fresh=True`` (what only a new interpreter shows: its own hash seed...)."""
    from tests import forkserver

    def _run(
        *args: str, run_dir: Path | None = None, timeout: int = 300, fresh: bool = False
    ) -> subprocess.CompletedProcess:
        run_dir = run_dir or tmp_path / "run"
        extra = [f"hydra.run.dir={run_dir}", f"hydra.sweep.dir={run_dir}", f"cache_dir={tmp_path / 'cache'}"]
        env = cli_env()
        sock = None if fresh else cli_fork_server
        forked = forkserver.forked_run(sock, "fedrun.cli", [*args, *extra], tmp_path, env, timeout=timeout)
        return forked or subprocess.run(
            [sys.executable, "-m", "fedrun.cli", *args, *extra],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            cwd=tmp_path,
        )

    return _run


# The files whose tests take longest (a --durations list of the whole suite), longest first. `pytest -n 2` hands
# tests out in collection order, so a long test collected last would run alone at the end while the other worker
# idles; collected first, the short ones fill in beside it. Whole files move, so module-scoped fixtures still set
# up once per worker.
LONG_FIRST = (
    "tests/engines/test_ray_engine.py",
    "tests/docs/test_doc_commands.py",
    "tests/cli/test_sweep_faults.py",
    "tests/cli/test_sweeps.py",
    "tests/run/test_kill_table.py",
    "tests/cli/test_signal_table.py",
    "tests/papers/test_cost.py",
    "tests/cli/test_run_dir_contract.py",
    "tests/papers/test_law_rows.py",
    "tests/papers/test_layouts.py",
    "tests/report/test_report.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put the tests of :data:`LONG_FIRST`'s files first, in its order (a stable sort: the rest keep theirs)."""
    rank = {name: i for i, name in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(LONG_FIRST)))
