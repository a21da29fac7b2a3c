"""Trackers chosen by name (``tracking=[tensorboard,mlflow,wandb]``): the config group, the old
``tracking.tensorboard=true`` key, one-line refusals for a missing package, TensorBoard's event files, and no
tracker library imported unless chosen. MLflow and W&B read back: tests/storage/test_tracking_backends.py."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from fedrun.config.schema import RunSpec
from fedrun.config.validate import validate
from fedrun.core.errors import ConfigError
from fedrun.storage.tracking import TB_DIR, Trackers, scalars
from tests.conftest import REPO


def test_scalars_keep_finite_numbers_only() -> None:
    row = {"round": 3, "test_acc": 0.5, "lr": 0.1, "clients": 4, "note": "x", "grad_coherence": float("nan")}
    assert scalars(row) == {"test_acc": 0.5, "lr": 0.1, "clients": 4.0}


def test_trackers_are_chosen_by_name_from_the_tracking_group(make_spec: Callable[..., RunSpec]) -> None:
    none = make_spec().tracking
    assert (none.tensorboard, none.mlflow.enabled, none.wandb.enabled) == (False, False, False)
    one = make_spec("tracking=[mlflow]").tracking
    assert (one.tensorboard, one.mlflow.enabled, one.wandb.enabled) == (False, True, False)
    every = make_spec("tracking=[tensorboard,mlflow,wandb]", "tracking.mlflow.uri=http://mlflow:5000").tracking
    assert (every.tensorboard, every.mlflow.enabled, every.wandb.enabled) == (True, True, True)
    assert every.mlflow.uri == "http://mlflow:5000"
    assert every.wandb.mode == "offline"  # no network needed unless asked for


def test_the_old_tensorboard_key_is_the_same_switch(make_spec: Callable[..., RunSpec]) -> None:
    assert make_spec("tracking.tensorboard=true").tracking.tensorboard
    # an old run directory's config.yaml: tracking holds only the tensorboard key
    raw = dict(make_spec().raw)
    raw["tracking"] = {"tensorboard": True}
    spec = validate(raw)
    assert spec.tracking.tensorboard and not spec.tracking.mlflow.enabled and not spec.tracking.wandb.enabled


def test_bad_tracking_settings_are_one_line_errors(make_spec: Callable[..., RunSpec]) -> None:
    with pytest.raises(ConfigError, match=r"^tracking\.wandb\.mode: invalid value 'cloud'; valid: offline, online"):
        make_spec("tracking=[wandb]", "tracking.wandb.mode=cloud")
    raw = dict(make_spec().raw)
    raw["tracking"] = {"mlflow": {"enabled": True, "url": "x"}}
    with pytest.raises(ConfigError, match=r"^tracking\.mlflow\.url: Key 'url' not in 'MlflowTracking'$"):
        validate(raw)


def _hide(monkeypatch: pytest.MonkeyPatch, module: str) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == module else real(name, *a))


@pytest.mark.parametrize(
    ("choice", "module", "extra"),
    [("tensorboard", "tensorboard", "tracking"), ("mlflow", "mlflow", "mlflow"), ("wandb", "wandb", "wandb")],
)
def test_a_chosen_tracker_without_its_package_is_a_one_line_config_error(
    make_spec: Callable[..., RunSpec], monkeypatch: pytest.MonkeyPatch, choice: str, module: str, extra: str
) -> None:
    _hide(monkeypatch, module)
    with pytest.raises(ConfigError) as e:
        make_spec(f"tracking=[{choice}]")
    assert str(e.value) == (
        f"tracking.{choice}: needs the {module} package, not installed here; pip install 'fedrun[{extra}]'"
    )
    make_spec()  # not chosen: nothing is needed


def test_a_missing_tracker_package_stops_fedrun_with_exit_2_before_any_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    from tests.conftest import main_exit_code

    _hide(monkeypatch, "mlflow")
    run_dir = tmp_path / "run"
    code = main_exit_code(
        monkeypatch, ["fedrun", "data.standin=true", "fl.rounds=2", "tracking=[mlflow]", f"hydra.run.dir={run_dir}"]
    )
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "fedrun: error: tracking.mlflow: needs the mlflow package, not installed here; pip install 'fedrun[mlflow]'"
    ]
    assert not (run_dir / "metrics.csv").exists() and not (run_dir / "checkpoint.pt").exists()


def test_an_unknown_tracker_name_lists_the_valid_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    from tests.conftest import main_exit_code

    code = main_exit_code(monkeypatch, ["fedrun", "tracking=[mlflow,neptune]", f"hydra.run.dir={tmp_path / 'run'}"])
    assert code == 2
    assert capsys.readouterr().err.strip() == (
        "fedrun: error: tracking: unknown option 'neptune'; valid: mlflow, tensorboard, wandb"
    )


def test_no_tracker_library_is_imported_unless_chosen(tmp_path: Path) -> None:
    """The run's speed with no tracker: mlflow, wandb and tensorboard stay unimported (mlflow alone costs seconds)."""
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from tests.conftest import compose_cfg\n"
        "from fedrun.config.validate import validate\n"
        "from fedrun.run import loop\n"
        "from fedrun.storage.tracking import Trackers\n"
        "spec = validate(compose_cfg(['data.standin=true']))\n"
        f"Trackers.open(spec.tracking, Path({str(tmp_path)!r}), spec.raw).close()\n"
        "print(sorted(m for m in ('mlflow', 'wandb', 'tensorboard') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_tensorboard_event_file_holds_each_row(tmp_path: Path, make_spec: Callable[..., RunSpec]) -> None:
    pytest.importorskip("tensorboard", reason="TensorBoard is the 'tracking' extra: pip install 'fedrun[tracking]'")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    trackers = Trackers.open(make_spec("tracking=[tensorboard]").tracking, tmp_path)
    for r in (1, 2, 3):
        trackers.log({"round": r, "test_acc": 0.1 * r, "test_loss": 2.0 / r})
    trackers.finish(tmp_path, {"status": "completed"})
    trackers.close()
    assert list((tmp_path / TB_DIR).glob("events.out.tfevents.*"))
    acc = EventAccumulator(str(tmp_path / TB_DIR))
    acc.Reload()
    assert set(acc.Tags()["scalars"]) == {"test_acc", "test_loss"}
    events = acc.Scalars("test_acc")
    assert [e.step for e in events] == [1, 2, 3]
    assert [e.value for e in events] == pytest.approx([0.1, 0.2, 0.3])
