"""Every use fedrun makes of Hydra's private API (``hydra._internal``), in one module.

Hydra offers no public hook for what fedrun needs, so it replaces, calls or recognises four private names:

- ``hydra._internal.utils.run_and_report``: the reporter ``@hydra.main`` runs a command under; fedrun's prints
  a composition error as one line with exit code 2 and ends a failed sweep with exit code 1 (fedrun/cli/main.py);
- ``ConfigLoaderImpl.load_configuration``: every composition (a run, a sweep and each of its jobs, ``--cfg``,
  ``--help``) passes fedrun's compose checks (fedrun/cli/compose_checks.py) around it;
- ``BasicSweeper.split_arguments``: the jobs of a sweep, in the order ``fedrun -m`` numbers them
  (fedrun/cli/reproduce_sweep.py);
- ``hydra.core.utils._save_config(cfg, filename, output_dir)``: the frame that writes the job's ``.hydra/*.yaml``
  record, so a failed write of it names its file (:func:`hydra_record_in`).

These may change in any hydra-core release, so pyproject.toml pins hydra-core to :data:`HYDRA_CORE` and
tests/cli/test_hydra_patches.py fails on an installed version outside it or on a changed signature of any of the
four. Only the patching lives here; what the patches do stays with their callers.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import hydra._internal.utils as hydra_utils
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.types import Override
from hydra.types import RunMode
from omegaconf import DictConfig

__all__ = [
    "HYDRA_CORE",
    "ConfigLoaderImpl",
    "around_composition",
    "hydra_record_in",
    "report_with",
    "saved",
    "sweep_jobs",
]

HYDRA_CORE = ">=1.3.2,<1.4"  # the versions these patches were checked on; pyproject.toml's dependency says the same

# around(loader, overrides, run_mode, compose) -> the composed config; compose() runs Hydra's own composition
Around = Callable[[ConfigLoaderImpl, list[str], RunMode, Callable[[], DictConfig]], DictConfig]


def report_with(reporter: Callable[[Callable[[], Any]], Any]) -> None:
    """Run every ``@hydra.main`` command of this process under ``reporter(func)`` instead of Hydra's reporter."""
    hydra_utils.run_and_report = reporter  # type: ignore[assignment]


def around_composition(around: Around) -> None:
    """Route every composition of this process through ``around`` (idempotent: a second call keeps the first)."""
    current = ConfigLoaderImpl.load_configuration
    if getattr(current, "fedrun_checked", False):
        return

    def load_configuration(
        self: ConfigLoaderImpl,
        config_name: str | None,
        overrides: list[str],
        run_mode: RunMode,
        from_shell: bool = True,
        validate_sweep_overrides: bool = True,
    ) -> DictConfig:
        def compose() -> DictConfig:
            return current(self, config_name, overrides, run_mode, from_shell, validate_sweep_overrides)

        return around(self, list(overrides), run_mode, compose)

    load_configuration.fedrun_checked = True  # type: ignore[attr-defined]
    ConfigLoaderImpl.load_configuration = load_configuration  # type: ignore[method-assign]


def sweep_jobs(parsed: list[Override]) -> list[list[str]]:
    """Each job's overrides, in the order Hydra's BasicSweeper launches them (its job numbers): one batch."""
    return BasicSweeper.split_arguments(parsed, None)[0]


def saved() -> Callable[[], None]:
    """A function that puts back every name this module replaces as it is now (tests isolate themselves)."""
    reporter, loader = hydra_utils.run_and_report, ConfigLoaderImpl.load_configuration

    def restore() -> None:
        hydra_utils.run_and_report = reporter
        ConfigLoaderImpl.load_configuration = loader  # type: ignore[method-assign]

    return restore


def hydra_record_in(tb: TracebackType | None) -> Path | None:
    """The ``.hydra/*.yaml`` file Hydra was writing (``hydra.core.utils._save_config``) when the error of the
    traceback ``tb`` was raised; None when it was raised elsewhere."""
    saving = [
        frame
        for frame, _ in traceback.walk_tb(tb)
        if frame.f_code.co_name == "_save_config" and frame.f_globals.get("__name__") == "hydra.core.utils"
    ]
    if not saving:
        return None
    return Path(saving[-1].f_locals["output_dir"]) / str(saving[-1].f_locals["filename"])
