"""A run's summary (``summary.json``) as a typed, frozen value: every reader uses its attributes.

:class:`Summary` is built from the JSON object a run wrote (:meth:`Summary.parse`, :meth:`Summary.of`) and keeps it
as it was (:attr:`Summary.fields`), so what is written back is what was read. Each field fedrun knows is an
attribute of its type (``status`` a :class:`~fedrun.storage.status.Status`, accuracies floats, counters ints); a
value of the wrong type (a damaged or hand-edited file) reads as None there and stays in :attr:`Summary.fields`,
where fedrun-report checks it. Every key it does not know (a method's diagnostics, the partition statistics, keys
of a newer fedrun of the same format) is in :attr:`Summary.extra`.

Formats: 0 (no ``"format"`` key: written before the field existed) and 1 read the same; a newer one is refused
in one line. Writing keeps format 1: the JSON on disk is unchanged.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from fedrun.storage.status import Status

SUMMARY_FORMAT = 1  # summary.json's "format"; 0: a summary of before the field
OBJECTIVES = ("final", "last_k", "best")  # the test accuracies of a completed run: test_acc_<objective>


class UnreadableRunFile(ValueError):
    """A run file that exists but cannot be read as fedrun's (truncated, not JSON/YAML, the wrong shape, a newer
    format); the message starts with the file's name (:class:`~fedrun.storage.rundir.RunDir` adds it)."""


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _float(v: Any) -> float | None:
    ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    return float(v) if ok else None


def _bool(v: Any) -> bool | None:
    return v if isinstance(v, bool) else None


def _positive(v: Any) -> int | None:
    n = _int(v)
    return n if n is not None and n > 0 else None


def _mapping(v: Any) -> Mapping[str, Any] | None:
    return MappingProxyType(v) if isinstance(v, dict) else None


def _typed(kind: Any) -> Any:
    """A typed field, read from the JSON object by its own name with ``kind`` (not given to the constructor)."""
    return field(default=None, init=False, compare=False, metadata={"read": kind})


@dataclass(frozen=True)
class Summary:
    """summary.json: its ``format`` (0 for a summary of before the field), the JSON object as written
    (:attr:`fields`, without ``format``), each known field typed, and :attr:`extra`: the keys it does not know."""

    format: int
    fields: Mapping[str, Any] = field(default_factory=dict)
    # what the run is (written when it starts)
    status: Status | None = _typed(Status.parse)
    algorithm: str | None = _typed(_str)
    data: str | None = _typed(_str)
    model: str | None = _typed(_str)
    partition: str | None = _typed(_str)
    seed: int | None = _typed(_int)
    engine: str | None = _typed(_str)  # the engine's registry name
    device: str | None = _typed(_str)
    threads: int | None = _typed(_positive)  # torch's intra-op threads
    model_params: int | None = _typed(_int)
    data_standin: bool | None = _typed(_bool)  # trained on seeded stand-in data
    code: Mapping[str, Any] | None = _typed(_mapping)  # {"commit", "dirty"} or {"version"}
    run_dir: str | None = _typed(_str)
    # how it ended (written when it stops)
    rounds_completed: int | None = _typed(_int)
    last_k: int | None = _typed(_int)
    test_acc_final: float | None = _typed(_float)
    test_acc_last_k: float | None = _typed(_float)
    test_acc_best: float | None = _typed(_float)
    best_round: int | None = _typed(_int)
    test_loss_final: float | None = _typed(_float)
    train_acc_final: float | None = _typed(_float)
    round_to_target: int | None = _typed(_int)
    wall_time_s: float | None = _typed(_float)
    loop_time_s: float | None = _typed(_float)
    train_time_s: float | None = _typed(_float)
    aggregate_time_s: float | None = _typed(_float)
    train_samples: int | None = _typed(_int)
    samples_per_s: float | None = _typed(_float)
    resumed_from_round: int | None = _typed(_int)
    error: str | None = _typed(_str)
    signal: str | None = _typed(_str)  # the signal that interrupted the run (SIGINT...)
    extra: Mapping[str, Any] = field(default_factory=dict, init=False, compare=False)

    def __post_init__(self) -> None:
        raw = dict(self.fields)
        raw.pop("format", None)
        object.__setattr__(self, "fields", MappingProxyType(raw))
        for f in dataclasses.fields(self):
            if "read" in f.metadata:
                object.__setattr__(self, f.name, f.metadata["read"](raw.get(f.name)))
        object.__setattr__(self, "extra", MappingProxyType({k: v for k, v in raw.items() if k not in KNOWN}))

    def __reduce__(self) -> tuple[type[Summary], tuple[int, dict[str, Any]]]:
        # pickled (and copied) as what it is built from: its read-only mappings do not pickle
        return (Summary, (self.format, dict(self.fields)))

    @classmethod
    def of(cls, fields: Mapping[str, Any]) -> Summary:
        """The summary of a JSON object as fedrun writes it (its ``format``, 0 when it has none)."""
        fmt = fields.get("format", 0)
        return cls(fmt if _int(fmt) is not None else 0, dict(fields))

    @classmethod
    def parse(cls, text: str) -> Summary:
        """The summary in ``text``; :class:`UnreadableRunFile` when it is not a fedrun summary this fedrun reads."""
        try:
            blob = json.loads(text)
        except (ValueError, RecursionError) as e:
            raise UnreadableRunFile(_short(e)) from None
        if not isinstance(blob, dict) or not isinstance(blob.get("status", ""), str):
            raise UnreadableRunFile("not a fedrun summary (a JSON object with a status)")
        fmt = blob.pop("format", 0)
        if _int(fmt) is None or fmt < 0:
            raise UnreadableRunFile(f"format {fmt!r} is not a summary format (0 to {SUMMARY_FORMAT})")
        if fmt > SUMMARY_FORMAT:
            newer = f"format {fmt} is newer than this fedrun reads (0 to {SUMMARY_FORMAT}); upgrade fedrun"
            raise UnreadableRunFile(newer)
        return cls(fmt, blob)

    @property
    def completed(self) -> bool:
        """Whether the run completed (its accuracies are the whole run's)."""
        return self.status is Status.COMPLETED

    def test_acc(self, which: str) -> float | None:
        """``test_acc_<which>`` (``final``, ``last_k``, ``best``) of a completed run; None otherwise."""
        if which not in OBJECTIVES or not self.completed:
            return None
        value: float | None = getattr(self, f"test_acc_{which}")
        return value

    def replace(self, **changes: Any) -> Summary:
        """This summary with the JSON fields in ``changes`` set (``status``, ``error``...), in the current format."""
        return Summary(SUMMARY_FORMAT, {**self.fields, **changes})

    def to_json(self) -> dict[str, Any]:
        """The JSON object to write: the fields as read (or given), with ``format``."""
        return {**self.fields, "format": SUMMARY_FORMAT}


# the JSON keys read into typed attributes
KNOWN = frozenset(f.name for f in dataclasses.fields(Summary) if "read" in f.metadata)


def _short(e: BaseException) -> str:
    return " ".join(str(e).split())[:200] or type(e).__name__
