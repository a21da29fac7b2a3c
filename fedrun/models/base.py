"""A model as fedrun trains it: an ``nn.Module`` called functionally on a parameter dict."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from fedrun.errors import ConfigError
from fedrun.tree import Tensors


@dataclass
class ModelParams:
    """Fields every model accepts (``model.*``)."""


def require_image(
    name: str, input_shape: tuple[int, ...], channels: int | None = None, size: int | None = None
) -> None:
    """Cross-check a model's expected input against the dataset (raises a one-line ConfigError)."""
    ok = len(input_shape) == 3 and (channels is None or input_shape[0] == channels)
    ok = ok and (size is None or input_shape[1:] == (size, size))
    if not ok:
        want = f"[{channels or 'C'}, {size or 'H'}, {size or 'W'}]"
        raise ConfigError("model.name", f"{name} needs image input {want}; the dataset gives {list(input_shape)}")


def masked_mean(values: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
    """Mean of per-sample ``values``; with ``weight`` (1 = real sample, 0 = padding) a weighted mean."""
    if weight is None:
        return values.mean()
    return (values * weight).sum() / weight.sum().clamp_min(1.0)


class FunctionalModel:
    """Wraps an ``nn.Module`` so it is called as f(params, x): the form every engine and algorithm uses.

    Parameters travel as ``dict[str, Tensor]``; buffers (e.g. BatchNorm statistics) are kept separately and
    are not trained. Models whose ``vmap_safe`` attribute is False (in-place buffer updates) must run on
    the sequential engine.
    """

    def __init__(self, module: nn.Module) -> None:
        self.module = module
        self.buffers: Tensors = {n: b for n, b in module.named_buffers()}
        self.vmap_safe: bool = getattr(module, "vmap_safe", True) and not self.buffers

    def init_params(self) -> Tensors:
        return {n: p.detach().clone() for n, p in self.module.named_parameters()}

    def logits(self, params: Tensors, x: torch.Tensor, buffers: Tensors | None = None) -> torch.Tensor:
        state = {**(self.buffers if buffers is None else buffers), **params}
        return functional_call(self.module, state, (x,))

    def loss(self, params: Tensors, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Mean cross-entropy of a batch ``{x, y, w?, buffers?}``.

        ``buffers`` (a client's copy of e.g. BatchNorm running statistics) travel in the batch because it is
        an argument of the differentiated function: ``torch.func`` lets a forward pass update arguments in
        place, but not tensors it captured.
        """
        ce = F.cross_entropy(self.logits(params, batch["x"], batch.get("buffers")), batch["y"], reduction="none")
        return masked_mean(ce, batch.get("w"))

    def set_buffers(self, buffers: Tensors) -> None:
        """Make ``buffers`` the global model's (used in evaluation and copied to the next round's clients)."""
        for k, v in buffers.items():
            self.buffers[k].copy_(v)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.module.parameters())
