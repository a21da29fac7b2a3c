"""The fault table for files: damaged data files are one DataError line naming the file; damaged caches
(partition .npz, engine-auto.json) are recomputed, never used and never an error.

Each row writes one damaged file the way a truncated download, a wrong file or a hostile one looks, then loads
it through the reader fedrun uses. ``DATA_FAULTS`` and ``CACHE_FAULTS`` + ``ENGINE_FAULTS`` are counted in the
documentation's reliability page (docs/reliability.md).
"""

from __future__ import annotations

import gzip
import json
import os
import pickle
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from fedrun.core.errors import DataError
from fedrun.data.base import Dataset, Split
from fedrun.data.partition import make_partition, valid_parts
from fedrun.data.partitions.basic import DirichletParams
from fedrun.data.sources.cifar import CIFARParams, load_cifar10, load_cifar100
from fedrun.data.sources.digit5 import Digit5Params, load_digit5
from fedrun.data.sources.emnist import EMNISTParams, load_emnist
from fedrun.data.sources.leaf import read_leaf_users
from fedrun.data.sources.mnist import MNISTParams, load_mnist
from fedrun.data.sources.pacs import PACSParams, load_pacs
from fedrun.data.sources.shakespeare import ShakespeareParams, load_shakespeare
from fedrun.engines import auto, auto_budget
from tests.conftest import main_exit_code

IDX_STEMS = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
CODES = {np.uint8: 0x08, np.int8: 0x09, np.int16: 0x0B, np.int32: 0x0C, np.float32: 0x0D}


def idx(arr: np.ndarray) -> bytes:
    header = bytes([0, 0, CODES[arr.dtype.type], arr.ndim]) + b"".join(struct.pack(">I", d) for d in arr.shape)
    return header + arr.astype(arr.dtype.newbyteorder(">")).tobytes()


# ---- writers of good files, then one damage each ------------------------------------------------------------


def mnist(root: Path, **replace: bytes) -> Path:
    """The four IDX files under root/mnist, one of them (``stem`` or ``stem.gz``) replaced; returns that one."""
    d = root / "mnist"
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    good = {
        IDX_STEMS[0]: idx(rng.integers(0, 256, (12, 28, 28), dtype=np.uint8)),
        IDX_STEMS[1]: idx(rng.integers(0, 10, 12).astype(np.uint8)),
        IDX_STEMS[2]: idx(rng.integers(0, 256, (5, 28, 28), dtype=np.uint8)),
        IDX_STEMS[3]: idx(rng.integers(0, 10, 5).astype(np.uint8)),
    }
    for stem, raw in good.items():
        (d / stem).write_bytes(raw)
    ((name, content),) = replace.items()
    (d / name.removesuffix(".gz")).unlink()
    (d / name).write_bytes(content)
    return d / name


def load_mnist_(root: Path) -> Any:
    return load_mnist(MNISTParams(root=str(root), verify=False))


def gz(raw: bytes) -> bytes:
    return gzip.compress(raw, compresslevel=1)


def cifar(root: Path, batch: Any = None, which: str = "data_batch_3") -> Path:
    d = root / "cifar-10-batches-py"
    d.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        obj = {b"data": rng.integers(0, 256, (4, 3072), dtype=np.uint8), b"labels": rng.integers(0, 10, 4).tolist()}
        (d / name).write_bytes(pickle.dumps(obj))
    if batch is not None:
        (d / which).write_bytes(batch if isinstance(batch, bytes) else pickle.dumps(batch))
    return d / which


def cifar_batch(**fields: Any) -> dict:
    rng = np.random.default_rng(1)
    base = {b"data": rng.integers(0, 256, (4, 3072), dtype=np.uint8), b"labels": [1, 2, 3, 4]}
    return {**base, **{k.encode(): v for k, v in fields.items()}}


class _Exploit:
    def __reduce__(self):  # noqa: ANN204 - would run a shell command if unpickled by plain pickle
        return (os.system, ("echo pwned",))


