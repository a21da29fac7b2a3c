"""Each optional extra missing (hidden in-process): one line naming the ``pip install 'fedrun[...]'``, exit 2.

Optuna's sweeper, Hydra's launcher plugins (fedrun/cli/main.py: before Hydra composes, whose own error would only
say that a config is missing), Ray (the engine) and TensorBoard (the tracker)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from fedrun.cli import main as cli
from fedrun.config import location
from tests.conftest import main_exit_code


def _hide(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    for m in modules:
        monkeypatch.setitem(sys.modules, m, None)


@pytest.mark.parametrize(
    ("override", "module", "extra"),
    [
        ("hydra/sweeper=optuna_tpe", "hydra_plugins.hydra_optuna_sweeper", "tune"),
        ("hydra/launcher=parallel", "hydra_plugins.hydra_joblib_launcher", "dist"),
        ("hydra/launcher=slurm", "hydra_plugins.hydra_submitit_launcher", "dist"),
        ("hydra/launcher=ray_cluster", "hydra_plugins.hydra_ray_launcher", "ray-launcher"),
    ],
)
def test_a_missing_hydra_plugin_names_its_extra(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
    tmp_path: Path,
    override: str,
    module: str,
    extra: str,
) -> None:
    _hide(monkeypatch, module)
    argv = ["fedrun", "-m", override, f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    assert main_exit_code(monkeypatch, argv) == 2
    err = capsys.readouterr().err
    assert err == (
        f"fedrun: error: {override}: needs the {module.split('.')[1]} package, not installed here;"
        f" pip install 'fedrun[{extra}]'\n"
    )
    assert not (tmp_path / "sweep").exists()


def test_every_sweeper_and_launcher_preset_has_its_plugin_mapped() -> None:
    for group in ("hydra/sweeper", "hydra/launcher"):
        for path in (location.CONF_DIR / group).glob("*.yaml"):
            assert cli.plugin_config(group, path.stem) in cli.PLUGINS, path


def test_an_installed_plugin_is_not_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "has_module", lambda module: True)
    cli.check_plugins(["hydra/sweeper=optuna_tpe", "hydra/launcher=../../etc/passwd", "seed=1"])  # no exit


def test_ray_engine_without_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    from fedrun.core.errors import ConfigError
    from fedrun.engines.ray_engine import ray_module

    _hide(monkeypatch, "ray")
    with pytest.raises(ConfigError, match=r"^hardware.engine: needs the ray package.*pip install 'fedrun\[dist\]'$"):
        ray_module()


def test_tensorboard_tracker_without_tensorboard(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    _hide(monkeypatch, "tensorboard")
    argv = ["fedrun", "tracking.tensorboard=true", "data.standin=true", f"hydra.run.dir={tmp_path / 'run'}"]
    assert main_exit_code(monkeypatch, argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "pip install 'fedrun[tracking]'" in err, err
