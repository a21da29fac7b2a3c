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
from pathlib import Path

import numpy as np

from fedrun.errors import DataError

_IDX_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


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


def read_bytes(path: Path) -> bytes:
    """Read a file, transparently gunzipping ``.gz``; corrupt archives give a DataError naming the file."""
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as f:
                return f.read()
        return path.read_bytes()
    except (OSError, EOFError, gzip.BadGzipFile) as e:
        raise DataError(f"{path}: cannot read ({e}); the file is truncated or corrupt, delete it and fetch it again")


def find_file(stem: str, dirs: list[Path]) -> Path | None:
    for d in dirs:
        for candidate in (d / stem, d / f"{stem}.gz"):
            if candidate.is_file():
                return candidate
    return None


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def download(url: str, dest: Path, md5_expected: str | None) -> None:
    """Fetch ``url`` to ``dest`` atomically, verifying the md5 of what was downloaded."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            data = r.read()
    except OSError as e:
        raise DataError(f"download of {url} failed ({e}); no network? place the file at {dest} by hand")
    if md5_expected is not None and md5(data) != md5_expected:
        raise DataError(f"download of {url}: checksum mismatch (got {md5(data)}, expected {md5_expected})")
    tmp = dest.with_suffix(dest.suffix + ".part")
    tmp.write_bytes(data)
    tmp.replace(dest)


def load_idx_split(
    name: str,
    dirs: list[Path],
    files: dict[str, tuple[str, str | None]],
    mirror: str | None,
    download_dir: Path,
    allow_download: bool,
    hint: str,
) -> dict[str, np.ndarray]:
    """Load the four IDX files of an MNIST-style dataset.

    ``files`` maps a key (``train_x``...) to (file stem, md5 of the decompressed bytes or None).
    """
    out = {}
    for key, (stem, digest) in files.items():
        path = find_file(stem, dirs)
        if path is None and allow_download and mirror is not None:
            download(f"{mirror}{stem}.gz", download_dir / f"{stem}.gz", None)
            path = download_dir / f"{stem}.gz"
        if path is None:
            looked = ", ".join(str(d) for d in dirs)
            raise DataError(f"{name}: {stem}[.gz] not found (looked in {looked}); {hint}")
        raw = read_bytes(path)
        if digest is not None and md5(raw) != digest:
            raise DataError(f"{path}: checksum mismatch (corrupt or a different file); delete it and fetch it again")
        out[key] = parse_idx(raw, str(path))
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
    try:
        obj = _NumpyOnlyUnpickler(io.BytesIO(raw), encoding="bytes").load()
    except Exception as e:  # noqa: BLE001 - any failure means a bad file
        raise DataError(f"{name}: cannot unpickle ({e}); truncated or corrupt, delete it and fetch it again")
    return {k.decode() if isinstance(k, bytes) else k: v for k, v in obj.items()}


def extract_tar(archive: Path, dest: Path) -> None:
    with tarfile.open(archive) as tf:
        tf.extractall(dest, filter="data")
