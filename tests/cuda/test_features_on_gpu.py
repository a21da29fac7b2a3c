"""The capabilities added after the first GPU check, on the GPU against the CPU result.

Upload transforms (client-level DP, compression with error feedback), DP-SGD, the simulated clock
(stragglers with partial work, dropout, an asynchronous server) and the personalised methods with their
per-client evaluation, each as a short run of the vectorised engine on ``FEDRUN_TEST_DEVICE`` and on the
CPU. Every random draw of these paths (the DP noise, the compressors' coins, dropouts and stragglers) is
made on the CPU from keyed generators and moved, so the two runs see the same draws and differ only by
floating-point rounding: losses within rtol 1e-3 and accuracies within 0.01, as the engines' runs in
``test_engines_on_gpu.py``. Sign compression and top-k pick entries by sign and magnitude, so a rounding
difference can flip a near-zero entry; their runs get the looser accuracy bound of 0.02. A client's local
test split holds about 20 images here, so one flipped prediction moves a per-client statistic (mean, worst
and best 10%) by up to 0.05: those columns get 0.05.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.cuda.gpu_util import DEVICE, assert_same_metrics, run_on

RUN = ("fl.rounds=3", "checkpoint.every=0", "hardware.engine=vectorised", "fl.participation=0.8")
LOCAL = ("eval.local_test=split",)
FEATURES: dict[str, tuple[str, ...]] = {
    "dp_client": ("privacy=client", "privacy.noise_multiplier=0.3", "privacy.clip=0.5", "privacy.sampling=fixed"),
    "dp_sample": ("privacy=sample", "privacy.noise_multiplier=0.5", "privacy.clip=1.0", "privacy.sampling=fixed"),
    "topk_ef": ("compression=topk", "compression.ratio=0.1", "compression.error_feedback=true"),
    "qsgd": ("compression=qsgd", "compression.levels=4"),
    "sign_ef": ("compression=sign", "compression.error_feedback=true"),
    "stragglers": ("system.stragglers=0.5", "system.straggler_policy=partial", "system.straggler_work=steps"),
    "dropout": ("system.dropout=0.3",),
    "fedbuff": ("system=fedbuff", "system.buffer=2", "system.concurrency=3"),
    "ditto": ("algorithm=ditto", *LOCAL),
    "fedrep": ("algorithm=fedrep", "fl.local_epochs=2", *LOCAL),
    "pfedme": ("algorithm=pfedme", *LOCAL),
    "finetune": ("algorithm=fedavg", *LOCAL, "eval.finetune_steps=2"),
}
LOOSE = {"topk_ef": 0.02, "sign_ef": 0.02}


@pytest.mark.cuda
@pytest.mark.parametrize("feature", list(FEATURES))
def test_feature_on_the_gpu_matches_the_cpu_result(feature: str, tmp_path: Path) -> None:
    overrides = (*FEATURES[feature], *RUN)
    cache = tmp_path / "cache"
    _, expected, _ = run_on(tmp_path / "cpu", "cpu", *overrides, cache_dir=cache)
    summary, actual, _ = run_on(tmp_path / "dev", DEVICE, *overrides, cache_dir=cache)
    assert summary["status"] == "completed"
    floats = actual.select_dtypes("number").to_numpy(dtype=float)
    assert np.isfinite(floats[~np.isnan(floats)]).all()
    per_client = [c for c in expected.columns if "_acc" in c and c.startswith(("local_", "unseen_", "personal_"))]
    for col in per_client:
        assert actual[col].to_numpy() == pytest.approx(expected[col].to_numpy(), abs=0.05, nan_ok=True), col
    rest = [c for c in expected.columns if c not in per_client]
    assert_same_metrics(actual[rest], expected[rest], rtol=1e-3, acc_atol=LOOSE.get(feature, 0.01))


def test_the_feature_runs_report_what_they_add(tmp_path: Path) -> None:
    """The columns the comparison covers exist (a renamed column would make the GPU check vacuous)."""
    _, dp, _ = run_on(tmp_path / "dp", "cpu", *FEATURES["dp_client"], *RUN)
    _, ditto, _ = run_on(tmp_path / "ditto", "cpu", *FEATURES["ditto"], *RUN, cache_dir=tmp_path / "cache")
    assert any("epsilon" in c for c in dp.columns)
    assert isinstance(ditto, pd.DataFrame) and any(c.startswith("local_") and "_acc" in c for c in ditto.columns)
