"""Shared readers for the image-domain datasets (Digit-Five, PACS): array dumps and image folders.

- ``.npz`` dumps are read with ``allow_pickle=False``;
- ``.pkl`` dumps (FedBN's ``partitions/train_part*.pkl``: a pickled ``(images, labels)`` pair) go through
  an unpickler that only rebuilds numpy arrays, never arbitrary objects;
- image folders ``<dir>/<class>/<image>`` are decoded with Pillow (imported only when needed).
"""

from __future__ import annotations

import io
import pickle
import zipfile
import zlib
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from fedrun.core.errors import DataError
from fedrun.data.sources.files import check_labels

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff")


class _ArraysUnpickler(pickle.Unpickler):
    """Rebuilds numpy arrays, dtypes and scalars inside plain tuples/lists/dicts; refuses everything else."""

    _ALLOWED = {
        (mod, name)
        for mod in ("numpy.core.multiarray", "numpy._core.multiarray")
        for name in ("_reconstruct", "scalar")
    } | {
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy.core.numeric", "_frombuffer"),
        ("numpy._core.numeric", "_frombuffer"),
    }

    def find_class(self, module: str, name: str):  # noqa: ANN201
        if (module, name) in self._ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a data pickle")


def load_pickled_pair(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """A pickled ``(images, labels)`` pair (FedBN's Digit-Five dumps), or a dict with images/labels keys."""
    try:
        obj = _ArraysUnpickler(io.BytesIO(path.read_bytes()), encoding="latin1").load()
    except Exception as e:  # noqa: BLE001 - any failure means a bad file
        raise DataError(f"{path}: cannot unpickle ({e}); truncated or corrupt, delete it and fetch it again") from None
    if isinstance(obj, dict):
        obj = (obj.get("images", obj.get("x")), obj.get("labels", obj.get("y")))
    if not (isinstance(obj, (tuple, list)) and len(obj) == 2):
        raise DataError(f"{path}: expected a pickled (images, labels) pair")
    try:
        images, labels = np.asarray(obj[0]), np.asarray(obj[1]).reshape(-1)
    except (ValueError, TypeError) as e:
        raise DataError(f"{path}: not an (images, labels) pair of arrays ({e})") from None
    if images.ndim < 3 or not (np.issubdtype(images.dtype, np.integer) or np.issubdtype(images.dtype, np.floating)):
        raise DataError(
            f"{path}: images of type {images.dtype} and shape {list(images.shape)}; expected [N, H, W(, C)]"
        )
    check_labels(path, labels, 0, np.iinfo(np.int64).max)
    return images, labels.astype(np.int64)


def load_npz(path: Path, keys: tuple[str, ...]) -> dict[str, np.ndarray]:
    """The arrays ``keys`` of an ``.npz`` dump (no pickles)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            missing = [k for k in keys if k not in z.files]
            if missing:
                raise DataError(f"{path}: missing arrays {missing} (has {z.files}); expected keys {list(keys)}")
            return {k: z[k] for k in keys}
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error) as e:  # truncated or foreign
        raise DataError(f"{path}: cannot read the .npz dump ({e}); delete it and fetch it again") from None


def to_chw_uint8(images: np.ndarray, size: int, channels: int = 3, name: str = "<images>") -> torch.Tensor:
    """[N,H,W], [N,H,W,C] or [N,C,H,W] images (uint8, or float in [0,1]) -> uint8 [N,channels,size,size].

    Grey images are repeated to ``channels``; other sizes are resized bilinearly with antialiasing
    (FedBN/FedIMA resize Digit-Five to 28x28)."""
    x = np.asarray(images)
    if not (np.issubdtype(x.dtype, np.integer) or np.issubdtype(x.dtype, np.floating)) or x.size == 0:
        raise DataError(
            f"{name}: images of type {x.dtype} and shape {list(x.shape)}; expected a non-empty array of numbers"
        )
    if x.dtype != np.uint8:
        x = np.clip(np.rint(x * 255.0 if x.max() <= 1.0 else x), 0, 255).astype(np.uint8)
    if x.ndim == 3:
        x = x[:, None]
    elif x.ndim == 4 and x.shape[-1] in (1, 3, 4) and x.shape[1] not in (1, 3, 4):
        x = x.transpose(0, 3, 1, 2)
    if x.ndim != 4 or x.shape[1] not in (1, 3, 4):
        raise DataError(f"{name}: cannot read images of shape {list(images.shape)}")
    t = torch.from_numpy(np.ascontiguousarray(x[:, :3]))
    if t.shape[1] == 1 and channels == 3:
        t = t.expand(-1, 3, -1, -1)
    if t.shape[2:] != (size, size):
        t = F.interpolate(t.float(), size=(size, size), mode="bilinear", antialias=True, align_corners=False)
        t = t.round().clamp(0, 255).to(torch.uint8)
    return t.contiguous()


def _pil():  # noqa: ANN202 - PIL.Image, imported only for image folders
    try:
        from PIL import Image
    except ImportError:
        raise DataError("reading image folders needs Pillow (pip install pillow); or use the .npz dumps") from None
    return Image


def read_image(path: Path, resize: int, crop: int) -> np.ndarray:
    """One image as uint8 [3, crop, crop]: shorter side resized to ``resize`` then centre-cropped (torchvision's
    Resize + CenterCrop)."""
    image_mod = _pil()
    try:
        with image_mod.open(path) as im:
            im = im.convert("RGB")
            w, h = im.size
            scale = resize / min(w, h)
            im = im.resize((max(crop, round(w * scale)), max(crop, round(h * scale))), image_mod.BILINEAR)
            w, h = im.size
            left, top = (w - crop) // 2, (h - crop) // 2
            im = im.crop((left, top, left + crop, top + crop))
            return np.asarray(im, dtype=np.uint8).transpose(2, 0, 1)
    except OSError as e:
        raise DataError(f"{path}: cannot decode the image ({e}); the file is corrupt, fetch it again") from None


def read_image_folder(folder: Path, classes: list[str], resize: int, crop: int) -> tuple[np.ndarray, np.ndarray]:
    """All images under ``folder/<class>/`` (class index = position in ``classes``), sorted by path."""
    xs, ys = [], []
    for k, cls in enumerate(classes):
        d = folder / cls
        if not d.is_dir():
            continue
        for f in sorted(d.iterdir()):
            if f.suffix.lower() in IMAGE_SUFFIXES:
                xs.append(read_image(f, resize, crop))
                ys.append(k)
    if not xs:
        raise DataError(f"{folder}: no images found in the class folders {classes}")
    return np.stack(xs), np.asarray(ys, dtype=np.int64)
