"""One source of config truth: each component's params dataclass is its schema in Hydra's ConfigStore, every
YAML option composes on it (types checked while composing, also for ``--cfg``), no YAML of a config group nor
conf/config.yaml restates a default (a YAML states only the values in which its option differs), so changing a
default in its dataclass changes what ``fedrun`` composes, and a method's params declare the rounds they derive
from ``fl.rounds``."""

from __future__ import annotations

import dataclasses
import re
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from fedrun.algorithms.base import AlgoParams, Algorithm
from fedrun.config import registry
from fedrun.config.identity import round_schedule
from fedrun.config.registry import ALGORITHMS, Entry, schema_of
from fedrun.config.schema import COMPONENT_GROUPS, HardwareConfig, run_sections, store_schemas
from fedrun.core.errors import ConfigError
from fedrun.data.base import DataParams
from tests.conftest import CONF_DIR, REPO, compose_cfg, main_exit_code


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
    # every field of the params dataclass is in the composed node (the YAML restates no default: see below)
    fields = {f.name: f for f in dataclasses.fields(entry.params)}
    assert set(node) == {"name", *fields}
    text = (Path(CONF_DIR) / group / f"{option}.yaml").read_text()
    own = {k: v for k, v in (yaml.safe_load(text) or {}).items() if k != "defaults"}
    assert "name" not in own  # the schema base names the component


# every config group of conf/ (nested ones too: hardware/engine) but the paper presets (a paper's whole setting) and
# Hydra's own: a new group (an engine's or a tracker's options) is guarded without an edit here
GUARDED = [
    (str(p.parent.relative_to(CONF_DIR)), p.stem)
    for p in sorted(Path(CONF_DIR).rglob("*.yaml"))
    if p.parent != Path(CONF_DIR) and p.relative_to(CONF_DIR).parts[0] not in ("experiment", "hydra")
]
CHOSEN = {k: v for d in yaml.safe_load((Path(CONF_DIR) / "config.yaml").read_text())["defaults"] if isinstance(d, dict)
          for k, v in d.items()}  # fmt: skip


def _compose_option(conf: Path, group: str, option: str) -> dict[str, Any]:
    """The config composed with ``group=option`` (``group=[option]`` for a list group such as tracking; appended
    with ``+`` when the root config does not choose the group)."""
    plain = f"{group}=[{option}]" if isinstance(CHOSEN.get(group), list) else f"{group}={option}"
    tries = [plain] if group in CHOSEN else [f"+{group}={option}", plain]
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(conf), version_base=None):
            for i, override in enumerate(tries):
                try:
                    cfg = compose(config_name="config", overrides=[override])
                except Exception:  # noqa: BLE001 - a nested group already in the tree: the plain form
                    if i == len(tries) - 1:
                        raise
                    continue
                out = OmegaConf.to_container(cfg, resolve=False)
                assert isinstance(out, dict)
                return {str(k): v for k, v in out.items()}
    finally:
        GlobalHydra.instance().clear()
    raise AssertionError("unreachable")


