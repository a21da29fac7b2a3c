"""DP-SGD's clipped sum without one full gradient per sample: book-keeping (Bu et al. 2023, "Differentially
private optimization on large model at small cost", Alg. 1) on the ghost norm (Goodfellow 2015; Li et al. 2022,
"Large language models can be strong differentially private learners", Sec. 4), for a ``nn.Sequential`` chain of
Linear and Conv2d layers and parameter-free modules (ReLU, Flatten, MaxPool2d...).

For a Linear layer z_j = W a_j + b of sample j, with output gradient g_j = dl_j/dz_j, the per-sample gradients
are dl_j/dW = g_j a_j^T and dl_j/db = g_j, hence (no sequence dimension)

    ||dl_j/dW||^2 = ||a_j||^2 ||g_j||^2,    ||dl_j/db||^2 = ||g_j||^2,

and with c_j = min(1, C / (||dl_j/dtheta|| + 1e-6)) (Opacus' factor) the clipped sums are

    sum_j c_j dl_j/dW = (c o g)^T a,    sum_j c_j dl_j/db = c^T g.

A Conv2d layer's per-sample weight gradients are formed (g_j against the unfolded input: c_out x c_in k^2 each,
small next to a Linear layer's), and summed with the same c_j. a_j and g_j come from one forward that keeps
each layer's input and one backward to zero "probes" added to each layer's output (``torch.func.grad`` with
respect to the probes: autograd forms no weight gradient), so the step runs under the vectorised engine's
``vmap`` over the cohort like the ``vmap(grad)`` path (fedrun/privacy/sample.py), which it equals to float
reassociation (tests/privacy/test_ghost.py).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import grad

from fedrun.core.tree import Tensors

# modules without parameters or state whose output for a sample depends on that sample alone
PARAMETER_FREE = (
    nn.ReLU, nn.LeakyReLU, nn.ELU, nn.GELU, nn.SiLU, nn.Tanh, nn.Sigmoid, nn.Softplus, nn.Flatten, nn.Identity,
    nn.MaxPool2d, nn.AvgPool2d,
)  # fmt: skip


@dataclass
class Layer:
    """One module of the chain: ``kind`` "linear", "conv" or "call" (parameter-free), ``name`` its index."""

    kind: str
    name: str
    module: nn.Module
    bias: bool = False


@dataclass
class LayerChain:
    """The book-keeping clipped sum for a model that is a chain of supported layers (:func:`layer_chain`)."""

    layers: list[Layer]
    meta: nn.Module  # the module on the meta device: the layers' output shapes, without arithmetic
    shapes: dict[tuple[int, ...], list[tuple[int, ...]] | None] = field(default_factory=dict)

    @property
    def parametric(self) -> list[Layer]:
        """The Linear and Conv2d layers, in order."""
        return [layer for layer in self.layers if layer.kind != "call"]

    def out_shapes(self, x_shape: tuple[int, ...]) -> list[tuple[int, ...]] | None:
        """Each Linear/Conv2d layer's output shape for a batch of shape ``x_shape`` (cached per shape); None when
        a Linear layer would see more than one vector per sample (a sequence: the ghost norm above does not hold)."""
        if x_shape not in self.shapes:
            h, out = torch.empty(x_shape, device="meta"), []
            for layer in self.layers:
                h = self.meta.get_submodule(layer.name)(h)
                if layer.kind != "call":
                    out.append(tuple(h.shape))
            sequence = any(
                layer.kind == "linear" and len(s) != 2 for layer, s in zip(self.parametric, out, strict=True)
            )
            self.shapes[x_shape] = None if sequence else out
        return self.shapes[x_shape]

    def forward(
        self, probes: list[torch.Tensor], params: Tensors, x: torch.Tensor, y: torch.Tensor
    ) -> tuple[torch.Tensor, tuple[list[torch.Tensor], torch.Tensor]]:
        """(sum_j l_j, (each Linear/Conv2d layer's input a, the B losses l_j)), every such layer's output plus its
        zero probe, so the gradient with respect to the probes is each layer's per-sample output gradient g."""
        h, inputs, probe = x, [], iter(probes)
        for layer in self.layers:
            if layer.kind == "call":
                h = layer.module(h)
                continue
            inputs.append(h)
            w, b = params[f"{layer.name}.weight"], params.get(f"{layer.name}.bias")
            if layer.kind == "linear":
                h = F.linear(h, w, b)
            else:
                m = cast(nn.Conv2d, layer.module)
                h = F.conv2d(h, w, b, m.stride, cast(tuple[int, ...], m.padding), m.dilation, m.groups)
            h = h + next(probe)
        losses = F.cross_entropy(h, y, reduction="none")
        return losses.sum(), (inputs, losses.detach())

    def clipped_sum(
        self, params: Tensors, batch: dict[str, torch.Tensor], clip: float, weight: torch.Tensor | None
    ) -> tuple[Tensors, torch.Tensor] | None:
        """(sum_j c_j dl_j/dtheta per parameter, the B losses): :func:`fedrun.privacy.sample.clip_and_sum` of
        :func:`~fedrun.privacy.sample.per_sample_grads`, without forming them for the Linear layers; None when
        this input's shape is not one the chain supports (:meth:`out_shapes`)."""
        x, y = batch["x"], batch["y"]
        shapes = self.out_shapes(tuple(x.shape))
        if shapes is None:
            return None
        dtype = next(iter(params.values())).dtype
        probes = [torch.zeros(s, dtype=dtype, device=x.device) for s in shapes]
        outs, (inputs, losses) = grad(self.forward, has_aux=True)(probes, params, x, y)
        parametric = self.parametric
        sq = torch.zeros_like(losses)
        conv_grads: dict[str, torch.Tensor] = {}
        for layer, a, g in zip(parametric, inputs, outs, strict=True):
            if layer.kind == "linear":
                g2 = g.pow(2).sum(1)
                sq = sq + a.pow(2).sum(1) * g2 + (g2 if layer.bias else 0)
            else:
                conv_grads[layer.name] = gw = conv_weight_grads(cast(nn.Conv2d, layer.module), a, g)
                sq = sq + gw.pow(2).flatten(1).sum(1) + (g.sum((2, 3)).pow(2).sum(1) if layer.bias else 0)
        factor = torch.clamp(clip / (sq.sqrt() + 1e-6), max=1.0)
        if weight is not None:
            factor = factor * weight.to(factor.dtype)
        total: Tensors = {}
        for layer, a, g in zip(parametric, inputs, outs, strict=True):
            w = params[f"{layer.name}.weight"]
            if layer.kind == "linear":
                total[f"{layer.name}.weight"] = (g * factor[:, None]).mT @ a
                gb = g
            else:
                total[f"{layer.name}.weight"] = torch.tensordot(factor, conv_grads[layer.name], dims=1).reshape(w.shape)
                gb = g.sum((2, 3))
            if layer.bias:
                total[f"{layer.name}.bias"] = factor @ gb
        return total, losses


def conv_weight_grads(m: nn.Conv2d, a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """The per-sample weight gradients of a Conv2d (groups 1) with input ``a`` [B, c_in, H, W] and output
    gradient ``g`` [B, c_out, H', W']: g_j against the unfolded a_j, [B, c_out, c_in k_h k_w]."""
    cols = F.unfold(a, m.kernel_size, m.dilation, m.padding, m.stride)  # type: ignore[arg-type]
    return g.flatten(2) @ cols.mT


def layer_chain(module: nn.Module, params: Tensors) -> LayerChain | None:
    """The module as a :class:`LayerChain`, or None when it is not one this path supports: a ``nn.Sequential``
    whose children are Linear, Conv2d (groups 1, zero padding, numeric padding) or :data:`PARAMETER_FREE`
    modules, with exactly ``params`` as parameters and no buffers."""
    if not isinstance(module, nn.Sequential) or any(True for _ in module.buffers()):
        return None
    layers, names = [], set()
    for name, m in module.named_children():
        bias = getattr(m, "bias", None) is not None
        if type(m) is nn.Linear:
            layers.append(Layer("linear", name, m, bias))
        elif type(m) is nn.Conv2d and m.groups == 1 and m.padding_mode == "zeros" and not isinstance(m.padding, str):
            layers.append(Layer("conv", name, m, bias))
        elif type(m) in PARAMETER_FREE:
            layers.append(Layer("call", name, m))
            continue
        else:
            return None
        names |= {f"{name}.weight", *([f"{name}.bias"] if bias else [])}
    if names != set(params):
        return None
    return LayerChain(layers, copy.deepcopy(module).to("meta"))
