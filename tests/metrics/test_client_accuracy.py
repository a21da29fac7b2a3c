"""Per-client accuracy spread (FedSAM's "mean (std across clients)") on constructed data and a fixed model."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from fedrun.data.base import Dataset, Split
from fedrun.data.federated import FederatedData
from fedrun.metrics.clients import ClientAccuracy, own_data_accuracy, reweighted_accuracy, spread
from fedrun.models.base import FunctionalModel


def test_reweighted_accuracy_is_the_clients_class_mix_of_per_class_accuracy() -> None:
    correct = np.array([1, 1, 0, 1, 0, 0], dtype=bool)  # class 0: 2/2, class 1: 1/2, class 2: 0/2
    groups = np.array([0, 0, 1, 1, 2, 2])
    counts = np.array([[10, 0, 0], [5, 5, 0], [0, 0, 3], [0, 0, 0], [1, 1, 0]])
    acc = reweighted_accuracy(correct, groups, counts)
    np.testing.assert_allclose(acc[[0, 1, 2, 4]], [1.0, 0.75, 0.0, 0.75])
    assert np.isnan(acc[3])  # a client without data has no accuracy
    # a group missing from the test split is left out and the client's mix renormalised
    acc = reweighted_accuracy(correct[:4], groups[:4], np.array([[2, 2, 6]]))
    np.testing.assert_allclose(acc, [0.75])


def test_spread_is_unweighted_mean_and_population_std() -> None:
    s = spread(np.array([0.5, 1.0, np.nan]))
    assert s["client_acc_mean"] == pytest.approx(0.75)
    assert s["client_acc_std"] == pytest.approx(0.25)
    assert (s["client_acc_min"], s["client_acc_max"]) == (0.5, 1.0)


def _always_class_zero() -> FunctionalModel:
    """A linear model that predicts class 0 for every input (zero weights, bias favouring class 0)."""
    lin = nn.Linear(2, 3)
    with torch.no_grad():
        lin.weight.zero_()
        lin.bias.copy_(torch.tensor([1.0, 0.0, 0.0]))
    return FunctionalModel(lin)


def test_client_accuracy_end_to_end_on_constructed_clients() -> None:
    y_train = torch.tensor([0, 0, 0, 0, 0, 1, 1, 2, 2, 2])
    y_test = torch.tensor([0, 1, 2, 0, 1, 2])
    data = Dataset("toy", Split(torch.zeros(10, 2), y_train), Split(torch.zeros(6, 2), y_test), 3, (2,))
    parts = [np.array([0, 1, 2]), np.array([3, 4, 5, 6]), np.array([7, 8, 9])]  # all 0 / half 0 / all 2
    fed = FederatedData(data, parts, torch.device("cpu"))
    model = _always_class_zero()
    params = model.init_params()
    on_test = ClientAccuracy.build(model, fed, parts, "test", batch_size=4)
    np.testing.assert_allclose(on_test.per_client(params), [1.0, 0.5, 0.0])
    out = on_test(params)
    assert out["client_acc_mean"] == pytest.approx(0.5)
    assert out["client_acc_std"] == pytest.approx(np.std([1.0, 0.5, 0.0]))
    on_train = ClientAccuracy.build(model, fed, parts, "train", batch_size=4)
    np.testing.assert_allclose(on_train.per_client(params), [1.0, 0.5, 0.0])
    np.testing.assert_allclose(own_data_accuracy(np.ones(10, bool), parts), [1.0, 1.0, 1.0])
