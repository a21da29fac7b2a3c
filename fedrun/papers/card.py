"""The scorecard as text (``fedrun-report scorecard``): the headline, the claims, the cells, the orders the paper
separates, and the records behind them.

The headline counts the cells run out of the cells the paper publishes for the target's presets, and the claims
reproduced (:mod:`fedrun.papers.claims`). A target whose round budget is unknown (``Target.budget_unknown``: the
paper gives none) has its cells and claims marked "budget unknown", not judged, and lists each cell's readings from
the recorded runs: the run's last round and the rounds its record keeps, beside the preset's budget.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import yaml

from fedrun.config import location
from fedrun.papers import robust_claims
from fedrun.papers.claims import RESOLVE_SE, claims
from fedrun.papers.scorecard import TOLERANCE, load_evidence, published
from fedrun.papers.setups import mixed, record_keys, record_lines
from fedrun.papers.targets import Target

UNKNOWN = "budget unknown"


def _num(v: Any, fmt: str = "{:.2f}") -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else fmt.format(v)


def _yes(v: Any, unknown: bool = False) -> str:
    if unknown:
        return UNKNOWN
    return "-" if v is None else ("yes" if v else "no")


def headline(card: pd.DataFrame, claim: pd.DataFrame, target: Target) -> list[str]:
    """Cells run of cells published (per table), cells within the tolerance, claims reproduced of those judged."""
    pub = published(target)
    ran = card[card["n"] > 0]
    per_table = ", ".join(
        f"Table {t}: {int((ran['table'] == t).sum())} of {n}"
        for t, n in pub.groupby("table", sort=False).size().items()
    )
    if pub.empty:  # (pFedMe, Robust: the cells are named, their published values are not shipped)
        out = [
            f"cells run: {len(ran)}; not compared: fedrun ships none of the published values of {target.paper}'s"
            f" cells (fedrun/papers/cells/: their value column is empty; {target.note})"
        ]
        if len(claim):  # the papers' claims in words (fedrun/papers/robust_claims.py)
            judged = claim[claim["resolved"].astype(bool)]
            held = int(judged["reproduced"].astype(bool).sum())
            line = f"the papers' stated claims that hold: {held} of {len(judged)} resolved"
            if len(judged) < len(claim):
                rest = len(claim) - len(judged)
                line += f"; {rest} not resolved (within {RESOLVE_SE:g} standard errors of its bound)"
            out.append(line)
        return out
    text = f"cells run: {len(ran)} of {len(pub)} published ({per_table})"
    if target.budget_unknown:
        return [f"{text}; {UNKNOWN}: not judged ({target.budget_unknown})"]
    within = int(ran["reproduced"].sum())
    text += f"; within {TOLERANCE} points of the paper or our seed spread: {within} of {len(ran)}"
    return [text, claims_line(claim)]


def claims_line(claim: pd.DataFrame) -> str:
    """Claims reproduced of those resolved, and how many are not resolved or share no seed."""
    shared = claim[claim["seeds"].map(len) > 0]
    resolved = shared[shared["resolved"].astype(bool)]
    line = (
        f"claims reproduced: {int(resolved['reproduced'].astype(bool).sum())} of {len(resolved)} resolved (the"
        f" proposed method's gain over a baseline, on the seeds both rows ran: beyond {RESOLVE_SE:g} standard errors,"
        f" of the paper's sign and within {TOLERANCE} points of its gain)"
    )
    if len(resolved) < len(shared):
        line += f"; {len(shared) - len(resolved)} not resolved (within {RESOLVE_SE:g} standard errors of zero)"
    if len(shared) < len(claim):
        line += f"; {len(claim) - len(shared)} not judged (no seed run by both rows)"
    return line


def _claim_verdict(c: pd.Series, unknown: bool) -> str:
    if unknown:
        return UNKNOWN
    if c["seeds"] and not c["resolved"]:
        return c["note"]
    return _yes(c["reproduced"])


def claims_table(claim: pd.DataFrame, unknown: bool) -> str:
    """The claims: the paper's gain, ours ± its standard error over the shared seeds, the seeds, the verdict."""
    rows = [
        {
            "table": c["table"],
            "column": c["column"],
            "claim": c["claim"],
            "paper gain": _num(c["paper_gain"], "{:+.2f}"),
            "our gain ± s.e.": _num(c["ours_gain"], "{:+.2f}")
            + (f" ± {c['ours_se']:.2f}" if not math.isnan(c["ours_se"]) else ""),
            "seeds": ", ".join(map(str, c["seeds"])) or c["note"],
            "reproduced": _claim_verdict(c, unknown),
        }
        for _, c in claim.iterrows()
    ]
    return pd.DataFrame(rows).to_markdown(index=False, disable_numparse=True)


