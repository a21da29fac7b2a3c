"""CIFAR-100 keeps its 20 coarse labels (a tiny file in the python-pickle format), so Pachinko runs on it."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

from fedrun.data.partition import partition_input
from fedrun.data.partitions.pachinko import PachinkoParams, pachinko
from fedrun.data.sources.cifar import CIFARParams, load_cifar100


def write_batch(path: Path, n: int) -> None:
    fine = list(range(n))
    blob = {b"data": np.zeros((n, 3072), np.uint8), b"fine_labels": fine, b"coarse_labels": [f // 5 for f in fine]}
    path.write_bytes(pickle.dumps(blob, protocol=4))


def test_cifar100_coarse_labels_feed_pachinko(tmp_path: Path) -> None:
    d = tmp_path / "cifar-100-python"
    d.mkdir()
    write_batch(d / "train", 100)
    write_batch(d / "test", 100)
    data = load_cifar100(CIFARParams(root=str(tmp_path), verify=False))
    assert data.train.coarse.tolist() == [f // 5 for f in range(100)]
    parts = pachinko(partition_input(data), 10, PachinkoParams(), np.random.default_rng(0))
    assert [len(p) for p in parts] == [10] * 10
