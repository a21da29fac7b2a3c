"""The ``trackers`` table: tracker settings and a run dir's ``tracking.json`` as hostile input. A tracker server that
does not answer is refused in one line within seconds (exit 2, nothing written: MLflow's client retried for
minutes, W&B's waited two), a ``file:`` URI is MLflow's to parse (not a folder named ``file:`` in the current
directory), and a ``tracking.json`` that the run did not write (an entry of another shape, a last round beyond the
run) does not stop the logging. Only 127.0.0.1 addresses (port 9, discard: nothing listens there)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from fedrun.storage.trackers.common import STATE_FILE
from tests.hostile import Case, completed_run, ids, run_case

CATEGORY = "trackers"
DEAD = "http://127.0.0.1:9"
RUN = "hydra.run.dir={t}/r"
MLF = ("tracking=[mlflow]", RUN)
R2 = ("resume={done}", "fl.rounds=2")
ML = ("tracking.mlflow.enabled=true", "tracking.mlflow.uri={t}/store")  # a resume's switch; a store in the case's
WB = ("tracking.wandb.enabled=true",)


class Env:
    """W&B's server set for the case (``setup``), with an API key (so that wandb tries it), restored when the run
    ends (``close``)."""

    def __init__(self, url: str) -> None:
        self.values = {"WANDB_BASE_URL": url, "WANDB_API_KEY": "0" * 40}
        self.old = {k: os.environ.get(k) for k in self.values}
        os.environ.update(self.values)

    def close(self) -> None:
        for k, v in self.old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _state(blob: object) -> object:
    """A setup planting ``blob`` as the completed run's tracking.json."""

    def setup(t: Path) -> None:
        (t / "done" / STATE_FILE).write_text(json.dumps(blob))

    return setup


def _logged_round(name: str, expected: int) -> object:
    def after(t: Path) -> None:
        state = json.loads((t / "done" / STATE_FILE).read_text())
        assert state[name]["last_round"] == expected, state  # the resumed round was logged

    return after


def _file_store(t: Path) -> None:
    assert list((t / "store").glob("*/meta.yaml")), "the run went to the file: URI's folder"


def _refused_fresh(run_dir: Path) -> None:
    """A refused new run leaves what every refusal leaves (fedrun/cli/main.py): error.txt and Hydra's record."""
    assert {p.name for p in run_dir.iterdir()} <= {"error.txt", ".hydra"}, sorted(run_dir.iterdir())


def _unreachable(uri: str, field: str = "tracking.mlflow.uri") -> tuple[str, ...]:
    return (f"fedrun: error: {field}: cannot reach {uri} (",)


CASES = [
    Case("mlflow-server-unreachable", (*MLF, f"tracking.mlflow.uri={DEAD}"), 2,
         _unreachable(DEAD), after=lambda t: _refused_fresh(t / "r")),
    Case("mlflow-https-server-unreachable", (*MLF, "tracking.mlflow.uri=https://127.0.0.1:9/x"), 2,
         _unreachable("https://127.0.0.1:9/x")),
    Case("mlflow-unreachable-on-resume", (*R2, "tracking.mlflow.enabled=true", f"tracking.mlflow.uri={DEAD}"), 2,
         _unreachable(DEAD), kept=("done",), tiny=False),
    Case("mlflow-port-not-a-number-on-resume", (*R2, *ML[:1], "tracking.mlflow.uri=http://127.0.0.1:none"), 2,
         ("tracking.mlflow.uri: 'http://127.0.0.1:none' is not a valid server address",), kept=("done",), tiny=False),
    Case("mlflow-server-without-host-on-resume", (*R2, *ML[:1], "tracking.mlflow.uri=http://:9"), 2,
         ("tracking.mlflow.uri: 'http://:9' names no host",), kept=("done",), tiny=False),
    Case("wandb-online-server-unreachable", ("tracking=[wandb]", RUN, "tracking.wandb.mode=online"), 2,
         _unreachable(DEAD, "tracking.wandb.mode"), lambda t: Env(DEAD)),
    Case("wandb-online-on-resume-unreachable", (*R2, *WB, "tracking.wandb.mode=online"), 2,
         _unreachable(DEAD, "tracking.wandb.mode"), lambda t: Env(DEAD), ("done",), tiny=False),
    Case("mlflow-file-uri-is-mlflows", (*MLF, "tracking.mlflow.uri=file:{t}/store"), 0,
         after=_file_store),  # before: a folder named file: in the current directory
    Case("wandb-online-server-port-not-a-number", ("tracking=[wandb]", RUN, "tracking.wandb.mode=online"), 2,
         ("tracking.wandb.mode: 'http://127.0.0.1:none' is not a valid server address",),
         lambda t: Env("http://127.0.0.1:none")),
    Case("state-last-round-beyond-the-run", (*R2, *WB), 0, (),
         _state({"wandb": {"id": "abcd1234", "last_round": 10**18}}),
         after=_logged_round("wandb", 2), tiny=False),  # before: no round logged, silently
    Case("state-entry-not-a-map", (*R2, *ML), 0, (), _state({"mlflow": ["run", 1]}),
         after=_logged_round("mlflow", 2), tiny=False),  # before: AttributeError: 'list' object has no attribute 'get'
]  # fmt: skip


@pytest.fixture(scope="module")
def done(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return completed_run(tmp_path_factory.mktemp("trackers") / "run")


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_trackers(
    case: Case, tmp_path: Path, done: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    pytest.importorskip("mlflow" if any("mlflow" in a for a in case.args) else "wandb")
    t0 = time.monotonic()
    run_case(case, tmp_path, monkeypatch, capsys, done)
    if case.code == 2:
        assert time.monotonic() - t0 < 30, "a refusal must come in seconds"
