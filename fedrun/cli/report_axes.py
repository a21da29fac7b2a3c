"""``fedrun-report table DIR`` without ``--rows``/``--cols``: the keys the sweep in DIR varies, as its closing line
names them (fedrun/report/sweep_console.py, :func:`table_command`): the first in the rows, the others in the
columns, the keys a cell averages over (``--over``, the seed) left out. Read from the sweep's ``multirun.yaml`` (the
command Hydra saved, and its sweeper's ``params``); with none, the rows are ``algorithm``.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from fedrun.cli.sweeps import command_varying
from fedrun.core.errors import ConfigError
from fedrun.core.safe_yaml import load_yaml
from fedrun.report.sweep_console import DEFAULT_ROWS

MULTIRUN_FILE = "multirun.yaml"
ROWS_HELP = "comma-separated config keys for the rows (with no --cols either: the sweep's keys, else algorithm)"


def sweep_keys(dirs: list[Path]) -> list[str]:
    """The keys the sweeps in ``dirs`` vary, in their commands' order (a folder without ``multirun.yaml``, or with
    one that does not read, adds none)."""
    keys: list[str] = []
    for folder in dirs:
        saved = folder / MULTIRUN_FILE
        try:
            config = OmegaConf.create(load_yaml(saved.read_text(), str(saved), plain=True))
            found = command_varying(config)
        except (OSError, ConfigError, ValueError, TypeError):
            continue
        keys += [k for k in found if k not in keys]
    return keys


def table_axes(dirs: list[Path], rows: str | None, cols: str, over: list[str]) -> tuple[list[str], list[str]]:
    """The table's row and column keys: ``--rows`` and ``--cols`` (comma-separated) as given, or where neither was,
    the sweep's keys (see the module docstring)."""
    if rows is not None or cols:
        return _keys(rows or DEFAULT_ROWS), _keys(cols)
    keys = [k for k in sweep_keys(dirs) if k not in over]
    return (keys[:1], keys[1:]) if keys else ([DEFAULT_ROWS], [])


def _keys(text: str) -> list[str]:
    return [k.strip() for k in text.split(",") if k.strip()]
