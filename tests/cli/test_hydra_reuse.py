"""fedrun/cli/hydra_reuse.py: a composition that reuses an earlier one's defaults list and merged files composes
the config Hydra composes from the files, and sees a changed file, a new option and a new schema."""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from omegaconf import OmegaConf

from fedrun.cli import compose_checks, hydra_patches, hydra_reuse
from tests.conftest import REPO


def _params(func: object) -> list[tuple[str, object]]:
    return [(p.name, p.default) for p in inspect.signature(func).parameters.values()]  # type: ignore[arg-type]


def test_the_defaults_fedrun_reuses_are_computed_and_merged_where_it_patches_them() -> None:
    """:func:`hydra_reuse.install` replaces the module-level ``create_defaults_list`` that Hydra's loader
    calls and its merge of the listed files, and relies on the loader applying the overrides that set values after
    that merge, and on Hydra's own split of the overrides (``Overrides.config_overrides``)."""
    from hydra._internal import config_loader_impl, defaults_list

    empty = inspect.Parameter.empty
    assert _params(config_loader_impl.create_defaults_list) == [
        ("repo", empty), ("config_name", empty), ("overrides_list", empty), ("prepend_hydra", empty),
        ("skip_missing", empty),
    ]  # fmt: skip
    assert _params(ConfigLoaderImpl._compose_config_from_defaults_list) == [
        ("self", empty), ("defaults", empty), ("repo", empty)
    ]  # fmt: skip
    assert _params(defaults_list.Overrides) == [("repo", empty), ("overrides_list", empty)]
    assert [f.name for f in dataclasses.fields(defaults_list.DefaultsList)] == [
        "defaults", "defaults_tree", "config_overrides", "overrides"
    ]  # fmt: skip
    source = inspect.getsource(ConfigLoaderImpl._load_configuration_impl)
    listed = source.index("defaults_list = create_defaults_list(")
    merged = source.index("cfg = self._compose_config_from_defaults_list(")
    applied = source.index("ConfigLoaderImpl._apply_overrides_to_config(config_overrides, cfg)")
    assert listed < merged < applied
    assert "config_overrides = defaults_list.config_overrides" in source
    assert "defaults_list.overrides.known_choices" in source  # what it reads of the reused Overrides
    assert "self.config_overrides.append(override)" in inspect.getsource(defaults_list.Overrides.__init__)


def _smoke_jobs(name: str) -> list[list[str]]:
    from fedrun.cli import reproduce
    from fedrun.cli.reproduce_sweep import expand, split_command
    from fedrun.papers.targets import TARGETS

    target = next(t for t in TARGETS if t.name == name)
    return [job for cmd in reproduce.commands(target, Path("sweep"), True) for job in expand(split_command(cmd[4:])[1])]


def _composed_text(cfg: Any) -> str:
    """A composed config (its hydra node too) as YAML, with the types of its nodes; the working directory aside."""
    OmegaConf.set_struct(cfg, False)
    cfg.hydra.runtime.cwd = ""
    return OmegaConf.to_yaml(cfg) + repr([(k, type(v).__name__, OmegaConf.get_type(v)) for k, v in cfg.items()])


def _compose_all(jobs: list[list[str]], reuse: bool, config_dir: Path | None = None) -> list[str]:
    from hydra import compose
    from hydra.core.global_hydra import GlobalHydra
    from hydra.initialize import initialize_config_dir

    from fedrun.cli.main import CONF_DIR

    GlobalHydra.instance().clear()
    out = []
    try:
        with initialize_config_dir(config_dir=str(config_dir or CONF_DIR), version_base=None):
            for job in jobs:
                if not reuse:
                    hydra_reuse.Kept.compositions.clear()  # each composition Hydra's own, from the files
                try:
                    out.append(_composed_text(compose(config_name="config", overrides=job, return_hydra_config=True)))
                except Exception as e:  # noqa: BLE001 - a job that does not compose must fail the same way
                    out.append(f"{type(e).__name__}: {e}")
    finally:
        GlobalHydra.instance().clear()
    return out


@pytest.fixture
def installed() -> Iterator[None]:
    """fedrun's compose checks and the reuse installed, nothing kept yet; put back (and let go) after the test."""
    restore = hydra_patches.saved()
    compose_checks.install()
    hydra_reuse.Kept.compositions.clear()
    try:
        yield
    finally:
        restore()


