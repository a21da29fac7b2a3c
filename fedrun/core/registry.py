"""A name -> implementation registry, the pattern of every pluggable kind (methods, models, data, engines, trackers).

A component registers itself with a decorator next to its definition, together with the dataclass of its
parameters (the one statement of its keys, types and defaults); a registry imports every module of its package the
first time it is asked, so a new component is one module found by the registry. It lives in ``core`` so that every
layer can keep one (``storage`` its trackers); building and checking params from a config is ``config``'s
(fedrun/config/registry.py).
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from fedrun.core.errors import ConfigError

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Entry(Generic[T]):
    name: str
    obj: T
    params: type | None
    standin: Callable[..., Any] | None = (
        None  # data sources: (params, rng) -> a stand-in Dataset (fedrun/data/standin.py)
    )
    signature: Callable[[Any], Any] | None = None  # data sources: params -> what models meet (a DataSignature)


class Registry(Generic[T]):
    """A named collection of components of one kind (e.g. ``algorithm``)."""

    def __init__(self, kind: str, package: str) -> None:
        self.kind = kind
        self.package = package
        self._entries: dict[str, Entry[T]] = {}
        self._loaded = False

    def register(
        self,
        name: str,
        params: type | None = None,
        standin: Callable[..., Any] | None = None,
        signature: Callable[[Any], Any] | None = None,
    ) -> Callable[[T], T]:
        """Register ``obj`` as ``name`` with its hyperparameter dataclass ``params``; a data source also with
        the builder of its stand-in (``standin(params, rng) -> Dataset``, fedrun/data/standin.py) and its
        ``signature(params) -> DataSignature``, from which every model is checked against it before any
        work (fedrun/config/schema.py :func:`~fedrun.config.schema.check_model_fits_data`)."""

        def deco(obj: T) -> T:
            if name in self._entries and self._entries[name].obj is not obj:
                raise RuntimeError(f"{self.kind} '{name}' registered twice")
            self._entries[name] = Entry(name, obj, params, standin, signature)
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
