"""Whole runs under client-level DP: the same noise on every engine, a killed run (adaptive clip included) resumes to
the same numbers, epsilon and the clip columns in metrics.csv and the budget in summary.json, empty Poisson rounds
released as noise alone, and bad input refused in one line before any work."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from fedrun.config.schema import RunSpec
from fedrun.core.errors import ConfigError
from fedrun.privacy.accounting import epsilon
from tests.conftest import main_exit_code
from tests.run.run_util import finished_run, killed_then_resumed

SMALL = (
    "data.max_train_samples=600",
    "data.max_test_samples=200",
    "fl.clients=10",
    "fl.rounds=4",
    "fl.participation=0.5",
    "fl.batch_size=20",
    "model.hidden=[32]",
    "hardware.threads=1",
    "checkpoint.every=1",
    "privacy=client",
    "privacy.noise_multiplier=0.5",
    "privacy.clip=0.3",
)
DP_COLUMNS = ["epsilon", "clip", "clipped_fraction"]


def test_columns_and_summary_say_the_budget(tmp_path: Path, make_spec: Callable[..., RunSpec]) -> None:
    m, s = finished_run(tmp_path, "dp", make_spec(*SMALL))
    assert set(DP_COLUMNS) <= set(m.columns)
    assert list(m["epsilon"]) == [epsilon(0.5, 0.5, t, 1e-5, "rdp") for t in (1, 2, 3, 4)]
    assert (m["clip"] == 0.3).all() and m["clipped_fraction"].between(0, 1).all()
    assert s["epsilon_final"] == m["epsilon"].iloc[-1] and s["delta"] == 1e-5
    p = s["privacy"]
    assert p["sampling"] == "poisson" and p["accountant"] == "rdp (dp-accounting)" and p["q"] == 0.5
    assert p["noise_multiplier"] == 0.5 and p["unit"] == "one client's whole data"


def test_the_same_noise_on_every_engine(tmp_path: Path, make_spec: Callable[..., RunSpec]) -> None:
    seq, _ = finished_run(tmp_path, "seq", make_spec(*SMALL))
    vec, _ = finished_run(tmp_path, "vec", make_spec(*SMALL, "hardware.engine=vectorised"))
    pd.testing.assert_frame_equal(seq[["clients", "epsilon", "clip"]], vec[["clients", "epsilon", "clip"]])
    # the noise dominates the update at z S / m_exp: were it drawn differently, the models would part by far more
    pd.testing.assert_series_equal(seq["test_loss"], vec["test_loss"], rtol=1e-3, check_exact=False)


def test_killed_and_resumed_run_gives_the_same_numbers_with_adaptive_clip(
    tmp_path: Path, make_spec: Callable[..., RunSpec], monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = make_spec(*SMALL, "privacy.adaptive_clip=true", "privacy.clip_count_stddev=1.0", "privacy.clip_lr=0.5")
    _, full, resumed = killed_then_resumed(spec, tmp_path, monkeypatch, 2)
    pd.testing.assert_frame_equal(resumed, full, check_exact=True)
    assert full["clip"].nunique() == 4  # S adapted every round, so the resumed S decided something


def test_an_empty_poisson_round_releases_the_noise_alone(tmp_path: Path, make_spec: Callable[..., RunSpec]) -> None:
    from fedrun.engines.sampling import sample_clients

    spec = make_spec(*SMALL, "fl.participation=0.1", "fl.rounds=6", "seed=3")
    cohorts = [len(sample_clients(spec.fl, spec.seed, r, poisson=True)) for r in range(6)]
    assert cohorts.count(0) == 3  # seed 3 draws three empty cohorts at q = 0.1 over 10 clients
    m, _ = finished_run(tmp_path, "empty", spec)
    assert list(m["clients"]) == cohorts
    empty = m[m["clients"] == 0]
    assert empty["local_loss"].isna().all() and (empty["clipped_fraction"] == 0).all()


def test_bad_input_is_refused(make_spec: Callable[..., RunSpec]) -> None:
    with pytest.raises(ConfigError, match=r"privacy.noise_multiplier: must be a finite number >= 0"):
        make_spec("privacy=client", "privacy.noise_multiplier=-1")
    with pytest.raises(ConfigError, match=r"privacy.mode: invalid value 'global'; valid: none, client, local, sample"):
        make_spec("privacy.mode=global")
    with pytest.raises(
        ConfigError, match=r"algorithm.name: scaffold .*valid with privacy.mode=client: .*fedavg, fedavgm"
    ):
        make_spec("privacy=client", "algorithm=scaffold")
    with pytest.raises(ConfigError, match=r"fl.sampling: .*valid: fixed"):
        make_spec("privacy=client", "fl.sampling=bernoulli")


def test_cli_refuses_a_negative_z_and_an_unreachable_target_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.chdir(tmp_path)  # ``fedrun`` in-process (the console script's code path): exit code and stderr
    where = [f"hydra.run.dir={tmp_path / 'run'}", f"cache_dir={tmp_path / 'cache'}"]
    argv = ["fedrun", "privacy=client", "privacy.noise_multiplier=-0.5", "hardware.threads=1", *where]
    assert main_exit_code(monkeypatch, argv) == 2
    assert (
        capsys.readouterr().err.strip()
        == "fedrun: error: privacy.noise_multiplier: must be a finite number >= 0 (0: no noise), got -0.5"
    )
    assert main_exit_code(monkeypatch, ["fedrun", *SMALL, "privacy.target_epsilon=0.001", "fl.rounds=50", *where]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "privacy.target_epsilon: 0.001 is unreachable over 50 steps" in err
    assert not (tmp_path / "run" / "metrics.csv").exists()


def test_sample_level_dp_sgd_runs_alike_on_both_engines_with_the_largest_clients_budget(
    tmp_path: Path, make_spec: Callable[..., RunSpec]
) -> None:
    from fedrun.data.federated import num_local_steps
    from fedrun.run.experiment import build_experiment

    sample = (*SMALL[:9], "privacy=sample", "privacy.noise_multiplier=1.1", "privacy.clip=0.5", "fl.rounds=2")
    spec = make_spec(*sample)
    seq, s = finished_run(tmp_path, "seq", spec)
    vec, _ = finished_run(tmp_path, "vec", make_spec(*sample, "hardware.engine=vectorised"))
    pd.testing.assert_series_equal(seq["test_loss"], vec["test_loss"], rtol=1e-4, check_exact=False)
    assert s["privacy"]["unit"] == "one training sample of a client"
    # epsilon: the largest over the clients, each at q_i = B / n_i over the steps it took (cohorts of 5 of 10)
    from fedrun.engines.sampling import sample_clients

    sizes = build_experiment(spec).fed.sizes
    steps = {c: 0 for c in range(10)}
    for rnd in range(2):
        for c in sample_clients(spec.fl, spec.seed, rnd):
            steps[int(c)] += num_local_steps(int(sizes[c]), spec.fl)
    want = max(epsilon(min(20 / int(sizes[c]), 1.0), 1.1, n, 1e-5, "rdp") for c, n in steps.items())
    assert seq["epsilon"].iloc[-1] == pytest.approx(want) and want > 0
    with pytest.raises(ConfigError, match="algorithm.name: fedsam computes its own local gradient"):
        build_experiment(make_spec(*sample, "algorithm=fedsam"))
