"""PFLlib's data as its benchmark made it (fedrun issue 50 point 6): the test split merged into the training split
(``data.merge_test``), its ``pat`` and ``dir`` partitions (``partition=pfllib``) and each client's 75/25 split.

The expected client sizes and class counts were produced by PFLlib's own ``separate_data``
(TsingZ0/PFLlib ``dataset/utils/dataset_utils.py``, with ``np.random.seed(1)`` as ``generate_FashionMNIST.py``
seeds it) on the merged Fashion-MNIST labels; the same procedure reproduces the per-client class counts of the
MNIST partition the repository ships (``dataset/MNIST/config.json``) and, continuing the generator through
scikit-learn's split, the label order of its clients' train and test files.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch

from fedrun.config.schema import RunSpec
from fedrun.core.errors import ConfigError
from fedrun.data import memo
from fedrun.data.base import Dataset, Split
from fedrun.data.partition import class_counts
from fedrun.data.partitions.base import PartitionInput
from fedrun.data.partitions.pfllib import PFLlibParams, least_samples, pfllib
from fedrun.data.sources.mnist import MNISTParams, load_fmnist
from fedrun.run.experiment import build_experiment

# PFLlib's generator on Fashion-MNIST (train then test labels), 20 clients: each client's size
PAT_SIZES = [2316, 1300, 2293, 8091, 2059, 1002, 1893, 9046, 2933, 1909, 2564, 6594, 2332, 1925, 1000, 8743, 1913]
PAT_SIZES += [1683, 3116, 7288]
DIR_SIZES = [82, 320, 875, 2603, 1455, 5473, 4385, 4461, 5560, 3556, 6170, 6803, 8551, 626, 1328, 195, 2937, 4832]
DIR_SIZES += [5090, 4698]
# and some clients' class counts (client: {class: count})
PAT_CLASSES = {0: {0: 1236, 1: 1080}, 3: {0: 4083, 1: 4008}, 5: {2: 319, 3: 683}, 19: {8: 4094, 9: 3194}}
DIR_CLASSES = {
    0: {0: 67, 1: 1, 6: 2, 8: 5, 9: 7},
    3: {2: 2498, 3: 69, 4: 3, 6: 3, 9: 30},
    5: {0: 5473},
    19: {0: 1, 1: 491, 2: 1876, 3: 267, 4: 1, 5: 2060, 6: 1, 9: 1},
}


@pytest.fixture(scope="module")
def merged_labels() -> np.ndarray:
    data = load_fmnist(MNISTParams())
    return np.concatenate([data.train.y.numpy(), data.test.y.numpy()])


def split(labels: np.ndarray, scheme: str, **kw: object) -> list[np.ndarray]:
    return pfllib(PartitionInput(labels, 10), 20, PFLlibParams(scheme=scheme, **kw), np.random.default_rng(0))


def counts(labels: np.ndarray, parts: list[np.ndarray], clients: dict[int, dict[int, int]]) -> dict:
    m = class_counts(labels, parts, 10)
    return {i: {c: int(m[i, c]) for c in np.flatnonzero(m[i])} for i in clients}


@pytest.mark.parametrize(
    ("scheme", "sizes", "classes"), [("pat", PAT_SIZES, PAT_CLASSES), ("dir", DIR_SIZES, DIR_CLASSES)]
)
def test_the_partition_is_pfllibs_on_the_merged_fashion_mnist(
    merged_labels: np.ndarray, scheme: str, sizes: list[int], classes: dict
) -> None:
    parts = split(merged_labels, scheme)
    assert [len(p) for p in parts] == sizes and sum(sizes) == 70000
    assert counts(merged_labels, parts, classes) == classes
    assert len(np.unique(np.concatenate(parts))) == 70000  # every sample dealt out, once


def test_pat_by_hand_two_classes_to_four_clients_each_counts_from_pfllibs_randint(merged_labels: np.ndarray) -> None:
    # class c goes to clients 4 (c // 2) .. 4 (c // 2) + 3 (ceil(20 / 10 x 2) = 4 a class, in client order); the
    # first three draw randint(max(1750 / 10, 40 / 10), 1750) on the generator np.random.seed(1) starts, the
    # fourth takes the rest of the class's 7,000
    parts = split(merged_labels, "pat")
    m = class_counts(merged_labels, parts, 10)
    assert [list(np.flatnonzero(row)) for row in m] == [[2 * (i // 4), 2 * (i // 4) + 1] for i in range(20)]
    first = np.random.RandomState(1).randint(175.0, 1750.0, 3)
    assert list(m[:4, 0]) == [*first, 7000 - first.sum()]
    balanced = class_counts(merged_labels, split(merged_labels, "pat", balance=True), 10)
    assert (balanced[balanced > 0] == 1750).all()


def test_dir_keeps_drawing_until_every_client_holds_a_batch_of_test_samples(merged_labels: np.ndarray) -> None:
    p = PFLlibParams(scheme="dir")
    assert least_samples(70000, 20, p) == 40  # min(10 / (1 - 0.75), 70000 / 20 / 2)
    assert min(len(x) for x in split(merged_labels, "dir")) == 82 >= 40
    assert least_samples(1000, 20, p) == 25  # a small set: half an equal share


def test_a_fixed_generator_seed_ignores_the_runs_and_null_follows_it() -> None:
    labels = np.repeat(np.arange(10), 100)
    inp = PartitionInput(labels, 10)
    runs = [np.random.default_rng(s) for s in (0, 1)]
    fixed = [pfllib(inp, 20, PFLlibParams(scheme="dir", alpha=1.0), g) for g in runs]
    assert all(np.array_equal(a, b) for a, b in zip(*fixed, strict=True))  # PFLlib's trials share one partition
    own = [pfllib(inp, 20, PFLlibParams(scheme="dir", alpha=1.0, seed=None), np.random.default_rng(s)) for s in (0, 1)]
    assert not all(np.array_equal(a, b) for a, b in zip(*own, strict=True))


@pytest.mark.parametrize(
    ("kw", "field"),
    [({"scheme": "exdir"}, "scheme"), ({"alpha": 0.0}, "alpha"), ({"train_ratio": 1.0}, "train_ratio")],
)
def test_bad_settings_name_the_field(kw: dict, field: str) -> None:
    with pytest.raises(ConfigError) as e:
        PFLlibParams(**kw)  # type: ignore[arg-type]
    assert e.value.field == field


def test_merge_test_appends_the_test_split_and_keeps_it() -> None:
    x = torch.arange(12, dtype=torch.uint8).reshape(6, 1, 1, 2)
    data = Dataset("toy", Split(x[:4], torch.tensor([0, 1, 0, 1])), Split(x[4:], torch.tensor([1, 0])), 2, (1, 1, 2))
    merged = data.merged()
    assert torch.equal(merged.train.x, x) and merged.train.y.tolist() == [0, 1, 0, 1, 1, 0]
    assert merged.test is data.test and len(data.train) == 4  # the source is left as it was


def test_merge_test_is_applied_per_run_on_the_cached_source() -> None:
    memo.clear()
    plain = memo.load_source("fmnist", load_fmnist, MNISTParams())
    merged = memo.load_source("fmnist", load_fmnist, MNISTParams(merge_test=True))
    assert len(plain.train) == 60000 and len(merged.train) == 70000 and len(merged.test) == 10000
    assert torch.equal(merged.train.y[60000:], plain.test.y) and torch.equal(merged.train.x[:60000], plain.train.x)
    assert memo.cache_key("fmnist", MNISTParams()) == memo.cache_key("fmnist", MNISTParams(merge_test=True))
    memo.clear()


@pytest.mark.parametrize("preset", ["pfllib_fmnist_pat", "pfllib_fmnist_dir"])
def test_the_presets_clients_train_on_three_quarters_and_test_on_the_rest(
    preset: str, make_spec: Callable[..., RunSpec]
) -> None:
    exp = build_experiment(make_spec(f"experiment={preset}", "hardware.threads=1"))
    sizes = np.array([len(p) for p in exp.parts])
    assert sizes.tolist() == (PAT_SIZES if preset.endswith("pat") else DIR_SIZES)
    local = exp.capability("local_eval").local  # type: ignore[union-attr]
    test = local.sizes
    # fedrun rounds 0.25 n; PFLlib's scikit-learn split takes ceil(0.25 n): at most one sample apart
    assert np.array_equal(test, np.array([round(0.25 * n) for n in sizes]))
    assert np.abs(test - np.ceil(0.25 * sizes)).max() <= 1
    assert exp.fed.sizes.sum().item() + test.sum() == 70000
    assert local.on_train  # the local test samples are clients' own, out of the merged training split
