"""Local test splits: each client's test samples, drawn from its own data distribution (``eval.local_test``).

Two conventions exist in the personalised-FL literature and both are offered:

- ``split``: each client's own samples are split, a seeded ``eval.local_test_fraction`` of them held out as its
  local test split and the rest trained on (PFLlib's ``dataset_utils.split_data``, train_ratio 0.75, and
  FL-bench split every client's data the same way). The clients then train on fewer samples than with
  ``none``, so the run is a different run.
- ``partition``: the global test split is dealt out among the clients with each client's label distribution:
  the test samples of class c are shuffled and cut among the clients in proportion to n_{i,c} / n_c, client i's
  share of the training samples of class c. Disjoint from every client's training data (it is the test split),
  the training is unchanged, and every test sample goes to one client at most.

The draws are keyed by (seed, purpose, client or class), so a client's split does not depend on the others, and
are cached beside the partition (``cache_dir``) under a key of everything they depend on.
"""

from __future__ import annotations

import hashlib
import json
import sys
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fedrun.core.errors import ConfigError
from fedrun.core.rng import np_rng
from fedrun.storage.cache import cache_file, write_cache

MODES = ("none", "split", "partition")
CACHE_VERSION = 1


@dataclass(frozen=True)
class LocalTest:
    """Every client's local test indices: into the training split (``split``) or the test split (``partition``)."""

    mode: str
    parts: list[np.ndarray]

    @property
    def on_train(self) -> bool:
        return self.mode == "split"

    @property
    def sizes(self) -> np.ndarray:
        return np.array([len(p) for p in self.parts], dtype=np.int64)


@dataclass(frozen=True)
class Unseen:
    """Clients that never train (``eval.unseen_clients``): their training parts (for fine-tuning) and local tests."""

    train_parts: list[np.ndarray]
    local_test: LocalTest


