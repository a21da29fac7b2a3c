"""MLflow: one MLflow run per fedrun run, in one MLflow experiment per sweep.

The flattened config becomes the run's params, every numeric metrics.csv column a metric at step = round, and
summary.json and the plots artifacts at the end. The store is ``tracking.mlflow.uri`` (a server, ``sqlite:///...``,
a folder), by default the local file store ``outputs/mlruns``: ``mlflow ui --backend-store-uri outputs/mlruns``.
The run id is kept in ``<run_dir>/tracking.json``: a resumed run continues the same MLflow run from the round
after the last one it logged, when it logs to the same store; the store is always the one the current command's
config names (a run dir from elsewhere does not send the metrics to its server). A server that does not accept a
connection within seconds is refused before the run starts (MLflow's client would retry for minutes).
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedrun.storage.status import Status
from fedrun.storage.trackers.base import TRACKERS, Tracker, check_reachable
from fedrun.storage.trackers.common import TrackerState, artifacts, flatten, scalars, status_of

DEFAULT_STORE = "outputs/mlruns"
DEFAULT_EXPERIMENT = "fedrun"
PARAMS_PER_CALL = 100  # MLflow's log_batch limit
END_STATUS: dict[str, str] = {Status.COMPLETED: "FINISHED", Status.INTERRUPTED: "KILLED"}  # diverged and failed: FAILED
SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]+:")  # RFC 3986; two letters at least, so C:/ stays a Windows path


@dataclass
class MlflowTracking:
    """MLflow (``tracking=[mlflow]``): one MLflow run per fedrun run, continued when the run resumes."""

    enabled: bool = False  # log each round to MLflow (or list it: tracking=[mlflow])
    uri: str | None = None  # the tracking store or server; default a local file store, outputs/mlruns
    experiment: str | None = None  # default: the sweep directory in a multirun, else "fedrun"


def store_uri(uri: str | None) -> str:
    """``uri`` as MLflow takes it: one with a scheme (``http://``, ``sqlite:///``, ``file:/abs``) as given, for
    MLflow to parse; a folder (default outputs/mlruns) as a ``file:`` URI.

    MLflow 3 keeps its file store only on request (``MLFLOW_ALLOW_FILE_STORE``): fedrun's default asks for it, as
    the one store that needs neither a server nor SQLAlchemy.
    """
    given = uri or DEFAULT_STORE
    if SCHEME.match(given):
        chosen = given
    else:
        chosen = Path(given).resolve().as_uri()
    if chosen.startswith("file:"):
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    return chosen


@TRACKERS.register("mlflow", MlflowTracking)
class MlflowTracker(Tracker):
    """Log a fedrun run into one MLflow run (new, or the one an earlier attempt of this run dir started)."""

    title = "MLflow"
    needs = ("mlflow", "mlflow")
    setting = "uri"

    @classmethod
    def check(cls, settings: MlflowTracking) -> None:
        check_reachable(store_uri(settings.uri), "uri")

    @classmethod
    def open(cls, settings: MlflowTracking, run_dir: Path, config: dict[str, Any], group: str) -> MlflowTracker:
        return cls(run_dir, config, settings.uri, settings.experiment or group)

    def __init__(self, run_dir: Path, config: dict[str, Any], uri: str | None, experiment: str) -> None:
        from mlflow.tracking import MlflowClient

        self.state = TrackerState(run_dir, "mlflow", config)
        self.uri = store_uri(uri)  # this command's store, never the one an earlier attempt's tracking.json names
        self.client = MlflowClient(tracking_uri=self.uri)
        self.run_id = self._earlier_run()
        self.last_round = self.state.last_round if self.run_id else 0
        if self.run_id:
            self.client.update_run(self.run_id, status="RUNNING")
            self.last_round = max(self.last_round, self._last_logged_step())
        else:
            self.run_id = self._new_run(run_dir, config, experiment)
        self.state.save(uri=self.uri, run_id=self.run_id, last_round=self.last_round)
        self.closed = False

    def _earlier_run(self) -> str | None:
        from mlflow.exceptions import MlflowException

        run_id = self.state.values.get("run_id")
        if not isinstance(run_id, str) or self.state.values.get("uri") != self.uri:
            return None
        try:
            self.client.get_run(run_id)
        except MlflowException:  # the store was moved or cleared: a new MLflow run
            return None
        return run_id

    def _last_logged_step(self) -> int:
        """The last round the MLflow run holds (a killed attempt may have logged a round tracking.json lacks)."""
        assert self.run_id is not None
        keys = self.client.get_run(self.run_id).data.metrics
        if not keys:
            return 0
        return max(m.step for m in self.client.get_metric_history(self.run_id, next(iter(sorted(keys)))))

    def _experiment_id(self, name: str) -> str:
        from mlflow.exceptions import MlflowException

        found = self.client.get_experiment_by_name(name)
        if found is not None:
            return str(found.experiment_id)
        try:
            return str(self.client.create_experiment(name))
        except MlflowException:  # another job of the sweep created it first
            again = self.client.get_experiment_by_name(name)
            if again is None:
                raise
            return str(again.experiment_id)

    def _new_run(self, run_dir: Path, config: dict[str, Any], experiment: str) -> str:
        from mlflow.entities import Param

        run = self.client.create_run(
            self._experiment_id(experiment),
            run_name=run_dir.name,
            tags={"fedrun.run_dir": str(run_dir.resolve())},
        )
        run_id = str(run.info.run_id)
        params = [Param(k, v) for k, v in flatten(config).items()]
        for i in range(0, len(params), PARAMS_PER_CALL):
            self.client.log_batch(run_id, params=params[i : i + PARAMS_PER_CALL])
        return run_id

    def log(self, row: dict[str, Any]) -> None:
        step = int(row["round"])
        if step <= self.last_round:  # logged by an earlier attempt of this run
            return
        assert self.run_id is not None
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, v, now, step) for k, v in scalars(row).items()])
        self.last_round = step
        self.state.save(last_round=step)

    def finish(self, run_dir: Path, summary: dict[str, Any]) -> None:
        """Attach summary.json and the plots; end the MLflow run with the fedrun run's status."""
        assert self.run_id is not None
        for path in artifacts(run_dir):
            self.client.log_artifact(self.run_id, str(path))
        self._end(END_STATUS.get(status_of(summary), "FAILED"))

    def _end(self, status: str) -> None:
        from mlflow.entities import RunStatus

        if not self.closed:
            assert self.run_id is not None
            self.client.set_terminated(self.run_id, RunStatus.to_string(RunStatus.from_string(status)))
            self.closed = True

    def close(self) -> None:
        """End the MLflow run as FAILED unless :meth:`finish` ended it (the fedrun run failed on the way)."""
        self._end("FAILED")
