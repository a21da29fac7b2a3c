"""fedrun/config/registry.py's ``build_params`` (this file is named for it: tests/engines/ has a test_registry.py):
a section built again from the same values is not merged by OmegaConf again (a sweep's jobs and a run's checks
build the same sections ~50 times a job), and the memo never answers for values OmegaConf would treat otherwise."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

import pytest
from omegaconf import OmegaConf

from fedrun.config import registry
from fedrun.config.registry import build_params
from fedrun.config.schema import store_schemas
from fedrun.core.errors import ConfigError


@dataclass
class Toy:
    steps: int = 3
    lr: float = 0.1
    flag: bool = False
    sizes: list[int] = field(default_factory=lambda: [1, 2])
    mode: Literal["a", "b"] = "a"

    def __post_init__(self) -> None:
        registry.positive("steps", self.steps)


@pytest.fixture
def merges(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[object]]:
    """The OmegaConf merges ``build_params`` makes (an empty memo to start with)."""
    calls: list[object] = []
    merge = OmegaConf.merge

    def counted(*configs: object) -> object:
        calls.append(configs)
        return merge(*configs)

    monkeypatch.setattr(registry, "_MERGED", {})
    monkeypatch.setattr(OmegaConf, "merge", counted)
    yield calls


def test_the_same_values_are_merged_once_and_built_alike(merges: list[object]) -> None:
    first = build_params(Toy, {"steps": 5, "sizes": [4]}, "toy", ignore=())
    second = build_params(Toy, {"steps": 5, "sizes": [4]}, "toy", ignore=())
    assert len(merges) == 1
    assert first == second == Toy(steps=5, sizes=[4])
    first.sizes.append(9)  # a built section's list is its own: not the memo's, not the next build's
    assert second.sizes == [4] and build_params(Toy, {"steps": 5, "sizes": [4]}, "toy", ignore=()).sizes == [4]
    build_params(Toy, {"steps": 6, "sizes": [4]}, "toy", ignore=())
    assert len(merges) == 2


@pytest.mark.parametrize(
    ("cached", "other", "error"),
    [
        ({"steps": 1}, {"steps": True}, "toy.steps: Value 'True' of type 'bool' could not be converted to Integer"),
        ({"steps": 1}, {"steps": 1.0}, "toy.steps: Value '1.0' of type 'float' could not be converted to Integer"),
        ({"flag": True}, {"flag": 1}, None),  # OmegaConf converts 1 to True: the same section, merged on its own
    ],
)
def test_values_equal_in_python_but_not_in_type_are_merged_on_their_own(
    merges: list[object], cached: dict[str, object], other: dict[str, object], error: str | None
) -> None:
    build_params(Toy, cached, "toy", ignore=())
    if error is None:
        assert build_params(Toy, other, "toy", ignore=()) == build_params(Toy, cached, "toy", ignore=())
        assert len(merges) == 2
        return
    for _ in range(2):  # a refusal is never memoised
        with pytest.raises(ConfigError) as e:
            build_params(Toy, other, "toy", ignore=())
        assert str(e.value) == error


def test_range_and_choice_checks_run_on_every_build(merges: list[object]) -> None:
    for _ in range(2):
        with pytest.raises(ConfigError, match=r"toy\.steps: must be > 0"):
            build_params(Toy, {"steps": -1}, "toy", ignore=())
        with pytest.raises(ConfigError, match=r"toy\.mode: invalid value 'c'; valid: a, b"):
            build_params(Toy, {"mode": "c"}, "toy", ignore=())


def test_a_changed_default_is_built_once_the_schema_cache_is_cleared(
    merges: list[object], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert build_params(Toy, {}, "toy", ignore=()).lr == 0.1
    monkeypatch.setattr(Toy.__dataclass_fields__["lr"], "default", 0.5)  # type: ignore[attr-defined]
    monkeypatch.setattr(Toy, "lr", 0.5)
    try:
        registry.schema_of.cache_clear()
        assert build_params(Toy, {}, "toy", ignore=()).lr == 0.5
    finally:
        monkeypatch.undo()
        registry.schema_of.cache_clear()
        store_schemas()  # the stored schemas made again from the cleared cache, as tests/config/test_schema_store.py


def test_values_that_are_not_plain_data_are_not_memoised(merges: list[object]) -> None:
    node = OmegaConf.create({"sizes": [7]})
    for _ in range(2):
        assert build_params(Toy, {"sizes": node.sizes}, "toy", ignore=()).sizes == [7]
    assert len(merges) == 2 and registry._MERGED == {}