def cifar100(root: Path, coarse: list[int]) -> Path:
    d = root / "cifar-100-python"
    d.mkdir(parents=True)
    for name in ("train", "test"):
        obj = {b"data": np.zeros((4, 3072), np.uint8), b"fine_labels": [0, 5, 10, 99], b"coarse_labels": coarse}
        (d / name).write_bytes(pickle.dumps(obj))
    return d / "train"


def leaf(root: Path, text: str | bytes, name: str = "bad.json") -> Path:
    d = root / "leaf"
    d.mkdir(parents=True)
    good = {"users": ["a"], "num_samples": [1], "user_data": {"a": {"x": ["hello"], "y": ["o"]}}}
    (d / "0_good.json").write_text(json.dumps(good))
    (d / name).write_bytes(text if isinstance(text, bytes) else text.encode())
    return d / name


def leaf_blob(**user: Any) -> str:
    return json.dumps({"users": ["u"], "user_data": {"u": {"x": ["abc"], "y": ["d"], **user}}})


def shakespeare(root: Path, text: str) -> Path:
    """LEAF's Shakespeare train/test json under root/shakespeare/data, plus ``text`` as train/b.json; returns it."""
    for part in ("train", "test"):
        d = root / "shakespeare" / "data" / part
        d.mkdir(parents=True)
        good = {"users": ["a"], "num_samples": [1], "user_data": {"a": {"x": ["a" * 80], "y": ["b"]}}}
        (d / "a.json").write_text(json.dumps(good))
    bad = root / "shakespeare" / "data" / "train" / "b.json"
    bad.write_text(text)
    return bad


def shakespeare_user(x: str, y: str = '["b"]', user: str = '"u"') -> str:
    """A LEAF file of one user, its x and y given as json text (a lone surrogate cannot be written by json.dumps)."""
    return f'{{"users": [{user}], "user_data": {{{user}: {{"x": {x}, "y": {y}}}}}}}'


def femnist(root: Path, x: Any, y: Any) -> Path:
    for part in ("train", "test"):
        d = root / "femnist" / "data" / part
        d.mkdir(parents=True)
        good = {"users": ["w0"], "user_data": {"w0": {"x": [[0.5] * 784], "y": [3]}}}
        (d / "a.json").write_text(json.dumps(good))
    bad = root / "femnist" / "data" / "train" / "b.json"
    bad.write_text(json.dumps({"users": ["w1"], "user_data": {"w1": {"x": x, "y": y}}}))
    return bad


def digit5_npz(root: Path, **arrays: Any) -> Path:
    d = root / "digit5"
    d.mkdir(parents=True)
    base = {
        "x_train": np.zeros((4, 28, 28), np.uint8),
        "y_train": np.array([0, 1, 2, 3]),
        "x_test": np.zeros((2, 28, 28), np.uint8),
        "y_test": np.array([4, 5]),
    }
    np.savez(d / "mnist.npz", **{k: v for k, v in {**base, **arrays}.items() if v is not None})
    return d / "mnist.npz"


def damage(path: Path, how: Callable[[bytes], bytes]) -> Path:
    path.write_bytes(how(path.read_bytes()))
    return path


def digit5_pkl(root: Path, obj: Any) -> Path:
    d = root / "digit_dataset" / "MNIST" / "partitions"
    d.mkdir(parents=True)
    (d / "train_part0.pkl").write_bytes(pickle.dumps(obj))
    (d.parent / "test.pkl").write_bytes(pickle.dumps((np.zeros((2, 28, 28), np.uint8), np.array([1, 2]))))
    return d / "train_part0.pkl"


def pacs_npz(root: Path, x: Any, y: Any) -> Path:
    d = root / "PACS"
    d.mkdir(parents=True)
    np.savez(d / "photo.npz", x=x, y=y)
    return d / "photo.npz"


load_cifar = lambda root: load_cifar10(CIFARParams(root=str(root), verify=False))  # noqa: E731
load_digit5_ = lambda root: load_digit5(Digit5Params(root=str(root), domains=["mnist"]))  # noqa: E731
load_pacs_ = lambda root: load_pacs(PACSParams(root=str(root), domains=["photo"], resize=8, crop=8))  # noqa: E731
load_femnist = lambda root: load_emnist(EMNISTParams(root=str(root), source="leaf"))  # noqa: E731
load_leaf = lambda root: read_leaf_users(root / "leaf")  # noqa: E731
load_shakespeare_ = lambda root: load_shakespeare(ShakespeareParams(root=str(root), source="leaf"))  # noqa: E731


