"""Captions of report tables (metric, n, std convention) and which value of a column is best."""

from __future__ import annotations

import pandas as pd

from fedrun.report.tables import LOWER_IS_BETTER, common_n

STD = "mean ± sample standard deviation (n-1 denominator)"


def _last_k(runs: pd.DataFrame) -> str:
    col = "eval.last_k" if "eval.last_k" in runs else "summary.last_k"
    ks = sorted({int(k) for k in pd.to_numeric(runs.get(col, pd.Series(dtype=float)), errors="coerce").dropna()})
    return "/".join(map(str, ks)) or "k"


def metric_name(metric: str, runs: pd.DataFrame) -> str:
    return {
        "last_k": f"test accuracy (%), mean of the last {_last_k(runs)} evaluated rounds",
        "best": "best test accuracy (%) over the evaluated rounds",
        "final": "test accuracy (%) after the last round",
        "train": "training accuracy (%) after the last round",
        "rounds_to_target": "first round reaching eval.target",
    }[metric]


def n_text(counts: list[int], over: list[str]) -> str:
    """ "n = 3 runs (seed) per cell" or "n = 3 runs (seed) per cell unless a cell says (n=...)"."""
    counts = [c for c in counts if c > 0]
    what = f"runs ({', '.join(over)})" if over else "runs"
    if not counts:
        return f"no completed {what}"
    if len(set(counts)) == 1:
        return f"n = {counts[0]} {what} per cell"
    return f"n = {common_n(counts)} {what} per cell unless a cell says (n=...)"


def table_caption(metric: str, runs: pd.DataFrame, counts: list[int], over: list[str], bold: bool = True) -> str:
    """The caption of a plain table; ``bold``: it says that the best cells are bold (the .tex, not the Markdown)."""
    best = "lowest" if metric in LOWER_IS_BETTER else "highest"
    tail = f"; the {best} value of each column in bold" if bold else ""
    return f"{metric_name(metric, runs)}; {STD} over {n_text(counts, over)}{tail}."


LAYOUT_CAPTION = {
    "fedima": "test accuracy (%), mean of the last {k} evaluated rounds without (with) IMA; mean over seeds",
    "fedgam": "train / test accuracy (%) after the last round, mean over seeds; σ: population standard deviation"
    " (n denominator) of the test accuracy across the settings",
    "fedcos": "test accuracy (%) after the last round, mean over seeds; (gain) over the same method without FedCos",
    "fedcos_bestlast": "best and last-round test accuracy (%), mean over seeds; (gain) over the same method without"
    " FedCos",
    "fedlaw": "test accuracy (%), mean of the last {k} evaluated rounds; " + STD + " over seeds",
    "fedlaw_gws": "test accuracy (%), mean of the last {k} evaluated rounds; " + STD + " over seeds",
    "fedlaw_corr": f"Pearson r of the accumulated aggregation weights lambda with each client factor; {STD} over seeds",
    "fedsam": "Train: training accuracy (%); Validation: mean (standard deviation across clients) of the clients'"
    " test accuracy (%); Round: first round reaching eval.target (- = never); mean over seeds",
    "rounds": "first round reaching eval.target, mean over seeds (- = not reached by every seed)",
}


def layout_caption(layout: str, runs: pd.DataFrame, counts: list[int], over: list[str], bold: bool = True) -> str:
    """The caption of a paper layout; ``bold`` as in :func:`table_caption` (fedlaw_corr has no best value)."""
    tail = " The best value of each column in bold." if bold and layout != "fedlaw_corr" else ""
    return f"{LAYOUT_CAPTION[layout].replace('{k}', _last_k(runs))}; {n_text(counts, over)}.{tail}"


def layout_direction(layout: str, columns: list[str]) -> dict[str, str | None]:
    """Per column: ``max`` (accuracy), ``min`` (rounds, spreads across settings) or None (no best: r values)."""
    out: dict[str, str | None] = {}
    for c in columns:
        if layout == "fedlaw_corr":
            out[c] = None
        elif layout == "rounds" or c.endswith("Round") or c.startswith("σ"):
            out[c] = "min"
        else:
            out[c] = "max"
    return out