def _leaves(node: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in node.items():
        if isinstance(value, dict) and value:
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def _same(a: Any, b: Any) -> bool:
    """Equal as a config value: 1 and 1.0 are, True and 1 are not."""
    return a == b and isinstance(a, bool) == isinstance(b, bool) and isinstance(a, str) == isinstance(b, str)


@pytest.fixture(scope="module")
def conf_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    conf = tmp_path_factory.mktemp("conf") / "conf"
    shutil.copytree(CONF_DIR, conf)
    return conf


@pytest.mark.parametrize(("group", "option"), GUARDED, ids=[f"{g}/{o}" for g, o in GUARDED])
def test_no_yaml_of_a_group_restates_a_default(group: str, option: str, conf_copy: Path) -> None:
    """Each value a YAML option states differs from what composing gives without it (its params dataclass's
    default, or what its own defaults list brings): a default has one home, and no comment excuses a copy."""
    path = conf_copy / group / f"{option}.yaml"
    text = path.read_text()
    node = yaml.safe_load(text) or {}
    own = {k: v for k, v in node.items() if k != "defaults"}
    package = re.search(r"^# @package (\S+)", text, re.M)
    where = (package[1] if package else group.replace("/", ".")).replace("_group_", group.replace("/", "."))
    prefix = "" if where == "_global_" else f"{where.removeprefix('_global_.')}."
    header = f"# @package {package[1]}\n" if package else ""
    path.write_text(header + (yaml.safe_dump({"defaults": node["defaults"]}) if "defaults" in node else ""))
    try:
        base = _compose_option(conf_copy, group, option)
    finally:
        path.write_text(text)
    for key, value in _leaves(own):
        default = OmegaConf.select(OmegaConf.create(base), prefix + key, default=KeyError)
        assert not _same(value, default), (
            f"conf/{group}/{option}.yaml: {key}: {value!r} restates the default {prefix}{key}={default!r}; state a"
            " default once, in its dataclass (a note beside it says where it comes from), and in a YAML only the"
            " values its option changes"
        )


@pytest.fixture
def patch_default(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """``patch(cls, field, value)``: the dataclass ``cls`` with another default for ``field``, as Hydra composes
    it (the schemas stored again); everything is restored after the test."""

    def restore() -> None:
        registry.schema_of.cache_clear()
        store_schemas()  # fedrun's schema too, its hardware and tracking sections built from the registries

    def patch(cls: type, name: str, value: Any) -> None:
        monkeypatch.setattr(cls.__dataclass_fields__[name], "default", value)  # type: ignore[attr-defined]
        monkeypatch.setattr(cls, name, value)
        restore()

    yield patch
    monkeypatch.undo()
    restore()


def test_changing_a_default_changes_what_fedrun_cfg_job_prints(
    patch_default: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def printed(*overrides: str) -> dict[str, Any]:
        assert main_exit_code(monkeypatch, ["fedrun", "--cfg", "job", *overrides]) == 0
        return yaml.safe_load(capsys.readouterr().out)

    before = printed("algorithm=fedprox", "data=cifar10")
    assert (before["algorithm"]["mu"], before["data"]["root"]) == (0.01, "${oc.env:FEDRUN_DATA,data}")
    patch_default(ALGORITHMS.get("fedprox").params, "mu", 0.125)
    patch_default(DataParams, "root", "/elsewhere")  # a field every dataset inherits
    after = printed("algorithm=fedprox", "data=cifar10")
    assert (after["algorithm"]["mu"], after["data"]["root"]) == (0.125, "/elsewhere")
    assert {k: v for k, v in after["algorithm"].items() if k != "mu"} == {
        k: v for k, v in before["algorithm"].items() if k != "mu"
    }


def test_a_wrong_type_is_refused_while_composing_also_for_cfg_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--cfg job`` composes only; a wrong type or an unknown key of a component is refused there too."""
    monkeypatch.chdir(tmp_path)  # `fedrun` through its console script's code path, in this process
    for override, field in (("algorithm.mu=abc", "algorithm.mu"), ("algorithm.bogus=1", "algorithm.bogus")):
        code = main_exit_code(monkeypatch, ["fedrun", "--cfg", "job", "algorithm=fedprox", override])
        out = capsys.readouterr()
        assert code == 2, out.out[-2000:] + out.err[-2000:]
        lines = out.err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"fedrun: error: {field}: "), out.err
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
    for section in (
        "fl",
        "eval",
        "output",
        "checkpoint",
        "ima",
        "proxy",
        "corrupt",
        "tracking",
        "system",
        "compression",
        "privacy",
    ):
        assert OmegaConf.to_container(cfg[section]) == dataclasses.asdict(dict(run_sections())[section]())


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


def test_storing_the_schemas_again_stores_only_what_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    """store_schemas is called before every composition (fedrun/papers/cost.py composes each preset of
    ``fedrun-reproduce list``): unchanged registries store nothing (OmegaConf's structured configs cost ~0.1 s a
    set); a new registration, or a rebuilt schema (a changed default), stores them all again."""
    stored: list[str] = []
    real = ConfigStore.store
    monkeypatch.setattr(ConfigStore, "store", lambda self, **kw: stored.append(kw["name"]) or real(self, **kw))
    store_schemas()
    stored.clear()
    store_schemas()
    assert stored == []
    ALGORITHMS.register("fedschema", ALGORITHMS.get("fedprox").params)(ALGORITHMS.get("fedavg").obj)
    try:
        store_schemas()
        assert "fedschema" in stored and "fedrun_schema" in stored
        assert "fedschema.yaml" in ConfigStore.instance().list("schema/algorithm")
    finally:
        ALGORITHMS._entries.pop("fedschema")
    stored.clear()
    registry.schema_of.cache_clear()
    store_schemas()
    assert "fedavg" in stored and "fedrun_schema" in stored
