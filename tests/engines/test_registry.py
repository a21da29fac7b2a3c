"""Engines and trackers as registries with typed params: the ``hardware`` and ``tracking`` sections are built from
what the engines and trackers register, each key and default stated once (the params dataclass), and every
conf/hardware and conf/tracking option holds only what differs from those defaults."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from fedrun.config import schema
from fedrun.config.registry import ENGINES, Entry
from fedrun.config.validate import validate
from fedrun.core.errors import ConfigError
from fedrun.engines.ray_engine import RayParams
from fedrun.engines.sequential import SequentialEngine
from fedrun.engines.vectorised import VectorisedParams
from fedrun.storage.tracking import TRACKERS
from tests.conftest import CONF_DIR, compose_cfg


def test_the_hardware_section_is_the_shared_keys_then_each_engines_options() -> None:
    keys = [f.name for f in dataclasses.fields(schema.hardware_class())]
    shared = ["device", "engine", "threads", "precision", "stack", "parallel"]
    assert keys == [*shared, "chunk", "compile", "actors", "address", "placement"]
    assert set(compose_cfg([]).hardware) == set(keys)
    for params in (VectorisedParams, RayParams):
        for f in dataclasses.fields(params):
            assert not hasattr(schema.HardwareConfig, f.name)  # stated by the engine only


def test_an_engine_option_is_checked_by_its_engines_params(make_spec) -> None:  # noqa: ANN001
    with pytest.raises(ConfigError) as e:
        make_spec("hardware.chunk=0")
    assert str(e.value) == "hardware.chunk: must be > 0, got 0"
    spec = make_spec("hardware.chunk=3", "hardware.engine=vectorised")
    assert schema.engine_options(VectorisedParams, spec.hardware) == VectorisedParams(chunk=3)
    with pytest.raises(ConfigError, match=r"^hardware\.bogus: unknown key"):
        validate({**spec.raw, "hardware": {**spec.raw["hardware"], "bogus": 1}})


def test_two_engines_declaring_one_key_differently_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    @dataclasses.dataclass
    class Other:
        chunk: int | None = 4  # the vectorised engine's default is None

    ENGINES.names()
    monkeypatch.setitem(ENGINES._entries, "zz_other", Entry("zz_other", SequentialEngine, Other))
    with pytest.raises(RuntimeError, match="declare hardware.chunk differently"):
        schema.hardware_class()


def test_every_registered_engine_and_tracker_has_its_option() -> None:
    for name in ENGINES.names():
        assert (Path(CONF_DIR) / "hardware" / f"{name}.yaml").is_file(), name
        assert compose_cfg([f"hardware={name}"]).hardware.engine == name
    for name in TRACKERS.names():
        assert (Path(CONF_DIR) / "tracking" / f"{name}.yaml").is_file(), name
        assert list(validate(compose_cfg([f"tracking=[{name}]"])).tracking.chosen()) == [name]


def _restated(own: dict, defaults: dict, where: str) -> list[str]:
    out = []
    for key, value in own.items():
        if isinstance(value, dict):
            out += _restated(value, defaults.get(key) or {}, f"{where}{key}.")
        elif key in defaults and type(defaults[key]) is type(value) and defaults[key] == value:
            out.append(f"{where}{key}")
    return out


@pytest.mark.parametrize("group", ["hardware", "tracking"])
def test_no_option_restates_a_default(group: str) -> None:
    defaults = compose_cfg([])[group]
    for path in sorted((Path(CONF_DIR) / group).glob("*.yaml")):
        own = yaml.safe_load(path.read_text()) or {}
        assert not _restated(own, dict(defaults), f"{group}."), path
