"""The user's modules of a config's ``imports`` (``[mypkg.algo]``): imported only when the current command named
them itself.

A config's ``imports`` is a record of what the run needed; what is imported is what the command line names
(``fedrun ... imports=[mypkg.algo]``, fedrun/cli/compose_checks.py :func:`command_imports`). A run dir that
someone else wrote (``fedrun resume=DIR``, ``fedrun-report landscape DIR``) or a config file therefore never
runs code. The current directory is never added to ``sys.path``: a named module that is not on ``sys.path`` is
looked up there for that one name (its top-level package), as ``python -m`` would find it.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import re
import sys
from collections.abc import Collection
from typing import Any

from fedrun.core.errors import ConfigError

MODULE_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*\Z")


def checked_names(modules: Any) -> list[str]:
    """The module names of a config's ``imports`` value; ConfigError naming the entry that is not one."""
    if not modules:
        return []
    if not isinstance(modules, list):
        raise ConfigError("imports", f"expected a list of module names, got {modules!r}")
    for i, name in enumerate(modules):
        if not isinstance(name, str) or not MODULE_NAME.match(name):
            raise ConfigError(f"imports[{i}]", f"{name!r} is not a module name (dotted, like mypkg.algo)")
    return list(modules)


def load_imports(modules: Any, named: Collection[str]) -> list[str]:
    """Import each module of ``modules`` (a config's ``imports``) that is in ``named`` (the modules the current
    command named itself), so that the components they register exist before validation; return the others,
    which are not imported (a config file or a run dir never runs code)."""
    skipped = []
    for i, name in enumerate(checked_names(modules)):
        if name not in named:
            skipped.append(name)
            continue
        try:
            _import_named(name)
        except Exception as e:  # noqa: BLE001 - the user's module: name it and why, in one line
            why = str(e).splitlines()[0] if str(e) else ""
            raise ConfigError(f"imports[{i}]", f"cannot import {name!r}: {type(e).__name__}: {why}") from None
    return skipped


def _import_named(name: str) -> None:
    """Import ``name`` from ``sys.path``, or, when its top-level package is on neither ``sys.path`` nor already
    imported, that package from the current directory alone (``sys.path`` is left as it is)."""
    top = name.partition(".")[0]
    if top not in sys.modules and importlib.util.find_spec(top) is None:
        spec = importlib.machinery.PathFinder.find_spec(top, [os.getcwd()])
        if spec is not None and spec.loader is not None:
            module = importlib.util.module_from_spec(spec)
            sys.modules[top] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                del sys.modules[top]
                raise
    importlib.import_module(name)


def not_imported_hint(skipped: list[str]) -> str:
    """What a refusal adds when the config named modules that were not imported."""
    names = ",".join(skipped)
    return (
        f" (the config's imports [{names}] were not imported: a config file or run dir never runs code; if you"
        f" trust them, name them on the command line: imports=[{names}])"
    )
