"""Every command the documentation shows runs: each line of each ```bash block of README.md and docs/**/*.md.

The rule (docs/extending.md, "Commands in the documentation"):

- A page's lines run in order, each with ``bash -c``, in a fresh temporary directory of the page's own (so the
  ``outputs/`` a command writes lands there), with the checkout's code first on ``PYTHONPATH`` and
  ``FEDRUN_DATA`` at the checkout's ``data/``. A block titled with a file name
  (```` ```python title="mypkg/algo.py" ````) is written to that file there first.
  Each line must exit 0 within ``TIMEOUT`` seconds.
- ``fedrun`` is the real command with one shrink appended: the ``-smoke`` targets' (tests/docs/shrink.py).
- ``make TARGET`` is checked, not run: ``make -n TARGET`` in the checkout must succeed (the target exists and its
  recipe expands). ``make test`` is what CI runs; ``make run``'s command is the plain ``fedrun``, run above.
- ``fedrun-reproduce run ...`` gets ``--dry-run`` (it prints the sweep's commands).

Each ``fedrun``, ``fedrun-report`` and ``fedrun-reproduce`` a line starts is a process of its own, forked from the
worker's fork server (tests/forkserver.py: fedrun, torch and Hydra imported once for all the pages a test worker
runs, not once per command; none for a page without such a line); where the fork could differ from a fresh
interpreter (an environment of the line's own, signals inherited as ignored) the server declines and the shim starts
a fresh one.

Output shown in the docs goes in ```text blocks, which are not run. A page is one test (its lines depend on each
other, in order); pages are independent, so pytest-xdist may spread them over workers.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import forkserver
from tests.conftest import REPO

TIMEOUT = 900  # a hang guard, not a speed check: a page's commands take minutes on a loaded 2-core machine
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```", re.S | re.M)
TITLE = re.compile(r'title="([^"]+)"')


def doc_files() -> list[Path]:
    """README.md and every Markdown page under docs/."""
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def blocks(path: Path) -> list[tuple[str, str, str]]:
    """(language, title, body) of each fenced block of ``path``."""
    return [(lang, (TITLE.search(info) or [None, ""])[1], body) for lang, info, body in FENCE.findall(path.read_text())]


def commands(path: Path) -> list[str]:
    """The lines of the page's ```bash blocks (blank lines and comments dropped)."""
    return [
        line.strip()
        for lang, _, body in blocks(path)
        if lang == "bash"
        for line in body.splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]


def shims(bin_dir: Path, cache: Path, sock: str | None = None) -> None:
    """``fedrun``, ``make``, ``fedrun-report`` and ``fedrun-reproduce`` as the rule runs them, first on PATH; the
    Python ones ask the fork server at ``sock`` (tests/forkserver.py) first and run in a fresh interpreter
    where it declines or is not there."""
    bin_dir.mkdir(parents=True)
    venv = Path(sys.executable).parent
    ask = "from tests.forkserver import client\n"
    ask += f"code = client({{entry!r}}, ARGS, {{extra!r}}, {str(sock)!r}, PATH)\n"
    ask += "if code is not None:\n    sys.exit(code)\n"
    ask = ask if sock else ""
    scripts = {
        "fedrun": (
            f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(REPO)!r})\nARGS, PATH = sys.argv[1:], sys.path\n"
            + ask.format(entry="fedrun", extra={"cache": str(cache)})
            + "from tests.docs.shrink import shrunk_argv\n"
            f"argv = shrunk_argv(sys.argv[1:], __import__('pathlib').Path({str(cache)!r}))\n"
            "sys.argv = ['fedrun', *argv]\nfrom fedrun.cli.__main__ import main\nmain()\n"
        ),
        "make": f'#!/bin/bash\nexec /usr/bin/make --no-print-directory -n -C {shlex.quote(str(REPO))} "$@"\n',
    }
    for name, dry_run in (("fedrun-report", False), ("fedrun-reproduce", True)):
        real = str(venv / name)
        # the console script's sys.path: its own folder first, then PYTHONPATH's checkout
        scripts[name] = (
            f"#!{sys.executable}\nimport os, sys\nARGS = sys.argv[1:]\n"
            + ("if ARGS[:1] == ['run']:\n    ARGS.append('--dry-run')\n" if dry_run else "")
            + f"PATH = [{str(venv)!r}, *sys.path[1:]]\n"
            + ask.format(entry=name, extra={"argv0": real})
            + f"os.execv({real!r}, [{real!r}, *ARGS])\n"
        )
    for name, text in scripts.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)


PAGES = [p for p in doc_files() if commands(p)]


def test_the_docs_show_commands_and_this_test_reads_them() -> None:
    readme = commands(REPO / "README.md")
    assert "make run" in readme and "make test" in readme  # the README's promise, as CI runs it
    assert any(c.startswith("fedrun -m") for c in readme) and any(c.startswith("fedrun-report") for c in readme)


def page_env(home: Path) -> dict[str, str]:
    """The environment of a page's lines: ``home`` its HOME, ``home/bin`` (the shims) first on PATH."""
    venv = Path(sys.executable).parent
    return {
        "PATH": f"{home / 'bin'}:{venv}:/usr/bin:/bin",
        "PYTHONPATH": str(REPO),
        "FEDRUN_DATA": os.environ.get("FEDRUN_DATA", str(REPO / "data")),
        "HOME": str(home),
        "OMP_NUM_THREADS": "1",
        "MPLBACKEND": "Agg",
    }


@pytest.fixture(scope="session")
def fork_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str | None]:
    """The fork server of every page this worker runs (its socket): the pages' environments differ only in HOME and
    PATH, which the server lets a child have as its page has them (tests/forkserver.py ``PER_PAGE``). It also makes
    the lazy imports of the pages' many system and privacy runs once (``lazy``: ~1.2 CPU-s a command each)."""
    base = tmp_path_factory.mktemp("forkserver")
    with forkserver.started(page_env(base), base, base / "forkserver.log", warm=True, lazy=True) as sock:
        yield sock


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_every_command_of_the_page_runs(page: Path, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    work = tmp_path / "work"
    work.mkdir()
    for _, title, body in blocks(page):
        if title:
            (work / title).parent.mkdir(parents=True, exist_ok=True)
            (work / title).write_text(body)
            (work / title).parent.joinpath("__init__.py").touch() if title.endswith(".py") else None
    env = page_env(tmp_path)
    lines = commands(page)
    # the server only where a line starts a Python command (a page of ``make`` lines needs none)
    sock = request.getfixturevalue("fork_server") if any("fedrun" in line for line in lines) else None
    shims(tmp_path / "bin", tmp_path / "cache", sock)
    for line in lines:
        res = subprocess.run(["bash", "-c", line], cwd=work, env=env, capture_output=True, text=True, timeout=TIMEOUT)
        assert res.returncode == 0, (
            f"{page.name}: `{line}` exited {res.returncode}\n{res.stdout[-2000:]}\n{res.stderr[-3000:]}"
        )
