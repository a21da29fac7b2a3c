"""A composition that reuses an earlier one's defaults list and merged config files (Hydra's private API, as
fedrun/cli/hydra_patches.py uses it: the two modules are the fence tests/cli/test_hydra_patches.py checks).

Of a composition's ~85 ms, ~60 go to Hydra's defaults list (reading and resolving every config file's
``defaults``) and to merging the files it lists (``config_loader_impl.create_defaults_list``,
``ConfigLoaderImpl._compose_config_from_defaults_list``). Both depend on the config's name, the overrides that
choose or remove group options (not those that set values, which Hydra applies after the merge), the config sources
and what their files hold. A sweep's jobs differ in values (seeds, rates, a partition's alpha), so each job after
the first of its group choices gets the first's defaults list and a deep copy of its merged files, and Hydra applies
the job's values to that as it would have to its own merge: the same config (tests/cli/test_hydra_reuse.py; all
3,262 jobs of every reproduce target compared when this was written). What the files hold is told by a fingerprint
of each config directory (every file's and folder's inode, size and times: ~1 ms for conf/) and of the schemas
stored (``ConfigStore.store`` counts them); a source of another kind, or a directory of more than :data:`WALK_MAX`
entries, is composed from its files each time.
"""

from __future__ import annotations

import copy
import os
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import hydra._internal.config_loader_impl as loader_impl
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.defaults_list import DefaultsList, Overrides
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.types import Override
from omegaconf import DictConfig

REUSED_MAX = 64  # compositions whose defaults lists and merged files are kept (each a composed config)
WALK_MAX = 5000  # files and folders of a config directory fingerprinted per composition; a larger one is not reused


@dataclass
class Reusable:
    """A composition's defaults list, and its config files merged (kept pristine; handed out as copies)."""

    defaults: DefaultsList
    merged: DictConfig | None = None


class Kept:
    """The compositions kept, the latest last; how many schemas the store has stored."""

    compositions: OrderedDict[tuple[Any, ...], Reusable] = OrderedDict()
    stored = 0


def install() -> None:
    """Have each composition of this process reuse an earlier one's defaults list and merged files where they are
    the same (module docstring); idempotent."""
    current = loader_impl.create_defaults_list
    if getattr(current, "fedrun_reuse", False):
        return
    merge, store = ConfigLoaderImpl._compose_config_from_defaults_list, ConfigStore.store

    def create_defaults_list(
        repo: Any, config_name: str | None, overrides_list: list[Override], prepend_hydra: bool, skip_missing: bool
    ) -> DefaultsList:
        return _defaults_list(current, repo, config_name, overrides_list, prepend_hydra, skip_missing)

    def compose_from_defaults(self: ConfigLoaderImpl, defaults: list[Any], repo: Any) -> DictConfig:
        return _merged(lambda: merge(self, defaults, repo), defaults)

    def counted_store(self: ConfigStore, *args: Any, **kwargs: Any) -> None:
        Kept.stored += 1
        store(self, *args, **kwargs)

    create_defaults_list.fedrun_reuse = True  # type: ignore[attr-defined]
    loader_impl.create_defaults_list = create_defaults_list  # type: ignore[assignment]
    ConfigLoaderImpl._compose_config_from_defaults_list = compose_from_defaults  # type: ignore[method-assign]
    ConfigStore.store = counted_store  # type: ignore[method-assign]


def _defaults_list(
    current: Callable[..., DefaultsList],
    repo: Any,
    config_name: str | None,
    overrides_list: list[Override],
    prepend_hydra: bool,
    skip_missing: bool,
) -> DefaultsList:
    """Hydra's defaults list for these arguments: an earlier composition's where its key is the same (its config
    name, the overrides that are not values, by Hydra's own split, and what the sources hold), with this
    composition's values; else Hydra's, kept."""
    sources = sources_fingerprint(repo)
    if sources is None:
        return current(repo, config_name, overrides_list, prepend_hydra, skip_missing)
    split = Overrides(repo=repo, overrides_list=overrides_list)  # the first thing Hydra's own does, too
    values = {id(o) for o in split.config_overrides}
    choices = tuple(o.input_line or str(o) for o in overrides_list if id(o) not in values)
    key = (config_name, prepend_hydra, skip_missing, choices, sources)
    kept = Kept.compositions.get(key)
    if kept is None:
        found = current(repo, config_name, overrides_list, prepend_hydra, skip_missing)
        Kept.compositions[key] = Reusable(found)
        while len(Kept.compositions) > REUSED_MAX:
            Kept.compositions.popitem(last=False)
        return found
    Kept.compositions.move_to_end(key)
    return DefaultsList(
        defaults=kept.defaults.defaults,
        defaults_tree=kept.defaults.defaults_tree,
        config_overrides=split.config_overrides,
        overrides=kept.defaults.overrides,  # read for its known choices (hydra.runtime.choices): the same
    )


def _merged(merge: Callable[[], DictConfig], defaults: list[Any]) -> DictConfig:
    """The files of ``defaults`` merged: a copy of the kept merge of that defaults list, else Hydra's (kept)."""
    kept = next((k for k in Kept.compositions.values() if k.defaults.defaults is defaults), None)
    if kept is not None and kept.merged is not None:
        return copy.deepcopy(kept.merged)
    cfg = merge()
    if kept is not None:
        kept.merged = copy.deepcopy(cfg)  # Hydra goes on to change its own (struct, the values, hydra.*)
    return cfg


def saved() -> Callable[[], None]:
    """A function that puts back the names :func:`install` replaces as they are now, and lets go what is kept."""
    defaults_list, merge = loader_impl.create_defaults_list, ConfigLoaderImpl._compose_config_from_defaults_list
    store = ConfigStore.store

    def restore() -> None:
        loader_impl.create_defaults_list = defaults_list  # type: ignore[assignment]
        ConfigLoaderImpl._compose_config_from_defaults_list = merge  # type: ignore[method-assign]
        ConfigStore.store = store  # type: ignore[method-assign]
        Kept.compositions.clear()

    return restore


def sources_fingerprint(repo: Any) -> tuple[Any, ...] | None:
    """What the config sources of ``repo`` hold, as far as a composition reads it: each source's kind and path, a
    config directory's every entry, the store's schemas (how many were stored, and the names it holds); None where
    it cannot be told cheaply (another kind of source, a large directory)."""
    out: list[Any] = []
    for source in repo.get_sources():
        scheme = source.scheme()
        out.append((scheme, source.path))
        if scheme == "file":
            walked = _walk_fingerprint(source.path)
            if walked is None:
                return None
            out.append(walked)
        elif scheme == "structured":
            out.append((Kept.stored, _store_names(ConfigStore.instance().repo)))
        elif scheme != "pkg":  # a package's files do not change while it runs
            return None
    return tuple(out)


def _walk_fingerprint(root: str) -> tuple[Any, ...] | None:
    """Each file and folder below ``root``: path, inode, size, modification and change times (None: too many)."""
    entries: list[tuple[Any, ...]] = []
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in [".", *sorted(files)]:
            path = os.path.join(folder, name)
            try:
                st = os.stat(path)
            except OSError:
                continue
            entries.append((path, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
        if len(entries) > WALK_MAX:
            return None
    return tuple(entries)


def _store_names(repo: dict[str, Any], prefix: str = "") -> tuple[Any, ...]:
    """Every name the config store holds, with its node's identity."""
    names: list[Any] = []
    for name, node in repo.items():
        names.append((prefix + name, id(node)))
        if isinstance(node, dict):
            names.extend(_store_names(node, f"{prefix}{name}/"))
    return tuple(names)
