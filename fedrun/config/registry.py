"""Name -> implementation registries for algorithms, models, datasets, partitions, engines and capabilities.

Every component registers itself with a decorator next to its definition, together with the dataclass
of its hyperparameters. That dataclass is the one statement of the component's keys, types and defaults:
its schema (:func:`schema_of`) is stored in Hydra's ConfigStore as ``schema/<kind>/<name>``, on which
each YAML option of the group composes (OmegaConf checks types while composing), and :func:`build_params`
builds it from the composed node (its ``__post_init__`` checks ranges). Only names found here can be
instantiated from a config (no `_target_`).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from fedrun.core.errors import ConfigError
from fedrun.core.registry import Entry as Entry
from fedrun.core.registry import Registry as Registry

T = TypeVar("T")

INPUT_KINDS = ("images", "features", "tokens")


@dataclasses.dataclass(frozen=True)
class DataSignature:
    """What a model meets of a dataset, known from its parameters before any file is read: the shape of one
    input, the number of classes, and the kind of input: ``images`` (stored as uint8 [C, H, W], float after
    scaling), ``features`` (float [D]) or ``tokens`` (int64 ids [T] below ``num_classes``: next-token data)."""

    input_shape: tuple[int, ...]
    num_classes: int
    inputs: str

    def __post_init__(self) -> None:
        assert self.inputs in INPUT_KINDS, self.inputs

    def describe(self) -> str:
        """E.g. ``images [3, 32, 32], 10 classes`` or ``token ids [80], 80 symbols``."""
        what = {"images": "images", "features": "features", "tokens": "token ids"}[self.inputs]
        classes = f"{self.num_classes} {'symbols' if self.inputs == 'tokens' else 'classes'}"
        return f"{what} {list(self.input_shape)}, {classes}"


def _schema_type(tp: Any) -> Any:
    """``tp`` as OmegaConf can check it: a ``Literal`` of strings is a ``str`` (its choices are checked by
    :func:`build_params`), ``Literal | None`` an optional ``str``."""
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return str
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if any(typing.get_origin(a) is typing.Literal for a in args):
            return str | None if type(None) in args else str
    return tp


def field_default(f: dataclasses.Field[Any]) -> Any:
    """``f``'s default as a new field (for a dataclass made from others' fields)."""
    if f.default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=f.default_factory)
    return dataclasses.field(default=f.default)


@functools.cache
def schema_of(cls: type, name: str | None = None) -> type:
    """The structured-config schema of the hyperparameter dataclass ``cls``: its fields, types and defaults
    (after ``name``, fixed to ``name``, for a registry choice), for OmegaConf to check while composing.

    A dataclass of its own (``__post_init__`` is not carried over) so that composing never runs a range
    check: those run once, on the final values, in :func:`build_params`.
    """
    hints = typing.get_type_hints(cls)
    fields: list[tuple[str, Any, Any]] = [("name", str, dataclasses.field(default=name))] if name is not None else []
    fields += [(f.name, _schema_type(hints[f.name]), field_default(f)) for f in dataclasses.fields(cls) if f.init]
    return dataclasses.make_dataclass(f"{cls.__name__}Schema", fields)


_PLAIN = (str, int, float, bool, type(None))
_MERGED: dict[tuple[type, Any], dict[str, Any]] = {}  # (schema, frozen values) -> the values OmegaConf checked
_MERGED_MAX = 4096


def _frozen(value: Any) -> Any:
    """``value`` as a hashable key that tells apart what OmegaConf may treat apart (``1``, ``1.0``, ``True`` and
    ``"1"`` differ by type), or None where it is not plain data (an OmegaConf node, an object): not memoised."""
    if isinstance(value, _PLAIN):
        return (type(value), value)
    if type(value) in (list, tuple):
        items = tuple(_frozen(v) for v in value)
        return None if None in items else (type(value), items)
    if type(value) is dict:
        pairs = tuple((k, _frozen(v)) for k, v in value.items())
        return None if any(not isinstance(k, str) or f is None for k, f in pairs) else (dict, pairs)
    return None


def _merged(cls: type, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` merged onto ``cls``'s schema by OmegaConf (its keys and types checked, missing keys given their
    defaults), as plain data. Memoised for plain values: a sweep's jobs and a run's checks build the same sections
    many times (~50 a job), and each merge copies an OmegaConf node per field (~3 ms a section)."""
    schema = schema_of(cls)
    key = (schema, _frozen(values))
    if key[1] is not None and key in _MERGED:
        return copy.deepcopy(_MERGED[key])
    merged = OmegaConf.to_container(OmegaConf.merge(OmegaConf.structured(schema), values), resolve=False)
    assert isinstance(merged, dict)
    checked = {str(k): v for k, v in merged.items()}
    if key[1] is not None:
        if len(_MERGED) >= _MERGED_MAX:
            _MERGED.clear()
        _MERGED[key] = copy.deepcopy(checked)
    return checked


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _check_choices_and_finite(cls: type, values: dict[str, Any], prefix: str) -> None:
    """What OmegaConf's types do not say: a ``Literal``'s choices, and that a float is finite."""
    hints = _hints(cls)
    for key, value in values.items():
        tp = hints[key]
        literal = next((a for a in (tp, *typing.get_args(tp)) if typing.get_origin(a) is typing.Literal), None)
        if literal is not None and value is not None and value not in typing.get_args(literal):
            choices = ", ".join(map(str, typing.get_args(literal)))
            raise ConfigError(f"{prefix}.{key}", f"invalid value {value!r}; valid: {choices}")
        if isinstance(value, float) and not math.isfinite(value):  # nan passes every range comparison
            raise ConfigError(f"{prefix}.{key}", f"must be a finite number, got {value!r}")


