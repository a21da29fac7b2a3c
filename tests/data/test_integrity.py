"""Data integrity: damaged dataset files give a DataError naming the file; stale partition caches are never used."""

from __future__ import annotations

import gzip
import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from fedrun.core.errors import DataError
from fedrun.data.base import Dataset, Split
from fedrun.data.partition import make_partition
from fedrun.data.partitions.basic import DirichletParams
from fedrun.data.sources.cifar import CIFARParams, load_cifar10
from fedrun.data.sources.files import check_idx, safe_unpickle
from fedrun.data.sources.mnist import MNISTParams, load_fmnist, load_mnist

STEMS = ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"]


def idx_bytes(arr: np.ndarray) -> bytes:
    """An IDX file (uint8) holding ``arr``."""
    header = bytes([0, 0, 0x08, arr.ndim]) + b"".join(int(n).to_bytes(4, "big") for n in arr.shape)
    return header + arr.astype(np.uint8).tobytes()


def write_idx_set(folder: Path, n_train: int = 60000, n_test: int = 10000, images: bool = True) -> None:
    """The four MNIST-layout files, gzipped, with ``n`` samples (all-zero images are enough here)."""
    folder.mkdir(parents=True, exist_ok=True)
    shapes = {STEMS[0]: (n_train, 28, 28), STEMS[1]: (n_train,), STEMS[2]: (n_test, 28, 28), STEMS[3]: (n_test,)}
    for stem, shape in shapes.items():
        (folder / f"{stem}.gz").write_bytes(gzip.compress(idx_bytes(np.zeros(shape, np.uint8)), compresslevel=1))


def test_real_fashion_mnist_passes_every_check(tmp_path: Path) -> None:
    data = load_fmnist(MNISTParams(root=str(tmp_path)))  # nothing under root: the Debian files are used
    assert len(data.train) == 60000 and len(data.test) == 10000
    assert int(data.train.y.max()) == 9


def test_corrupt_fashion_mnist_file_fails_its_checksum(tmp_path: Path) -> None:
    write_idx_set(tmp_path / "fashion-mnist")  # right shapes, wrong content
    with pytest.raises(DataError, match=r"train-images-idx3-ubyte\.gz: checksum mismatch"):
        load_fmnist(MNISTParams(root=str(tmp_path)))


def test_truncated_idx_file_names_the_file(tmp_path: Path) -> None:
    folder = tmp_path / "mnist"
    write_idx_set(folder)
    target = folder / f"{STEMS[2]}.gz"
    raw = gzip.decompress(target.read_bytes())
    target.write_bytes(gzip.compress(raw[: len(raw) // 2]))  # a valid archive of half the file
    with pytest.raises(DataError, match=rf"{STEMS[2]}\.gz: truncated or corrupt IDX file"):
        load_mnist(MNISTParams(root=str(tmp_path)))


def test_truncated_gzip_archive_names_the_file(tmp_path: Path) -> None:
    folder = tmp_path / "mnist"
    write_idx_set(folder)
    target = folder / f"{STEMS[0]}.gz"
    target.write_bytes(target.read_bytes()[:1000])
    with pytest.raises(DataError, match=rf"{STEMS[0]}\.gz: cannot read"):
        load_mnist(MNISTParams(root=str(tmp_path)))


def test_wrong_shape_of_a_known_file_is_caught_before_training(tmp_path: Path) -> None:
    write_idx_set(tmp_path / "mnist", n_train=100)
    with pytest.raises(
        DataError, match=r"train-images-idx3-ubyte\.gz: shape \[100, 28, 28\], expected \[60000, 28, 28\]"
    ):
        load_mnist(MNISTParams(root=str(tmp_path)))


def test_out_of_range_labels_are_caught() -> None:
    labels = np.zeros(10000, np.uint8)
    labels[5] = 200
    with pytest.raises(DataError, match=r"label 200 out of range \[0, 10\)"):
        check_idx(Path("t10k-labels-idx1-ubyte"), "t10k-labels-idx1-ubyte", labels)


def test_corrupt_cifar_batch_fails_its_checksum(tmp_path: Path) -> None:
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    batch = {b"data": np.zeros((10, 3072), np.uint8), b"labels": list(range(10))}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        (folder / name).write_bytes(pickle.dumps(batch))
    with pytest.raises(DataError, match=r"data_batch_1: checksum mismatch"):
        load_cifar10(CIFARParams(root=str(tmp_path)))


class _Exploit:
    def __reduce__(self):  # noqa: ANN204 - would call os.system when unpickled by a plain pickle.load
        return (os.system, ("echo pwned",))


def test_data_pickles_cannot_execute_code() -> None:
    with pytest.raises(DataError, match="refusing to load posix.system|refusing to load os.system"):
        safe_unpickle(pickle.dumps({"data": _Exploit()}), "evil")


# ---- partition caches -------------------------------------------------------------------------------------


def _dataset(seed: int) -> Dataset:
    y = torch.from_numpy(np.random.default_rng(seed).integers(0, 10, 2000))
    split = Split(torch.zeros(2000, 1, 2, 2, dtype=torch.uint8), y)
    return Dataset("toy", split, split, 10, (1, 2, 2))


def _cache_file(cache: Path) -> Path:
    (f,) = cache.glob("*.npz")
    return f


def test_partition_cache_is_reused_only_for_the_same_key(tmp_path: Path) -> None:
    p = DirichletParams(alpha=0.3)
    first = make_partition(_dataset(0), "dirichlet", p, 8, 0, str(tmp_path))
    mtime = _cache_file(tmp_path).stat().st_mtime_ns
    second = make_partition(_dataset(0), "dirichlet", p, 8, 0, str(tmp_path))
    assert all(np.array_equal(a, b) for a, b in zip(first, second, strict=True))
    assert _cache_file(tmp_path).stat().st_mtime_ns == mtime  # read, not rewritten
    # different labels under the same dataset name and size: a new key, never the old file
    other = make_partition(_dataset(1), "dirichlet", p, 8, 0, str(tmp_path))
    assert len(list(tmp_path.glob("*.npz"))) == 2
    assert sum(len(x) for x in other) == 2000


def test_stale_or_tampered_cache_is_recomputed(tmp_path: Path) -> None:
    p = DirichletParams(alpha=0.3)
    fresh = make_partition(_dataset(0), "dirichlet", p, 8, 0, str(tmp_path))
    f = _cache_file(tmp_path)
    with np.load(f, allow_pickle=False) as z:
        key = json.loads(str(z["key"]))
    bogus = np.arange(2000)
    offsets = np.linspace(0, 2000, 9).astype(np.int64)
    # a file at the right path written for another seed: its key differs, so it is ignored
    np.savez(f, indices=bogus, offsets=offsets, key=json.dumps({**key, "seed": 1}))
    again = make_partition(_dataset(0), "dirichlet", p, 8, 0, str(tmp_path))
    assert all(np.array_equal(a, b) for a, b in zip(fresh, again, strict=True))
    # the right key but indices beyond the dataset: ignored too
    np.savez(f, indices=bogus + 10**6, offsets=offsets, key=json.dumps(key))
    again = make_partition(_dataset(0), "dirichlet", p, 8, 0, str(tmp_path))
    assert all(np.array_equal(a, b) for a, b in zip(fresh, again, strict=True))
    # a truncated file: ignored, not an error
    f.write_bytes(f.read_bytes()[:100])
    again = make_partition(_dataset(0), "dirichlet", p, 8, 0, str(tmp_path))
    assert all(np.array_equal(a, b) for a, b in zip(fresh, again, strict=True))
