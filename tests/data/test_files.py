"""Readers for the standard files: IDX (raw and gzipped), CIFAR pickles; clear errors for bad files."""

from __future__ import annotations

import gzip
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest

from fedrun.core.errors import DataError
from fedrun.data.sources.cifar import CIFARParams, load_cifar10, load_cifar100
from fedrun.data.sources.files import parse_idx, read_bytes, safe_unpickle
from fedrun.data.sources.mnist import MNISTParams, load_mnist


def idx_bytes(arr: np.ndarray) -> bytes:
    code = {np.uint8: 0x08, np.int32: 0x0C}[arr.dtype.type]
    header = bytes([0, 0, code, arr.ndim]) + b"".join(struct.pack(">I", d) for d in arr.shape)
    return header + arr.astype(arr.dtype.newbyteorder(">")).tobytes()


def write_mnist(folder: Path, n_train: int = 30, n_test: int = 10, gz: bool = True) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True, exist_ok=True)
    arrays = {
        "train-images-idx3-ubyte": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        "train-labels-idx1-ubyte": rng.integers(0, 10, n_train).astype(np.uint8),
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        "t10k-labels-idx1-ubyte": rng.integers(0, 10, n_test).astype(np.uint8),
    }
    for stem, arr in arrays.items():
        raw = idx_bytes(arr)
        if gz:
            with gzip.open(folder / f"{stem}.gz", "wb") as f:
                f.write(raw)
        else:
            (folder / stem).write_bytes(raw)
    return arrays


def test_parse_idx_roundtrip_including_big_endian_ints() -> None:
    a = np.arange(24, dtype=np.int32).reshape(2, 3, 4) * 1000
    assert np.array_equal(parse_idx(idx_bytes(a)), a)


@pytest.mark.parametrize("gz", [True, False])
def test_mnist_reader_parses_real_format(tmp_path: Path, gz: bool) -> None:
    arrays = write_mnist(tmp_path / "mnist", gz=gz)
    ds = load_mnist(MNISTParams(root=str(tmp_path), verify=False))
    assert ds.train.x.shape == (30, 1, 28, 28) and ds.test.x.shape == (10, 1, 28, 28)
    assert np.array_equal(ds.train.x[:, 0].numpy(), arrays["train-images-idx3-ubyte"])
    assert np.array_equal(ds.test.y.numpy(), arrays["t10k-labels-idx1-ubyte"])


def test_truncated_idx_names_the_file(tmp_path: Path) -> None:
    write_mnist(tmp_path / "mnist", gz=False)
    f = tmp_path / "mnist" / "train-images-idx3-ubyte"
    f.write_bytes(f.read_bytes()[:-100])
    with pytest.raises(DataError, match="train-images-idx3-ubyte.*truncated"):
        load_mnist(MNISTParams(root=str(tmp_path), verify=False))


def test_corrupt_gzip_names_the_file(tmp_path: Path) -> None:
    write_mnist(tmp_path / "mnist")
    f = tmp_path / "mnist" / "t10k-labels-idx1-ubyte.gz"
    f.write_bytes(f.read_bytes()[:20])
    with pytest.raises(DataError, match="t10k-labels-idx1-ubyte.gz"):
        read_bytes(f)


def test_missing_data_says_where_it_looked_and_how_to_get_it(tmp_path: Path) -> None:
    with pytest.raises(DataError) as e:
        load_mnist(MNISTParams(root=str(tmp_path), verify=False))
    assert str(tmp_path / "mnist") in str(e.value) and "data.download=true" in str(e.value)


def write_cifar(root: Path, hundred: bool = False) -> None:
    rng = np.random.default_rng(0)
    if hundred:
        d = root / "cifar-100-python"
        d.mkdir(parents=True)
        for name, n in (("train", 20), ("test", 10)):
            fine = rng.integers(0, 100, n)
            obj = {
                b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
                b"fine_labels": fine.tolist(),
                b"coarse_labels": (fine // 5).tolist(),
            }
            (d / name).write_bytes(pickle.dumps(obj))
        return
    d = root / "cifar-10-batches-py"
    d.mkdir(parents=True)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        obj = {b"data": rng.integers(0, 256, (4, 3072), dtype=np.uint8), b"labels": rng.integers(0, 10, 4).tolist()}
        (d / name).write_bytes(pickle.dumps(obj))


def test_cifar10_reader(tmp_path: Path) -> None:
    write_cifar(tmp_path)
    ds = load_cifar10(CIFARParams(root=str(tmp_path), verify=False))
    assert ds.train.x.shape == (20, 3, 32, 32) and ds.test.x.shape == (4, 3, 32, 32)
    assert ds.num_classes == 10


def test_cifar100_keeps_coarse_labels(tmp_path: Path) -> None:
    write_cifar(tmp_path, hundred=True)
    ds = load_cifar100(CIFARParams(root=str(tmp_path), verify=False))
    assert ds.train.coarse is not None
    assert np.array_equal(ds.train.coarse.numpy(), ds.train.y.numpy() // 5)


def test_unpickler_refuses_code() -> None:
    class Evil:
        def __reduce__(self):  # noqa: ANN204
            return (print, ("pwned",))

    with pytest.raises(DataError, match="refusing"):
        safe_unpickle(pickle.dumps({b"data": Evil()}), "evil")


def test_verify_checks_the_standard_sizes(tmp_path: Path) -> None:
    write_mnist(tmp_path / "mnist")
    with pytest.raises(DataError, match="expected \\[60000, 28, 28\\]"):
        load_mnist(MNISTParams(root=str(tmp_path)))
