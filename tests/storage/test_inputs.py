"""fedrun/storage/inputs.py: the files a run reads by path, read without blocking and kept by content; a run killed
by SIGKILL whose trace is then edited is refused on resume, and resumes once the trace is back as it was."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedrun.cli import main as cli
from fedrun.core.errors import ConfigError
from fedrun.storage.inputs import (
    NotRegularFile,
    check_inputs,
    digest,
    input_files,
    open_regular,
    read_regular,
    record_inputs,
)
from fedrun.storage.rundir import RunDir
from tests.conftest import REPO, dir_snapshot
from tests.hostile import TINY
from tests.pause_worker import PAUSED

SAMPLE = REPO / "tests" / "system" / "sample_trace.json"


def _raw(trace: str | None, devices: str = "trace") -> dict:
    return {"system": {"devices": devices, "trace": trace}}


def test_only_regular_files_are_read_and_nothing_blocks(tmp_path: Path) -> None:
    (tmp_path / "plain").write_bytes(b"abc")
    assert read_regular(tmp_path / "plain") == b"abc"
    with pytest.raises(ValueError, match="larger than 2 bytes"):
        read_regular(tmp_path / "plain", limit=2)
    os.mkfifo(tmp_path / "fifo")  # no writer: a blocking open would wait forever
    (tmp_path / "zero").symlink_to("/dev/zero")
    (tmp_path / "dir").mkdir()
    for name, kind in (("fifo", "a FIFO"), ("zero", "a character device"), ("dir", "a directory")):
        with pytest.raises(NotRegularFile) as e, open_regular(tmp_path / name):
            pass
        assert e.value.kind == kind
    with pytest.raises(FileNotFoundError):
        read_regular(tmp_path / "absent")


def test_the_files_a_config_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert input_files(_raw(None)) == {} and input_files(_raw("t.json", devices="tiers")) == {}
    assert input_files({"system": None}) == {} and input_files({}) == {}
    assert input_files(_raw("t.json")) == {"system.trace": [str(tmp_path / "t.json")]}  # as the run reads it
    assert input_files(_raw("/x/t.pkl")) == {"system.trace": ["/x/t.pkl", "/x/t.behave.pkl"]}


def test_digests_name_content_absence_and_what_is_no_file(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"same")
    (tmp_path / "b").write_bytes(b"same")
    os.mkfifo(tmp_path / "fifo")
    assert digest(str(tmp_path / "a")) == digest(str(tmp_path / "b")) != digest(str(SAMPLE))
    assert digest(str(tmp_path / "absent")) is None
    assert str(digest(str(tmp_path / "fifo"))).startswith("unreadable: ")


def test_a_record_is_checked_by_content(tmp_path: Path) -> None:
    trace = tmp_path / "t.json"
    trace.write_text("{}")
    rd = RunDir(tmp_path / "run")
    rd.path.mkdir()
    raw = _raw(str(trace))
    check_inputs(rd, raw, goes_on=False)  # no record, a skipped run: none written
    assert not rd.inputs_file.exists()
    record_inputs(rd, raw)
    check_inputs(rd, raw, goes_on=True)  # unchanged
    os.utime(trace, (1, 1))  # touched, same bytes
    check_inputs(rd, raw, goes_on=True)
    trace.write_text("{ }")
    with pytest.raises(ConfigError, match=r"t\.json changed \(sha256 [0-9a-f]{12}\.\.\. -> [0-9a-f]{12}\.\.\.\)") as e:
        check_inputs(rd, raw, goes_on=True)
    assert e.value.field == "system.trace" and str(rd.path) in e.value.message
    trace.unlink()
    with pytest.raises(ConfigError, match="is gone"):
        check_inputs(rd, raw, goes_on=True)
    rd.inputs_file.write_text('{"format": 1, "files": {"system.trace": [{"path": 1}]}}')
    with pytest.raises(ConfigError, match=r"^resume: .*input_digests\.json: unreadable record .*KeyError"):
        check_inputs(rd, raw, goes_on=True)
    rd.inputs_file.unlink()
    trace.write_text("{}")
    check_inputs(rd, raw, goes_on=True)  # a run of a fedrun before the record: recorded now
    assert json.loads(rd.inputs_file.read_text())["files"]["system.trace"][0]["sha256"] == digest(str(trace))


def test_a_pickle_traces_behaviour_file_is_kept_too(tmp_path: Path) -> None:
    (tmp_path / "t.pkl").write_bytes(pickle.dumps({0: {"computation": 1.0, "communication": 1.0}}))
    rd = RunDir(tmp_path / "run")
    rd.path.mkdir()
    raw = _raw(str(tmp_path / "t.pkl"))
    record_inputs(rd, raw)  # no behaviour pickle: recorded as absent
    (tmp_path / "t.behave.pkl").write_bytes(pickle.dumps({}))
    with pytest.raises(ConfigError, match=r"t\.behave\.pkl appeared since the run"):
        check_inputs(rd, raw, goes_on=True)


def test_sigkill_then_an_edited_trace_is_refused_and_the_trace_as_it_was_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = tmp_path / "trace.json"
    clients = json.loads(SAMPLE.read_text())["clients"]
    trace.write_text(json.dumps({"clients": {c: clients[c] for c in ("0", "1", "2", "3")}}))
    original = trace.read_bytes()
    run_dir = tmp_path / "run"
    args = [*TINY, "fl.rounds=4", "checkpoint.every=1", "system.devices=trace", "system.trace=trace.json"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "tests.pause_worker", "round:3", *args, f"hydra.run.dir={run_dir}"]
    proc = subprocess.Popen([*cmd, f"cache_dir={tmp_path / 'cache'}"], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 600  # a bound, not a timing: the run waits in round 3 for the signal
    while not (tmp_path / PAUSED).exists():
        assert proc.poll() is None and time.monotonic() < deadline, "the run did not reach round 3"
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "running"  # killed mid-run

    trace.write_text(original.decode().replace("40000000000.0", "1000.0"))  # client 0 now a slow device
    left = dir_snapshot(run_dir)
    run = subprocess.run([sys.executable, "-m", "fedrun.cli", f"resume={run_dir}"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    assert run.returncode == 2, run.stderr
    assert (
        run.stderr.startswith(f"fedrun: error: system.trace: {trace} changed (sha256 ") and run.stderr.count("\n") == 1
    )
    assert dir_snapshot(run_dir) == left  # nothing written

    trace.write_bytes(original)
    monkeypatch.chdir(tmp_path)  # (the trace's relative path is read from here, as the run read it)
    cli.resume(run_dir, [])
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["rounds_completed"] == 4


@pytest.mark.parametrize(
    "text",
    ["{garbled", "[]", '{"format": 2, "files": {}}', '{"format": 1, "files": {"system.trace": [{"path": "x"}]}}',
     '{"format": 1, "files": {"system.trace": [{"path": "x", "sha256": 7}]}}', '{"format": 1, "files": {"k": [3]}}'],
)  # fmt: skip
def test_a_damaged_record_is_refused_in_one_line_naming_it(tmp_path: Path, text: str) -> None:
    rd = RunDir(tmp_path)
    rd.inputs_file.write_text(text)
    with pytest.raises(ConfigError, match="unreadable record of the files the run read") as e:
        check_inputs(rd, _raw(str(SAMPLE)), goes_on=True)
    assert e.value.field == "resume" and str(rd.inputs_file) in str(e.value) and "\n" not in str(e.value)
