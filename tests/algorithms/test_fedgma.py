"""FedGMA: the soft sign-agreement mask (paper) and FedIMA code's hard AND-mask variant."""

from __future__ import annotations

import pytest
import torch

from fedrun.algorithms.base import RoundInfo
from fedrun.algorithms.fedgma import FedGMA, FedGMAParams
from fedrun.config.schema import FLConfig
from fedrun.core.errors import ConfigError

W = {"w": torch.zeros(3)}
# three clients; coordinate 0: all agree (+), 1: 2 of 3 agree (A = 1/3), 2: all agree (-)
MODELS = {"w": torch.tensor([[1.0, 1.0, -1.0], [2.0, 1.0, -2.0], [3.0, -4.0, -3.0]])}
P = torch.tensor([0.5, 0.25, 0.25])
INFO = RoundInfo(0, 3, torch.arange(3), torch.tensor([2.0, 1.0, 1.0]), torch.ones(3), 0.1)


def test_paper_mask_scales_disagreeing_coordinates() -> None:
    algo = FedGMA(FedGMAParams(server_lr=1.0, tau=0.5), FLConfig(), None)
    new, _, diag = algo.aggregate(W, {}, {"params": MODELS}, P, INFO)
    avg = (P[:, None] * MODELS["w"]).sum(0)  # [1.75, -0.25, -1.75]
    torch.testing.assert_close(new["w"], torch.stack([avg[0], avg[1] / 3, avg[2]]))
    assert diag["gma_mask_full"] == pytest.approx(2 / 3)
    low = FedGMA(FedGMAParams(server_lr=2.0, tau=0.3), FLConfig(), None).aggregate(W, {}, {"params": MODELS}, P, INFO)
    torch.testing.assert_close(low[0]["w"], 2.0 * avg)  # tau below every agreement: server SGD with lr 2


def test_ima_code_variant_is_fedavg_minus_a_tiny_masked_step() -> None:
    hp = FedGMAParams(variant="ima_code")
    assert (hp.server_lr, hp.tau) == (1e-4, 0.8)
    new, _, _ = FedGMA(hp, FLConfig(), None).aggregate(W, {}, {"params": MODELS}, P, INFO)
    fma = (P[:, None] * MODELS["w"]).sum(0)
    # hand loop of FedIMA's aggregator: p <- FMA - lr * mask_j (w_j - p) / m, mask = |sum sign| > 2.4 & same sign
    p = W["w"].clone()
    for j in range(3):
        d = MODELS["w"][j] - p
        mask = torch.tensor([d[0] > 0, False, d[2] < 0])
        p = fma - 1e-4 * d * mask / 3
    torch.testing.assert_close(new["w"], p)
    assert (new["w"] - fma).abs().max() < 1e-3


def test_bad_variant_raises() -> None:
    with pytest.raises(ConfigError, match="variant"):
        FedGMAParams(variant="hard")
    with pytest.raises(ConfigError, match="tau"):
        FedGMAParams(tau=1.5)
