"""What the evidence records behind a scorecard ran: each record's commit, note and setup, and the columns whose
records ran different setups.

A record's ``setup`` ({fact: value}) says how its runs differ from the preset as it is now (e.g. ``"test images":
"9,900 (proxy.per_class=10 kept 100 aside)"``); a fact a record does not state is the preset's now. A column is
*mixed* when its records differ in a fact, and so is a table whose columns do: the method is the only thing a
claim or an order should see change.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

NOW = "as the preset now"


def used_records(card: pd.DataFrame, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records whose runs are on ``card``, in the order the card first names them."""
    ids = list(dict.fromkeys(r for recs in card.get("records", []) for r in recs))
    by_id = {r["id"]: r for r in records}
    return [by_id[i] for i in ids if i in by_id]


def _differences(recs: list[dict[str, Any]], keys: dict[str, int]) -> list[str]:
    """``fact: value [1], value [2, 3]`` for each fact the records do not agree on."""
    facts = list(dict.fromkeys(f for r in recs for f in r.get("setup", {})))
    out = []
    for fact in facts:
        by_value: dict[str, list[int]] = {}
        for r in recs:
            by_value.setdefault(str(r.get("setup", {}).get(fact, NOW)), []).append(keys[r["id"]])
        if len(by_value) > 1:
            out.append(f"{fact}: " + ", ".join(f"{v} [{', '.join(map(str, k))}]" for v, k in by_value.items()))
    return out


def mixed(card: pd.DataFrame, records: list[dict[str, Any]]) -> list[str]:
    """One line per column (then per table, across its columns) whose records ran different setups."""
    used = used_records(card, records)
    keys = {r["id"]: k for k, r in enumerate(used, 1)}
    by_id = {r["id"]: r for r in used}
    out = []
    ran = card[card["records"].map(len) > 0] if not card.empty else card
    for by in (["table", "column"], ["table"]):
        if ran.empty:
            break
        for name, grp in ran.groupby(by, sort=False):
            if by == ["table"] and grp["column"].nunique() < 2:
                continue
            recs = [by_id[i] for i in dict.fromkeys(r for rs in grp["records"] for r in rs) if i in by_id]
            diffs = _differences(recs, keys)
            if diffs:
                where = f"Table {name[0]}, {name[1]}" if len(by) == 2 else f"Table {name[0]} across its columns"
                out.append(f"mixed setups: {where}: " + "; ".join(diffs))
    return out


def record_lines(card: pd.DataFrame, records: list[dict[str, Any]]) -> list[str]:
    """``[k] id: commit ...; note ...; setup ...`` for each record on the card (k: the card's ``rec`` column)."""
    out = []
    for k, r in enumerate(used_records(card, records), 1):
        parts = [f"commit {r['commit']}"]
        if r.get("commit_note"):
            parts.append(r["commit_note"])
        if r.get("note"):
            parts.append(r["note"])
        if r.get("setup"):
            parts.append("differs from the preset now: " + "; ".join(f"{f}: {v}" for f, v in r["setup"].items()))
        out.append(f"[{k}] {r['id']}: " + "; ".join(parts))
    return out


def record_keys(card: pd.DataFrame, records: list[dict[str, Any]]) -> dict[str, int]:
    """Record id -> its number on the card."""
    return {r["id"]: k for k, r in enumerate(used_records(card, records), 1)}
