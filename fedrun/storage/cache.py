"""The on-disk cache under ``cache_dir`` (partitions, ``engine-auto.json``): usable or refused up front, and
never the reason a run fails.

``cache_dir`` must be a directory or a path where one can be made: a file, a device (``/dev/null``) or a path
through a file is bad input (``ConfigError`` naming ``cache_dir``: exit 2). A cache that cannot be written (a
read-only directory, ``/proc``, a full disk) is one warning line on stderr, once per directory; the run goes on
and recomputes what it would have cached. Cache files are written atomically (temp file, rename) and a failed
write leaves no temp file.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from fedrun.core.errors import ConfigError
from fedrun.storage.atomic import atomic_write_with

_WARNED: set[str] = set()


def cache_file(cache_dir: str | None, name: str) -> Path | None:
    """``<cache_dir>/<name>``, the directory made when missing; None without a cache_dir or when it cannot be
    made for lack of rights (warned). Raises ConfigError when ``cache_dir`` is not a directory at all."""
    if not cache_dir:
        return None
    d = Path(cache_dir)
    if d.exists() and not d.is_dir():
        raise ConfigError("cache_dir", f"{d} is not a directory; valid: a directory (made when missing), or null")
    try:
        d.mkdir(parents=True, exist_ok=True)
    except (NotADirectoryError, FileExistsError):
        raise ConfigError("cache_dir", f"{d} is under a file, not a directory; valid: a directory, or null") from None
    except OSError as e:
        warn_unwritable(d, e)
        return None
    return d / name


def warn_unwritable(path: Path, e: OSError) -> None:
    """One line on stderr (once per directory): the cache is not written, the run goes on."""
    key = str(path if path.is_dir() or not path.suffix else path.parent)
    if key in _WARNED:
        return
    _WARNED.add(key)
    why = e.strerror or str(e)
    print(f"fedrun: warning: cache_dir: cannot write {path} ({why}); running without caching it", file=sys.stderr)


def write_cache(path: Path, write: Callable[[Path], object]) -> bool:
    """Write a cache file atomically with ``write(temp_path)`` (:func:`~fedrun.storage.atomic.atomic_write_with`;
    the temp file keeps ``path``'s extension); False (warned, temp removed) when it fails."""
    try:
        atomic_write_with(path, write, ext=path.suffix)
        return True
    except OSError as e:
        warn_unwritable(path, e)
        return False
