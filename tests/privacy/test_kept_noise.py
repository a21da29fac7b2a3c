"""A run at a target epsilon, resumed or extended, keeps its checkpoint's noise multiplier without solving it again:
dp-accounting's search (seconds; PLD's tens of seconds a resume) is not called, and every number is the one the
solve-and-discard of before gave (fedrun/privacy/mechanisms/base.py, docs/privacy.md "Choosing z from a target
epsilon"): the resumed run's metrics are the uninterrupted run's, and the extension reports the epsilon spent over
all its rounds at the first rounds' z, above the target."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from fedrun.core.errors import ConfigError
from fedrun.core.extras import MissingExtra
from fedrun.privacy import accounting
from fedrun.privacy.mechanisms.client import count_noise_refused
from fedrun.privacy.settings import PrivacySettings
from fedrun.run.loop import run
from tests.conftest import main_exit_code
from tests.privacy.test_budget_invariants import SMALL, _spent
from tests.run.run_util import interrupted_copy

try:  # imported at collection (tests/privacy/test_budget_invariants.py says why)
    dp_accounting = accounting._library()
except MissingExtra:
    pytest.skip("needs the privacy extra (dp-accounting)", allow_module_level=True)

LEVELS = {
    # adaptive clipping: the clip is state too, and the count noise is checked against the z the rounds use
    "client": ("privacy=client", "privacy.target_epsilon=4", "privacy.adaptive_clip=true",
               "privacy.clip_count_stddev=1"),
    "sample": ("privacy=sample", "privacy.target_epsilon=2", "fl.batch_size=25", "fl.participation=1.0"),
    "local": ("privacy=local", "privacy.target_epsilon=20"),  # its z is twice the solve's: kept, not doubled again
}  # fmt: skip
COLUMNS = ["round", "epsilon", "noise_multiplier", "test_acc", "test_loss"]


def _no_solve(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """From now on dp-accounting's search fails (and this process's solved z are forgotten): the calls it got."""
    calls: list[Any] = []

    def refuse(*args: Any, **kwargs: Any) -> float:
        calls.append(args)
        raise AssertionError("z solved again")

    accounting.noise_for_epsilon.cache_clear()
    monkeypatch.setattr(dp_accounting, "calibrate_dp_mechanism", refuse)
    return calls


def _summary(run_dir: Path) -> dict[str, Any]:
    out: dict[str, Any] = json.loads((run_dir / "summary.json").read_text())
    return out


@pytest.mark.parametrize("level", list(LEVELS))
def test_a_resumed_or_extended_run_keeps_its_z_without_solving_it(
    make_spec: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, level: str
) -> None:
    spec = make_spec(*SMALL, *LEVELS[level], "fl.rounds=4")
    full, partial = interrupted_copy(spec, tmp_path, monkeypatch, 2)  # (solves z: a new run)
    first = _summary(full)
    cli = [*SMALL, *LEVELS[level], "output.quiet=true", "output.plots=false", f"cache_dir={tmp_path / 'cache'}"]
    if level == "client":  # the command a user types: ``fedrun``'s validation (its preflight) and run, in-process
        monkeypatch.chdir(tmp_path)
        assert main_exit_code(monkeypatch, ["fedrun", *cli, "fl.rounds=2", f"hydra.run.dir={tmp_path / 'cli'}"]) == 0
    calls = _no_solve(monkeypatch)

    assert run(spec, partial)["resumed_from_round"] == 2  # killed after round 2, resumed as it was
    pd.testing.assert_frame_equal(
        pd.read_csv(partial / "metrics.csv")[COLUMNS], pd.read_csv(full / "metrics.csv")[COLUMNS], check_exact=True
    )
    assert _summary(partial)["epsilon_final"] == first["epsilon_final"]

    longer = make_spec(*SMALL, *LEVELS[level], "fl.rounds=6")  # (its preflight solves nothing either)
    run(longer, full)
    extended = _summary(full)
    z = first["privacy"]["noise_multiplier"]
    assert extended["privacy"]["noise_multiplier"] == z and extended["privacy"]["noise_solved_for_rounds"] == 4
    assert extended["privacy"]["extended_past_target"]
    assert extended["epsilon_final"] > first["privacy"]["target_epsilon"] * (1 + 1e-3)  # spent over all 6 rounds
    if level != "local":
        assert extended["epsilon_final"] == pytest.approx(_spent(longer, z, 6), rel=1e-9)
    m = pd.read_csv(full / "metrics.csv")
    assert list(m["round"]) == [1, 2, 3, 4, 5, 6] and m["epsilon"].is_monotonic_increasing
    if level == "client":
        assert main_exit_code(monkeypatch, ["fedrun", f"resume={tmp_path / 'cli'}", "fl.rounds=3"]) == 0
        assert _summary(tmp_path / "cli")["privacy"]["noise_solved_for_rounds"] == 2
    assert calls == []

    (tmp_path / "new").mkdir()  # the check can fail: a new run does solve, and meets the refusing search
    with pytest.raises(AssertionError, match="z solved again"):
        run(make_spec(*SMALL, *LEVELS[level], "fl.rounds=6"), tmp_path / "new")
    assert len(calls) == 1


def test_the_preflight_refuses_a_count_noise_the_target_leaves_no_room_for_and_solves_nothing_otherwise(
    make_spec: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Adaptive clipping needs z < 2 sigma_b (Andrew et al. Thm. 1): a sigma_b the solved z is sure to break is refused
    before any data is read, naming the z (solved for the message); one it leaves room for costs no solve."""
    target = (*SMALL, "privacy=client", "privacy.target_epsilon=4", "privacy.adaptive_clip=true", "fl.rounds=4")
    fl = make_spec(*SMALL, "fl.rounds=4").fl

    def refused(sigma_b: float) -> bool:
        settings = PrivacySettings(mode="client", target_epsilon=4, adaptive_clip=True, clip_count_stddev=sigma_b)
        return count_noise_refused(settings, fl)

    for sigma_b in (0.1, 0.5):  # 2 sigma_b below the smallest z tried; epsilon at z = 2 sigma_b above the target
        assert refused(sigma_b)
        with pytest.raises(ConfigError, match=r"privacy.clip_count_stddev: .* leaves no budget for the update at z="):
            make_spec(*target, f"privacy.clip_count_stddev={sigma_b}")
    calls = _no_solve(monkeypatch)
    assert not refused(1.0)
    make_spec(*target, "privacy.clip_count_stddev=1")  # validated (its preflight run) without a solve
    assert calls == []
