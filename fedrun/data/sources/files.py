"""Reading the standard on-disk formats: IDX (MNIST family) and the CIFAR python pickles.

Files are located under ``data.root`` in the common layouts (``<root>/<name>``, torchvision's
``<root>/<Name>/raw``), checked against known checksums of their *decompressed* bytes, and downloaded
only when ``data.download=true``.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import pickle
import tarfile
import urllib.request
import zlib
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import numpy.typing as npt

from fedrun.core.errors import DataError, DataMissing

_IDX_DTYPES: dict[int, npt.DTypeLike] = {
    0x08: np.uint8,
    0x09: np.int8,
    0x0B: ">i2",
    0x0C: ">i4",
    0x0D: ">f4",
    0x0E: ">f8",
}

# Shapes and label counts of the standard MNIST-layout files (MNIST, Fashion-MNIST, KMNIST share them):
# a file of the right name but another shape is a wrong or damaged download, caught before training.
IDX_SHAPES = {
    "train-images-idx3-ubyte": (60000, 28, 28),
    "train-labels-idx1-ubyte": (60000,),
    "t10k-images-idx3-ubyte": (10000, 28, 28),
    "t10k-labels-idx1-ubyte": (10000,),
}
IDX_CLASSES = {"train-labels-idx1-ubyte": 10, "t10k-labels-idx1-ubyte": 10}

# md5 of the files of the CIFAR python distributions as extracted (the values torchvision checks too).
CIFAR_MD5 = {
    "cifar-10-batches-py": {
        "data_batch_1": "c99cafc152244af753f735de768cd75f",
        "data_batch_2": "d4bba439e000b95fd0a9bffe97cbabec",
        "data_batch_3": "54ebc095f3ab1f0389bbae665268c751",
        "data_batch_4": "634d18415352ddfa80567beed471001a",
        "data_batch_5": "482c414d41f54cd18b22e5b47cb7c3cb",
        "test_batch": "40351d587109b95175f43aff81a1287e",
    },
    "cifar-100-python": {
        "train": "16019d7e3df5f24257cddd939b257f8d",
        "test": "f0ef6b0ae62326f3e7ffdfab6717acfc",
    },
}


def parse_idx(raw: bytes, name: str = "<bytes>") -> np.ndarray:
    """Parse an IDX file (as in the MNIST distribution) into an array."""
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_DTYPES:
        raise DataError(f"{name}: not an IDX file (bad magic number)")
    ndim = raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError(f"{name}: truncated IDX header")
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    dtype = np.dtype(_IDX_DTYPES[raw[2]])
    expected = int(np.prod(shape)) * dtype.itemsize
    if len(raw) - header != expected:
        raise DataError(
            f"{name}: truncated or corrupt IDX file ({len(raw) - header} data bytes, header promises {expected});"
            " delete it and fetch it again"
        )
    return np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape).astype(dtype.newbyteorder("="))


def _open(path: Path):  # noqa: ANN202 - a binary file object (gzip-decompressing for .gz)
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def _cannot_read(path: Path, e: BaseException) -> DataError:
    return DataError(f"{path}: cannot read ({e}); the file is truncated or corrupt, delete it and fetch it again")


def read_bytes(path: Path, limit: int | None = None) -> bytes:
    """Read a file, transparently gunzipping ``.gz``; corrupt archives give a DataError naming the file.

    With ``limit`` no more than that many (decompressed) bytes are read: a file longer than its format's known
    size is refused without being decompressed whole (a small gzip can hold gigabytes of zeros).
    """
    try:
        with _open(path) as f:
            raw = f.read() if limit is None else f.read(limit + 1)
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error) as e:
        raise _cannot_read(path, e) from None
    if limit is not None and len(raw) > limit:
        raise DataError(f"{path}: longer than the {limit} bytes its format allows; a wrong or damaged file")
    return raw


# the largest IDX payload fedrun reads (EMNIST ByClass train images: 547 MB); a header promising more is damage
MAX_IDX_BYTES = 2**31


def read_idx_bytes(path: Path, stem: str | None = None, verify: bool = True) -> bytes:
    """The bytes of an IDX file (gunzipped), read no further than its header promises.

    The magic number and the shape are checked from the header before any data is read (a known MNIST-layout
    ``stem`` must have its per-sample shape and at most its sample count, exactly it with ``verify``); then
    exactly the promised data bytes are read, and one more byte is an error (trailing data). So a damaged or
    hostile file never costs more memory than the file it claims to be.
    """
    try:
        with _open(path) as f:
            head = f.read(4)
            if len(head) < 4 or head[0] != 0 or head[1] != 0 or head[2] not in _IDX_DTYPES:
                raise DataError(f"{path}: not an IDX file (bad magic number)")
            dims = f.read(4 * head[3])
            if len(dims) < 4 * head[3]:
                raise DataError(f"{path}: truncated IDX header")
            shape = tuple(int.from_bytes(dims[4 * i : 4 * i + 4], "big") for i in range(head[3]))
            if stem is not None:
                _check_shape(path, stem, shape, verify)
            expected = int(np.prod(shape, dtype=object)) * np.dtype(_IDX_DTYPES[head[2]]).itemsize
            if expected > MAX_IDX_BYTES:
                raise DataError(f"{path}: IDX header promises {expected} data bytes, more than any dataset holds")
            data = f.read(expected + 1)
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error) as e:
        raise _cannot_read(path, e) from None
    if len(data) > expected:
        raise DataError(f"{path}: longer than its IDX header says ({expected} data bytes); a damaged file")
    return head + dims + data


def find_file(stem: str, dirs: list[Path]) -> Path | None:
    for d in dirs:
        for candidate in (d / stem, d / f"{stem}.gz"):
            if candidate.is_file():
                return candidate
    return None


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def check_md5(path: Path, raw: bytes, expected: str | None) -> None:
    """DataError naming ``path`` when its (decompressed) bytes do not have the known md5."""
    if expected is not None and md5(raw) != expected:
        raise DataError(f"{path}: checksum mismatch (corrupt or a different file); delete it and fetch it again")


def _check_shape(path: Path, stem: str, shape: tuple[int, ...], verify: bool) -> None:
    """A known MNIST-layout file's shape: the per-sample shape always, the sample count with ``verify`` (else at
    most the standard count: a subset may be smaller, never larger)."""
    known = IDX_SHAPES.get(stem)
    if known is None:
        return
    too_many = len(shape) > 0 and shape[0] > known[0]
    if tuple(shape[1:]) != known[1:] or (verify and shape != known) or too_many:
        raise DataError(
            f"{path}: shape {list(shape)}, expected {list(known)} for {stem}; a wrong or damaged file, fetch it again"
        )


def check_labels(path: Path, y: np.ndarray, lo: int, hi: int) -> None:
    """Labels must be integers in [lo, hi): a DataError naming ``path`` otherwise."""
    if y.size == 0:
        return
    if not np.issubdtype(y.dtype, np.integer):
        raise DataError(f"{path}: labels of type {y.dtype}, expected integers; a wrong or damaged file")
    if int(y.min()) < lo or int(y.max()) >= hi:
        bad = int(y.min()) if int(y.min()) < lo else int(y.max())
        raise DataError(f"{path}: label {bad} out of range [{lo}, {hi}); a corrupt file, fetch it again")


def check_idx(path: Path, stem: str, arr: np.ndarray, verify: bool = True) -> None:
    """Known shape and label range of a standard MNIST-layout file (no-op for other files).

    The per-sample shape and the label range are always checked; the sample count only with ``verify``
    (a subset written in the same format is a valid file too).
    """
    _check_shape(path, stem, tuple(arr.shape), verify)
    classes = IDX_CLASSES.get(stem)
    if classes is not None:
        check_labels(path, arr, 0, classes)


def download(url: str, dest: Path, md5_expected: str | None) -> None:
    """Fetch ``url`` to ``dest`` atomically, verifying the md5 of what was downloaded."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            data = r.read()
    except OSError as e:
        raise DataMissing(f"download of {url} failed ({e}); no network? place the file at {dest} by hand") from None
    if md5_expected is not None and md5(data) != md5_expected:
        raise DataError(f"download of {url}: checksum mismatch (got {md5(data)}, expected {md5_expected})")
    tmp = dest.with_suffix(dest.suffix + ".part")
    tmp.write_bytes(data)
    tmp.replace(dest)


