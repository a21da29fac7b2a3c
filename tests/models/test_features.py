"""The feature/head split used by MOON and FedFA."""

from __future__ import annotations

import torch
from torch import nn

from fedrun.models.base import FunctionalModel
from fedrun.models.features import FeatureModel, find_head


class _WithFc(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(5, 4), nn.ReLU())
        self.fc = nn.Linear(4, 3)
        self.aux = nn.Linear(3, 3)  # registered after fc: must not be taken as the head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.body(x))


def test_sequential_split_gives_penultimate_features() -> None:
    torch.manual_seed(0)
    module = nn.Sequential(nn.Flatten(), nn.Linear(6, 4), nn.ReLU(), nn.Linear(4, 2))
    fm = FeatureModel(FunctionalModel(module))
    params = fm.model.init_params()
    x = torch.randn(3, 2, 3)
    logits, z = fm.forward(params, x)
    expected_z = torch.relu(x.flatten(1) @ params["1.weight"].T + params["1.bias"])
    torch.testing.assert_close(z, expected_z)
    torch.testing.assert_close(fm.classify(params, z), logits)
    assert fm.head_name == "3" and fm.dim == 4


def test_fc_attribute_is_the_head() -> None:
    torch.manual_seed(0)
    fm = FeatureModel(FunctionalModel(_WithFc()))
    assert find_head(fm.model.module)[0] == "fc"
    params = fm.model.init_params()
    x = torch.randn(2, 5)
    logits, z = fm.forward(params, x)
    assert z.shape == (2, 4)
    torch.testing.assert_close(fm.classify(params, z), logits)
    # the split is differentiable through torch.func like the plain model
    g = torch.func.grad(lambda p: fm.features(p, x).sum())(params)
    assert float(g["body.0.weight"].abs().sum()) > 0
