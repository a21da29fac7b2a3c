"""Evaluation (fedrun/metrics/evaluate.py) equals a plain-torch reference, builds no autograd state, and runs the
LSTM in cache-sized chunks on CPU."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fedrun.data.base import Dataset, Split
from fedrun.data.federated import FederatedData
from fedrun.metrics.clients import correct_mask
from fedrun.metrics.evaluate import evaluate
from fedrun.models.base import FunctionalModel
from fedrun.models.lstm import INFERENCE_ROWS, CharLSTM

N = 2 * INFERENCE_ROWS + 45  # more rows than one chunk, and a ragged last batch


def _fed(x: torch.Tensor, y: torch.Tensor, classes: int, mean: tuple[float, ...] | None = None) -> FederatedData:
    std = None if mean is None else tuple(0.5 for _ in mean)
    data = Dataset("toy", Split(x[:10], y[:10]), Split(x, y), classes, tuple(x.shape[1:]), mean, std)
    return FederatedData(data, [np.arange(10)], torch.device("cpu"))


def _lstm_case() -> tuple[CharLSTM, FederatedData, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    vocab = 12
    module = CharLSTM(vocab, embed_dim=4, hidden=8, layers=2)
    x = torch.randint(0, vocab, (N, 7))
    y = torch.randint(0, vocab, (N,))
    return module, _fed(x, y, vocab), x, y


def _cnn_case() -> tuple[nn.Module, FederatedData, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    module = nn.Sequential(
        nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 3 * 3, 5)
    )
    module.train()
    with torch.no_grad():  # non-trivial running statistics, so eval mode matters
        module(torch.randn(64, 1, 8, 8) * 2 + 1)
    x = torch.randint(0, 256, (N, 1, 8, 8), dtype=torch.uint8)
    y = torch.randint(0, 5, (N,))
    return module, _fed(x, y, 5, mean=(0.3,)), x, y


def _reference_lstm(module: CharLSTM, x: torch.Tensor) -> torch.Tensor:
    """nn.LSTM on the whole split at once, as plain torch runs it."""
    with torch.no_grad():
        return module.fc(module.lstm(module.embed(x))[0][:, -1])


def _reference_cnn(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return module((x.float() / 255.0 - 0.3) / 0.5)


def _reference(logits: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    loss = F.cross_entropy(logits.double(), y, reduction="mean")
    return float((logits.argmax(1) == y).double().mean()), float(loss)


@pytest.mark.parametrize("case", ["lstm", "cnn"])
@pytest.mark.parametrize("batch_size", [64, 2048])
def test_evaluate_equals_a_plain_torch_evaluation(case: str, batch_size: int) -> None:
    if case == "lstm":
        module, fed, x, y = _lstm_case()
        module.eval()
        ref_logits = _reference_lstm(module, x)
    else:
        module, fed, x, y = _cnn_case()
        module.eval()
        ref_logits = _reference_cnn(module, x)
    module.train()
    model = FunctionalModel(module)
    acc, loss = evaluate(model, model.init_params(), fed, fed.test, batch_size)
    ref_acc, ref_loss = _reference(ref_logits, y)
    assert acc == ref_acc
    assert loss == pytest.approx(ref_loss, rel=1e-6)
    np.testing.assert_array_equal(
        correct_mask(model, model.init_params(), fed, fed.test, batch_size), (ref_logits.argmax(1) == y).numpy()
    )
    assert module.training  # evaluation puts the model back in train mode


def test_evaluation_leaves_train_mode_restored_when_a_batch_fails() -> None:
    module, fed, _, _ = _cnn_case()
    model = FunctionalModel(module)
    bad = {**model.init_params(), "5.weight": torch.zeros(5, 7)}  # wrong shape: the first batch raises
    with pytest.raises(RuntimeError):
        evaluate(model, bad, fed, fed.test)
    assert module.training
    with pytest.raises(RuntimeError):
        correct_mask(model, bad, fed, fed.test)
    assert module.training


def test_lstm_inference_on_cpu_runs_in_chunks_with_the_same_logits() -> None:
    module, _, x, _ = _lstm_case()
    module.eval()
    rows: list[int] = []
    handle = module.lstm.register_forward_hook(lambda _m, inp, _out: rows.append(len(inp[0])))
    with torch.inference_mode():
        chunked = module(x)
    assert rows == [INFERENCE_ROWS, INFERENCE_ROWS, N - 2 * INFERENCE_ROWS]
    torch.testing.assert_close(chunked, _reference_lstm(module, x), rtol=1e-6, atol=1e-6)
    assert not chunked.requires_grad
    rows.clear()
    module(x).sum().backward()  # training (a gradient is taken): one call on the whole batch, as before
    handle.remove()
    assert rows == [N]
    assert module.lstm.weight_hh_l0.grad is not None


def test_evaluate_builds_no_autograd_state() -> None:
    module, fed, _, _ = _lstm_case()
    model = FunctionalModel(module)
    params = {k: v.requires_grad_(True) for k, v in model.init_params().items()}
    seen: list[tuple[bool, bool]] = []
    handle = module.fc.register_forward_hook(lambda _m, _i, out: seen.append((out.is_inference(), out.requires_grad)))
    evaluate(model, params, fed, fed.test, 1000)
    handle.remove()
    assert seen and all(s == (True, False) for s in seen)  # inference tensors: no graph, no version counters
