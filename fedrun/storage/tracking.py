"""Optional experiment trackers fed with every metrics.csv row, in addition to the CSV (``tracking.*``).

Chosen by name from the ``tracking`` config group: ``fedrun tracking=[tensorboard,mlflow,wandb]``
(``tracking.tensorboard=true``, the key old run directories carry, is the same switch as ``tracking=[tensorboard]``).

- ``tensorboard``: event files in ``<run_dir>/tb`` (``pip install 'fedrun[tracking]'``);
- ``mlflow``: one MLflow run per fedrun run, one experiment per sweep, in ``tracking.mlflow.uri`` (default the
  file store ``outputs/mlruns``; ``pip install 'fedrun[mlflow]'``);
- ``wandb``: one W&B run per fedrun run, offline by default, under ``<run_dir>/wandb``
  (``pip install 'fedrun[wandb]'``).

Each numeric column of a row is a metric at step = the row's round; MLflow and W&B also get the flattened config
and, at the end, summary.json and the plots. A resumed run continues the same MLflow and W&B runs (their ids are in
``<run_dir>/tracking.json``) and logs no round twice. A library is imported only when its tracker is chosen; a
missing one is refused in one line, before the run starts (:func:`require_trackers`), as is a tracker server that
does not answer within seconds (:func:`check_trackers`).

Each tracker is one module of ``fedrun/storage/trackers/`` that registers itself in :data:`TRACKERS` with the
dataclass of its settings (fedrun/storage/trackers/base.py), plus its ``conf/tracking/<name>.yaml``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedrun.core.errors import ConfigError
from fedrun.core.extras import MissingExtra, has_module
from fedrun.storage.trackers.base import TRACKERS as TRACKERS
from fedrun.storage.trackers.base import Tracker
from fedrun.storage.trackers.common import STATE_FILE as STATE_FILE
from fedrun.storage.trackers.common import scalars as scalars
from fedrun.storage.trackers.tensorboard import TB_DIR as TB_DIR

DEFAULT_EXPERIMENT = "fedrun"


@dataclasses.dataclass
class TrackingSection:
    """The base of the ``tracking`` section (fedrun/config/schema.py makes it, one field per registered tracker: a
    switch for a tracker without settings, else its settings dataclass)."""

    def chosen(self) -> dict[str, Any]:
        """The trackers turned on, by name, with their settings (``True`` for a switch)."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is True or (not isinstance(value, bool) and getattr(value, "enabled", False)):
                out[f.name] = value
        return out

    if TYPE_CHECKING:

        def __getattr__(self, name: str) -> Any: ...  # each registered tracker's field


def require_tracker(name: str) -> None:
    """Raise a one-line ConfigError naming the tracker (the ``tracking`` section's key; validation prefixes
    ``tracking.``) and its ``pip install`` when its package is missing. Found without importing it: free."""
    needs = TRACKERS.get(name).obj.needs
    if needs is not None and not has_module(needs[0]):
        raise MissingExtra(name, *needs)


def require_trackers(names: list[str]) -> None:
    """Check that every chosen tracker's package is installed (config validation, before any work)."""
    for name in names:
        require_tracker(name)


def check_trackers(choice: TrackingSection) -> None:
    """What each chosen tracker checks before a run writes anything (a server that does not answer is refused in
    seconds): a ConfigError naming ``tracking.<name>.<key>``."""
    for name, settings in choice.chosen().items():
        try:
            TRACKERS.get(name).obj.check(settings)
        except ConfigError as e:
            raise ConfigError(f"tracking.{name}" + (f".{e.field}" if e.field else ""), e.message) from None


def sweep_name() -> str | None:
    """The sweep directory of the Hydra multirun this process runs a job of (as configured), else None."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized():
        return None
    hc = HydraConfig.get()
    return str(hc.sweep.dir) if hc.mode == RunMode.MULTIRUN else None


def _opened(name: str, settings: Any, run_dir: Path, config: dict[str, Any], group: str) -> Tracker:
    """The tracker ``name`` opened; an error opening its store is one line naming its setting."""
    cls = TRACKERS.get(name).obj
    field = f"tracking.{name}" + (f".{cls.setting}" if cls.setting else "")
    try:
        tracker: Tracker = cls.open(settings, run_dir, config, group)
    except Exception as e:  # a library's own errors (MlflowException, wandb.Error, OSError) vary by version
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
        raise ConfigError(field, f"cannot open the {cls.title or name} tracker: {first}") from None
    return tracker


class Trackers:
    """The run's trackers as one: ``log`` each new row, ``finish`` at the end, ``close`` always (no-ops when none
    is on)."""

    def __init__(self, trackers: list[Tracker]) -> None:
        self.trackers = trackers

    @classmethod
    def open(cls, choice: TrackingSection, run_dir: Path, config: dict[str, Any] | None = None) -> Trackers:
        """The trackers ``choice`` turns on, for the run in ``run_dir`` with the (resolved) ``config``."""
        trackers: list[Tracker] = []
        group = sweep_name() or DEFAULT_EXPERIMENT
        try:
            for name, settings in choice.chosen().items():
                trackers.append(_opened(name, settings, run_dir, config or {}, group))
        except BaseException:
            for t in trackers:  # those opened before the one that failed
                t.close()
            raise
        return cls(trackers)

    def log(self, row: dict[str, Any]) -> None:
        for t in self.trackers:
            t.log(row)

    def finish(self, run_dir: Path, summary: dict[str, Any]) -> None:
        """The run ended: each tracker attaches summary.json and the plots and ends its run."""
        for t in self.trackers:
            t.finish(run_dir, summary)

    def close(self) -> None:
        for t in self.trackers:
            t.close()
