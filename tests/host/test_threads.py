"""hardware.threads=0: one thread per idle core, measured; recorded in summary.json and kept on resume."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import fedrun.host.threads as threads
from fedrun.config.schema import RunSpec
from fedrun.run.experiment import earlier_engine_and_threads
from fedrun.run.loop import run
from tests.run.test_resume import SMALL


@pytest.fixture(autouse=True)
def _keep_torch_threads() -> None:
    n = torch.get_num_threads()
    threads._CHOICE.clear()
    yield
    threads._CHOICE.clear()
    torch.set_num_threads(n)


@pytest.mark.parametrize(
    ("cores", "busy", "expected"),
    [(2, 0.1, 2), (2, 0.4, 2), (2, 0.6, 1), (2, 2.0, 1), (2, 7.5, 1), (16, 0.0, 16), (16, 3.2, 13), (16, 15.9, 1)],
)
def test_one_thread_per_idle_core(cores: int, busy: float, expected: int) -> None:
    assert threads.choose_threads(cores, busy) == expected


def test_busy_cores_from_proc_stat(monkeypatch: pytest.MonkeyPatch) -> None:
    samples = iter([(1000, 600), (1400, 700)])  # (all jiffies, idle): 400 elapsed, 100 of them idle
    monkeypatch.setattr(threads, "_cpu_times", lambda: next(samples))
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 2)
    assert threads.busy_cores(0.0) == pytest.approx(2 * 300 / 400)


def test_the_measured_count_is_set_recorded_and_taken_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threads, "usable_cores", lambda: 4)
    measured = iter([1.2, 0.0])
    monkeypatch.setattr(threads, "busy_cores", lambda: next(measured))
    got = threads.apply_threads(0)
    assert got == {"threads": 3, "threads_selection": "measured: 1.2 of 4 cores busy"}
    assert torch.get_num_threads() == 3
    assert threads.apply_threads(0)["threads"] == 3  # not measured again (0.0 busy would give 4)
    assert threads.apply_threads(2) == {"threads": 2, "threads_selection": "configured"}
    assert threads.apply_threads(0, pinned=1) == {"threads": 1, "threads_selection": "kept from the resumed run"}
    assert torch.get_num_threads() == 1


def test_summary_records_the_threads_and_a_resume_keeps_them(
    tmp_path: Path, make_spec: Callable[..., RunSpec], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(threads, "busy_cores", lambda: 0.0)
    monkeypatch.setattr(threads, "usable_cores", lambda: 2)
    spec = make_spec(*SMALL, "hardware.threads=0", "fl.rounds=2")
    summary = run(spec, tmp_path)
    assert summary["threads"] == 2 and summary["threads_selection"] == "measured: 0.0 of 2 cores busy"
    assert json.loads((tmp_path / "summary.json").read_text())["threads"] == 2
    assert earlier_engine_and_threads(tmp_path) == (
        "vectorised",
        2,
    )  # what a resume (or an extension) builds with
