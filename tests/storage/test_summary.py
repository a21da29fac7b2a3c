"""storage/summary.py: summary.json as a typed, frozen Summary. Formats 0 (no ``format`` key) and 1 read the same,
each known field typed, every other key in ``extra``; the JSON written back is the JSON read."""

from __future__ import annotations

import dataclasses
import json
import pickle
from pathlib import Path

import pytest

from fedrun.storage.rundir import RunDir
from fedrun.storage.status import Status
from fedrun.storage.summary import SUMMARY_FORMAT, Summary, UnreadableRunFile

# a completed run's summary.json as fedrun wrote it before the format field (format 0), by hand
FORMAT_0 = """{
  "algorithm": "fedavg", "data": "fmnist", "model": "mlp", "partition": "dirichlet", "seed": 3,
  "engine": "sequential", "device": "cpu", "threads": 2, "status": "completed", "rounds_completed": 20,
  "last_k": 10, "test_acc_final": 0.81, "test_acc_last_k": 0.8, "test_acc_best": 0.82, "best_round": 19,
  "wall_time_s": 12.5, "samples_per_s": 4000.0, "partition_stats": {"gini": 0.4}
}"""
# an interrupted run of format 1, with a method's diagnostics
FORMAT_1 = {
    "format": 1,
    "algorithm": "fedlaw",
    "status": "interrupted",
    "rounds_completed": 4,
    "error": "interrupted by SIGTERM",
    "signal": "SIGTERM",
    "wall_time_s": 3,
    "lambda_final": [0.5, 0.5],
    "gamma_final": 0.9,
}


def test_a_format_0_summary_reads_typed() -> None:
    s = Summary.parse(FORMAT_0)
    assert s.format == 0 and s.status is Status.COMPLETED and s.completed
    assert (s.algorithm, s.data, s.model, s.partition, s.seed) == ("fedavg", "fmnist", "mlp", "dirichlet", 3)
    assert (s.engine, s.device, s.threads, s.rounds_completed, s.last_k) == ("sequential", "cpu", 2, 20, 10)
    assert (s.test_acc_final, s.test_acc_last_k, s.test_acc_best, s.best_round) == (0.81, 0.8, 0.82, 19)
    assert (s.wall_time_s, s.samples_per_s, s.error, s.signal) == (12.5, 4000.0, None, None)
    assert s.test_acc("last_k") == 0.8 and s.test_acc("best") == 0.82 and s.test_acc("nope") is None
    assert dict(s.extra) == {"partition_stats": {"gini": 0.4}}


def test_a_format_1_summary_reads_typed_and_its_unknown_keys_land_in_extra(tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text(json.dumps(FORMAT_1))
    s = RunDir(tmp_path).read_summary()
    assert s is not None and s.format == 1
    assert (s.status, s.error, s.signal, s.rounds_completed) == (
        Status.INTERRUPTED,
        "interrupted by SIGTERM",
        "SIGTERM",
        4,
    )
    assert s.wall_time_s == 3.0 and isinstance(s.wall_time_s, float)
    assert dict(s.extra) == {"lambda_final": [0.5, 0.5], "gamma_final": 0.9}
    assert s.test_acc("final") is None and not s.completed  # an interrupted run's accuracies are no result
    assert "format" not in s.fields and s.fields["algorithm"] == "fedlaw"


def test_values_of_the_wrong_type_read_as_none_and_stay_in_fields() -> None:
    s = Summary.parse('{"status": "done", "threads": 0, "test_acc_final": "0.9", "seed": true, "code": "x"}')
    assert (s.status, s.threads, s.test_acc_final, s.seed, s.code) == (None, None, None, None, None)
    assert s.fields["status"] == "done" and s.fields["test_acc_final"] == "0.9"  # where fedrun-report checks them
    assert s.extra == {}  # known keys, even when their value is damaged


def test_a_summary_is_frozen() -> None:
    s = Summary.parse(FORMAT_0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.status = Status.FAILED  # type: ignore[misc]
    with pytest.raises(TypeError):
        s.fields["status"] = "failed"  # type: ignore[index]
    with pytest.raises(TypeError):
        s.extra["new"] = 1  # type: ignore[index]
    assert pickle.loads(pickle.dumps(s)) == s and pickle.loads(pickle.dumps(s)).extra == s.extra
    failed = s.replace(status=Status.FAILED, error="boom")
    assert (failed.status, failed.error, s.status, s.error) == (Status.FAILED, "boom", Status.COMPLETED, None)


def test_writing_a_summary_keeps_the_json_as_read_with_the_current_format(tmp_path: Path) -> None:
    rd = RunDir(tmp_path)
    rd.write_summary(Summary.parse(json.dumps(FORMAT_1)))
    assert json.loads(rd.summary_file.read_text()) == {**FORMAT_1, "format": SUMMARY_FORMAT}
    rd.write_summary({"status": Status.RUNNING, "algorithm": "fedavg"})  # the fields of one, as fedrun.run writes
    assert rd.summary_file.read_text() == '{\n  "algorithm": "fedavg",\n  "format": 1,\n  "status": "running"\n}\n'
    assert SUMMARY_FORMAT == 1  # the JSON on disk is unchanged: no new format


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("{", "Expecting"),
        ("[1]", "not a fedrun summary"),
        ('{"status": 3}', "not a fedrun summary"),
        ('{"status": "completed", "format": -1}', "format -1 is not a summary format"),
        ('{"status": "completed", "format": 2}', "format 2 is newer than this fedrun reads"),
    ],
)
def test_what_is_not_a_summary_this_fedrun_reads_is_refused(text: str, why: str) -> None:
    with pytest.raises(UnreadableRunFile, match=why):
        Summary.parse(text)