def emnist_letters(root: Path, labels: np.ndarray) -> Path:
    d = root / "emnist" / "gzip"
    d.mkdir(parents=True)
    for part, y in (("train", labels), ("test", np.array([1, 2], np.uint8))):
        (d / f"emnist-letters-{part}-images-idx3-ubyte.gz").write_bytes(gz(idx(np.zeros((len(y), 28, 28), np.uint8))))
        (d / f"emnist-letters-{part}-labels-idx1-ubyte.gz").write_bytes(gz(idx(y)))
    return d / "emnist-letters-train-labels-idx1-ubyte.gz"


@dataclass(frozen=True)
class Fault:
    name: str
    write: Callable[[Path], Path]  # writes the damaged file under root, returns it
    load: Callable[[Path], Any]


good_labels = idx(np.arange(12, dtype=np.uint8) % 10)
DATA_FAULTS = [
    # IDX (MNIST family)
    Fault(
        "idx truncated", lambda r: mnist(r, **{IDX_STEMS[0]: idx(np.zeros((12, 28, 28), np.uint8))[:-100]}), load_mnist_
    ),
    Fault("idx bad magic", lambda r: mnist(r, **{IDX_STEMS[1]: b"\x01\x02\x03\x04" + good_labels[4:]}), load_mnist_),
    Fault("idx truncated header", lambda r: mnist(r, **{IDX_STEMS[0]: b"\x00\x00\x08\x03\x00\x00"}), load_mnist_),
    Fault("idx trailing data", lambda r: mnist(r, **{IDX_STEMS[1]: good_labels + b"\x00" * 50}), load_mnist_),
    Fault("idx negative label", lambda r: mnist(r, **{IDX_STEMS[1]: idx(np.full(12, -1, np.int8))}), load_mnist_),
    Fault("idx label out of range", lambda r: mnist(r, **{IDX_STEMS[3]: idx(np.full(5, 10, np.uint8))}), load_mnist_),
    Fault("idx float labels", lambda r: mnist(r, **{IDX_STEMS[1]: idx(np.zeros(12, np.float32))}), load_mnist_),
    Fault(
        "idx wrong image shape", lambda r: mnist(r, **{IDX_STEMS[2]: idx(np.zeros((5, 27, 28), np.uint8))}), load_mnist_
    ),
    Fault(
        "idx header claims more samples than the dataset has",
        lambda r: mnist(
            r, **{IDX_STEMS[0]: idx(np.zeros((12, 28, 28), np.uint8))[:4] + struct.pack(">III", 70000, 28, 28)}
        ),
        load_mnist_,
    ),
    Fault(
        "gzip truncated",
        lambda r: mnist(
            r,
            **{
                IDX_STEMS[0] + ".gz": gz(idx(np.random.default_rng(0).integers(0, 256, (12, 28, 28), dtype=np.uint8)))[
                    :3000
                ]
            },
        ),
        load_mnist_,
    ),
    Fault("gzip not gzip", lambda r: mnist(r, **{IDX_STEMS[3] + ".gz": b"this is not a gzip archive"}), load_mnist_),
    Fault("gzip of zeros (a bomb)", lambda r: mnist(r, **{IDX_STEMS[0] + ".gz": gz(bytes(20_000_000))}), load_mnist_),
    Fault(
        "gzip longer than its header",
        lambda r: mnist(r, **{IDX_STEMS[1] + ".gz": gz(good_labels + bytes(20_000_000))}),
        load_mnist_,
    ),
    Fault(
        "emnist letters label 0",
        lambda r: emnist_letters(r, np.array([1, 0, 3], np.uint8)),
        lambda r: load_emnist(EMNISTParams(root=str(r), split="letters")),
    ),
    Fault(
        "emnist letters label 27",
        lambda r: emnist_letters(r, np.array([1, 27, 3], np.uint8)),
        lambda r: load_emnist(EMNISTParams(root=str(r), split="letters")),
    ),
    # CIFAR pickles
    Fault("cifar batch not a dict", lambda r: cifar(r, [1, 2, 3]), load_cifar),
    Fault("cifar data=None", lambda r: cifar(r, cifar_batch(data=None)), load_cifar),
    Fault("cifar negative label", lambda r: cifar(r, cifar_batch(labels=[1, -1, 2, 3])), load_cifar),
    Fault("cifar label out of range", lambda r: cifar(r, cifar_batch(labels=[1, 10, 2, 3]), "test_batch"), load_cifar),
    Fault("cifar labels are text", lambda r: cifar(r, cifar_batch(labels=["cat", "dog", "cat", "cat"])), load_cifar),
    Fault("cifar labels missing", lambda r: cifar(r, {b"data": np.zeros((4, 3072), np.uint8)}), load_cifar),
    Fault("cifar too few labels", lambda r: cifar(r, cifar_batch(labels=[1, 2])), load_cifar),
    Fault(
        "cifar rows of the wrong size", lambda r: cifar(r, cifar_batch(data=np.zeros((4, 3000), np.uint8))), load_cifar
    ),
    Fault("cifar pixels beyond a byte", lambda r: cifar(r, cifar_batch(data=np.full((4, 3072), 300.0))), load_cifar),
    Fault("cifar truncated pickle", lambda r: damage(cifar(r), lambda b: b[: len(b) // 2]), load_cifar),
    Fault("cifar pickle that runs code", lambda r: cifar(r, pickle.dumps({b"data": _Exploit()})), load_cifar),
    Fault("cifar deeply nested pickle", lambda r: cifar(r, b"(" * 100_000 + b"."), load_cifar),
    Fault(
        "cifar100 coarse label 20",
        lambda r: cifar100(r, [0, 1, 20, 2]),
        lambda r: load_cifar100(CIFARParams(root=str(r), verify=False)),
    ),
    # LEAF json
    Fault("leaf deeply nested", lambda r: leaf(r, "[" * 200_000 + "]" * 200_000), load_leaf),
    Fault("leaf invalid json", lambda r: leaf(r, '{"users": ['), load_leaf),
    Fault("leaf not utf-8", lambda r: leaf(r, b'{"users": ["\xff\xfe"]}'), load_leaf),
    Fault("leaf top level a list", lambda r: leaf(r, "[1, 2, 3]"), load_leaf),
    Fault("leaf users not a list", lambda r: leaf(r, json.dumps({"users": "u", "user_data": {}})), load_leaf),
    Fault("leaf user without data", lambda r: leaf(r, json.dumps({"users": ["u"], "user_data": {}})), load_leaf),
    Fault("leaf user name a number", lambda r: leaf(r, json.dumps({"users": [7], "user_data": {"7": {}}})), load_leaf),
    Fault("leaf x not a list", lambda r: leaf(r, leaf_blob(x=5)), load_leaf),
    Fault("leaf x nested lists", lambda r: leaf(r, leaf_blob(x=[[[1, 2]]], y=[1])), load_leaf),
    Fault("leaf y an object", lambda r: leaf(r, leaf_blob(y=[{"a": 1}])), load_leaf),
    Fault("leaf x and y lengths differ", lambda r: leaf(r, leaf_blob(x=["ab", "cd"], y=["e"])), load_leaf),
    # issue 22: a lone surrogate (json's "\ud800") and a number for a Shakespeare window were tracebacks
    Fault("leaf x a lone surrogate", lambda r: leaf(r, leaf_blob(x=["\ud800"], y=["d"])), load_leaf),
    Fault("leaf user a lone surrogate", lambda r: leaf(r, shakespeare_user("[5]", user='"\\udc00"')), load_leaf),
    Fault(
        "shakespeare x a lone surrogate",
        lambda r: shakespeare(r, shakespeare_user(f'["\\ud800{"a" * 79}"]')),
        load_shakespeare_,
    ),
    Fault(
        "shakespeare y a lone surrogate",
        lambda r: shakespeare(r, shakespeare_user(f'["{"a" * 80}"]', '["\\udfff"]')),
        load_shakespeare_,
    ),
    Fault("shakespeare x a number", lambda r: shakespeare(r, shakespeare_user("[5]")), load_shakespeare_),
    Fault(
        "shakespeare y a number",
        lambda r: shakespeare(r, shakespeare_user(f'["{"a" * 80}"]', "[7]")),
        load_shakespeare_,
    ),
    Fault("femnist rows of different lengths", lambda r: femnist(r, [[0.1] * 784, [0.1] * 10], [1, 2]), load_femnist),
    Fault("femnist label as text", lambda r: femnist(r, [[0.1] * 784], ["a"]), load_femnist),
    Fault("femnist label 62", lambda r: femnist(r, [[0.1] * 784], [62]), load_femnist),
    # .npz / .pkl dumps (Digit-Five, PACS)
    Fault("npz truncated", lambda r: damage(digit5_npz(r), lambda b: b[: len(b) // 2]), load_digit5_),
    Fault("npz not a zip", lambda r: damage(digit5_npz(r), lambda b: b"garbage" * 10), load_digit5_),
    Fault("npz missing array", lambda r: digit5_npz(r, y_test=None), load_digit5_),
    Fault("npz negative label", lambda r: digit5_npz(r, y_train=np.array([0, -3, 1, 2])), load_digit5_),
    Fault("npz labels and images differ", lambda r: digit5_npz(r, y_test=np.array([1, 2, 3])), load_digit5_),
    Fault("npz object array", lambda r: digit5_npz(r, x_test=np.array([None, None], dtype=object)), load_digit5_),
    Fault("pkl labels are text", lambda r: digit5_pkl(r, (np.zeros((2, 28, 28), np.uint8), ["a", "b"])), load_digit5_),
    Fault("pkl not a pair", lambda r: digit5_pkl(r, (1, 2, 3)), load_digit5_),
    Fault("pkl images None", lambda r: digit5_pkl(r, (None, np.array([1]))), load_digit5_),
    Fault("pacs npz label 7", lambda r: pacs_npz(r, np.zeros((2, 8, 8, 3), np.uint8), np.array([0, 7])), load_pacs_),
    Fault(
        "pacs npz truncated",
        lambda r: damage(pacs_npz(r, np.zeros((2, 8, 8, 3), np.uint8), np.array([0, 1])), lambda b: b[:-40]),
        load_pacs_,
    ),
]


@pytest.mark.parametrize("fault", DATA_FAULTS, ids=[f.name for f in DATA_FAULTS])
def test_a_damaged_data_file_is_one_data_error_naming_it(tmp_path: Path, fault: Fault) -> None:
    bad = fault.write(tmp_path)
    with pytest.raises(DataError) as e:
        fault.load(tmp_path)
    message = str(e.value)
    assert str(bad) in message, message
    assert "\n" not in message


class CountingGzip(gzip.GzipFile):
    """Counts the decompressed bytes handed out."""

    total = 0

    def read(self, size: int = -1) -> bytes:  # noqa: D102
        out = super().read(size)
        CountingGzip.total += len(out)
        return out


@pytest.mark.parametrize("payload", ["zeros", "header then zeros"])
def test_a_gzip_is_read_no_further_than_its_format_allows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, payload: str
) -> None:
    """The issue's case: a small gzip of gigabytes of zeros was decompressed whole (6.4 GB) before its checksum
    failed. 200 MB here; the reader stops after the header (zeros: bad magic) or after the promised bytes."""
    raw = idx(np.zeros(12, np.uint8)) if payload == "header then zeros" else b""
    stem = IDX_STEMS[1]
    f = mnist(tmp_path, **{stem + ".gz": b""})
    with gzip.open(f, "wb", compresslevel=1) as out:
        out.write(raw)
        chunk = bytes(1 << 20)
        for _ in range(200):
            out.write(chunk)
    monkeypatch.setattr(gzip, "open", lambda path, mode="rb": CountingGzip(path, mode))
    CountingGzip.total = 0
    with pytest.raises(DataError, match=stem):
        load_mnist_(tmp_path)
    assert CountingGzip.total <= 16 + 12 + 1


def test_a_damaged_data_file_through_the_cli_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = cifar(tmp_path / "data", cifar_batch(data=None))
    monkeypatch.chdir(tmp_path)  # `fedrun` through its console script's code path, in this process
    args = ["fedrun", "data=cifar10", f"data.root={tmp_path / 'data'}", "data.verify=false"]
    code = main_exit_code(monkeypatch, [*args, f"hydra.run.dir={tmp_path / 'run'}", f"cache_dir={tmp_path / 'c'}"])
    stderr = capsys.readouterr().err
    assert code == 2, stderr
    assert stderr.startswith(f"fedrun: error: {bad}: not a CIFAR batch") and stderr.count("\n") == 1
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [".hydra", "error.txt"]


# ---- caches: a damaged cache is recomputed, never used -------------------------------------------------------

N, CLIENTS = 600, 6


def _dataset() -> Dataset:
    y = torch.from_numpy(np.random.default_rng(0).integers(0, 10, N))
    split = Split(torch.zeros(N, 1, 2, 2, dtype=torch.uint8), y)
    return Dataset("toy", split, split, 10, (1, 2, 2))


def _rewrite(f: Path, **arrays: Any) -> None:
    with np.load(f, allow_pickle=False) as z:
        content = {k: z[k] for k in z.files}
    content.update(arrays)
    np.savez(f, **{k: v for k, v in content.items() if v is not None})


def _offsets(sizes: list[int]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


CACHE_FAULTS: list[tuple[str, Callable[[Path], None]]] = [
    ("all indices 0", lambda f: _rewrite(f, indices=np.zeros(N, np.int64))),
    ("negative offsets", lambda f: _rewrite(f, offsets=np.array([0, -5, 100, 200, 300, 400, N]))),
    ("too few clients", lambda f: _rewrite(f, indices=np.arange(N), offsets=_offsets([200, 200, 200]))),
    ("too many clients", lambda f: _rewrite(f, indices=np.arange(N), offsets=_offsets([100] * 3 + [50] * 6))),
    ("negative index", lambda f: _rewrite(f, indices=np.arange(N) - 1)),
    ("index beyond the data", lambda f: _rewrite(f, indices=np.arange(N) + 1)),
    ("a sample held twice", lambda f: _rewrite(f, indices=np.r_[np.arange(N - 1), 0])),
    (
        "offsets not ending at the indices",
        lambda f: _rewrite(f, indices=np.arange(N), offsets=_offsets([100] * 5 + [90])),
    ),
    (
        "offsets decreasing",
        lambda f: _rewrite(f, indices=np.arange(N), offsets=np.array([0, 300, 200, 400, 500, 550, N])),
    ),
    ("float indices", lambda f: _rewrite(f, indices=np.arange(N, dtype=np.float64))),
    ("2-D indices", lambda f: _rewrite(f, indices=np.arange(N).reshape(2, -1))),
    ("indices missing", lambda f: _rewrite(f, indices=None)),
    ("key missing", lambda f: _rewrite(f, key=None)),
    ("truncated file", lambda f: f.write_bytes(f.read_bytes()[:200])),
    ("not a zip", lambda f: f.write_bytes(b"\x00" * 1000)),
    ("empty file", lambda f: f.write_bytes(b"")),
]


@pytest.mark.parametrize(("name", "spoil"), CACHE_FAULTS, ids=[c[0] for c in CACHE_FAULTS])
def test_a_damaged_partition_cache_is_recomputed(tmp_path: Path, name: str, spoil: Callable[[Path], None]) -> None:
    p = DirichletParams(alpha=0.5)
    fresh = make_partition(_dataset(), "dirichlet", p, CLIENTS, 0, str(tmp_path))
    (f,) = tmp_path.glob("*.npz")
    spoil(f)
    again = make_partition(_dataset(), "dirichlet", p, CLIENTS, 0, str(tmp_path))
    assert len(again) == CLIENTS and all(np.array_equal(a, b) for a, b in zip(fresh, again, strict=True))
    with np.load(f, allow_pickle=False) as z:  # and the file was rewritten, valid again
        assert valid_parts(z["indices"], z["offsets"], N, CLIENTS) is None


def test_valid_parts_accepts_a_real_partition_and_names_each_fault() -> None:
    assert valid_parts(np.arange(10), _offsets([3, 0, 7]), 10, 3) is None  # an empty client is a client
    assert "2 clients, expected 3" in valid_parts(np.arange(10), _offsets([3, 7]), 10, 3)
    assert "more than one client" in valid_parts(np.r_[0, np.arange(9)], _offsets([3, 0, 7]), 10, 3)


ENGINE_FAULTS: list[tuple[str, str]] = [
    ("a list", "[1, 2]"),
    ("a string", '"vectorised"'),
    ("truncated", '{"K": {"engine": "vec'),
    ("empty", ""),
    ("deeply nested", "[" * 200_000),
    ("entry not an object", '{"K": "vectorised"}'),
    ("unknown engine", '{"K": {"engine": "warp", "clients": 4, "steps": 2, "vectorised_s": 1, "sequential_s": 2}}'),
    (
        "negative timing",
        '{"K": {"engine": "vectorised", "clients": 4, "steps": 2, "vectorised_s": -1, "sequential_s": 2}}',
    ),
    ("NaN timing", '{"K": {"engine": "vectorised", "clients": 4, "steps": 2, "vectorised_s": NaN, "sequential_s": 2}}'),
    (
        "timings disagree",
        '{"K": {"engine": "vectorised", "clients": 4, "steps": 2, "vectorised_s": 3, "sequential_s": 2}}',
    ),
    ("timings missing", '{"K": {"engine": "vectorised", "clients": 4, "steps": 2}}'),
    (
        "clients not a count",
        '{"K": {"engine": "sequential", "clients": "4", "steps": 2, "vectorised_s": 3, "sequential_s": 2}}',
    ),
    ("fallback to vectorised", '{"K": {"engine": "vectorised", "reason": "not vmappable: x"}}'),
]
MEASURED = {"engine": "sequential", "clients": 4, "steps": 2, "vectorised_s": 0.3, "sequential_s": 0.2}


@pytest.fixture(scope="module")
def experiment():  # noqa: ANN201 - a built fedrun Experiment
    from fedrun.config.validate import validate
    from fedrun.run.experiment import build_experiment
    from tests.conftest import compose_cfg

    tiny = ["data.max_train_samples=200", "data.max_test_samples=100", "fl.clients=4", "model.hidden=[8]"]
    spec = validate(compose_cfg([*tiny, "hardware.engine=sequential", "hardware.threads=1", "cache_dir=null"]))
    return spec, build_experiment(spec)


@pytest.mark.parametrize(("name", "content"), ENGINE_FAULTS, ids=[e[0] for e in ENGINE_FAULTS])
def test_a_damaged_engine_auto_json_is_ignored_and_remeasured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, experiment: Any, name: str, content: str
) -> None:
    spec, exp = experiment
    (tmp_path / "engine-auto.json").write_text(content)
    calls = []
    monkeypatch.setattr(auto, "_CHOICES", {})
    monkeypatch.setattr(auto, "probe_key", lambda *a: "K")
    monkeypatch.setattr(auto, "measure", lambda *a: calls.append(1) or dict(MEASURED))
    monkeypatch.setattr(auto_budget, "BUDGET", float("inf"))  # a run this small is not timed otherwise
    choice = auto.choose(spec.hardware, exp.algorithm, exp.fed, spec.fl, spec.seed, str(tmp_path))
    assert calls == [1] and {k: choice[k] for k in (*MEASURED, "reason")} == {**MEASURED, "reason": "measured"}
    assert json.loads((tmp_path / "engine-auto.json").read_text()) == {"K": MEASURED}


def test_a_valid_engine_auto_json_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, experiment: Any) -> None:
    spec, exp = experiment
    (tmp_path / "engine-auto.json").write_text(json.dumps({"K": MEASURED, "other": {"engine": "x"}}))
    monkeypatch.setattr(auto, "_CHOICES", {})
    monkeypatch.setattr(auto, "probe_key", lambda *a: "K")
    monkeypatch.setattr(auto, "measure", lambda *a: pytest.fail("measured although cached"))
    choice = auto.choose(spec.hardware, exp.algorithm, exp.fed, spec.fl, spec.seed, str(tmp_path))
    assert choice == {**MEASURED, "how": "cache", "reason": "cached measurement"}
