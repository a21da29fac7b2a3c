"""Shakespeare from LEAF's json files (Caldas et al. 2018), as FedCos uses it: one client per speaking
role, input = an 80-character window, target = the next character, an 80-symbol vocabulary.

LEAF's preprocessing writes ``data/train/*.json`` and ``data/test/*.json``, each
``{"users": [...], "num_samples": [...], "user_data": {user: {"x": [80-char strings], "y": [chars]}}}``.
Characters map to their index in LEAF's ``ALL_LETTERS`` (language_utils.py); a character outside it
(LEAF would give -1) maps to the space and is counted in ``notes["unknown_chars"]``.
The training users become the natural clients (``partition=natural``); the test split is all test users.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from fedrun.data.base import DataParams, Dataset, Split
from fedrun.data.sources.leaf import read_leaf_users
from fedrun.errors import DataError, DataMissing
from fedrun.registry import DATASETS, positive

ALL_LETTERS = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
SPACE = ALL_LETTERS.index(" ")
HINT = (
    "run LEAF's data/shakespeare/preprocess.sh (github.com/TalwalkarLab/leaf) and copy its data/train and "
    "data/test folders to {root}/shakespeare/data/"
)


@dataclass
class ShakespeareParams(DataParams):
    """``data=shakespeare``: ``seq_len`` is checked against every window (LEAF: 80)."""

    seq_len: int = 80

    def __post_init__(self) -> None:
        super().__post_init__()
        positive("seq_len", self.seq_len)


_LUT = np.full(128, -1, dtype=np.int64)  # ASCII code -> vocabulary index (ALL_LETTERS is ASCII)
_LUT[[ord(c) for c in ALL_LETTERS]] = np.arange(len(ALL_LETTERS))


def encode(text: str) -> tuple[np.ndarray, int]:
    """Vocabulary indices of ``text`` (unknown characters -> space) and the number of unknown characters."""
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).astype(np.int64)
    idx = np.where(codes < 128, _LUT[np.minimum(codes, 127)], -1)
    bad = idx < 0
    return np.where(bad, SPACE, idx), int(bad.sum())


def read_leaf_dir(folder: Path, seq_len: int) -> tuple[list[str], list[np.ndarray], list[np.ndarray], int]:
    """Users, their windows [n, seq_len] and targets [n] from every json file in ``folder``."""
    users, xs, ys, unknown = [], [], [], 0
    for u, x_text, y_text in read_leaf_users(folder):
        if any(len(w) != seq_len for w in x_text) or any(len(c) != 1 for c in y_text):
            raise DataError(f"{folder}: user {u}: expected {seq_len}-character windows and 1-character targets")
        x, bad_x = encode("".join(x_text))
        y, bad_y = encode("".join(y_text))
        users.append(u)
        xs.append(x.reshape(len(x_text), seq_len))
        ys.append(y)
        unknown += bad_x + bad_y
    return users, xs, ys, unknown


def _find(root: Path) -> Path:
    for d in (root / "shakespeare" / "data", root / "shakespeare", root / "leaf" / "data" / "shakespeare" / "data"):
        if (d / "train").is_dir() and (d / "test").is_dir():
            return d
    raise DataMissing(f"shakespeare: train/ and test/ LEAF folders not found under {root}; " + HINT.format(root=root))


@DATASETS.register("shakespeare", ShakespeareParams)
def load_shakespeare(p: ShakespeareParams) -> Dataset:
    """LEAF Shakespeare: long token windows [N, 80], next-character targets, one natural client per role."""
    if p.download:
        raise DataError("shakespeare: no automatic download; " + HINT.format(root=p.root))
    d = _find(Path(p.root))
    users, xs, ys, bad_train = read_leaf_dir(d / "train", p.seq_len)
    _, txs, tys, bad_test = read_leaf_dir(d / "test", p.seq_len)
    sizes = np.array([len(y) for y in ys])
    starts = np.concatenate([[0], np.cumsum(sizes)])
    natural = [np.arange(starts[i], starts[i + 1]) for i in range(len(users))]
    cat = lambda a: torch.from_numpy(np.concatenate(a) if a else np.zeros(0, dtype=np.int64))  # noqa: E731
    return Dataset(
        name="shakespeare",
        train=Split(cat(xs), cat(ys)),
        test=Split(cat(txs), cat(tys)),
        num_classes=len(ALL_LETTERS),
        input_shape=(p.seq_len,),
        natural_clients=natural,
        notes={"users": str(len(users)), "unknown_chars": str(bad_train + bad_test)},
    )
