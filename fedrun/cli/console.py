"""The console scripts pyproject.toml installs besides ``fedrun`` (fedrun/cli/__main__.py): each command's ``main``,
the process then ending without walking its objects again (fedrun/host/exits.py)."""

from __future__ import annotations

from fedrun.host.exits import ending_process


def report() -> int:
    """``fedrun-report``: fedrun/cli/report.py."""
    from fedrun.cli.report import main

    return ending_process(main)


def reproduce() -> int:
    """``fedrun-reproduce``: fedrun/cli/reproduce.py."""
    from fedrun.cli.reproduce import main

    return ending_process(main)
