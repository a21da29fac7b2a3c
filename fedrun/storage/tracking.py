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
missing one is refused in one line, before the run starts (:func:`require_trackers`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from fedrun.core.errors import ConfigError
from fedrun.core.extras import MissingExtra, has_module
from fedrun.storage.trackers.common import STATE_FILE as STATE_FILE
from fedrun.storage.trackers.common import scalars as scalars
from fedrun.storage.trackers.tensorboard import TB_DIR as TB_DIR

# tracker name -> (the module it needs, the extra that installs it)
EXTRAS = {"tensorboard": ("tensorboard", "tracking"), "mlflow": ("mlflow", "mlflow"), "wandb": ("wandb", "wandb")}
DEFAULT_EXPERIMENT = "fedrun"


def require_tracker(name: str) -> None:
    """Raise a one-line ConfigError naming the tracker (the ``tracking`` section's key; validation prefixes
    ``tracking.``) and its ``pip install`` when its package is missing. Found without importing it: free."""
    module, extra = EXTRAS[name]
    if not has_module(module):
        raise MissingExtra(name, module, extra)


def require_trackers(tensorboard: bool, mlflow: bool, wandb: bool) -> None:
    """Check that every chosen tracker's package is installed (config validation, before any work)."""
    for name, chosen in (("tensorboard", tensorboard), ("mlflow", mlflow), ("wandb", wandb)):
        if chosen:
            require_tracker(name)


class Tracker(Protocol):
    def log(self, row: dict[str, Any]) -> None:
        """One evaluated round's metrics row (``round`` is the step)."""

    def finish(self, run_dir: Path, summary: dict[str, Any]) -> None:
        """The run ended with ``summary`` (written to summary.json): attach what it attaches, end the tracker run."""

    def close(self) -> None:
        """Release the tracker (idempotent; after :meth:`finish`, or when the run failed on the way)."""


class MlflowChoice(Protocol):
    @property
    def enabled(self) -> bool: ...
    @property
    def uri(self) -> str | None: ...
    @property
    def experiment(self) -> str | None: ...


class WandbChoice(Protocol):
    @property
    def enabled(self) -> bool: ...
    @property
    def mode(self) -> str: ...
    @property
    def project(self) -> str: ...
    @property
    def entity(self) -> str | None: ...


class TrackingChoice(Protocol):
    """The ``tracking`` section of a run's config (fedrun.config.schema.TrackingConfig), read only."""

    @property
    def tensorboard(self) -> bool: ...
    @property
    def mlflow(self) -> MlflowChoice: ...
    @property
    def wandb(self) -> WandbChoice: ...


def sweep_name() -> str | None:
    """The sweep directory of the Hydra multirun this process runs a job of (as configured), else None."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized():
        return None
    hc = HydraConfig.get()
    return str(hc.sweep.dir) if hc.mode == RunMode.MULTIRUN else None


def _opened(name: str, field: str, make: Any) -> Tracker:
    """``make()``; an error opening a tracker's store is one line naming its setting."""
    try:
        tracker: Tracker = make()
    except Exception as e:  # a library's own errors (MlflowException, wandb.Error, OSError) vary by version
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
        raise ConfigError(field, f"cannot open the {name} tracker: {first}") from None
    return tracker


class Trackers:
    """The run's trackers as one: ``log`` each new row, ``finish`` at the end, ``close`` always (no-ops when none
    is on)."""

    def __init__(self, trackers: list[Tracker]) -> None:
        self.trackers = trackers

    @classmethod
    def open(cls, choice: TrackingChoice, run_dir: Path, config: dict[str, Any] | None = None) -> Trackers:
        """The trackers ``choice`` turns on, for the run in ``run_dir`` with the (resolved) ``config``."""
        trackers: list[Tracker] = []
        try:
            cls._open_each(trackers, choice, run_dir, config or {})
        except BaseException:
            for t in trackers:  # those opened before the one that failed
                t.close()
            raise
        return cls(trackers)

    @staticmethod
    def _open_each(trackers: list[Tracker], choice: TrackingChoice, run_dir: Path, config: dict[str, Any]) -> None:
        if choice.tensorboard:
            from fedrun.storage.trackers.tensorboard import TensorBoardTracker

            trackers.append(
                _opened("TensorBoard", "tracking.tensorboard", lambda: TensorBoardTracker(run_dir / TB_DIR))
            )
        group = sweep_name() or DEFAULT_EXPERIMENT
        if choice.mlflow.enabled:
            from fedrun.storage.trackers.mlflow_tracker import MlflowTracker

            ml = choice.mlflow
            experiment = ml.experiment or group
            trackers.append(
                _opened("MLflow", "tracking.mlflow.uri", lambda: MlflowTracker(run_dir, config, ml.uri, experiment))
            )
        if choice.wandb.enabled:
            from fedrun.storage.trackers.wandb_tracker import WandbTracker

            wb = choice.wandb
            trackers.append(
                _opened(
                    "W&B",
                    "tracking.wandb",
                    lambda: WandbTracker(run_dir, config, wb.mode, wb.project, wb.entity, group),
                )
            )

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
