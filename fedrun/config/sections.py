"""The config sections built from registries: ``hardware`` from the engines, ``tracking`` from the trackers (in
fedrun/config/schema.py), and every capability's section (fedrun/capabilities/): its settings' keys, then the keys
its choices declare (an async server's, a compressor's), or, for a capability that ``joins`` a root section
(personalised evaluation's ``eval.local_test...``), its keys after that section's own. The registries are the
lists: a new engine, capability or choice is found here without an edit.
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Mapping
from dataclasses import fields, is_dataclass, make_dataclass
from typing import Any, TypeVar

from fedrun.config.registry import CAPABILITIES, ENGINES, build_params, field_default

T = TypeVar("T")


def merged_class(base: type, contributors: tuple[tuple[str, type | None], ...], section: str) -> type:
    """``base``'s keys, then each contributor's (a registered name and its params dataclass, or None) in order, each
    key once; a contributor redeclaring a key of ``base``, or two declaring one differently, is a RuntimeError (a
    programming error, found by the tests that build every section). ``base`` itself when nothing is added."""
    return _merged(base, contributors, section)


@functools.lru_cache(maxsize=32)
def _merged(base: type, contributors: tuple[tuple[str, type | None], ...], section: str) -> type:
    own = {f.name for f in fields(base)}
    options: dict[str, tuple[Any, Any, str, tuple[Any, Any]]] = {}
    for name, params in contributors:
        if params is None:
            continue
        hints = typing.get_type_hints(params)
        for f in fields(params):
            if f.name in own:
                raise RuntimeError(f"'{name}' declares {section}.{f.name}, a key of the section itself")
            known = options.get(f.name)
            if known is not None and (known[0], known[3]) != (hints[f.name], (f.default, f.default_factory)):
                raise RuntimeError(f"'{known[2]}' and '{name}' declare {section}.{f.name} differently")
            options.setdefault(f.name, (hints[f.name], field_default(f), name, (f.default, f.default_factory)))
    if not options:
        return base
    extra = [(key, tp, default) for key, (tp, default, _, _) in options.items()]
    frozen = bool(base.__dataclass_params__.frozen)  # type: ignore[attr-defined]
    merged = make_dataclass(base.__name__, extra, bases=(base,), frozen=frozen)
    merged.__doc__ = base.__doc__
    # where the added keys are declared (their notes: fedrun/config/catalogue.py's field_notes)
    merged.__fedrun_parts__ = tuple(p for _, p in contributors if p is not None)  # type: ignore[attr-defined]
    return merged


def options_of(params: type[T], section: Any, prefix: str) -> T:
    """One contributor's options (its params dataclass ``params``) read from the built section ``section``; a key the
    section lacks (a config saved before the contributor existed) takes its default."""
    values = {f.name: getattr(section, f.name) for f in fields(params) if hasattr(section, f.name)}  # type: ignore[arg-type]
    return build_params(params, values, prefix, ignore=())


def hardware_class(base: type) -> type:
    """The whole ``hardware`` section: ``base``'s keys (every engine's), then each registered engine's options."""
    return merged_class(base, tuple((n, ENGINES.get(n).params) for n in ENGINES.names()), "hardware")


def capabilities() -> list[Any]:
    """Every registered capability class (fedrun/capabilities/), in ``position`` order."""
    return sorted((CAPABILITIES.get(n).obj for n in CAPABILITIES.names()), key=lambda c: (c.position, c.name))


def capability_class(cap: Any) -> type:
    """The section class of a capability that owns its section: its settings' keys, then its choices' own."""
    return merged_class(cap.Settings, tuple(cap.contributors()), cap.section)


def joined_class(base: type, section: str) -> type:
    """A root section (``eval``) with the keys of the capabilities that join it, in their order."""
    joins = tuple((c.name, c.Settings) for c in capabilities() if c.joins and c.section == section)
    return merged_class(base, joins, section)


def owned_sections() -> list[tuple[str, type]]:
    """(section, its class) of every capability that owns a section, in ``position`` order."""
    return [(c.section, capability_class(c)) for c in capabilities() if not c.joins]


def build_sections(raw: Mapping[str, Any], root: Mapping[str, Any]) -> dict[str, Any]:
    """Every capability's settings, by capability name, from the composed config ``raw``: an owned section built and
    checked whole; a joined one's keys read from its (already built) root section in ``root``."""
    out: dict[str, Any] = {}
    for cap in capabilities():
        if cap.joins:
            out[cap.name] = options_of(cap.Settings, root[cap.section], cap.section)
        else:
            node = raw.get(cap.section)
            out[cap.name] = build_params(capability_class(cap), dict(node or {}), cap.section, ignore=())
            for _, params in cap.contributors():
                if isinstance(params, type) and is_dataclass(params):
                    options_of(params, out[cap.name], cap.section)
    return out


def section_choices() -> dict[str, list[str]]:
    """``{"<section>.<key>": its valid values}`` of every key whose choices are a registry (``system.server``,
    ``privacy.mode``, ``compression.name``...): the reference pages and ``fedrun --help`` list them from here."""
    return {f"{c.section}.{k}": list(v) for c in capabilities() for k, v in c.choices().items()}


def capability_tags(raw: Mapping[str, Any]) -> list[str]:
    """Each capability's short tag for the run's folder name, from the composed config ``raw`` (a section that does
    not build gives none: validation, after naming the folder, says what is wrong with it)."""
    tags = []
    for cap in capabilities():
        try:
            node = raw.get(cap.section) or {}
            if cap.joins:
                settings = build_params(
                    cap.Settings,
                    {k: v for k, v in dict(node).items() if k in _names(cap.Settings)},
                    cap.section,
                    ignore=(),
                )
            else:
                settings = build_params(capability_class(cap), dict(node), cap.section, ignore=())
            tag = cap.tag(settings)
        except Exception:  # noqa: BLE001 - a bad section: no tag (validation names the error)
            tag = ""
        if tag:
            tags.append(tag)
    return tags


def _names(cls: type) -> set[str]:
    return {f.name for f in fields(cls)}
