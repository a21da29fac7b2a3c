"""Name -> implementation registries for algorithms, models, datasets and partitions.

Every component registers itself with a decorator next to its definition, together with the dataclass
of its hyperparameters. Config nodes are validated against that dataclass (unknown keys, types, ranges)
before any work starts, and only names found here can be instantiated from a config (no `_target_`).
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import pkgutil
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from fedrun.core.errors import ConfigError

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Entry(Generic[T]):
    name: str
    obj: T
    params: type | None


class Registry(Generic[T]):
    """A named collection of components of one kind (e.g. ``algorithm``)."""

    def __init__(self, kind: str, package: str) -> None:
        self.kind = kind
        self.package = package
        self._entries: dict[str, Entry[T]] = {}
        self._loaded = False

    def register(self, name: str, params: type | None = None) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            if name in self._entries and self._entries[name].obj is not obj:
                raise RuntimeError(f"{self.kind} '{name}' registered twice")
            self._entries[name] = Entry(name, obj, params)
            return obj

        return deco

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        pkg = importlib.import_module(self.package)
        for mod in pkgutil.iter_modules(pkg.__path__):
            if not mod.name.startswith("_"):
                importlib.import_module(f"{self.package}.{mod.name}")

    def names(self) -> list[str]:
        self._load()
        return sorted(self._entries)

    def get(self, name: str) -> Entry[T]:
        self._load()
        if name not in self._entries:
            raise ConfigError(f"{self.kind}.name", f"unknown {self.kind} '{name}'; valid: {', '.join(self.names())}")
        return self._entries[name]


def _check_type(field: str, value: Any, tp: Any) -> Any:
    """Coerce/check ``value`` against a simple annotation; raise ConfigError naming ``field``."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _check_type(field, value, a)
            except ConfigError as e:
                errors.append(e.message)
        raise ConfigError(field, errors[0] if errors else f"invalid value {value!r}")
    if origin is typing.Literal:
        choices = typing.get_args(tp)
        if value not in choices:
            raise ConfigError(field, f"invalid value {value!r}; valid: {', '.join(map(str, choices))}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(field, f"expected a list, got {value!r}")
        (inner,) = typing.get_args(tp)[:1] or (Any,)
        return [_check_type(f"{field}[{i}]", v, inner) for i, v in enumerate(value)]
    if tp is Any:
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(field, f"expected true/false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(field, f"expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(field, f"expected a number, got {value!r}")
        if not math.isfinite(value):  # nan passes every range comparison, inf most of them
            raise ConfigError(field, f"must be a finite number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(field, f"expected a string, got {value!r}")
        return value
    return value


def build_params(cls: type[T], node: Mapping[str, Any], prefix: str, ignore: tuple[str, ...] = ("name",)) -> T:
    """Build the hyperparameter dataclass ``cls`` from a config mapping, validating every field.

    Unknown keys, wrong types and out-of-range values (checked in the dataclass's ``__post_init__``, which
    raises ConfigError with the bare field name) become a ConfigError naming ``prefix.field``.
    """
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in node.items():
        if key in ignore:
            continue
        if key not in fields:
            valid = ", ".join(sorted(fields)) or "(none)"
            raise ConfigError(f"{prefix}.{key}", f"unknown key; valid keys: {valid}")
        kwargs[key] = _check_type(f"{prefix}.{key}", value, hints[key])
    try:
        return cls(**kwargs)
    except ConfigError as e:
        raise ConfigError(f"{prefix}.{e.field}", e.message) from None


def positive(field: str, value: float | int | None, allow_zero: bool = False) -> None:
    """Range check helper for ``__post_init__``: value > 0 (or >= 0)."""
    if value is None:
        return
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(field, f"must be {'>= 0' if allow_zero else '> 0'}, got {value}")


def in_range(field: str, value: float | None, lo: float, hi: float, lo_open: bool = False) -> None:
    """Range check helper: lo <= value <= hi (lo < value when ``lo_open``)."""
    if value is None:
        return
    if value > hi or value < lo or (lo_open and value == lo):
        raise ConfigError(field, f"must be in {'(' if lo_open else '['}{lo}, {hi}], got {value}")


ALGORITHMS: Registry[Any] = Registry("algorithm", "fedrun.algorithms")
MODELS: Registry[Any] = Registry("model", "fedrun.models")
DATASETS: Registry[Any] = Registry("data", "fedrun.data.sources")
PARTITIONS: Registry[Any] = Registry("partition", "fedrun.data.partitions")
ENGINES: Registry[Any] = Registry("engine", "fedrun.engines")
