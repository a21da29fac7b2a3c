"""The personalised evaluator of a built run, as the run loop opens it (fedrun/capabilities/local_eval.py)."""

from __future__ import annotations

from pathlib import Path

from fedrun.metrics.personal import LocalEvaluation
from fedrun.run.experiment import Experiment


def local_evaluation(exp: Experiment, run_dir: Path | None, start: int) -> LocalEvaluation | None:
    """The run's evaluator of ``eval.local_test`` (None when off), opened at round ``start``."""
    cap = exp.capability("local_eval")
    if cap is None:
        return None
    cap.start(run_dir, start)
    return cap.evaluation  # type: ignore[attr-defined, no-any-return]
