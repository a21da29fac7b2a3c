"""MLflow and Weights & Biases trackers, read back through each library's own client and compared with the run's
metrics.csv: every numeric column at step = round, the flattened config as params, summary.json and the plots as
artifacts; a run stopped after some rounds and resumed continues the same tracker run and logs every round once."""

from __future__ import annotations

import json
import math
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from omegaconf import OmegaConf

from fedrun.cli import main as cli
from fedrun.config.schema import RunSpec
from fedrun.run.loop import run
from fedrun.storage.atomic import TIMING_COLUMNS
from fedrun.storage.trackers.common import STATE_FILE, flatten

# a run of a few seconds (tests/run/test_resume.py's): 600 Fashion-MNIST images, 4 clients, a 32-unit MLP
SMALL = [
    "experiment=smoke",
    "data.max_train_samples=600",
    "data.max_test_samples=200",
    "fl.clients=4",
    "fl.rounds=4",
    "model.hidden=[32]",
    "hardware.threads=1",
    "output.quiet=true",
    "output.plots=true",
    "checkpoint.every=1",
]


def _columns(run_dir: Path) -> pd.DataFrame:
    """metrics.csv's numeric columns, indexed by round."""
    frame = pd.read_csv(run_dir / "metrics.csv").set_index("round")
    return frame.select_dtypes("number")


