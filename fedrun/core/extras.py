"""Optional extras (``pip install 'fedrun[<extra>]'``): import one, or say in one line how to install it.

Every layer may call :func:`require_extra` (this module imports nothing of fedrun's but its errors): the Ray
engine, the trackers, the Hydra plugins a sweeper or launcher preset needs (fedrun/cli/main.py).
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from fedrun.core.errors import ConfigError


class MissingExtra(ConfigError):
    """An optional package is not installed: names the setting that needs it and the ``pip install`` that adds it."""

    def __init__(self, field: str, module: str, extra: str) -> None:
        self.module = module
        self.extra = extra
        super().__init__(field, f"needs the {module} package, not installed here; pip install 'fedrun[{extra}]'")

    def __reduce__(self) -> tuple[type, tuple[str, str, str]]:  # type: ignore[override]  # picklable, 3 arguments
        return type(self), (self.field, self.module, self.extra)


def has_module(module: str) -> bool:
    """Whether ``module`` can be imported (a module hidden as ``sys.modules[name] = None`` cannot)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or one hidden in sys.modules
        return False


def require_extra(module: str, extra: str, field: str) -> ModuleType:
    """``import module``, or raise :class:`MissingExtra`: one line naming ``field`` (the setting that asked for it,
    e.g. ``hardware.engine``) and ``pip install 'fedrun[extra]'``."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingExtra(field, module, extra) from None
