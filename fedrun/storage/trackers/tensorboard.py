"""TensorBoard: event files in ``<run_dir>/tb`` through ``torch.utils.tensorboard``; view them with
``tensorboard --logdir outputs``. A resumed run logs the rounds after its checkpoint again; TensorBoard shows the
latest value of a step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fedrun.storage.rundir import TB_DIR as TB_DIR
from fedrun.storage.trackers.base import TRACKERS, Tracker
from fedrun.storage.trackers.common import scalars


@TRACKERS.register("tensorboard")  # no settings: tracking.tensorboard is an on/off switch
class TensorBoardTracker(Tracker):
    """One ``SummaryWriter`` per run; a scalar per metrics column, step = round."""

    title = "TensorBoard"
    needs = ("tensorboard", "tracking")

    @classmethod
    def open(cls, settings: Any, run_dir: Path, config: dict[str, Any], group: str) -> TensorBoardTracker:
        return cls(run_dir / TB_DIR)

    def __init__(self, log_dir: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(log_dir))

    def log(self, row: dict[str, Any]) -> None:
        step = int(row["round"])
        for k, v in scalars(row).items():
            self.writer.add_scalar(k, v, step)
        self.writer.flush()

    def finish(self, run_dir: Path, summary: dict[str, Any]) -> None:
        """Nothing to attach: the event files are beside summary.json already."""

    def close(self) -> None:
        self.writer.close()
