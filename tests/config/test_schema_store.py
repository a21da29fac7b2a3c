"""One source of config truth: each component's params dataclass is its schema in Hydra's ConfigStore, every
YAML option composes on it (types checked while composing, also for ``--cfg``), the YAMLs and
conf/config.yaml do not restate its defaults, and a method's params declare the rounds they derive from
``fl.rounds``."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from omegaconf import OmegaConf

from fedrun.algorithms.base import AlgoParams, Algorithm
from fedrun.config import registry
from fedrun.config.identity import round_schedule
from fedrun.config.registry import ALGORITHMS, Entry, schema_of
from fedrun.config.schema import COMPONENT_GROUPS, FedrunConfig, HardwareConfig
from fedrun.core.errors import ConfigError
from tests.conftest import CONF_DIR, REPO, compose_cfg


def _options() -> Iterator[tuple[str, str]]:
    for group in COMPONENT_GROUPS:
        for path in sorted((Path(CONF_DIR) / group).glob("*.yaml")):
            yield group, path.stem


OPTIONS = list(_options())


@pytest.mark.parametrize(("group", "option"), OPTIONS, ids=[f"{g}/{o}" for g, o in OPTIONS])
def test_every_option_composes_on_its_components_schema(group: str, option: str) -> None:
    cfg = compose_cfg([f"{group}={option}"])
    node = cfg[group]
    entry = COMPONENT_GROUPS[group].get(node.name)
    assert OmegaConf.get_type(node) is schema_of(entry.params, entry.name)
    # every field of the params dataclass is in the composed node, and the YAML restates no default
    fields = {f.name: f for f in dataclasses.fields(entry.params)}
    assert set(node) == {"name", *fields}
    text = (Path(CONF_DIR) / group / f"{option}.yaml").read_text()
    own = {k: v for k, v in (yaml.safe_load(text) or {}).items() if k != "defaults"}
    assert "name" not in own  # the schema base names the component
    for line in text.splitlines():
        key = line.split(":", 1)[0]
        if key in own and "#" not in line and key not in text.split("defaults:", 1)[0]:
            default = fields[key].default
            assert not (type(own[key]) is type(default) and own[key] == default), f"{line!r} restates the default"


def test_a_wrong_type_is_refused_while_composing_also_for_cfg_job(tmp_path: Path) -> None:
    """``--cfg job`` composes only; a wrong type or an unknown key of a component is refused there too."""
    for override, field in (("algorithm.mu=abc", "algorithm.mu"), ("algorithm.bogus=1", "algorithm.bogus")):
        res = subprocess.run(
            [sys.executable, "-m", "fedrun.cli", "--cfg", "job", "algorithm=fedprox", override],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
        )
        assert res.returncode == 2, res.stdout[-2000:] + res.stderr[-2000:]
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"fedrun: error: {field}: "), res.stderr
    ok = compose_cfg(["algorithm=fedprox", "algorithm.mu=0.1"])
    assert ok.algorithm.mu == 0.1 and ok.algorithm.name == "fedprox"


def test_a_plain_mapping_is_checked_through_the_same_schema() -> None:
    """validate() of a saved run's config (plain dicts) still refuses wrong types, Literal choices and nan."""
    params = ALGORITHMS.get("fedprox").params
    with pytest.raises(ConfigError) as e:
        registry.build_params(params, {"mu": "abc"}, "algorithm")
    assert e.value.field == "algorithm.mu"
    with pytest.raises(ConfigError) as e:
        registry.build_params(params, {"mu": float("nan")}, "algorithm")
    assert e.value.field == "algorithm.mu" and "finite" in e.value.message
    with pytest.raises(ConfigError) as e:
        registry.build_params(ALGORITHMS.get("feddyn").params, {"variant": "nope"}, "algorithm")
    assert e.value.field == "algorithm.variant" and "valid: paper, law, official" in e.value.message
    assert not hasattr(registry, "_check_type")


def test_config_yaml_does_not_restate_the_schema() -> None:
    own = yaml.safe_load((Path(CONF_DIR) / "config.yaml").read_text())
    assert set(own) == {"defaults", "hydra"}
    cfg = compose_cfg([])
    for section in ("fl", "eval", "output", "checkpoint", "ima", "proxy", "corrupt", "tracking"):
        assert OmegaConf.to_container(cfg[section]) == dataclasses.asdict(getattr(FedrunConfig(), section))


def test_the_engine_default_is_stated_once() -> None:
    assert HardwareConfig().engine == "auto"
    assert compose_cfg([]).hardware.engine == "auto"  # the cpu preset, as before
    for option in ("cpu", "cuda"):
        assert "engine" not in (yaml.safe_load((Path(CONF_DIR) / "hardware" / f"{option}.yaml").read_text()) or {})
        assert compose_cfg([f"hardware={option}"]).hardware.engine == "auto"
    assert compose_cfg(["hardware=ray"]).hardware.engine == "ray"


def test_every_algorithm_takes_a_typed_setup_env() -> None:
    from fedrun.algorithms.base import SetupEnv

    for name in ALGORITHMS.names():
        cls = ALGORITHMS.get(name).obj
        assert cls.setup.__annotations__["env"] in (SetupEnv, "SetupEnv"), name
    assert Algorithm.setup.__annotations__["env"] in (SetupEnv, "SetupEnv")


@dataclasses.dataclass
class _WarmupParams(AlgoParams):
    warmup: float = 0.1

    @classmethod
    def derived_rounds(cls, node: Mapping[str, Any], rounds: int) -> dict[str, int]:
        return {"warmup": int(node.get("warmup", cls.warmup) * rounds)}


def test_round_schedule_reads_what_a_methods_params_declare(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(ALGORITHMS._entries, "warmup_test", Entry("warmup_test", Algorithm, _WarmupParams))
    raw = {"fl": {"rounds": 50}, "algorithm": {"name": "warmup_test", "warmup": 0.2}}
    assert round_schedule(raw) == {"algorithm.warmup": 10}
    assert round_schedule({**raw, "ima": {"enabled": True, "start": 0.5}}) == {"algorithm.warmup": 10, "ima.start": 25}
    # the built-in ones, as before (their fingerprints depend on these keys and values)
    fedfa = {"fl": {"rounds": 100}, "algorithm": {"name": "fedfa"}, "ima": {"enabled": True}}
    assert round_schedule(fedfa) == {"algorithm.calib_start": 26, "ima.start": 75}
    source = (REPO / "fedrun" / "config" / "identity.py").read_text()
    body = source.split("def round_schedule", 1)[1].split("\ndef ", 1)[0]
    assert '"fedfa"' not in body and '"ima"' not in body  # names no method
