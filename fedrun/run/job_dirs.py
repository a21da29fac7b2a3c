"""Sweep job directories named by what varies and keyed by content.

A job of ``fedrun -m`` runs in ``<hydra.sweep.dir>/<name>``: the overrides that vary across the sweep, then a
short hash of the part of its config that decides the results (:func:`fedrun.config.identity.config_key`), e.g.
``algorithm=fedprox,seed=1-3fa2c1d0``. The hash is the job's identity: a job finds its folder by it
(:func:`find_job_dir`), whatever the rest of the name says, so re-running a sweep with one more seed, method or
value runs only the new jobs (the finished ones are found and skipped, unfinished ones resume) although what
varies, and so the new names, changed; folders of older fedrun (the 12-hex hash alone) are found the same way.
One config never runs twice, however the command spells it. Which keys vary is Hydra's to tell
(fedrun/cli/sweeps.py); naming the folder is not.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from fedrun.storage.rundir import RunDir, UnreadableRunFile

KEY_CHARS = 8  # hex digits of the config's SHA-256 in a job folder's name (a collision is checked, not assumed away)
LEGACY_KEY_CHARS = 12  # job folders of before readable names: the 12-hex hash alone
LABEL_CHARS = 100  # the readable part of a folder name at most (the name stays far below NAME_MAX, 255)
VALUE_CHARS = 40  # one override's ``key=value`` at most in that part
# characters kept as they are in a folder name; any other is %-escaped (its UTF-8 bytes), '/' included
SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-+=,[]()@")


def full_key(raw: dict[str, Any]) -> str:
    """The content key of a job whose resolved config is ``raw``: the hash of its result-deciding part."""
    from fedrun.config.identity import config_key  # torch: only where a job runs

    return config_key(raw)


def job_key(raw: dict[str, Any]) -> str:
    """The short hash that ends the folder name of a job whose resolved config is ``raw``."""
    return full_key(raw)[:KEY_CHARS]


def unresolvable_key(overrides: Iterable[str]) -> str:
    """The directory of a job whose config does not even resolve: keyed by its overrides (it gets error.txt)."""
    blob = json.dumps(list(overrides)).encode()
    return "unresolved-" + hashlib.sha256(blob).hexdigest()[:LEGACY_KEY_CHARS]


def _escape(text: str) -> str:
    """``text`` with every character outside :data:`SAFE` %-escaped (so no ``/``, no space, no shell quote)."""
    return "".join(c if c in SAFE else "".join(f"%{b:02X}" for b in c.encode()) for c in text)


def _cut(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters ending in ``...`` when longer, never inside a %-escape."""
    if len(text) <= limit:
        return text
    head = text[: limit - 3]
    pct = head.rfind("%", len(head) - 2)
    return (head[:pct] if pct >= 0 else head) + "..."


def override_key(line: str) -> str:
    """The key of a ``key=value`` override line, without Hydra's ``+``/``++``/``~`` prefixes."""
    return line.partition("=")[0].lstrip("+~")


def job_label(overrides: Iterable[str], varying: Collection[str]) -> str:
    """The readable part of a job's folder name: its overrides whose key is in ``varying``, in the command's
    order, as ``key=value`` joined by ``,``; quotes dropped, odd characters escaped, each and all cut to length."""
    parts = []
    for line in overrides:
        key, _, value = line.partition("=")
        key = key.lstrip("+~")
        if key not in varying or line.startswith("~"):
            continue
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        parts.append(_cut(_escape(f"{key}={value}"), VALUE_CHARS))
    label = _cut(",".join(parts), LABEL_CHARS)
    return "%2E" + label[1:] if label.startswith(".") else label  # never a hidden folder


def folder_name(label: str, key: str) -> str:
    """``<label>-<key>``, or the key alone when nothing varies."""
    return f"{label}-{key}" if label else key


def _hash_part(name: str) -> str:
    return name.rsplit("-", 1)[-1]


def _saved_key(run_dir: Path) -> str | None:
    """The content key of the run whose config.yaml is in ``run_dir``; None when it has none (a job refused before
    it started) or one that does not read."""
    from fedrun.config.identity import saved_config_key

    try:
        cfg = RunDir(run_dir).read_config()
    except UnreadableRunFile:
        return None
    return saved_config_key(cfg) if cfg is not None else None


def find_job_dir(sweep_dir: Path, key: str) -> str | None:
    """The folder of ``sweep_dir`` that holds the job of content key ``key`` (the full hash), whatever its readable
    part: one whose name ends in a prefix of the key of at least :data:`KEY_CHARS` hex digits (the 12-hex names of
    older fedrun included), and whose config.yaml, when it has one, has that key. None when there is none."""
    try:
        names = sorted(os.listdir(sweep_dir))
    except OSError:
        return None
    for name in names:
        part = _hash_part(name)
        if len(part) < KEY_CHARS or not key.startswith(part.lower()) or not (sweep_dir / name).is_dir():
            continue
        saved = _saved_key(sweep_dir / name)
        if saved is None or saved == key:
            return name
    return None


def new_folder_name(sweep_dir: Path | None, label: str, key: str) -> str:
    """A name for a new job folder: ``<label>-<key[:8]>``, or with 4 more hex digits at a time while another
    config's folder ends in the same short hash (a collision is checked, not assumed away)."""
    taken = {_hash_part(name).lower() for name in _listdir(sweep_dir)} if sweep_dir is not None else set()
    n = KEY_CHARS
    while key[:n] in taken and n < len(key):
        n += 4
    return folder_name(label, key[:n])


def _listdir(folder: Path) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []


def job_dir_name(
    task: DictConfig, overrides: Iterable[str], varying: Collection[str] = (), sweep_dir: Path | None = None
) -> str:
    """The directory name of the job composed as ``task`` (no ``hydra`` node) from ``overrides``, in a sweep where
    the keys ``varying`` take more than one value: the folder of ``sweep_dir`` that already holds this config
    (:func:`find_job_dir`), else a new name (the varying overrides, then the short hash)."""
    overrides = list(overrides)
    try:
        key = full_key(OmegaConf.to_container(task, resolve=True))  # type: ignore[arg-type]
    except Exception:  # noqa: BLE001 - validation names the bad field in this job's error.txt
        return unresolvable_key(overrides)
    found = find_job_dir(sweep_dir, key) if sweep_dir is not None else None
    return found or new_folder_name(sweep_dir, job_label(overrides, varying), key)