def cells_table(card: pd.DataFrame, keys: dict[str, int], unknown: bool) -> str:
    rows = []
    for _, c in card.iterrows():
        ours = _num(c["ours"]) + (f" ± {c['ours_std']:.2f}" if not math.isnan(c["ours_std"]) else "")
        rows.append(
            {
                "table": c["table"],
                "row": c["row"],
                "column": c["column"],
                "ours": ours if c["n"] else c["note"],
                "paper": _num(c["paper"]),
                "difference": _num(c["difference"], "{:+.2f}") if c["n"] else "-",
                "within": _yes(c["reproduced"], unknown) if c["n"] and not pd.isna(c["paper"]) else "-",
                "seeds": ", ".join(map(str, sorted(c["values"]))) or "-",
                "rec": ", ".join(str(keys[r]) for r in c["records"] if r in keys) or "-",
            }
        )
    return pd.DataFrame(rows).to_markdown(index=False, disable_numparse=True)


def orders_table(order: pd.DataFrame) -> str:
    rows = [
        {
            "table": o["table"],
            "column": o["column"],
            "pairs held": f"{o['held']} of {o['pairs']}",
            "swapped": o["swapped"] or "-",
            "no shared seed": o["not compared"] or "-",
        }
        for _, o in order.iterrows()
    ]
    return pd.DataFrame(rows).to_markdown(index=False, disable_numparse=True)


def preset_rounds(preset: str) -> Any:
    """``fl.rounds`` as the preset file sets it (None when it leaves the default)."""
    cfg = yaml.safe_load((location.CONF_DIR / "experiment" / f"{preset}.yaml").read_text(encoding="utf-8"))
    return (cfg.get("fl") or {}).get("rounds")


def readings(card: pd.DataFrame, records: list[dict[str, Any]], target: Target) -> list[str]:
    """Per cell of a target with an unknown budget: the paper's value, ours at the run's last round and at each
    round the record keeps, and the preset's budget (read there, or named as missing from the record)."""
    by_id = {r["id"]: r for r in records}
    budgets = {p: preset_rounds(p) for p in target.presets}
    out = []
    for _, c in card[card["n"] > 0].iterrows():
        for rid in c["records"]:
            rec = by_id.get(rid)
            if rec is None:
                continue
            cell = next(x for x in rec["cells"] if (x["row"], x["column"]) == (c["row"], c["column"]))
            budget = budgets.get(rec["preset"])
            for seed, value in cell["values"].items():
                kept = {int(r): v for r, v in (cell.get("readings", {}).get(seed) or {}).items()}
                text = [f"round {rec.get('rounds', '?')} (the run's last) {_num(value)}"]
                text += [f"round {r} {_num(v)}" for r, v in sorted(kept.items())]
                at = kept.get(int(budget)) if budget is not None else None
                if budget is not None and at is None and budget != rec.get("rounds"):
                    text.append(
                        f"round {budget} (the preset's budget): not in the record (it keeps no per-round curve)"
                    )
                out.append(
                    f"- {c['row']}, {c['column']}, seed {seed}: paper {_num(c['paper'])}; ours " + ", ".join(text)
                )
    return out


def render(card: pd.DataFrame, order: pd.DataFrame, target: Target, records: list[dict[str, Any]] | None = None) -> str:
    """The card as Markdown: headline, claims, cells, orders, records (``records``: the evidence records; default
    the shipped ones)."""
    head = f"Scorecard: {target.name} ({target.paper})"
    if card.empty:
        return f"{head}\n\nno run of these runs is a cell of {target.name}'s tables"
    records = load_evidence() if records is None else records
    unknown = bool(target.budget_unknown)
    # the robust-FL papers' claims are stated in words, not gains of a published table (papers/robust_claims.py)
    claim = robust_claims.judge(card) if target.paper == robust_claims.PAPER else claims(card, target.paper)
    text = [head, "", *headline(card, claim, target), ""]
    if not claim.empty:
        text += ["Claims:", "", claims_table(claim, unknown), ""]
    keys = record_keys(card, records)
    text += ["Cells:", "", cells_table(card, keys, unknown), ""]
    if not order.empty:
        text += [f"Orders (only pairs the paper separates by more than {TOLERANCE} points; same seeds):", ""]
        text += [orders_table(order), ""]
    if unknown:
        text += [f"{UNKNOWN}: {target.budget_unknown}. Readings:", *readings(card, records, target), ""]
    if keys:
        text += ["Records:", *record_lines(card, records), *mixed(card, records)]
    return "\n".join(text).rstrip()


def render_card(card: pd.DataFrame, order: pd.DataFrame, target: Target) -> str:
    """:func:`render` with the shipped evidence records."""
    return render(card, order, target)
