"""The papers' claims on a scorecard: the proposed method's gain over each baseline, and the orders the paper
separates, each compared with ours on the seeds both sides ran.

A paper's claim is a gain, not a cell: in a column, the proposed method's row minus a baseline's row (for a
metric where lower is better, the baseline's minus the proposed's). Which rows are proposed (:data:`PROPOSED`):
FedCos's ``FedCos(mu)`` and ``B+FedCos(mu)`` rows (a composite is claimed over its own ``B`` only), FedLAW's
``FedLAW*`` and ``Adaptive GWS*`` rows (Table 10: over the FedAvg row of the same global lr), FedGAM's
``FedGAM*``, FedSAM's ``FedSAM`` and ``MoFedSAM``; FedIMA proposes IMA, so its claim is a row's ``... +IMA``
column over the same row's column without it. Our gain is the mean over the seeds both cells ran of the per-seed
difference (a 3-seed mean is never set against a single seed), with its standard error over those seeds (the
sample std / sqrt(n)). The gain is *resolved* when its magnitude exceeds twice its standard error
(:data:`RESOLVE_SE`); one seed has no spread, so its gain never is. A claim is *reproduced* when our gain is
resolved, has the paper's sign and is within :data:`TOLERANCE` points of the paper's gain; *not reproduced* when
it is resolved and misses either; and *not resolved* otherwise, with the number of seeds that would resolve it
at the measured spread (:func:`seeds_to_resolve`).

The order check compares only the pairs of rows that the paper separates by more than the tolerance, on the
seeds both rows ran: a swap of two rows 0.15 apart in the paper is not a failure.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pandas as pd

from fedrun.papers.scorecard import LOWER_IS_BETTER, TOLERANCE

PROPOSED = {
    "FedCos": r"FedCos\(",
    "FedLAW": r"^(FedLAW|Adaptive GWS)",
    "FedGAM": r"^FedGAM",
    "FedSAM": r"^(Mo)?FedSAM$",
}
RESOLVE_SE = 2.0  # a gain is resolved when |gain| > RESOLVE_SE x its standard error over the shared seeds
IMA = " +IMA"  # FedIMA: a column of the rows run with IMA
NOT_A_METHOD = re.compile(r"\(γ\)")  # FedLAW's rows of the learned gamma, not accuracies
SAME_LR = re.compile(r" \(global lr [^)]*\)$")  # FedLAW Table 10: a row's global learning rate
CLAIM_COLUMNS = [
    *["table", "column", "claim", "paper_gain", "ours_gain", "ours_std", "ours_se", "seeds", "resolved"],
    *["seeds_needed", "reproduced", "note"],
]
ORDER_COLUMNS = ["table", "column", "pairs", "held", "swapped", "not compared", "holds"]


def is_proposed(paper: str, row: str) -> bool:
    """Whether ``row`` is a method the paper proposes (FedIMA proposes IMA, a column: no row is)."""
    pattern = PROPOSED.get(paper)
    return bool(pattern and re.search(pattern, row) and not NOT_A_METHOD.search(row))


def baselines(paper: str, proposed: str, rows: list[str]) -> list[str]:
    """The rows a proposed row is claimed over: ``B+FedCos(mu)`` over ``B``; FedLAW Table 10's rows over the
    baseline of the same global lr; otherwise every row the paper does not propose."""
    others = [r for r in rows if not is_proposed(paper, r) and not NOT_A_METHOD.search(r)]
    if "+" in proposed:
        return [r for r in others if r == proposed.split("+")[0]]
    if tail := SAME_LR.search(proposed):
        return [r for r in others if r.endswith(tail.group())]
    return [r for r in others if not SAME_LR.search(r)]


def claim_pairs(paper: str, card: pd.DataFrame) -> list[tuple[int, int]]:
    """(proposed, baseline) pairs of ``card``'s line indices, within one table (and, but for FedIMA, one column)."""
    pairs = []
    if paper == "FedIMA":
        key = {(c["table"], c["row"], c["column"]): i for i, c in card.iterrows()}
        for i, c in card.iterrows():
            if (
                c["column"].endswith(IMA)
                and (b := key.get((c["table"], c["row"], c["column"][: -len(IMA)]))) is not None
            ):
                pairs.append((int(i), int(b)))
        return pairs
    for _, grp in card.groupby(["table", "column"], sort=False):
        rows = dict(zip(grp["row"], grp.index, strict=True))
        for row, i in rows.items():
            if is_proposed(paper, row):
                pairs += [(int(i), int(rows[b])) for b in baselines(paper, row, list(rows))]
    return pairs


def paired_gain(better: dict[int, float], worse: dict[int, float], low: bool) -> tuple[float, float, list[int]]:
    """(mean, sample std, seeds) of ``better - worse`` (``worse - better`` when lower is better) over the seeds
    both ran; NaN and no seeds when they share none."""
    seeds = sorted(set(better) & set(worse))
    if not seeds:
        return float("nan"), float("nan"), []
    d = np.array([(worse[s] - better[s]) if low else (better[s] - worse[s]) for s in seeds])
    return float(d.mean()), float(d.std(ddof=1)) if len(d) > 1 else float("nan"), seeds


def standard_error(std: float, n: int) -> float:
    """The standard error of a mean of ``n`` seeds of sample std ``std`` (NaN for one seed: no spread)."""
    return std / math.sqrt(n) if n > 1 and not math.isnan(std) else float("nan")


def is_resolved(gain: float, std: float, n: int) -> bool:
    """|gain| > :data:`RESOLVE_SE` standard errors over ``n`` seeds (never for one seed: its spread is unknown)."""
    se = standard_error(std, n)
    return not math.isnan(se) and abs(gain) > RESOLVE_SE * se


