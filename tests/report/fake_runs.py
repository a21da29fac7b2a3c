"""Run directories as fedrun writes them (config.yaml, summary.json, metrics.csv), with chosen numbers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml


def nest(flat: dict[str, Any]) -> dict[str, Any]:
    """{"partition.alpha": 0.1} -> {"partition": {"alpha": 0.1}}."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        node = out
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out


def fake_run(
    d: Path,
    config: dict[str, Any],
    acc: float | None = 0.5,
    status: str = "completed",
    curve: list[float] | None = None,
    **summary: Any,
) -> Path:
    """A run dir under ``d`` with the dotted ``config`` keys (``algorithm.name``...), ``test_acc_*`` = ``acc``,
    and, with ``curve``, a metrics.csv of test_acc per round 1, 2, ... and the summary's final / best / last-k
    mean computed from it, as fedrun writes them (fedrun-report checks the summary against metrics.csv):
    ``last_k`` = min(eval.last_k, rounds evaluated)."""
    d.mkdir(parents=True)
    cfg = {"seed": 0, "fl": {"rounds": 10}, "eval": {"last_k": 10}, **nest(config)}
    (d / "config.yaml").write_text(yaml.safe_dump(cfg))
    k = int(cfg["eval"]["last_k"])
    s = {"status": status, "test_acc_last_k": acc, "test_acc_final": acc, "test_acc_best": acc, "last_k": k}
    if curve is not None:
        last = curve[-k:]
        s |= {"last_k": len(last), "test_acc_last_k": sum(last) / len(last)}
        s |= {"test_acc_final": curve[-1], "test_acc_best": max(curve)}
    (d / "summary.json").write_text(json.dumps({**s, **summary}))
    if curve is not None:
        rows = "\n".join(f"{r},{a}" for r, a in enumerate(curve, start=1))
        (d / "metrics.csv").write_text("round,test_acc\n" + rows + "\n")
    return d
