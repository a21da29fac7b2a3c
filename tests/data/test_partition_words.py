"""``partition.png`` is titled in words (issue 51: ``dirichlet(alpha=0.5, variant=resample, min_size=10,
max_tries=1000)``): the parameter that sets the skew shows, how the split is drawn does not."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest

import fedrun.data.partitions  # noqa: F401 - registers the partitions
from fedrun.config.registry import PARTITIONS
from fedrun.config.schema import RunSpec
from fedrun.data.partitions.words import partition_words
from fedrun.run.loop import run


@pytest.mark.parametrize("name", PARTITIONS.names())
def test_every_partition_is_titled_in_words(name: str) -> None:
    params = dataclasses.asdict(PARTITIONS.get(name).params())
    words = partition_words(name, params, 20, 0)
    assert words.endswith("; 20 clients, seed 0") and "_" not in words and "None" not in words, words
    for internal in ("variant", "min_size", "max_tries", "resample", "exhausted", "choose"):
        assert internal not in words, words


def test_the_words_of_the_common_splits() -> None:
    assert partition_words("dirichlet", {"alpha": 0.5, "variant": "resample", "min_size": 10}, 10, 0) == (
        "Dirichlet label skew, alpha = 0.5; 10 clients, seed 0"
    )
    assert partition_words("shards", {"shards_per_client": 2}, 100, 1).startswith("label-sorted shards, 2 per client")
    assert partition_words("pct_noniid", {"iid_fraction": 0.1}, 5, 0).startswith("90% non-IID")
    assert partition_words("mine", {"beta": 0.3, "mode": "x"}, 5, 0) == "mine, beta = 0.3; 5 clients, seed 0"


def test_a_runs_partition_png_has_the_words(
    make_spec: Callable[..., RunSpec], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fedrun.storage.figures as figures

    titles: list[str] = []
    monkeypatch.setattr(figures, "plot_partition", lambda counts, path, title, **kw: titles.append(title))
    small = ("data.max_train_samples=300", "data.max_test_samples=100", "fl.clients=4", "fl.rounds=1")
    run(make_spec(*small, "model.hidden=[8]", "output.plots=true", "partition.alpha=0.3"), tmp_path)
    assert titles == ["samples per client and class\nDirichlet label skew, alpha = 0.3; 4 clients, seed 0"]
