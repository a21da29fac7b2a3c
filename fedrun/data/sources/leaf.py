"""LEAF's json format (Caldas et al. 2018), shared by Shakespeare and FEMNIST:
``{"users": [...], "num_samples": [...], "user_data": {user: {"x": [...], "y": [...]}}}`` per file.

Every file is checked for that shape before use: ``users`` a list of names each found in ``user_data``, ``x`` and
``y`` lists of the same length, each ``x`` a string, a number or a flat list of numbers (a Shakespeare window,
a FEMNIST image), each ``y`` a string or a number (both strings for text, ``text=True``: Shakespeare). Anything
else (other types, deeper nesting, a json nested too deeply to parse, a lone surrogate such as ``"\\ud800"``, which
json accepts but is no Unicode text) is one DataError naming the file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedrun.core.errors import DataError

LEAF_SEQ_LEN = 80  # LEAF's Shakespeare: 80 characters in, the next one out


@dataclass(frozen=True)
class LeafUser:
    """One user's samples and the file they came from (to name it in later errors)."""

    file: Path
    user: str
    x: list[Any]
    y: list[Any]


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _check_x(v: Any) -> bool:
    return isinstance(v, str) or _number(v) or (isinstance(v, list) and all(_number(e) for e in v))


def _lone_surrogate(values: list[Any]) -> int | None:
    """The index of the first string in ``values`` holding a lone surrogate (not encodable text), or None."""
    try:
        "".join(v for v in values if isinstance(v, str)).encode("utf-8")
    except UnicodeEncodeError:
        return next(i for i, v in enumerate(values) if isinstance(v, str) and not _encodable(v))
    return None


def _encodable(v: str) -> bool:
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _users(blob: Any, text: bool = False) -> list[tuple[str, list[Any], list[Any]]]:
    """(user, x, y) of one parsed file (``text``: every x and y a string); ValueError saying what is wrong with its
    shape."""
    if not isinstance(blob, dict):
        raise ValueError(f"the top level is a {type(blob).__name__}, not an object")
    users, data = blob.get("users"), blob.get("user_data")
    if not isinstance(users, list) or not isinstance(data, dict):
        raise ValueError("'users' must be a list and 'user_data' an object")
    out = []
    for u in users:
        if not isinstance(u, str):
            raise ValueError(f"user name {u!r} is not a string")
        if not _encodable(u):
            raise ValueError(f"user name {u!r} holds a lone surrogate (not Unicode text)")
        entry = data.get(u)
        if not isinstance(entry, dict) or not isinstance(entry.get("x"), list) or not isinstance(entry.get("y"), list):
            raise ValueError(f"user {u}: user_data must hold lists 'x' and 'y'")
        x, y = entry["x"], entry["y"]
        if len(x) != len(y):
            raise ValueError(f"user {u} has {len(x)} inputs but {len(y)} targets")
        bad_x = next((i for i, v in enumerate(x) if not _check_x(v)), None)
        if bad_x is not None:
            raise ValueError(f"user {u}: x[{bad_x}] is not a string, number or flat list of numbers")
        bad_y = next((i for i, v in enumerate(y) if not (isinstance(v, str) or _number(v))), None)
        if bad_y is not None:
            raise ValueError(f"user {u}: y[{bad_y}] is not a string or number")
        for name, values in (("x", x), ("y", y)):
            if text:
                bad = next((i for i, v in enumerate(values) if not isinstance(v, str)), None)
                if bad is not None:
                    raise ValueError(
                        f"user {u}: {name}[{bad}] is a {type(values[bad]).__name__}, not a string (the data is text)"
                    )
            bad = _lone_surrogate(values)
            if bad is not None:
                raise ValueError(f"user {u}: {name}[{bad}] holds a lone surrogate (not Unicode text)")
        out.append((u, x, y))
    return out


def read_leaf_files(folder: Path, text: bool = False) -> list[LeafUser]:
    """Every user of every ``*.json`` in ``folder`` (files sorted, users in file order), with its file; ``text``:
    every x and y must be a string."""
    files = sorted(folder.glob("*.json"))
    if not files:
        raise DataError(f"{folder}: no LEAF .json files; generate them with LEAF's preprocess.sh")
    out = []
    for f in files:
        try:
            blob = json.loads(f.read_text(encoding="utf-8"))
            out += [LeafUser(f, u, x, y) for u, x, y in _users(blob, text)]
        except RecursionError:
            raise DataError(f"{f}: not a LEAF json file (nested too deeply to parse)") from None
        except (OSError, ValueError) as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            raise DataError(f"{f}: not a LEAF json file ({e}); regenerate it with LEAF's preprocess.sh") from None
    return out


def read_leaf_users(folder: Path, text: bool = False) -> list[tuple[str, list[Any], list[Any]]]:
    """(user, x, y) for every user of every ``*.json`` in ``folder`` (files sorted, users in file order); ``text``:
    every x and y must be a string."""
    return [(u.user, u.x, u.y) for u in read_leaf_files(folder, text)]
