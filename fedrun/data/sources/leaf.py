"""LEAF's json format (Caldas et al. 2018), shared by Shakespeare and FEMNIST:
``{"users": [...], "num_samples": [...], "user_data": {user: {"x": [...], "y": [...]}}}`` per file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fedrun.errors import DataError


def read_leaf_users(folder: Path) -> list[tuple[str, list[Any], list[Any]]]:
    """(user, x, y) for every user of every ``*.json`` in ``folder`` (files sorted, users in file order)."""
    files = sorted(folder.glob("*.json"))
    if not files:
        raise DataError(f"{folder}: no LEAF .json files; generate them with LEAF's preprocess.sh")
    out = []
    for f in files:
        try:
            blob = json.loads(f.read_text(encoding="utf-8"))
            for u in blob["users"]:
                x, y = blob["user_data"][u]["x"], blob["user_data"][u]["y"]
                if len(x) != len(y):
                    raise ValueError(f"user {u} has {len(x)} inputs but {len(y)} targets")
                out.append((u, x, y))
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise DataError(f"{f}: not a LEAF json file ({e}); regenerate it with LEAF's preprocess.sh") from None
    return out
