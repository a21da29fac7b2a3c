"""The kill table: a run SIGKILLed at each of its write points, then re-run, gives the uninterrupted run's
metrics, and at no point leaves a half-written file (temp files aside, which the re-run removes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

# A few seconds per run: 600 Fashion-MNIST images, 4 clients, 4 rounds, a checkpoint and a client-weight log
# every round, both plots, dropout (so torch's RNG must be restored too).
OVERRIDES = [
    "experiment=smoke",
    "data.max_train_samples=600",
    "data.max_test_samples=200",
    "fl.clients=4",
    "fl.rounds=4",
    "model.hidden=[32]",
    "model.dropout=0.5",
    "hardware.threads=1",
    "hardware.engine=sequential",
    "output.quiet=true",
    "output.plots=true",
    "checkpoint.every=1",
    "eval.client_weights=true",
]
PARTIAL, TMP, RENAMED = "partial", "tmp", "renamed"
# (file name pattern, occurrence, phase): every file a run writes, in the order it writes them, killed with half
# its temp file written and right after its rename (and, for the checkpoint and the partition cache, which
# np.savez writes itself, with the whole temp file written but not renamed)
WRITE_POINTS = [
    *[("^config\\.yaml$", 1, p) for p in (PARTIAL, RENAMED)],
    *[("^fmnist-dirichlet-.*\\.npz$", 1, p) for p in (TMP, RENAMED)],  # the partition cache (cache_dir)
    *[("^partition\\.csv$", 1, p) for p in (PARTIAL, RENAMED)],
    *[("^partition\\.png$", 1, p) for p in (PARTIAL, RENAMED)],
    *[("^summary\\.json$", 1, p) for p in (PARTIAL, RENAMED)],  # status running
    *[("^client_weights\\.csv$", 1, p) for p in (PARTIAL, RENAMED)],
    *[("^metrics\\.csv$", 1, p) for p in (PARTIAL, RENAMED)],
    *[("^checkpoint\\.pt$", 1, p) for p in (PARTIAL, RENAMED)],
    *[("^metrics\\.csv$", 3, p) for p in (PARTIAL, RENAMED)],
    *[("^checkpoint\\.pt$", 3, p) for p in (PARTIAL, TMP, RENAMED)],
    ("^checkpoint\\.pt$", 4, RENAMED),  # the final checkpoint
    *[("^accuracy\\.png$", 1, p) for p in (PARTIAL, RENAMED)],
    *[("^summary\\.json$", 2, p) for p in (PARTIAL, RENAMED)],  # status completed
]


def test_sigkill_at_every_write_point_then_rerun_gives_the_uninterrupted_metrics(tmp_path: Path) -> None:
    cases = tmp_path / "cases.json"
    cases.write_text(json.dumps({"root": str(tmp_path), "overrides": OVERRIDES, "cases": WRITE_POINTS}))
    out = tmp_path / "out.json"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    res = subprocess.run(
        [sys.executable, "-m", "tests.kill_worker", str(cases), str(out)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=1500,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    results = json.loads(out.read_text())
    assert len(results) == len(WRITE_POINTS) == 26
    for r in results:
        assert r["killed"], f"{r['case']}: the run was not killed there (no such write point?)"
        assert r["half_written"] == [], r
        assert r["resume_exit"] == 0 and r["status"] == "completed", r
        assert r["same_metrics"] and r["same_client_weights"], r
        assert r["temps_left"] == [], r