def test_a_sweeps_jobs_compose_the_same_with_the_defaults_list_reused(installed: None) -> None:
    """Every job of FedCos Table II's -smoke target (methods' presets and group options, swept fractions) and those
    of two defences of the robust-FL table's (group options, attacks as values; 56 jobs) composes to the same config,
    hydra node and node types included, when each job after the first of its group choices reuses that one's
    defaults list and merged files as when each is composed from the files; one defaults list is computed per set of
    group choices. (All 3,262 jobs of every target, full and -smoke, compared the same way when this was written.)"""
    robust = [job for job in _smoke_jobs("robust-fmnist") if job[1] in ("defence=none", "defence=krum")]
    jobs = _smoke_jobs("fedcos-table2") + robust
    fresh = _compose_all(jobs, reuse=False)
    hydra_reuse.Kept.compositions.clear()
    reused = _compose_all(jobs, reuse=True)
    kept = len(hydra_reuse.Kept.compositions)
    assert len(jobs) == 56 and all(text.startswith("hydra:") for text in fresh), fresh[0][:300]
    assert reused == fresh
    choices = {tuple(o for o in job if (REPO / "conf" / o.split("=")[0]).is_dir()) for job in jobs}  # group options
    assert kept == len(choices) == 7  # FedCos's 5 algorithms (9 methods), 2 defences (10 attacks each: values)


def test_a_reused_composition_reads_a_changed_file_a_new_option_and_a_new_schema(tmp_path: Path) -> None:
    """What the config directory holds is part of what a composition reuses: a file changed in place (same size,
    same second), an option added to a group and a schema stored after the first composition each reach the next."""
    from dataclasses import dataclass

    from hydra.core.config_store import ConfigStore

    conf = tmp_path / "conf"
    (conf / "opt").mkdir(parents=True)
    (conf / "config.yaml").write_text("defaults:\n  - opt: a\n  - _self_\nx: 1\n")
    (conf / "opt" / "a.yaml").write_text("v: 1\n")

    @dataclass
    class Later:
        w: int = 7

    store = ConfigStore.instance()
    restore = hydra_patches.saved()
    try:
        compose_checks.install()
        hydra_reuse.Kept.compositions.clear()
        first = _compose_all([["x=2"], ["x=3"]], reuse=True, config_dir=conf)
        assert "v: 1" in first[0] and "x: 3" in first[1] and len(hydra_reuse.Kept.compositions) == 1
        (conf / "opt" / "a.yaml").write_text("v: 2\n")  # same size
        (conf / "opt" / "b.yaml").write_text("v: 3\n")
        changed = _compose_all([["x=2"], ["opt=b"]], reuse=True, config_dir=conf)
        assert "v: 2" in changed[0] and "v: 3" in changed[1]
        (conf / "config.yaml").write_text("defaults:\n  - opt: a\n  - later_test: later\n  - _self_\nx: 1\n")
        store.store(group="later_test", name="later", node=Later)
        assert "w: 7" in _compose_all([[]], reuse=True, config_dir=conf)[0]
    finally:
        store.repo.pop("later_test", None)
        restore()
    assert not hydra_reuse.Kept.compositions  # let go with the patches


def test_a_config_directory_too_large_to_fingerprint_is_composed_from_its_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, installed: None
) -> None:
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "config.yaml").write_text("x: 1\n")
    for i in range(4):
        (conf / f"extra{i}.yaml").write_text("y: 1\n")
    monkeypatch.setattr(hydra_reuse, "WALK_MAX", 3)
    assert "x: 2" in _compose_all([["x=2"], ["x=2"]], reuse=True, config_dir=conf)[1]
    assert not hydra_reuse.Kept.compositions


def test_the_compositions_kept_are_bounded_the_latest_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, installed: None
) -> None:
    conf = tmp_path / "conf"
    (conf / "opt").mkdir(parents=True)
    (conf / "config.yaml").write_text("defaults:\n  - opt: a\n  - _self_\n")
    for name in "abc":
        (conf / "opt" / f"{name}.yaml").write_text(f"v: {name}\n")
    monkeypatch.setattr(hydra_reuse, "REUSED_MAX", 2)
    texts = _compose_all([["opt=a"], ["opt=b"], ["opt=c"], ["opt=c"]], reuse=True, config_dir=conf)
    kept = [key[3] for key in hydra_reuse.Kept.compositions]
    assert [re.search(r"^opt:\n  v: (.)$", t, re.M).group(1) for t in texts] == ["a", "b", "c", "c"]  # type: ignore[union-attr]
    assert kept == [("opt=b",), ("opt=c",)]
