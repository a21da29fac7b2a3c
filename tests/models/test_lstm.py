"""The Shakespeare LSTM: fused nn.LSTM eagerly, the plain-operation recurrence under vmap, the same results."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from fedrun.config.schema import RunSpec
from fedrun.engines.vectorised import VectorisedEngine
from fedrun.models import lstm as lstm_module
from fedrun.models.lstm import CharLSTM
from fedrun.run.experiment import build_experiment
from tests.engines.test_vectorised_engine import assert_same_run
from tests.models.test_paper_models_run import tiny_shakespeare


def test_eager_calls_use_the_fused_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    model = CharLSTM(80, 8, 16, 2)
    x = torch.randint(0, 80, (3, 12), dtype=torch.int32)
    expected = model(x)
    monkeypatch.setattr(lstm_module, "lstm_forward", lambda *a: pytest.fail("plain recurrence called eagerly"))
    torch.testing.assert_close(model(x), expected)


@pytest.mark.parametrize("cell", ["plain", "fused"])
def test_both_cells_give_the_same_logits(cell: str) -> None:
    torch.manual_seed(0)
    model = CharLSTM(80, 8, 16, 2).double()
    x = torch.randint(0, 80, (5, 20))
    ref = model(x)
    model.cell = cell
    torch.testing.assert_close(model(x), ref, rtol=1e-12, atol=1e-12)


def test_vectorised_engine_trains_the_lstm_with_the_plain_recurrence(
    make_spec: Callable[..., RunSpec], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tiny_shakespeare(tmp_path / "data")
    spec = make_spec(
        "data=shakespeare",
        "data.seq_len=10",
        f"data.root={tmp_path / 'data'}",
        "model=lstm",
        "model.hidden=12",
        "partition=natural",
        "fl.clients=2",
        "fl.batch_size=4",
        "fl.local_steps=3",
        "fl.momentum=0.5",
        "proxy.per_class=0",  # the tiny test split is smaller than a proxy set
    )
    exp = build_experiment(spec)
    vec = VectorisedEngine(exp.algorithm, exp.fed, spec.fl, spec.seed, chunk=2)
    calls: list[bool] = []
    plain = lstm_module.lstm_forward
    monkeypatch.setattr(lstm_module, "lstm_forward", lambda *a: calls.append(True) or plain(*a))
    # float32, where nn.LSTM is the fused mkldnn kernel that vmap can only run client by client (with a warning)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert_same_run(exp, vec, rounds=2, rtol=1e-4, atol=2e-5)
    assert calls  # the vectorised engine ran the plain recurrence; the sequential one never does (test above)
