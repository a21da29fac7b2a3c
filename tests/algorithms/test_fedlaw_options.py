"""FedLAW's SWA order (code: lambda first; Sec. 6.1: gamma first), checked against a plain-torch re-derivation."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.optim.lr_scheduler import CosineAnnealingLR, StepLR
from torch.optim.swa_utils import SWALR

from fedrun.algorithms.fedlaw import FedLAWParams, FedLAWSWAParams
from fedrun.core.errors import ConfigError
from tests.algorithms.test_fedlaw import cohort, make, tiny_env

EPOCHS, LR = 16, 0.05  # stage 2 runs 8 epochs: SWA averages x after epoch 5 (epochs 6 and 7), as in the code


def reference(uploads: dict, weights: torch.Tensor, px: torch.Tensor, py: torch.Tensor, order: str) -> dict:
    """fedlaw_optimization (whether_swa='swa', exp) with the stages in ``order``, the proxy as one batch.

    lambda stage: Adam(0.5, 0.999) on x, CosineAnnealingLR(T_max=100) for epochs <= 5, then SWALR(0.05) and
    a running mean of x after each later epoch; gamma stage: Adam on g, StepLR(20, 0.5). The stage not
    yet run keeps its start value (gamma = 1, lambda = p).
    """
    w_stack, b_stack = uploads["params"]["weight"], uploads["params"]["bias"]
    x = weights.float().log().clone().requires_grad_(True)
    g = torch.zeros((), requires_grad=True)

    def loss() -> torch.Tensor:
        lam, gamma = torch.softmax(x, 0), g.exp()
        w = gamma * torch.einsum("i,ijk->jk", lam, w_stack)
        b = gamma * torch.einsum("i,ij->j", lam, b_stack)
        return F.cross_entropy(px @ w.T + b, py)

    def lam_stage(epochs: int) -> None:
        nonlocal x
        opt = torch.optim.Adam([x], lr=LR, betas=(0.5, 0.999))
        cos, swa, avg, n = CosineAnnealingLR(opt, T_max=100), None, None, 0
        for e in range(epochs):
            opt.zero_grad()
            loss().backward()
            opt.step()
            if e > 5:
                swa = swa or SWALR(opt, swa_lr=0.05)
                n += 1
                avg = x.detach().clone() if avg is None else avg + (x.detach() - avg) / n
                swa.step()
            else:
                cos.step()
        x = avg.requires_grad_(True)

    def gamma_stage(epochs: int) -> None:
        opt = torch.optim.Adam([g], lr=LR, betas=(0.5, 0.999))
        sched = StepLR(opt, step_size=20, gamma=0.5)
        for _ in range(epochs):
            opt.zero_grad()
            loss().backward()
            opt.step()
            sched.step()

    stages = (lam_stage, gamma_stage) if order == "lambda_first" else (gamma_stage, lam_stage)
    stages[0](EPOCHS // 2)
    stages[1](EPOCHS - EPOCHS // 2)
    with torch.no_grad():
        lam, gamma = torch.softmax(x, 0), g.exp()
        return {
            "weight": gamma * torch.einsum("i,ijk->jk", lam, w_stack),
            "bias": gamma * torch.einsum("i,ij->j", lam, b_stack),
        }


@pytest.mark.parametrize("order", ["lambda_first", "gamma_first"])
def test_swa_order_matches_the_two_stage_reference(order: str) -> None:
    model, env = tiny_env()  # proxy: 20 per class x 4 classes = 80 samples, one server batch per epoch
    params, uploads, weights, info = cohort(model, scale=2.0)
    law = make(FedLAWSWAParams, model, env, server_epochs=EPOCHS, server_lr=LR, swa_order=order)
    new, _, diag = law.aggregate(params, {}, uploads, weights, info)
    proxy = law.proxy_batch()
    want = reference(uploads, weights, proxy["x"], proxy["y"], order)
    for k in want:
        torch.testing.assert_close(new[k], want[k], rtol=1e-5, atol=1e-6)
    other = reference(
        uploads, weights, proxy["x"], proxy["y"], "gamma_first" if order == "lambda_first" else "lambda_first"
    )
    assert not torch.allclose(new["weight"], other["weight"], rtol=1e-3, atol=1e-4)  # the order matters here
    assert diag["gamma"] != pytest.approx(1.0, abs=1e-3)


def test_swa_order_values_and_config(make_spec) -> None:  # noqa: ANN001 - fixture
    with pytest.raises(ConfigError, match="swa_order"):
        FedLAWParams(swa=True, swa_order="both")
    assert make_spec("algorithm=fedlaw_swa").algorithm.params.swa_order == "lambda_first"  # the code's order
    spec = make_spec("algorithm=fedlaw_swa", "algorithm.swa_order=gamma_first")
    assert spec.algorithm.params.swa_order == "gamma_first"


def test_joint_rule_matches_the_codes_single_optimizee() -> None:
    """fedlaw_optimization (whether_swa='none', exp): one tensor [x_1..x_m, g] = [log p, 0] under Adam(lr,
    (0.5, 0.999)) and StepLR(20, 0.5) stepped per server epoch, no clamp; w = e^g sum softmax(x)_i w_i."""
    model, env = tiny_env()
    params, uploads, weights, info = cohort(model, scale=2.0)
    epochs = 45  # crosses two StepLR drops
    law = make(FedLAWParams, model, env, server_epochs=epochs, server_lr=LR)
    new, _, diag = law.aggregate(params, {}, uploads, weights, info)
    proxy = law.proxy_batch()
    w_stack, b_stack = uploads["params"]["weight"], uploads["params"]["bias"]
    opt_vars = torch.cat([weights.float().log(), torch.zeros(1)]).requires_grad_(True)
    opt = torch.optim.Adam([opt_vars], lr=LR, betas=(0.5, 0.999))
    sched = StepLR(opt, step_size=20, gamma=0.5)

    def model_param() -> tuple[torch.Tensor, torch.Tensor]:
        coef = opt_vars[-1].exp() * torch.softmax(opt_vars[:-1], 0)
        return torch.einsum("i,ijk->jk", coef, w_stack), torch.einsum("i,ij->j", coef, b_stack)

    for _ in range(epochs):
        w, b = model_param()
        opt.zero_grad()
        F.cross_entropy(proxy["x"] @ w.T + b, proxy["y"]).backward()
        opt.step()
        sched.step()
    with torch.no_grad():
        w, b = model_param()
    torch.testing.assert_close(new["weight"], w, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(new["bias"], b, rtol=1e-5, atol=1e-6)
    assert diag["gamma"] == pytest.approx(float(opt_vars[-1].detach().exp()), rel=1e-5)


@pytest.mark.parametrize("order", ["lambda_first", "gamma_first"])
def test_swa_second_stage_continues_the_first_stages_shuffle(order: str, monkeypatch) -> None:  # noqa: ANN001
    # the code's two stages read one DataLoader (central_node.validate_set): stage 2's epochs are epochs
    # E_s/2 .. E_s - 1 of one shuffle stream, not a replay of stage 1's; 160 proxy samples = 2 batches an epoch
    model, env = tiny_env(per_class=40)
    params, uploads, weights, info = cohort(model)
    law = make(FedLAWSWAParams, model, env, server_epochs=6, server_lr=LR, swa_order=order)
    seen: list[torch.Tensor] = []
    original = type(law).proxy_loss

    def spy(self, models, x, g, batch):  # noqa: ANN001, ANN202
        seen.append(batch["x"].clone())
        return original(self, models, x, g, batch)

    monkeypatch.setattr(type(law), "proxy_loss", spy)
    law.aggregate(params, {}, uploads, weights, info)
    proxy = env.proxy
    gen = proxy.generator(env.seed, info.round)
    want = [env.data.batch(idx, proxy.split)["x"] for _ in range(6) for idx in proxy.epoch_batches(gen)]
    assert len(seen) == len(want) == 12
    for got, ref in zip(seen, want, strict=True):
        torch.testing.assert_close(got, ref, rtol=0, atol=0)
    assert not torch.equal(seen[6], seen[0])  # stage 2 does not replay stage 1


def test_quad_adaptive_gws_keeps_lambda_at_the_size_weights() -> None:
    # adaptive GWS (learn=gamma) defines lambda = p (FedLAW Sec. 4); in the quad form lambda_i = x_i^2 / sum x^2
    # it stays at its start, which must therefore be x_i = sqrt(p_i) (not the code's uniform sqrt(1/m))
    model, env = tiny_env()
    params, uploads, weights, info = cohort(model)
    law = make(FedLAWParams, model, env, server_epochs=0, learn="gamma", parametrization="quad")
    new, _, diag = law.aggregate(params, {}, uploads, weights, info)
    want = {k: torch.einsum("i,i...->...", weights.float(), v) for k, v in uploads["params"].items()}
    for k in want:
        torch.testing.assert_close(new[k], want[k], rtol=1e-6, atol=1e-6)
    assert (diag["lambda_min"], diag["lambda_max"], diag["gamma"]) == pytest.approx((0.1, 0.6, 1.0))