def load_idx_split(
    name: str,
    dirs: list[Path],
    files: Mapping[str, tuple[str, str | None]],
    mirror: str | None,
    download_dir: Path,
    allow_download: bool,
    hint: str,
    verify: bool = True,
    labels: tuple[int, int] | None = None,
) -> dict[str, np.ndarray]:
    """Load the four IDX files of an MNIST-style dataset.

    ``files`` maps a key (``train_x``...) to (file stem, md5 of the decompressed bytes or None); with
    ``verify`` the md5 and the full standard shape are checked. ``labels`` = [lo, hi) is the range of the
    ``*_y`` files' labels (each file is checked, and named when out of range).
    """
    out = {}
    for key, (stem, digest) in files.items():
        path = find_file(stem, dirs)
        if path is None and allow_download and mirror is not None:
            download(f"{mirror}{stem}.gz", download_dir / f"{stem}.gz", None)
            path = download_dir / f"{stem}.gz"
        if path is None:
            looked = ", ".join(str(d) for d in dirs)
            raise DataMissing(f"{name}: {stem}[.gz] not found under data.root (looked in {looked}); {hint}")
        raw = read_idx_bytes(path, stem, verify)
        if verify:
            check_md5(path, raw, digest)
        out[key] = parse_idx(raw, str(path))
        check_idx(path, stem, out[key], verify)
        if labels is not None and key.endswith("_y"):
            check_labels(path, out[key], *labels)
    for split in ("train", "test"):
        x, y = out.get(f"{split}_x"), out.get(f"{split}_y")
        if x is not None and y is not None and len(x) != len(y):
            raise DataError(f"{name}: {split} split has {len(x)} images but {len(y)} labels; fetch the files again")
    return out


class _NumpyOnlyUnpickler(pickle.Unpickler):
    """Unpickler that can build numpy arrays and plain containers, and nothing that executes code."""

    _ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
    }

    def find_class(self, module: str, name: str):  # noqa: ANN201
        if (module, name) in self._ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a data pickle")


def safe_unpickle(raw: bytes, name: str) -> dict:
    """A data pickle holding a dict (the CIFAR batches), keys decoded; DataError naming ``name`` otherwise."""
    try:
        obj = _NumpyOnlyUnpickler(io.BytesIO(raw), encoding="bytes").load()
    except Exception as e:  # noqa: BLE001 - any failure means a bad file
        raise DataError(f"{name}: cannot unpickle ({e}); truncated or corrupt, delete it and fetch it again") from None
    if not isinstance(obj, dict):
        raise DataError(f"{name}: holds a {type(obj).__name__}, not the dict of a CIFAR batch; a wrong file")
    return {k.decode() if isinstance(k, bytes) else k: v for k, v in obj.items()}


def extract_tar(archive: Path, dest: Path) -> None:
    with tarfile.open(archive) as tf:
        tf.extractall(dest, filter="data")
