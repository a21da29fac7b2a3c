"""A model's representation z and classifier head, for methods that act on features (MOON, FedFA).

The head is the model's last ``nn.Linear`` (an attribute named ``fc`` or ``classifier`` when there is
one); z is that layer's input, captured with a forward pre-hook during the usual functional call, so any
registered model works unchanged and the call stays a pure function of (params, x) for ``vmap``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from fedrun.core.errors import ConfigError
from fedrun.core.tree import Tensors
from fedrun.models.base import FunctionalModel


def find_head(module: nn.Module) -> tuple[str, nn.Linear]:
    """(qualified name, module) of the classifier: ``fc``/``classifier`` if Linear, else the last Linear."""
    for name in ("fc", "classifier"):
        sub = getattr(module, name, None)
        if isinstance(sub, nn.Linear):
            return name, sub
    linears = [(n, m) for n, m in module.named_modules() if isinstance(m, nn.Linear)]
    if not linears:
        raise ConfigError("model.name", f"{type(module).__name__} has no final nn.Linear to split features from")
    return linears[-1]


class FeatureModel:
    """Splits a :class:`FunctionalModel` into features z = phi(x) and logits = head(z)."""

    def __init__(self, model: FunctionalModel) -> None:
        self.model = model
        self.head_name, self.head = find_head(model.module)
        self.dim: int = self.head.in_features

    def forward(
        self, params: Tensors, x: torch.Tensor, buffers: Tensors | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits, z) of one functional call; z is flattened to [batch, dim]. ``buffers``: as in
        :meth:`FunctionalModel.loss` (the batch's copy of e.g. BatchNorm statistics)."""
        captured: list[torch.Tensor] = []
        hook = self.head.register_forward_pre_hook(lambda _m, args: captured.append(args[0]))
        try:
            logits = self.model.logits(params, x, buffers)
        finally:
            hook.remove()
        return logits, captured[-1].flatten(1)

    def features(self, params: Tensors, x: torch.Tensor, buffers: Tensors | None = None) -> torch.Tensor:
        return self.forward(params, x, buffers)[1]

    def head_params(self, params: Tensors) -> Tensors:
        p = f"{self.head_name}."
        return {k[len(p) :]: v for k, v in params.items() if k.startswith(p)}

    def classify(self, params: Tensors, z: torch.Tensor) -> torch.Tensor:
        """head(z) with the head's weights taken from the full parameter dict ``params``."""
        h = self.head_params(params)
        return F.linear(z, h["weight"], h.get("bias"))
