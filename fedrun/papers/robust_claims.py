"""The robust-FL papers' stated claims, checked on fedrun's runs of the target ``robust-fmnist`` (docs/robustness.md).

No table of these papers' Fashion-MNIST values could be read as text (FLTrust, Cao et al. NDSS 2021; Fang et al.,
USENIX Security 2020; ByzFL's and Blades' benchmarks publish plots): so their cells (fedrun/papers/cells/robust.csv)
carry no published value, and what is judged is what the papers *say* their tables show, each claim one line here:
a cell of ours (a defence's row, an attack's column) against a reference cell, on the seeds both ran.

- ``within``: our cell is at most ``points`` below the reference ("keeps accuracy close to no attack");
- ``drop``: our cell is at least ``points`` below the reference ("the attack substantially lowers the accuracy").

The thresholds are fedrun's reading of "close" (5 points) and "substantially" (10 points; 5 for ALIE's smaller
perturbation), fixed before any run, the same for every claim of a kind; a claim holds when our mean paired
difference over the shared seeds meets it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

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
COLUMNS = ["table", "column", "claim", "paper_gain", "ours_gain", "ours_std", "seeds", "reproduced", "note"]


def _values(card: pd.DataFrame, table: str, row: str, column: str) -> dict[int, float]:
    hit = card[(card["table"] == table) & (card["row"] == row) & (card["column"] == column) & (card["n"] > 0)]
    return dict(hit["values"].iloc[0]) if len(hit) else {}


def judge(card: pd.DataFrame, claims: tuple[Claim, ...] = CLAIMS) -> pd.DataFrame:
    """One line per claim both of whose cells we ran: our mean paired difference (cell - reference, points), its
    sample std, the seeds both ran, and whether it holds."""
    out: list[dict[str, Any]] = []
    if card.empty:
        return pd.DataFrame(out, columns=COLUMNS)
    for c in claims:
        mine, ref = _values(card, c.table, c.row, c.column), _values(card, c.table, c.ref_row, c.ref_column)
        if not mine or not ref:
            continue
        seeds = sorted(set(mine) & set(ref))
        d = np.array([mine[s] - ref[s] for s in seeds])
        gain = float(d.mean()) if seeds else float("nan")
        holds = (gain >= -c.points) if c.kind == "within" else (gain <= -c.points)
        out.append(
            {
                "table": c.table,
                "column": c.column,
                "claim": c.words(),
                "paper_gain": float("nan"),  # the papers' values are not shipped: the claim is the bound
                "ours_gain": gain,
                "ours_std": float(d.std(ddof=1)) if len(d) > 1 else float("nan"),
                "seeds": seeds,
                "reproduced": bool(holds) if seeds else None,
                "note": "" if seeds else "no seed run by both cells",
            }
        )
    return pd.DataFrame(out, columns=COLUMNS)
