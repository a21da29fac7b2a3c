"""Loaded datasets kept in memory across the jobs of one process.

The jobs of a ``fedrun -m`` sweep on Hydra's basic launcher, or of a reproduce target run in-process
(fedrun/cli/reproduce_sweep.py), run one after another in one process and mostly read the same source: reading and
checksumming it again costs each job about a second for Fashion-MNIST, more for larger sets. A source is
loaded once per (name, loader parameters) and each job gets its own copy of the tensors, so a job that
edits its data in place cannot leak into the next. Only successful loads are kept: at most ``MAX_ENTRIES``
(least recently used dropped first), none over ``MAX_BYTES`` (PACS at 224 px: copying 1.5 GB per job would
cost more memory than reading it again costs time). Subsetting (``max_*_samples``) and ``longtail_rho`` are applied by
the caller to the copy, and ``merge_test`` here to the copy, so they are not part of the key.
"""

from __future__ import annotations

import copy
import dataclasses
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from fedrun.data.base import Dataset, Split

MAX_ENTRIES = 2
MAX_BYTES = 512 * 2**20
# applied after loading
_PER_RUN = (
    *("max_train_samples", "max_test_samples", "longtail_rho", "client_valid_ratio", "normalize", "augment"),
    "merge_test",
)
_CACHE: OrderedDict[tuple[str, str], Dataset] = OrderedDict()


def cache_key(name: str, params: Any) -> tuple[str, str]:
    """The source and the loader parameters that change what it returns (not the per-run subsetting)."""
    if dataclasses.is_dataclass(params):
        defaults = {f.name: f.default for f in dataclasses.fields(params) if f.name in _PER_RUN}
        params = dataclasses.replace(params, **defaults)  # type: ignore[type-var]  # an instance
    return name, repr(params)


def _clone_split(s: Split) -> Split:
    c = lambda t: None if t is None else t.clone()  # noqa: E731
    return Split(s.x.clone(), s.y.clone(), c(s.domain), c(s.coarse))


def copy_dataset(d: Dataset) -> Dataset:
    """A copy sharing no tensor or array with ``d``."""
    return dataclasses.replace(
        d,
        train=_clone_split(d.train),
        test=_clone_split(d.test),
        domain_names=None if d.domain_names is None else list(d.domain_names),
        natural_clients=None if d.natural_clients is None else [c.copy() for c in d.natural_clients],
        notes=dict(d.notes),
        stats=copy.deepcopy(d.stats),
    )


def nbytes(d: Dataset) -> int:
    """Bytes held by the dataset's tensors."""
    tensors = [t for s in (d.train, d.test) for t in (s.x, s.y, s.domain, s.coarse) if t is not None]
    return sum(t.element_size() * t.nelement() for t in tensors)


def load_source(name: str, loader: Callable[[Any], Dataset], params: Any) -> Dataset:
    """``loader(params)``, read once per process and key (up to ``MAX_BYTES``); a copy each call, its test split
    appended to its training split when ``params.merge_test`` is set (:meth:`Dataset.merged`)."""
    key = cache_key(name, params)
    if key not in _CACHE:
        data = loader(params)
        if nbytes(data) > MAX_BYTES:
            return _merge(data, params)
        _CACHE[key] = data
        while len(_CACHE) > MAX_ENTRIES:
            _CACHE.popitem(last=False)
    _CACHE.move_to_end(key)
    return _merge(copy_dataset(_CACHE[key]), params)


def _merge(data: Dataset, params: Any) -> Dataset:
    return data.merged() if getattr(params, "merge_test", False) else data


def clear() -> None:
    """Forget every loaded dataset."""
    _CACHE.clear()
