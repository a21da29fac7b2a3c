"""system.server=fedasync_mean: a buffer of one arrival is FedAsync; a larger one mixes in the buffer's mean."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from fedrun.config.validate import validate
from fedrun.run.loop import run
from fedrun.storage.atomic import TIMING_COLUMNS
from tests.conftest import compose_cfg

SMALL = ["experiment=smoke", "fl.clients=8", "fl.rounds=6", "fl.participation=0.5", "model.hidden=[16]",
         "hardware.threads=1", "system.devices=tiers", "system.staleness=polynomial"]  # fmt: skip


def _metrics(tmp_path: Path, name: str, *overrides: str) -> pd.DataFrame:
    (tmp_path / name).mkdir()
    assert run(validate(compose_cfg([*SMALL, *overrides])), tmp_path / name)["status"] == "completed"
    return pd.read_csv(tmp_path / name / "metrics.csv").drop(columns=list(TIMING_COLUMNS))


def test_a_buffer_of_one_is_fedasync_and_a_larger_one_waits_for_it(tmp_path: Path) -> None:
    one = _metrics(tmp_path, "one", "system=fedasync_mean", "system.buffer=1")
    fedasync = _metrics(tmp_path, "fedasync", "system=fedasync")
    np.testing.assert_allclose(one["test_loss"], fedasync["test_loss"], rtol=1e-6)
    assert one["sim_clock"].tolist() == fedasync["sim_clock"].tolist()
    three = _metrics(tmp_path, "three", "system=fedasync_mean", "system.buffer=3")
    assert (three["clients"] == 3).all() and (three["sim_clock"] > one["sim_clock"]).all()