def _expected(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Each metrics.csv column as (round, value) pairs, empty cells left out."""
    frame = _columns(run_dir)
    return {
        col: [(int(r), float(v)) for r, v in frame[col].items() if math.isfinite(float(v))]
        for col in frame.columns
        if frame[col].notna().any()
    }


# ---------------------------------------------------------------- MLflow


def _mlflow_client(store: Path, monkeypatch: pytest.MonkeyPatch):  # noqa: ANN202 - an MlflowClient
    """A client of the file store ``store``; MLflow 3 opens a file store only when asked to, as fedrun does."""
    pytest.importorskip("mlflow", reason="MLflow is the 'mlflow' extra: pip install 'fedrun[mlflow]'")
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")

    return MlflowClient(tracking_uri=store.resolve().as_uri())


def _mlflow_history(client: Any, run_id: str) -> dict[str, list[tuple[int, float]]]:
    keys = client.get_run(run_id).data.metrics
    return {k: sorted((m.step, m.value) for m in client.get_metric_history(run_id, k)) for k in keys}


def test_mlflow_run_holds_every_metrics_column_the_config_and_the_artifacts(
    tmp_path: Path, make_spec: Callable[..., RunSpec], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "mlruns"
    client = _mlflow_client(store, monkeypatch)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    spec = make_spec(*SMALL, "tracking=[mlflow]", f"tracking.mlflow.uri={store}")
    run(spec, run_dir)

    run_id = json.loads((run_dir / STATE_FILE).read_text())["mlflow"]["run_id"]
    experiment = client.get_experiment_by_name("fedrun")  # a single run: the one experiment "fedrun"
    assert experiment is not None
    assert [r.info.run_id for r in client.search_runs([experiment.experiment_id])] == [run_id]
    got = client.get_run(run_id)
    assert got.info.status == "FINISHED"
    assert got.info.run_name == "run"

    assert _mlflow_history(client, run_id) == _expected(run_dir)
    assert sorted(h[0] for h in _mlflow_history(client, run_id)["test_acc"]) == [1, 2, 3, 4]

    config = OmegaConf.to_container(OmegaConf.create(spec.raw), resolve=True)
    assert got.data.params == {k: str(v) for k, v in flatten(config).items()}
    assert got.data.params["fl.rounds"] == "4" and got.data.params["algorithm.name"] == "fedavg"

    artifacts = {a.path for a in client.list_artifacts(run_id)}
    assert {"summary.json", "accuracy.png", "partition.png"} <= artifacts
    summary = client.download_artifacts(run_id, "summary.json", str(tmp_path))
    assert json.loads(Path(summary).read_text()) == json.loads((run_dir / "summary.json").read_text())


def test_mlflow_uses_the_default_file_store_under_outputs(
    tmp_path: Path, make_spec: Callable[..., RunSpec], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("mlflow", reason="MLflow is the 'mlflow' extra: pip install 'fedrun[mlflow]'")
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)  # fedrun's default store asks for it itself
    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    run(make_spec(*SMALL, "fl.rounds=1", "output.plots=false", "tracking=[mlflow]"), run_dir)
    client = _mlflow_client(tmp_path / "outputs" / "mlruns", monkeypatch)
    state = json.loads((run_dir / STATE_FILE).read_text())["mlflow"]
    assert state["uri"] == (tmp_path / "outputs" / "mlruns").resolve().as_uri()
    assert client.get_run(state["run_id"]).data.metrics["test_acc"] == pytest.approx(
        float(pd.read_csv(run_dir / "metrics.csv")["test_acc"].iloc[-1])
    )


def test_a_run_dirs_tracking_json_does_not_choose_the_store(
    tmp_path: Path, make_spec: Callable[..., RunSpec], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shared run dir's tracking.json names another server: the metrics go to the store this command's config
    names (here the default, outputs/mlruns), not there (before: MLflow retried 127.0.0.1:9 for minutes)."""
    pytest.importorskip("mlflow", reason="MLflow is the 'mlflow' extra: pip install 'fedrun[mlflow]'")
    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    foreign = {"mlflow": {"uri": "http://127.0.0.1:9", "run_id": "0" * 32, "last_round": 0}}
    (run_dir / STATE_FILE).write_text(json.dumps(foreign))
    t0 = time.monotonic()
    run(make_spec(*SMALL, "fl.rounds=1", "output.plots=false", "tracking=[mlflow]"), run_dir)
    assert time.monotonic() - t0 < 120
    state = json.loads((run_dir / STATE_FILE).read_text())["mlflow"]
    assert state["uri"] == (tmp_path / "outputs" / "mlruns").resolve().as_uri() and state["run_id"] != "0" * 32
    assert _mlflow_client(tmp_path / "outputs" / "mlruns", monkeypatch).get_run(state["run_id"]).data.metrics


# ---------------------------------------------------------------- W&B (offline files, read with wandb's protobufs)

BLOCK = 32768  # the .wandb transaction log: LevelDB's log format after W&B's 7-byte header


def _wandb_records(path: Path) -> Iterator[Any]:
    """The ``Record`` protobufs of an offline run's ``.wandb`` file, parsed with the wandb library's own schema."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, pending = 7, b""
    while pos + 7 <= len(data):
        left = BLOCK - pos % BLOCK
        if left < 7:  # a block's tail too short for a header is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL, LAST
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending + chunk)
            pending = b""
            yield record
        elif kind in (2, 3):  # FIRST, MIDDLE
            pending += chunk


def _wandb_runs(run_dir: Path) -> list[Path]:
    return sorted((run_dir / "wandb").glob("offline-run-*"))


def _wandb_read(offline: Path) -> tuple[str, dict[str, Any], list[dict[str, Any]], set[str]]:
    """An offline run folder: its run id, config, history rows (with ``_step``) and saved files."""
    (log,) = offline.glob("run-*.wandb")
    run_id, config, history, files = "", {}, [], set()
    for r in _wandb_records(log):
        kind = r.WhichOneof("record_type")
        if kind == "run":
            run_id = r.run.run_id
            config = {u.key: json.loads(u.value_json) for u in r.run.config.update if u.key != "_wandb"}
        elif kind == "history":
            history.append({".".join(i.nested_key) or i.key: json.loads(i.value_json) for i in r.history.item})
        elif kind == "files":
            files |= {f.path for f in r.files.files}
    return run_id, config, history, files


def _wandb_history(rows: list[dict[str, Any]]) -> dict[str, list[tuple[int, float]]]:
    out: dict[str, list[tuple[int, float]]] = {}
    for row in rows:
        for k, v in row.items():
            if not k.startswith("_"):
                out.setdefault(k, []).append((int(row["_step"]), float(v)))
    return {k: sorted(v) for k, v in out.items()}


def test_wandb_offline_run_holds_every_metrics_column_the_config_and_the_files(
    tmp_path: Path, make_spec: Callable[..., RunSpec]
) -> None:
    pytest.importorskip("wandb", reason="W&B is the 'wandb' extra: pip install 'fedrun[wandb]'")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    spec = make_spec(*SMALL, "tracking=[wandb]")
    run(spec, run_dir)

    (offline,) = _wandb_runs(run_dir)  # offline by default: files under the run dir
    run_id, config, history, files = _wandb_read(offline)
    assert run_id == json.loads((run_dir / STATE_FILE).read_text())["wandb"]["id"]
    assert offline.name.endswith(run_id)
    assert _wandb_history(history) == _expected(run_dir)
    assert config == OmegaConf.to_container(OmegaConf.create(spec.raw), resolve=True)
    assert {"summary.json", "accuracy.png", "partition.png"} <= files
    assert (offline / "files" / "summary.json").read_bytes() == (run_dir / "summary.json").read_bytes()


# ---------------------------------------------------------------- a stopped run, resumed


class Stop(BaseException):
    """A run stopped as by a kill: no handler of fedrun's catches it."""


def test_a_resumed_run_continues_the_same_tracker_runs_and_logs_each_round_once(
    tmp_path: Path, make_spec: Callable[..., RunSpec], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("wandb", reason="W&B is the 'wandb' extra: pip install 'fedrun[wandb]'")
    store = tmp_path / "mlruns"
    client = _mlflow_client(store, monkeypatch)
    import fedrun.run.loop as loop

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    spec = make_spec(*SMALL, "fl.rounds=6", "tracking=[mlflow,wandb]", f"tracking.mlflow.uri={store}")
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(spec.raw))  # what `fedrun` writes when a run starts
    save = loop.save_state

    def stop_before_the_checkpoint_of_round_4(state, experiment, run_dir, done, *a):  # noqa: ANN001, ANN202
        if done == 4:  # round 4 is in metrics.csv and the trackers, its checkpoint is not: resume re-runs it
            raise Stop
        return save(state, experiment, run_dir, done, *a)

    monkeypatch.setattr(loop, "save_state", stop_before_the_checkpoint_of_round_4)
    with pytest.raises(Stop):
        run(spec, run_dir)
    monkeypatch.setattr(loop, "save_state", save)
    state = json.loads((run_dir / STATE_FILE).read_text())
    assert state["mlflow"]["last_round"] == state["wandb"]["last_round"] == 4
    assert sorted(s for s, _ in _mlflow_history(client, state["mlflow"]["run_id"])["test_acc"]) == [1, 2, 3, 4]

    cli.resume(run_dir, [])  # `fedrun resume=<dir>`: from the checkpoint of round 3
    assert json.loads((run_dir / "summary.json").read_text())["resumed_from_round"] == 3
    assert json.loads((run_dir / STATE_FILE).read_text())["mlflow"]["run_id"] == state["mlflow"]["run_id"]

    expected = _expected(run_dir)
    experiment = client.get_experiment_by_name("fedrun")
    runs = client.search_runs([experiment.experiment_id])
    assert [r.info.run_id for r in runs] == [state["mlflow"]["run_id"]]  # one MLflow run
    assert runs[0].info.status == "FINISHED"
    history = _mlflow_history(client, runs[0].info.run_id)
    assert sorted(s for s, _ in history["test_acc"]) == [1, 2, 3, 4, 5, 6]  # every round once
    for col, pairs in expected.items():
        if col in TIMING_COLUMNS:  # round 4's timings are the first attempt's
            assert [s for s, _ in history[col]] == [s for s, _ in pairs]
        else:
            assert history[col] == pairs

    attempts = _wandb_runs(run_dir)  # one offline folder per attempt, of one W&B run id (`wandb sync` joins them)
    assert len(attempts) == 2
    read = [_wandb_read(a) for a in attempts]
    assert {r[0] for r in read} == {state["wandb"]["id"]}
    steps = [row["_step"] for r in read for row in r[2]]
    assert sorted(steps) == [1, 2, 3, 4, 5, 6]  # every round once, across the two attempts
    wandb_history = _wandb_history([row for r in read for row in r[2]])
    assert set(wandb_history) == set(expected)
    for col in set(expected) - set(TIMING_COLUMNS):
        assert wandb_history[col] == expected[col]


def test_a_sweep_is_one_mlflow_experiment_named_by_its_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.conftest import main_exit_code

    store = tmp_path / "mlruns"
    client = _mlflow_client(store, monkeypatch)
    sweep = tmp_path / "sweep"
    argv = ["fedrun", "-m", *SMALL, "fl.rounds=1", "output.plots=false", "seed=0,1", "tracking=[mlflow]"]
    argv += [f"tracking.mlflow.uri={store}", f"hydra.sweep.dir={sweep}", f"cache_dir={tmp_path / 'cache'}"]
    assert main_exit_code(monkeypatch, argv) == 0
    experiment = client.get_experiment_by_name(str(sweep))
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id])
    jobs = sorted(p.parent for p in sweep.glob("*/" + STATE_FILE))
    assert len(jobs) == 2
    assert sorted(r.info.run_name for r in runs) == sorted(j.name for j in jobs)  # one MLflow run per job
    assert sorted(r.data.params["seed"] for r in runs) == ["0", "1"]
    assert client.get_experiment_by_name("fedrun") is None  # no single-run experiment was made
