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

from fedrun.papers.layouts import STD, layout
from fedrun.report.tables import LOWER_IS_BETTER, common_n
from fedrun.storage.rundir import METRICS_FILE
from fedrun.storage.status import Status

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
        "asr": "backdoor attack success rate (%): triggered test images of other classes classified as the target,"
        " last round",
        "asr_last_k": f"backdoor attack success rate (%), {last_k_text(runs)}",
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


def layout_caption(name: str, runs: pd.DataFrame, counts: list[int], over: list[str], bold: bool = True) -> str:
    """The caption of a paper layout: its record's caption text, then n; ``bold`` as in :func:`table_caption`
    (a layout without a best value, as fedlaw_corr, says nothing of bold)."""
    record = layout(name)
    tail = " The best value of each column in bold." if bold and record.best else ""
    text = record.caption
    if "{last_k}" in text:
        text = text.replace("{last_k}", last_k_text(runs))
    return f"{text}; {n_text(counts, over)}.{tail}"


def layout_direction(name: str, columns: list[str]) -> dict[str, str | None]:
    """Per column: which value is best, by the layout's rule (``max``: accuracy, ``min``: rounds, losses, spreads
    across settings), or None for a layout without a best value (FedLAW's r values)."""
    record = layout(name)
    return {c: record.direction(c) if record.best else None for c in columns}
