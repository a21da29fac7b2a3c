"""The reference pages are generated from the registries and the YAML comments: a new component documents itself."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest

from fedrun.algorithms.base import AlgoParams
from fedrun.algorithms.fedavg import FedAvg
from fedrun.config import catalogue
from fedrun.config.registry import ALGORITHMS, DATASETS, MODELS, PARTITIONS


@dataclass
class _DocParams(AlgoParams):
    """``eta``: the test's server step."""

    eta: float = 1.0
    mode: Literal["a", "b"] = "a"


class _DocMethod(FedAvg):
    """FedDoc (Nobody et al. 2099): a method registered by a test only."""


@pytest.fixture
def registered_method(tmp_path: Path):  # noqa: ANN201 - yields the conf dir
    ALGORITHMS.names()  # load the package's methods first
    ALGORITHMS.register("feddoc", _DocParams)(_DocMethod)
    conf = tmp_path / "conf"
    for group in ("algorithm", "data", "partition", "model"):
        (conf / group).mkdir(parents=True)
    (conf / "algorithm" / "feddoc.yaml").write_text(
        "# FedDoc (Nobody et al. 2099, eq. 3): the server step eta of its Alg. 1.\n"
        "# mode: a | b.\n"
        "defaults:\n  - /schema/algorithm/feddoc@_here_\n  - _self_\n\n"
        "eta: 0.5   # Table 2's value\n"
    )
    yield conf
    ALGORITHMS._entries.pop("feddoc")


def test_a_method_registered_in_a_test_gets_its_page_and_index_line(registered_method: Path) -> None:
    pages = catalogue.pages(conf_dir=registered_method)
    page = pages["reference/methods/feddoc.md"]
    assert page.startswith("# feddoc\n")
    assert "FedDoc (Nobody et al. 2099, eq. 3): the server step eta of its Alg. 1." in page  # the header comment
    assert "a method registered by a test only" in page  # the class docstring
    assert "| `algorithm.eta` | float | `0.5` | Table 2's value |" in page  # the YAML's value and comment win
    assert "| `algorithm.mode` | 'a' \\| 'b' | `a` |  |" in page
    index = pages["reference/methods/index.md"]
    assert "| [`feddoc`](feddoc.md) | FedDoc (Nobody et al. 2099, eq. 3): the server step eta of its Alg. 1. |" in index


def test_without_the_method_there_is_no_page(tmp_path: Path) -> None:
    for group in ("algorithm", "data", "partition", "model"):
        (tmp_path / group).mkdir()
    assert "reference/methods/feddoc.md" not in catalogue.pages(conf_dir=tmp_path)


def test_every_registered_component_of_the_package_has_its_page_or_section() -> None:
    pages = catalogue.pages()
    for name in ALGORITHMS.names():
        assert f"reference/methods/{name}.md" in pages
    for registry, page in ((DATASETS, "data"), (PARTITIONS, "partitions"), (MODELS, "models")):
        for name in registry.names():
            assert f"## `{name}`" in pages[f"reference/{page}.md"], (page, name)


def test_yaml_comments_read_the_header_and_the_inline_comment_of_each_key(tmp_path: Path) -> None:
    path = tmp_path / "x.yaml"
    path.write_text(
        "# @package _global_\n# First line.\n# Second.\nfl:\n  lr: 0.1   # the paper's\n  note: 'a # b'\nk: 1\n"
    )
    header, comments = catalogue.yaml_comments(path)
    assert header == "First line.\nSecond."
    assert comments == {"fl.lr": "the paper's"}  # a '#' inside quotes is not a comment


def test_prose_keeps_source_text_as_written() -> None:
    assert catalogue.prose("w_i <- w * ``lambda_i``") == "w\\_i \\<- w \\* `lambda_i`"


@dataclass
class _NotedParams(AlgoParams):
    """Notes as the catalogue reads them."""

    eta: float = 1.0  # the step (Nobody 2099, eq. 3)
    # a note above its field,
    # over two lines
    mode: str = "a"
    bare: int = 0

    def __post_init__(self) -> None:
        note: int = 1  # not a field: a local of a method  # noqa: F841


@dataclass
class _NotedChild(_NotedParams):
    eta: float = 2.0
    bare: int = 1  # now it says


def test_field_notes_come_from_the_dataclass_that_declares_the_field() -> None:
    assert catalogue.field_notes(_NotedParams) == {
        "eta": "the step (Nobody 2099, eq. 3)",
        "mode": "a note above its field, over two lines",
        "bare": "",
    }
    # a subclass that only changes a default keeps its base's note
    assert catalogue.field_notes(_NotedChild) == {
        "eta": "the step (Nobody 2099, eq. 3)",
        "mode": "a note above its field, over two lines",
        "bare": "now it says",
    }


def test_every_key_of_every_reference_page_has_a_note() -> None:
    """Each hyperparameter of a registered component says what it is (and where its default comes from), from
    its one home, the params dataclass: every row of the reference tables has a note."""
    for group, registry, *_ in catalogue.GROUPS:
        for name in registry.names():
            params = registry.get(name).params
            if params is None:
                continue
            missing = [k for k, v in catalogue.field_notes(params).items() if not v]
            assert not missing, f"{group}={name}: no note beside the default of {missing} ({params.__module__})"
    for path, page in catalogue.pages().items():
        rows = [line for line in page.splitlines() if line.startswith("| `") and line.count(" | ") >= 3]
        # the trackers' keys are becoming a registry's typed params (issue 31 point 4): their notes come with them
        bare = [r for r in rows if r.endswith("|  |")]
        assert not bare, (path, bare)


def test_the_settings_page_shows_every_key_of_the_run_sections_with_its_default() -> None:
    page = catalogue.pages()[catalogue.SETTINGS_PAGE]
    assert "| `fl.rounds` | int | `30` | R, communication rounds" in page
    assert "| `corrupt.labels` | list\\[int\\] | `[0, 1]` |" in page
    assert "| `tracking.mlflow.uri` | str \\| None | `null` |" in page  # a nested section's keys, dotted
    assert "| `seed` | int | `0` |" in page and "| `imports` |" in page
    assert "`algorithm`" not in page.split("## Top-level keys")[1]  # the components have their own pages
    for section in (
        "fl",
        "eval",
        "output",
        "checkpoint",
        "ima",
        "proxy",
        "corrupt",
        "hardware",
        "tracking",
        "system",
        "compression",
    ):
        assert f"## `{section}`" in page
