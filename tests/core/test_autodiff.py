"""fedrun.core.autodiff: torch.func semantics, plain autograd when no transform is active."""

from __future__ import annotations

import torch

from fedrun.core import autodiff


def _loss(p: dict[str, torch.Tensor], x: torch.Tensor, unused: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x @ p["w"] + p["b"]).pow(2).sum()


def _loss_aux(p: dict[str, torch.Tensor], x: torch.Tensor, unused: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    h = x @ p["w"] + p["b"]
    return h.pow(2).sum(), h


def _inputs() -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    p = {"w": torch.randn(4, 3, generator=g), "b": torch.randn(3, generator=g)}
    return p, torch.randn(5, 4, generator=g), torch.randn(2, generator=g)


def test_eager_matches_torch_func() -> None:
    p, x, u = _inputs()
    g, v = autodiff.grad_and_value(_loss)(p, x, u)
    g_ref, v_ref = torch.func.grad_and_value(_loss)(p, x, u)
    assert torch.equal(v, v_ref) and not v.requires_grad
    for k in p:
        assert torch.allclose(g[k], g_ref[k], rtol=1e-6, atol=1e-7)
        assert not g[k].requires_grad
    assert not p["w"].requires_grad  # the caller's tensors are not touched


def test_argnums_aux_and_unused_input() -> None:
    p, x, u = _inputs()
    (gp, gx, gu), (v, aux) = autodiff.grad_and_value(_loss_aux, argnums=(0, 1, 2), has_aux=True)(p, x, u)
    (rp, rx, ru), (rv, raux) = torch.func.grad_and_value(_loss_aux, argnums=(0, 1, 2), has_aux=True)(p, x, u)
    assert torch.allclose(gx, rx) and torch.allclose(gp["w"], rp["w"]) and torch.allclose(v, rv)
    assert torch.equal(gu, torch.zeros_like(u)) and torch.equal(ru, gu)  # no dependence: zero gradient
    assert torch.equal(aux, raux) and not aux.requires_grad
    g_only = autodiff.grad(_loss_aux, has_aux=True)(p, x, u)
    assert torch.allclose(g_only[0]["b"], rp["b"]) and torch.equal(g_only[1], raux)


def test_under_vmap_uses_the_transform() -> None:
    p, x, u = _inputs()
    stacked = {k: torch.stack([v, 2 * v]) for k, v in p.items()}
    gs, vs = torch.func.vmap(autodiff.grad_and_value(_loss), in_dims=(0, None, None))(stacked, x, u)
    for j in range(2):
        g, v = autodiff.grad_and_value(_loss)({k: t[j] for k, t in stacked.items()}, x, u)
        assert torch.allclose(vs[j], v) and torch.allclose(gs["w"][j], g["w"], rtol=1e-6, atol=1e-7)


def test_eager_path_runs_outside_functorch() -> None:
    """Outside transforms the loss runs with no functorch level active (that is the point: it is faster)."""
    levels: list[object] = []

    def loss(p: dict[str, torch.Tensor], x: torch.Tensor, unused: torch.Tensor) -> torch.Tensor:
        levels.append(torch._C._functorch.maybe_current_level())
        return _loss(p, x, unused)

    p, x, u = _inputs()
    autodiff.grad_and_value(loss)(p, x, u)
    torch.func.grad_and_value(loss)(p, x, u)
    assert levels[0] is None and levels[1] is not None
