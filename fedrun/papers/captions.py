"""Captions of report tables (metric, n, std convention) and which value of a column is best.

A last-k caption states the k the runs used: ``eval.last_k`` asks for the mean of the last k evaluated rounds,
and a run that evaluated fewer rounds averages all of them (summary.json's ``last_k`` = min(eval.last_k,
rounds evaluated)), so a 3-round run's caption says 3, not 10.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from fedrun.report.tables import LOWER_IS_BETTER, common_n
from fedrun.storage.rundir import METRICS_FILE
from fedrun.storage.status import Status

STD = "mean ± sample standard deviation (n-1 denominator)"
DEFAULT_LAST_K = 10  # fedrun.config.schema.EvalConfig.last_k


def _count(value: Any) -> int | None:
    """A positive whole number (a k, a count of rounds) from a frame cell; None for a missing or odd value."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return int(v) if math.isfinite(v) and v >= 1 and v == int(v) else None


def _evaluated_rounds(run_dir: Any) -> int | None:
    """The rows of the run's metrics.csv (one per evaluated round); None when it cannot be read."""
    try:
        with open(Path(str(run_dir)) / METRICS_FILE, encoding="utf-8") as f:
            return max(sum(1 for line in f if line.strip()) - 1, 0) or None
    except (OSError, UnicodeDecodeError, TypeError):
        return None


def used_last_k(runs: pd.DataFrame) -> list[tuple[int, int]]:
    """Per run whose numbers a table shows (the completed ones; all runs when none completed): (the k its
    last-k mean used, the ``eval.last_k`` it asked for). The k used is summary.json's ``last_k``; a summary
    without it (an old format) gives min(eval.last_k, rows of metrics.csv)."""
    if runs.empty:
        return []
    shown = runs[runs["status"] == Status.COMPLETED] if "status" in runs else runs
    shown = shown if len(shown) else runs
    out = []
    for _, r in shown.iterrows():
        asked = _count(r.get("eval.last_k")) or DEFAULT_LAST_K
        used = _count(r.get("summary.last_k"))
        if used is None:
            evaluated = _evaluated_rounds(r.get("run_dir"))
            used = min(asked, evaluated) if evaluated else asked
        out.append((used, asked))
    return out


def last_k_text(runs: pd.DataFrame) -> str:
    """The k of a last-k mean as the runs used it: "mean of the last 10 evaluated rounds", "mean of all 3
    evaluated rounds (fewer than eval.last_k = 10)", or, when the runs used different k, "mean of the last k
    evaluated rounds, k = 3 or 10 by run (...)"."""
    pairs = used_last_k(runs)
    if not pairs:
        return "mean of the last k evaluated rounds"
    used = sorted({u for u, _ in pairs})
    asked = "/".join(map(str, sorted({a for _, a in pairs})))
    capped = any(u < a for u, a in pairs)
    if len(used) > 1:
        ks = ", ".join(map(str, used[:-1])) + f" or {used[-1]}"
        why = f" (eval.last_k = {asked}, or all the rounds a run evaluated when fewer)" if capped else ""
        return f"mean of the last k evaluated rounds, k = {ks} by run{why}"
    k = used[0]
    if capped:
        what = "the one evaluated round" if k == 1 else f"mean of all {k} evaluated rounds"
        return f"{what} (fewer than eval.last_k = {asked})"
    return "the last evaluated round" if k == 1 else f"mean of the last {k} evaluated rounds"


def metric_name(metric: str, runs: pd.DataFrame) -> str:
    """What a cell of ``metric`` is, in words; a last-k metric with the k the runs used (:func:`last_k_text`)."""
    return {
        "last_k": f"test accuracy (%), {last_k_text(runs)}",
        "best": "best test accuracy (%) over the evaluated rounds",
        "final": "test accuracy (%) after the last round",
        "train": "training accuracy (%) after the last round",
        "rounds_to_target": "first round reaching eval.target",
        "local_mean": "mean over clients of each client's own model's accuracy (%) on its local test split, last round",
        "local_wmean": "the same weighted by local test size (%), last round",
        "local_worst10": "mean accuracy (%) of the worst 10% of clients' own models on their local tests, last round",
        "local_global_mean": "mean over clients of the global model's accuracy (%) on their local tests, last round",
        "unseen_mean": "mean accuracy (%) of the clients that never trained (fine-tuned when set), last round",
        "unseen_global_mean": "mean accuracy (%) of the global model on the clients that never trained, last round",
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
    "pfllib": "accuracy (%) of the clients' models on their own test splits (correct over samples), best round; "
    + STD
    + " over seeds",
    "fedima": "test accuracy (%), {last_k} without (with) IMA; mean over seeds",
    "fedgam": "train / test accuracy (%) after the last round, mean over seeds; σ: population standard deviation"
    " (n denominator) of the test accuracy across the settings",
    "fedcos": "test accuracy (%) after the last round, mean over seeds; (gain) over the same method without FedCos",
    "fedcos_bestlast": "best and last-round test accuracy (%), mean over seeds; (gain) over the same method without"
    " FedCos",
    "fedlaw": "test accuracy (%), {last_k}; " + STD + " over seeds",
    "fedlaw_gws": "test accuracy (%), {last_k}; " + STD + " over seeds",
    "fedlaw_corr": f"Pearson r of the accumulated aggregation weights lambda with each client factor; {STD} over seeds",
    "fedsam": "Train: training accuracy (%); Validation: mean (standard deviation across clients) of the clients'"
    " test accuracy (%); Round: first round reaching eval.target (- = never); mean over seeds",
    "rounds": "first round reaching eval.target, mean over seeds (- = not reached by every seed)",
    "fedprox": "loss: training loss over every client's training data, acc: test accuracy (%), both after the last"
    " round; " + STD + " over seeds (the curves: fedrun-report curves --metric train_loss / test_acc)",
}


def layout_caption(layout: str, runs: pd.DataFrame, counts: list[int], over: list[str], bold: bool = True) -> str:
    """The caption of a paper layout; ``bold`` as in :func:`table_caption` (fedlaw_corr has no best value)."""
    tail = " The best value of each column in bold." if bold and layout != "fedlaw_corr" else ""
    text = LAYOUT_CAPTION[layout]
    if "{last_k}" in text:
        text = text.replace("{last_k}", last_k_text(runs))
    return f"{text}; {n_text(counts, over)}.{tail}"


def layout_direction(layout: str, columns: list[str]) -> dict[str, str | None]:
    """Per column: ``max`` (accuracy), ``min`` (rounds, spreads across settings) or None (no best: r values)."""
    out: dict[str, str | None] = {}
    for c in columns:
        if layout == "fedlaw_corr":
            out[c] = None
        elif layout == "rounds" or c.endswith(("Round", " loss")) or c == "loss" or c.startswith("σ"):
            out[c] = "min"
        else:
            out[c] = "max"
    return out
