"""privacy.mode=local: each client clips and noises its own upload; epsilon of one Gaussian per participation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fedrun.config.validate import validate
from fedrun.privacy.accounting import epsilon
from fedrun.run.loop import run
from tests.conftest import compose_cfg

SMALL = ["experiment=smoke", "fl.clients=6", "fl.rounds=3", "fl.participation=0.5", "model.hidden=[16]",
         "hardware.threads=1", "hardware.engine=sequential"]  # fmt: skip


def _run(tmp_path: Path, name: str, *overrides: str) -> tuple[pd.DataFrame, dict]:
    (tmp_path / name).mkdir()
    summary = run(validate(compose_cfg([*SMALL, *overrides])), tmp_path / name)
    assert summary["status"] == "completed"
    return pd.read_csv(tmp_path / name / "metrics.csv"), summary


def test_no_noise_and_a_clip_no_update_reaches_is_the_plain_run(tmp_path: Path) -> None:
    plain, _ = _run(tmp_path, "plain")
    local, _ = _run(tmp_path, "local", "privacy=local", "privacy.noise_multiplier=0", "privacy.clip=1e6")
    np.testing.assert_allclose(local["test_loss"], plain["test_loss"], rtol=1e-6)


def test_noise_changes_the_run_and_epsilon_is_a_gaussian_per_participation(tmp_path: Path) -> None:
    plain, _ = _run(tmp_path, "plain")
    local, summary = _run(tmp_path, "local", "privacy=local", "privacy.noise_multiplier=4", "privacy.clip=0.5")
    assert not np.allclose(local["test_loss"], plain["test_loss"])
    assert local["epsilon"].is_monotonic_increasing and summary["privacy"]["unit"].startswith("one client's update")
    # 3 fixed-size cohorts of 3 of 6 clients: the most frequent took part 2 or 3 times, each a Gaussian of z/2 = 2
    assert any(summary["epsilon_final"] == pytest.approx(epsilon(1.0, 2.0, k, 1e-5)) for k in (2, 3))


def test_a_target_epsilon_solves_z_for_a_client_in_every_round(tmp_path: Path) -> None:
    _, summary = _run(tmp_path, "target", "privacy=local", "privacy.target_epsilon=20")
    z = summary["privacy"]["noise_multiplier"]
    assert epsilon(1.0, z / 2, 3, 1e-5) == pytest.approx(20, rel=1e-3)
    assert summary["epsilon_final"] <= 20 * (1 + 1e-3)
