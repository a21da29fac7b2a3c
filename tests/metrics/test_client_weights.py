"""Each client's weight in the aggregate, recovered from the models: exact coefficients, FedLAW's own gamma and
lambda, a file that survives a resume."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import torch

import fedrun.run.rounds
from fedrun.metrics.client_weights import CLIENT_WEIGHTS_FILE, effective_weights
from fedrun.run.loop import run

SMALL = (
    "experiment=smoke",
    "data.max_train_samples=400",
    "data.max_test_samples=300",
    "fl.clients=4",
    "model.hidden=[16]",
    "hardware.threads=1",
    "eval.client_weights=true",
)


def test_recovers_the_coefficients_of_a_combination() -> None:
    g = torch.Generator().manual_seed(0)
    base = {"w": torch.randn(30, 20, generator=g), "b": torch.randn(20, generator=g)}
    stacked = {k: v + 1e-3 * torch.randn(5, *v.shape, generator=g) for k, v in base.items()}  # near-identical
    c = torch.tensor([0.05, 0.4, 0.2, 0.15, 0.13], dtype=torch.float64)  # sums to 0.93: shrunk
    new = {k: (c.float().reshape(-1, *[1] * v.dim()) * stacked[k]).sum(0) for k, v in base.items()}
    got = effective_weights(stacked, new)
    torch.testing.assert_close(got, c, rtol=0, atol=1e-4)
    twins = {k: torch.stack([v[0], v[0], v[1]]) for k, v in stacked.items()}  # two identical uploads
    same = effective_weights(twins, {k: 0.5 * v[0] + 0.5 * v[1] for k, v in stacked.items()})
    torch.testing.assert_close(same, torch.tensor([0.25, 0.25, 0.5], dtype=torch.float64), rtol=0, atol=1e-4)


def test_fedlaw_lambda_and_gamma_come_back(make_spec, tmp_path: Path) -> None:
    spec = make_spec(*SMALL, "algorithm=fedlaw", "algorithm.server_epochs=3", "algorithm.server_lr=0.05", "fl.rounds=2")
    run(spec, tmp_path)
    w = pd.read_csv(tmp_path / CLIENT_WEIGHTS_FILE)
    m = pd.read_csv(tmp_path / "metrics.csv").set_index("round")
    assert list(w.columns) == ["round", "client", "size", "p", "coef", "lambda"]
    assert sorted(w["round"].unique()) == [1, 2] and (w.groupby("round").size() == 4).all()
    per_round = w.groupby("round")
    pd.testing.assert_series_equal(per_round["coef"].sum(), m["gamma"], check_names=False, atol=1e-5, rtol=0)
    pd.testing.assert_series_equal(per_round["lambda"].min(), m["lambda_min"], check_names=False, atol=1e-5, rtol=0)
    pd.testing.assert_series_equal(per_round["lambda"].max(), m["lambda_max"], check_names=False, atol=1e-5, rtol=0)
    assert (m["gamma"] != 1).all() and (w["lambda"] - w["p"]).abs().max() > 1e-4  # both were learned
    assert (per_round["p"].sum() - 1).abs().max() < 1e-9


def test_a_resumed_run_writes_the_uninterrupted_file(make_spec, tmp_path: Path, monkeypatch) -> None:
    overrides = (*SMALL, "algorithm=fedavg_gws", "algorithm.gamma=0.9", "fl.rounds=3", "checkpoint.every=1")
    (tmp_path / "ref").mkdir()
    run(make_spec(*overrides), tmp_path / "ref")
    ref = pd.read_csv(tmp_path / "ref" / CLIENT_WEIGHTS_FILE)
    torch.testing.assert_close(torch.tensor(ref["coef"].values), 0.9 * torch.tensor(ref["p"].values), rtol=0, atol=1e-5)

    calls = {"n": 0}
    real = fedrun.run.rounds.evaluate

    def stop_in_round_two(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - after round 2's weights, before its checkpoint
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    (tmp_path / "cut").mkdir()
    monkeypatch.setattr(fedrun.run.rounds, "evaluate", stop_in_round_two)
    assert run(make_spec(*overrides), tmp_path / "cut")["status"] == "interrupted"
    assert pd.read_csv(tmp_path / "cut" / CLIENT_WEIGHTS_FILE)["round"].max() == 1  # its finished rounds only
    monkeypatch.setattr(fedrun.run.rounds, "evaluate", real)
    assert run(make_spec(*overrides), tmp_path / "cut")["resumed_from_round"] == 1
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "cut" / CLIENT_WEIGHTS_FILE), ref, check_exact=True)


def test_off_by_default_no_file(make_spec, tmp_path: Path) -> None:
    run(make_spec(*SMALL[:-1], "fl.rounds=1", "fl.local_steps=1"), tmp_path)
    assert not (tmp_path / CLIENT_WEIGHTS_FILE).exists()
