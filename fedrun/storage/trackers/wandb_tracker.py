"""Weights & Biases: one W&B run per fedrun run, offline by default (``tracking.wandb.mode``).

The same mapping as MLflow: the config as the run's config, every numeric metrics.csv column at step = round,
summary.json and the plots saved with the run at the end. Offline, the files go to ``<run_dir>/wandb/`` and
``wandb sync <run_dir>/wandb/offline-run-*`` uploads them later. The run id is kept in ``<run_dir>/tracking.json``:
a resumed run continues the same W&B run id (each attempt is its own offline folder; ``wandb sync`` uploads them
into one run in order), from the round after the last one logged.

wandb-core buffers the ``.wandb`` file (``x_transaction_log_flush_interval``, 15 s) and holds a step until the next
one: a run ended by SIGKILL may miss its last rounds there, though ``tracking.json`` counts them as logged. Ctrl-C,
SIGTERM, a divergence or an error end the W&B run properly.
"""

from __future__ import annotations

import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedrun.core.errors import ConfigError
from fedrun.storage.status import Status
from fedrun.storage.trackers.base import TRACKERS, Tracker, check_reachable
from fedrun.storage.trackers.common import TrackerState, artifacts, scalars, status_of

WANDB_MODES = ("offline", "online", "disabled")
DEFAULT_SERVER = "https://api.wandb.ai"  # W&B's own default, unless WANDB_BASE_URL names another


@dataclass
class WandbTracking:
    """Weights & Biases (``tracking=[wandb]``): one W&B run per fedrun run, continued when the run resumes."""

    enabled: bool = False  # log each round to W&B (or list it: tracking=[wandb])
    mode: str = "offline"  # offline: files under <run_dir>/wandb, uploaded later by `wandb sync`
    project: str = "fedrun"  # the W&B project the run goes to
    entity: str | None = None  # the W&B user or team; None: the logged-in user's default

    def __post_init__(self) -> None:
        if self.mode not in WANDB_MODES:
            raise ConfigError("mode", f"invalid value {self.mode!r}; valid: {', '.join(WANDB_MODES)}")


@TRACKERS.register("wandb", WandbTracking)
class WandbTracker(Tracker):
    """Log a fedrun run into one W&B run (new, or the one an earlier attempt of this run dir started)."""

    title = "W&B"
    needs = ("wandb", "wandb")

    @classmethod
    def check(cls, settings: WandbTracking) -> None:
        """Online, the server (``WANDB_BASE_URL``) must answer in seconds: wandb.init waits two minutes."""
        if settings.mode == "online":
            server = os.environ.get("WANDB_BASE_URL") or DEFAULT_SERVER
            check_reachable(server, "mode")

    @classmethod
    def open(cls, settings: WandbTracking, run_dir: Path, config: dict[str, Any], group: str) -> WandbTracker:
        return cls(run_dir, config, settings.mode, settings.project, settings.entity, group)

    def __init__(
        self, run_dir: Path, config: dict[str, Any], mode: str, project: str, entity: str | None, group: str
    ) -> None:
        import wandb

        self.state = TrackerState(run_dir, "wandb", config)
        run_id = self.state.values.get("id")
        resumed = isinstance(run_id, str)
        self.run_id = (
            run_id if isinstance(run_id, str) else secrets.token_hex(4)
        )  # W&B's own ids are 8 lowercase characters too
        self.last_round = self.state.last_round if resumed else 0
        settings = wandb.Settings(silent=True, console="off", x_disable_stats=True, disable_git=True)
        self.run = wandb.init(
            mode=mode,  # type: ignore[arg-type]  # one of WANDB_MODES, checked by the config
            dir=str(run_dir),
            project=project,
            entity=entity,
            id=self.run_id,
            name=run_dir.name,
            group=group,
            config=config,
            resume="allow",
            settings=settings,
        )
        self.state.save(id=self.run_id, last_round=self.last_round)
        self.closed = False

    def log(self, row: dict[str, Any]) -> None:
        step = int(row["round"])
        if step <= self.last_round:  # logged by an earlier attempt of this run
            return
        self.run.log(scalars(row), step=step)
        self.last_round = step
        self.state.save(last_round=step)

    def finish(self, run_dir: Path, summary: dict[str, Any]) -> None:
        """Save summary.json and the plots with the run (copies, as they are now); end it with the run's status."""
        files = Path(self.run.dir)
        for path in artifacts(run_dir):
            shutil.copyfile(path, files / path.name)
            self.run.save(str(files / path.name), base_path=str(files), policy="now")
        self._end(0 if status_of(summary) == Status.COMPLETED else 1)

    def _end(self, exit_code: int) -> None:
        if not self.closed:
            self.closed = True
            try:
                self.run.finish(exit_code=exit_code)
            finally:
                import wandb

                # wandb-core writes the run's .wandb file out only when its service stops (wandb 0.31): stop it, so
                # the files are whole when the fedrun run ends; the next run starts a service again (about 1 s)
                wandb.teardown()

    def close(self) -> None:
        """End the W&B run as failed unless :meth:`finish` ended it."""
        self._end(1)