def seeds_to_resolve(gain: float, std: float) -> int | None:
    """The fewest seeds n at which a gain of this size resolves at this seed std: |gain| > 2 std / sqrt(n), so
    n = floor((2 std / |gain|)^2) + 1 (at least 2, a spread needs two seeds); None when no n does (a zero gain)
    or the spread is unknown (NaN std: one seed)."""
    if math.isnan(std) or math.isnan(gain):
        return None
    if gain == 0:
        return None
    return max(2, math.floor((RESOLVE_SE * std / abs(gain)) ** 2) + 1)


def gain_holds(ours: float, paper: float) -> bool:
    """Our gain has the paper's sign and is within the tolerance of the paper's gain (for a resolved gain)."""
    if math.copysign(1, ours) != math.copysign(1, paper) and ours and paper:
        return False
    return bool(abs(ours - paper) <= TOLERANCE + 1e-9)


def verdict(gain: float, std: float, seeds: list[int], paper: float) -> tuple[bool, bool | None, int | None]:
    """(resolved, reproduced, seeds needed): reproduced is None where the seeds cannot tell (none shared, or the
    gain within :data:`RESOLVE_SE` standard errors); seeds needed is set for an unresolved gain with a spread."""
    if not seeds:
        return False, None, None
    if not is_resolved(gain, std, len(seeds)):
        return False, None, seeds_to_resolve(gain, std)
    return True, gain_holds(gain, paper), None


def unresolved_text(n: int, needed: int | None, std: float) -> str:
    """``not resolved (n seeds ...)``: how many seeds ran and how many would resolve the gain at its spread."""
    ran = f"{n} seed" + ("s" if n != 1 else "")
    if math.isnan(std):
        return f"not resolved ({ran}: spread unknown)"
    if needed is None:
        return f"not resolved ({ran}: a zero gain resolves at no number of seeds)"
    return f"not resolved ({ran}; {needed} would resolve it at this spread)"


def _label(paper: str, p: pd.Series, b: pd.Series) -> str:
    if paper == "FedIMA":
        return f"{p['row']}{IMA} over {b['row']}"
    return f"{p['row']} over {b['row']}"


def claims(card: pd.DataFrame, paper: str) -> pd.DataFrame:
    """One line per claim both of whose cells we ran: the paper's gain, ours (mean, seed std and standard error
    over the shared seeds), those seeds, whether our gain is resolved (and if not, the seeds that would resolve
    it), and whether the claim is reproduced (None where the seeds cannot tell: no shared seed, or not resolved)."""
    have = card[(card["n"] > 0) & card["paper"].notna()] if not card.empty else card
    out: list[dict[str, Any]] = []
    for i, j in claim_pairs(paper, have):
        p, b = have.loc[i], have.loc[j]
        low = p["metric"] in LOWER_IS_BETTER
        paper_gain = (b["paper"] - p["paper"]) if low else (p["paper"] - b["paper"])
        gain, std, seeds = paired_gain(p["values"], b["values"], low)
        resolved, ok, needed = verdict(gain, std, seeds, paper_gain)
        out.append(
            {
                "table": p["table"],
                "column": p["column"] if paper != "FedIMA" else b["column"],
                "claim": _label(paper, p, b),
                "paper_gain": paper_gain,
                "ours_gain": gain,
                "ours_std": std,
                "ours_se": standard_error(std, len(seeds)),
                "seeds": seeds,
                "resolved": resolved,
                "seeds_needed": needed,
                "reproduced": ok,
                "note": _note(seeds, resolved, needed, std, p, b),
            }
        )
    return pd.DataFrame(out, columns=CLAIM_COLUMNS)


def _note(seeds: list[int], resolved: bool, needed: int | None, std: float, p: pd.Series, b: pd.Series) -> str:
    if not seeds:
        return f"no seed run by both ({_seeds(p)} against {_seeds(b)})"
    return "" if resolved else unresolved_text(len(seeds), needed, std)


def _seeds(line: pd.Series) -> str:
    return "seeds " + ", ".join(map(str, sorted(line["values"])))


def orders(card: pd.DataFrame) -> pd.DataFrame:
    """Per (table, column) with two or more rows of ours: the pairs the paper separates by more than the tolerance,
    how many of them hold in ours on the seeds both rows ran, the swapped ones, those with no shared seed, and
    whether every compared pair holds."""
    out = []
    have = card[(card["n"] > 0) & card["paper"].notna()] if not card.empty else card
    for (table, column), grp in have.groupby(["table", "column"], sort=False):
        if len(grp) < 2:
            continue
        low = grp["metric"].iloc[0] in LOWER_IS_BETTER
        grp = grp.sort_values("paper", ascending=low, kind="stable")
        lines = list(grp.itertuples(index=False))
        pairs, held, swapped, loose = 0, 0, [], []
        for k, a in enumerate(lines):
            for b in lines[k + 1 :]:
                sep = (b.paper - a.paper) if low else (a.paper - b.paper)
                if sep <= TOLERANCE + 1e-9:
                    continue
                gain, _, seeds = paired_gain(a.values, b.values, low)
                if not seeds:
                    loose.append(f"{a.row} > {b.row}")
                    continue
                pairs += 1
                if gain > 0:
                    held += 1
                else:
                    swapped.append(f"{a.row} > {b.row} (paper {sep:+.2f}, ours {gain:+.2f})")
        line = {"table": table, "column": column, "pairs": pairs, "held": held, "swapped": "; ".join(swapped)}
        out.append({**line, "not compared": "; ".join(loose), "holds": held == pairs})
    return pd.DataFrame(out, columns=ORDER_COLUMNS)