def build_params(cls: type[T], node: Mapping[str, Any], prefix: str, ignore: tuple[str, ...] = ("name",)) -> T:
    """Build the hyperparameter dataclass ``cls`` from a config mapping, validating every field.

    Unknown keys and wrong types are refused by OmegaConf against :func:`schema_of` ``cls`` (the schema
    Hydra checked while composing; a plain mapping, e.g. a saved run's config, is checked here first);
    out-of-range values by the dataclass's ``__post_init__``, which raises ConfigError with the bare field
    name. Every error is a ConfigError naming ``prefix.field``.
    """
    fields = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]  # a params dataclass
    values = {key: value for key, value in node.items() if key not in ignore}
    for key in values:
        if key not in fields:
            valid = ", ".join(sorted(fields)) or "(none)"
            raise ConfigError(f"{prefix}.{key}", f"unknown key; valid keys: {valid}")
    try:
        checked = _merged(cls, values)
    except OmegaConfBaseException as e:
        full_key = getattr(e, "full_key", None)
        raise ConfigError(f"{prefix}.{full_key}" if full_key else prefix, str(e).splitlines()[0]) from None
    _check_choices_and_finite(cls, checked, prefix)
    try:
        return cls(**checked)
    except ConfigError as e:
        raise ConfigError(f"{prefix}.{e.field}", e.message) from None


def positive(field: str, value: float | int | None, allow_zero: bool = False) -> None:
    """Range check helper for ``__post_init__``: value > 0 (or >= 0)."""
    if value is None:
        return
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(field, f"must be {'>= 0' if allow_zero else '> 0'}, got {value}")


def in_range(
    field: str,
    value: float | None,
    lo: float,
    hi: float,
    lo_open: bool = False,
    hi_open: bool = False,
    why: str = "",
) -> None:
    """Range check helper: lo <= value <= hi (lo < value when ``lo_open``, value < hi when ``hi_open``).

    ``why`` (said after the range) tells what an excluded end would do, e.g. that it stops the method training.
    """
    if value is None:
        return
    if value > hi or value < lo or (lo_open and value == lo) or (hi_open and value == hi):
        reason = f" ({why})" if why else ""
        raise ConfigError(
            field, f"must be in {'(' if lo_open else '['}{lo}, {hi}{')' if hi_open else ']'}, got {value}{reason}"
        )


ALGORITHMS: Registry[Any] = Registry("algorithm", "fedrun.algorithms")
MODELS: Registry[Any] = Registry("model", "fedrun.models")
DATASETS: Registry[Any] = Registry("data", "fedrun.data.sources")
PARTITIONS: Registry[Any] = Registry("partition", "fedrun.data.partitions")
ENGINES: Registry[Any] = Registry("engine", "fedrun.engines")
# everything beyond the method that acts inside a round (fedrun/capabilities/base.py): system, privacy, compression...
CAPABILITIES: Registry[Any] = Registry("capability", "fedrun.capabilities")
