"""Optional TensorBoard tracking: event files with every metrics column; a clear error when not installed."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import pytest

from fedrun.config.schema import RunSpec
from fedrun.core.errors import ConfigError
from fedrun.storage.tracking import TB_DIR, Trackers, scalars


def test_scalars_keep_finite_numbers_only() -> None:
    row = {"round": 3, "test_acc": 0.5, "lr": 0.1, "clients": 4, "note": "x", "grad_coherence": float("nan")}
    assert scalars(row) == {"test_acc": 0.5, "lr": 0.1, "clients": 4.0}


def test_enabled_without_the_package_is_a_one_line_config_error(
    make_spec: Callable[..., RunSpec], monkeypatch: pytest.MonkeyPatch
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tensorboard" else real(name, *a))
    with pytest.raises(ConfigError, match=r"^tracking\.tensorboard: needs the tensorboard package"):
        make_spec("tracking.tensorboard=true")
    assert not make_spec().tracking.tensorboard  # off by default: nothing is needed


def test_tensorboard_event_file_holds_each_row(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    trackers = Trackers.open(True, tmp_path)
    for r in (1, 2, 3):
        trackers.log({"round": r, "test_acc": 0.1 * r, "test_loss": 2.0 / r})
    trackers.close()
    assert list((tmp_path / TB_DIR).glob("events.out.tfevents.*"))
    acc = EventAccumulator(str(tmp_path / TB_DIR))
    acc.Reload()
    assert set(acc.Tags()["scalars"]) == {"test_acc", "test_loss"}
    events = acc.Scalars("test_acc")
    assert [e.step for e in events] == [1, 2, 3]
    assert [e.value for e in events] == pytest.approx([0.1, 0.2, 0.3])