def split_clients(parts: list[np.ndarray], fraction: float, seed: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(training parts, local test parts): each client's samples shuffled by (seed, "local-test", client) and
    round(fraction * n_i) of them held out, at least one and at most n_i - 1 (a client of one sample keeps it
    for training and has no local test sample). Both parts are sorted."""
    train, test = [], []
    for i, p in enumerate(parts):
        p = np.asarray(p, dtype=np.int64)
        n_test = min(max(round(fraction * len(p)), 1), len(p) - 1) if len(p) > 1 else 0
        shuffled = np_rng(seed, "local-test", i).permutation(p)
        test.append(np.sort(shuffled[:n_test]))
        train.append(np.sort(shuffled[n_test:]))
    return train, test


def partition_test(
    train_labels: np.ndarray, parts: list[np.ndarray], test_labels: np.ndarray, num_classes: int, seed: int
) -> list[np.ndarray]:
    """The test split dealt out with each client's label distribution: class c's test samples, shuffled by
    (seed, "local-test-partition", c), cut at floor(n_test_c * cumsum_i n_{i,c} / n_c) (sorted per client)."""
    counts = np.stack([np.bincount(train_labels[p], minlength=num_classes)[:num_classes] for p in parts])
    out: list[list[np.ndarray]] = [[] for _ in parts]
    for c in range(num_classes):
        total = counts[:, c].sum()
        if total == 0:
            continue
        pool = np_rng(seed, "local-test-partition", c).permutation(np.flatnonzero(test_labels == c))
        cuts = np.floor(len(pool) * np.cumsum(counts[:, c]) / total).astype(np.int64)
        for i, (lo, hi) in enumerate(zip(np.concatenate([[0], cuts[:-1]]), cuts, strict=True)):
            out[i].append(pool[lo:hi])
    return [np.sort(np.concatenate(o)) if o else np.zeros(0, np.int64) for o in out]


def _digest(*arrays: np.ndarray) -> str:
    h = hashlib.sha1()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
        h.update(b"|")
    return h.hexdigest()


def _cached(key: dict[str, object], compute: Callable[[], list[np.ndarray]], cache_dir: str | None) -> list[np.ndarray]:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
    path = cache_file(cache_dir, f"local-test-{key['mode']}-{digest}.npz")
    if path is not None and path.is_file():
        try:
            with np.load(path, allow_pickle=False) as z:
                if json.loads(str(z["key"])) == key:
                    idx, off = z["indices"].astype(np.int64), z["offsets"].astype(np.int64)
                    return [idx[off[i] : off[i + 1]] for i in range(len(off) - 1)]
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, zlib.error):
            pass  # unreadable or foreign: recomputed and rewritten
    parts = compute()
    if path is not None:
        offsets = np.concatenate([[0], np.cumsum([len(p) for p in parts])]).astype(np.int64)
        flat = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        write_cache(path, lambda tmp: np.savez(tmp, indices=flat, offsets=offsets, key=json.dumps(key)))
    return parts


def make_local_test(
    mode: str,
    fraction: float,
    seed: int,
    parts: list[np.ndarray],
    train_labels: np.ndarray,
    test_labels: np.ndarray,
    num_classes: int,
    cache_dir: str | None = None,
) -> tuple[list[np.ndarray], LocalTest | None]:
    """(the clients' training parts, their local test splits) for ``eval.local_test=mode``; ``none`` returns
    ``parts`` unchanged and None."""
    if mode == "none":
        return parts, None
    flat = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    sizes = np.array([len(p) for p in parts], dtype=np.int64)
    key: dict[str, object] = {"version": CACHE_VERSION, "mode": mode, "seed": seed, "parts": _digest(flat, sizes)}
    if mode == "split":
        key["fraction"] = fraction
        test = _cached(key, lambda: split_clients(parts, fraction, seed)[1], cache_dir)
        train = [
            np.setdiff1d(np.asarray(p, dtype=np.int64), t, assume_unique=True) for p, t in zip(parts, test, strict=True)
        ]
        warn_if_thin(LocalTest(mode, test))
        return train, LocalTest(mode, test)
    key.update(labels=_digest(train_labels, test_labels), classes=num_classes)
    test = _cached(key, lambda: partition_test(train_labels, parts, test_labels, num_classes, seed), cache_dir)
    warn_if_thin(LocalTest(mode, test))
    return parts, LocalTest(mode, test)


def warn_if_thin(local: LocalTest) -> None:
    """One warning line on stderr when most clients' local test splits hold one sample or none: each such client's
    local accuracy is then 0 or 1 (or not measured), a coin of a number, though the run goes on."""
    sizes = local.sizes
    if not len(sizes) or float(np.median(sizes)) > 1:
        return
    more = "a larger eval.local_test_fraction" if local.on_train else "more test samples (data.max_test_samples)"
    print(
        f"fedrun: warning: eval.local_test: {int((sizes <= 1).sum())} of {len(sizes)} clients' local test splits"
        f" hold one sample or none, so each one's local accuracy is 0 or 1; for a measured one: {more} or more"
        " samples per client",
        file=sys.stderr,
    )


def partition_with_unseen(
    make: Callable[[int, str | None], list[np.ndarray]], clients: int, unseen: int, cache_dir: str | None
) -> list[np.ndarray]:
    """The partition of ``clients`` + ``unseen`` clients (``make(n, cache_dir)``), the unseen ones last. When the
    partition refuses that many clients but takes ``clients`` alone (probed without the cache), the unseen
    clients are what is too many: the refusal names ``eval.unseen_clients`` (it named the partition's field)."""
    try:
        return make(clients + unseen, cache_dir)
    except ConfigError as e:
        if not unseen:
            raise
        try:
            make(clients, None)
        except ConfigError:
            raise e from None
        raise ConfigError(
            "eval.unseen_clients",
            f"{unseen} unseen clients with fl.clients={clients} make {clients + unseen} clients, more than the"
            f" partition can form ({e.field}: {e.message.split('; valid:')[0]}); valid: fewer unseen clients"
            f" (fl.clients={clients} alone partitions), or"
            " more training samples",
        ) from None
