"""Sample-level DP-SGD (fedrun/privacy/sample.py) against Opacus, the reference for the arithmetic: one client's
steps on the same model and batches equal GradSampleModule + DPOptimizer's at noise 0 (on both paths: book-keeping
and vmap(grad)), and the noise's standard deviation is z C / B, as Opacus' is; the noise is keyed by (seed, round,
client, step)."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fedrun.algorithms.base import sgd_step
from fedrun.privacy.ghost import layer_chain
from fedrun.privacy.sample import DPSGD, NOISE_KEY, NoiseForBatches, clip_and_sum, per_sample_grads


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 4))


def _loss(model: nn.Module):  # noqa: ANN202 - the functional loss of ``model``'s architecture
    def loss(p, batch, ctx):  # noqa: ANN001, ANN202
        return F.cross_entropy(torch.func.functional_call(model, p, (batch["x"],)), batch["y"])

    return loss


def _batches(steps: int, b: int = 8) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [
        {"x": torch.randn(b, 12, generator=g) * 3, "y": torch.randint(0, 4, (b,), generator=g)} for _ in range(steps)
    ]


def _opacus_steps(batches: list[dict[str, torch.Tensor]], clip: float, lr: float) -> dict[str, torch.Tensor]:
    from opacus import GradSampleModule
    from opacus.optimizers import DPOptimizer

    model = _model()
    gsm = GradSampleModule(model)
    opt = DPOptimizer(
        torch.optim.SGD(gsm.parameters(), lr=lr), noise_multiplier=0.0, max_grad_norm=clip,
        expected_batch_size=batches[0]["y"].shape[0],
    )  # fmt: skip
    for batch in batches:
        opt.zero_grad()
        F.cross_entropy(gsm(batch["x"]), batch["y"]).backward()
        opt.step()
    return {k: v.detach().clone() for k, v in model.named_parameters()}


@pytest.mark.parametrize("path", ["vmap_grad", "book_keeping"])  # fedrun/privacy/ghost.py's, a run's for this model
@pytest.mark.parametrize("clip", [0.1, 1.0, 100.0])  # every sample clipped, some, none
def test_steps_equal_opacus_at_noise_zero(clip: float, path: str) -> None:
    batches, lr = _batches(5), 0.5
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Opacus' secure-RNG and hook-mode notices
        want = _opacus_steps(batches, clip, lr)
    model = _model()
    params = {k: v.detach().clone() for k, v in model.named_parameters()}
    dim = sum(v.numel() for v in params.values())
    step = DPSGD(clip, layer_chain(model, params) if path == "book_keeping" else None)
    assert (step.chain is None) == (path == "vmap_grad")
    for batch in batches:
        grads, _ = step(_loss(model), params, {**batch, NOISE_KEY: torch.zeros(dim)}, None)
        params, _ = sgd_step(params, grads, None, lr, 0.0, 0.0, None)
    for k in want:
        assert torch.allclose(params[k], want[k], atol=1e-6), k
    assert not torch.allclose(params["0.weight"], _model().state_dict()["0.weight"])  # the steps moved it


def test_per_sample_grads_are_autograds_one_sample_at_a_time() -> None:
    model, batch = _model(), _batches(1)[0]
    params = {k: v.detach().requires_grad_() for k, v in model.named_parameters()}
    grads, losses = per_sample_grads(_loss(model), params, batch, None)
    for j in (0, 5):
        one = {"x": batch["x"][j : j + 1], "y": batch["y"][j : j + 1]}
        ref = torch.autograd.grad(_loss(model)(params, one, None), list(params.values()))
        for (k, g), r in zip(grads.items(), ref, strict=True):
            assert torch.allclose(g[j], r, atol=1e-6), k
    clipped = clip_and_sum(grads, 0.5)
    norm = torch.sqrt(sum(v.detach().pow(2).sum() for v in clipped.values()))
    assert float(norm) <= 0.5 * 8 + 1e-4  # a sum of 8 vectors of norm <= C
    padded = clip_and_sum(grads, 0.5, torch.tensor([1.0] * 4 + [0.0] * 4))
    first = clip_and_sum({k: v[:4] for k, v in grads.items()}, 0.5)
    assert all(torch.allclose(padded[k], first[k], atol=1e-6) for k in first)  # padding adds nothing


def test_noise_std_is_z_c_over_b_like_opacus() -> None:
    from opacus.optimizers.optimizer import _generate_noise

    z, clip, b, dim = 1.3, 0.7, 8, 200_000
    draws = NoiseForBatches(dim, z * clip, seed=4, dtype=torch.float32, device=torch.device("cpu"))
    noise = draws(2, torch.tensor(5), 3)[NOISE_KEY]
    ours = noise / b  # what DPSGD adds to the mean gradient
    ref = _generate_noise(z * clip, torch.zeros(dim), generator=torch.Generator().manual_seed(0)) / b  # Opacus
    assert float(ours.std()) == pytest.approx(z * clip / b, rel=0.01)
    assert float(ours.std()) == pytest.approx(float(ref.std()), rel=0.01)
    # keyed: the same (seed, round, client, step) draws the same noise; another step, another
    assert torch.equal(noise, draws(2, torch.tensor(5), 3)[NOISE_KEY])
    assert not torch.equal(noise, draws(2, torch.tensor(5), 4)[NOISE_KEY])
    stacked = draws(2, torch.tensor([5, 6]), 3)[NOISE_KEY]  # the vectorised engine's [k, d]: row i is client i's
    assert torch.equal(stacked[0], noise) and not torch.equal(stacked[1], noise)
