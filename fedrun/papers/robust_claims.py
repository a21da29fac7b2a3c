"""The robust-FL papers' stated claims, checked on fedrun's runs of the target ``robust-fmnist`` (docs/robustness.md).

No table of these papers' Fashion-MNIST values could be read as text (FLTrust, Cao et al. NDSS 2021; Fang et al.,
USENIX Security 2020; ByzFL's and Blades' benchmarks publish plots): so their cells (fedrun/papers/cells/robust.csv)
carry no published value, and what is judged is what the papers *say* their tables show, each claim one line here:
a cell of ours (a defence's row, an attack's column) against a reference cell, on the seeds both ran.

- ``within``: our cell is at most ``points`` below the reference ("keeps accuracy close to no attack");
- ``drop``: our cell is at least ``points`` below the reference ("the attack substantially lowers the accuracy").

The thresholds are fedrun's reading of "close" (5 points) and "substantially" (10 points; 5 for ALIE's smaller
perturbation), fixed before any run, the same for every claim of a kind. As for the papers' gains
(:mod:`fedrun.papers.claims`), our margin over the threshold (the mean over the shared seeds of the per-seed margin)
must be *resolved*, beyond twice its standard error: the claim then holds or fails by its sign, and is otherwise
*not resolved*, with the seeds that would resolve it at the measured spread.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from fedrun.papers.claims import CLAIM_COLUMNS, is_resolved, seeds_to_resolve, standard_error, unresolved_text

PAPER = "Robust"  # fedrun/papers/cells/robust.csv's paper
CLOSE, SUBSTANTIAL = 5.0, 10.0  # points: fedrun's reading of the papers' words
ACC, ASR = "1", "2"  # the tables of the cells: clean accuracy (last-k mean), a backdoor's attack success rate


@dataclass(frozen=True)
class Claim:
    """A paper's claim: cell (``row``, ``column``) of table ``table`` against (``ref_row``, ``ref_column``)."""

    source: str
    row: str
    column: str
    ref_row: str
    ref_column: str
    kind: str  # within | drop
    points: float
    table: str = ACC

    def words(self) -> str:
        what = "at most" if self.kind == "within" else "at least"
        measure = "accuracy" if self.table == ACC else "ASR"
        return (
            f"{self.row} / {self.column}: {measure} {what} {self.points:g} points below {self.ref_row} /"
            f" {self.ref_column} ({self.source})"
        )


def _c(source: str, row: str, column: str, ref: tuple[str, str], kind: str, points: float, table: str = ACC) -> Claim:
    return Claim(source, row, column, ref[0], ref[1], kind, points, table)


BLANCHARD = "Blanchard et al. 2017, Sec. 5: averaging does not tolerate one Gaussian Byzantine worker, Krum does"
YIN = "Yin et al. 2018: median and trimmed mean are robust to arbitrary Byzantine values"
FANG = "Fang et al. 2020, Sec. 5: our attacks substantially increase the error rates of Krum, trimmed mean, median"
FLTRUST = "Cao et al. 2021 (FLTrust), Sec. V: under attacks FLTrust's error rate is close to FedAvg's without attack"
ALIE = "Baruch et al. 2019, Sec. 4: a little is enough to evade Krum and trimmed mean"
SUN = "Sun et al. 2019, Sec. 4: norm bounding (and weak DP) mitigates the backdoor"
CLAIMS = (
    _c(BLANCHARD, "FedAvg", "gaussian", ("FedAvg", "none"), "drop", SUBSTANTIAL),
    _c(BLANCHARD, "Krum", "gaussian", ("Krum", "none"), "within", CLOSE),
    _c(BLANCHARD, "Multi-Krum", "sign_flip", ("Multi-Krum", "none"), "within", CLOSE),
    _c(YIN, "Median", "gaussian", ("Median", "none"), "within", CLOSE),
    _c(YIN, "Trimmed mean", "gaussian", ("Trimmed mean", "none"), "within", CLOSE),
    _c(FANG, "Krum", "fang_krum", ("Krum", "none"), "drop", SUBSTANTIAL),
    _c(FANG, "Trimmed mean", "fang_trmean", ("Trimmed mean", "none"), "drop", SUBSTANTIAL),
    _c(FANG, "Median", "fang_trmean", ("Median", "none"), "drop", SUBSTANTIAL),
    _c(FLTRUST, "FLTrust", "none", ("FedAvg", "none"), "within", CLOSE),
    _c(FLTRUST, "FLTrust", "label_flip", ("FedAvg", "none"), "within", CLOSE),
    _c(FLTRUST, "FLTrust", "gaussian", ("FedAvg", "none"), "within", CLOSE),
    _c(FLTRUST, "FLTrust", "fang_krum", ("FedAvg", "none"), "within", CLOSE),
    _c(FLTRUST, "FLTrust", "fang_trmean", ("FedAvg", "none"), "within", CLOSE),
    _c(ALIE, "Krum", "alie", ("Krum", "none"), "drop", CLOSE),
    _c(ALIE, "Trimmed mean", "alie", ("Trimmed mean", "none"), "drop", CLOSE),
    _c(SUN, "Norm bounding", "backdoor", ("FedAvg", "backdoor"), "drop", SUBSTANTIAL, table=ASR),
)


def _values(card: pd.DataFrame, table: str, row: str, column: str) -> dict[int, float]:
    hit = card[(card["table"] == table) & (card["row"] == row) & (card["column"] == column) & (card["n"] > 0)]
    return dict(hit["values"].iloc[0]) if len(hit) else {}


def judge(card: pd.DataFrame, claims: tuple[Claim, ...] = CLAIMS) -> pd.DataFrame:
    """One line per claim both of whose cells we ran (:data:`~fedrun.papers.claims.CLAIM_COLUMNS`): our mean paired
    difference (cell - reference, points) as the gain, its spread and standard error over the shared seeds, whether
    its margin over the claim's threshold is resolved, and whether the claim holds (None: not resolved)."""
    out: list[dict[str, Any]] = []
    if card.empty:
        return pd.DataFrame(out, columns=CLAIM_COLUMNS)
    for c in claims:
        mine, ref = _values(card, c.table, c.row, c.column), _values(card, c.table, c.ref_row, c.ref_column)
        if not mine or not ref:
            continue
        seeds = sorted(set(mine) & set(ref))
        d = np.array([mine[s] - ref[s] for s in seeds])
        gain = float(d.mean()) if seeds else float("nan")
        std = float(d.std(ddof=1)) if len(d) > 1 else float("nan")
        margin = gain + c.points if c.kind == "within" else -(gain + c.points)  # >= 0: the claim holds
        resolved = bool(seeds) and is_resolved(margin, std, len(seeds))
        needed = None if resolved or not seeds else seeds_to_resolve(margin, std)
        note = "" if resolved else unresolved_text(len(seeds), needed, std) if seeds else "no seed run by both cells"
        out.append(
            {
                "table": c.table,
                "column": c.column,
                "claim": c.words(),
                "paper_gain": float("nan"),  # the papers' values are not shipped: the claim is its bound
                "ours_gain": gain,
                "ours_std": std,
                "ours_se": standard_error(std, len(seeds)),
                "seeds": seeds,
                "resolved": resolved,
                "seeds_needed": needed,
                "reproduced": bool(margin >= 0) if resolved else None,
                "note": note,
            }
        )
    return pd.DataFrame(out, columns=CLAIM_COLUMNS)
