"""Optional experiment trackers fed with every metrics.csv row, in addition to the CSV (``tracking.*``).

``tracking.tensorboard=true`` writes TensorBoard event files to ``<run_dir>/tb`` through
``torch.utils.tensorboard`` (needs the ``tensorboard`` package: ``pip install 'fedrun[tracking]'``);
view them with ``tensorboard --logdir outputs``. Every numeric column of a row becomes a scalar at
step = the row's round. A resumed run logs the rounds after its checkpoint again; TensorBoard shows the
latest value of a step.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from typing import Any, Protocol

from fedrun.core.errors import ConfigError

TB_DIR = "tb"


def require_tensorboard() -> None:
    """Raise a one-line ConfigError when the tensorboard package is not installed."""
    if importlib.util.find_spec("tensorboard") is None:
        raise ConfigError("tensorboard", "needs the tensorboard package: pip install 'fedrun[tracking]'")


class Tracker(Protocol):
    def log(self, row: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


def scalars(row: dict[str, Any]) -> dict[str, float]:
    """The finite numeric values of a metrics row, ``round`` excluded (it is the step)."""
    out = {}
    for k, v in row.items():
        if k == "round" or isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        if math.isfinite(float(v)):
            out[k] = float(v)
    return out


class TensorBoardTracker:
    """One ``SummaryWriter`` per run; a scalar per metrics column, step = round."""

    def __init__(self, log_dir: Path) -> None:
        require_tensorboard()
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(log_dir))

    def log(self, row: dict[str, Any]) -> None:
        step = int(row["round"])
        for k, v in scalars(row).items():
            self.writer.add_scalar(k, v, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class Trackers:
    """The run's trackers as one: ``log`` each new row, ``close`` at the end (no-ops when none is on)."""

    def __init__(self, trackers: list[Tracker]) -> None:
        self.trackers = trackers

    @classmethod
    def open(cls, tensorboard: bool, run_dir: Path) -> Trackers:
        return cls([TensorBoardTracker(run_dir / TB_DIR)] if tensorboard else [])

    def log(self, row: dict[str, Any]) -> None:
        for t in self.trackers:
            t.log(row)

    def close(self) -> None:
        for t in self.trackers:
            t.close()
