"""A model as fedrun trains it: an ``nn.Module`` called functionally on a parameter dict."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from fedrun.core.autodiff import eager
from fedrun.core.errors import ConfigError
from fedrun.core.tree import Tensors


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
        self._slot_map: dict[str, list[tuple[dict[str, Any], str]]] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_slot_map": None}  # rebuilt on first use from the (copied) module

    def init_params(self) -> Tensors:
        return {n: p.detach().clone() for n, p in self.module.named_parameters()}

    def logits(self, params: Tensors, x: torch.Tensor, buffers: Tensors | None = None) -> torch.Tensor:
        state = {**(self.buffers if buffers is None else buffers), **params}
        if eager():
            slots = self._slots()
            if state.keys() <= slots.keys():
                return self._swapped_call(slots, state, x)
        return functional_call(self.module, state, (x,))

    # ---- the eager fast path ------------------------------------------------------------------------------
    def _slots(self) -> dict[str, list[tuple[dict[str, Any], str]]]:
        """Where each named parameter/buffer lives: (its owner's ``_parameters``/``_buffers``, attribute), one
        entry per alias of a tied tensor (as ``functional_call``'s ``tie_weights`` replaces them all)."""
        if self._slot_map is None:
            slot_map: dict[str, list[tuple[dict[str, Any], str]]] = {}
            for kind, named in (("_parameters", self.module.named_parameters), ("_buffers", self.module.named_buffers)):
                canonical = {id(t): n for n, t in named()}
                for name, t in named(remove_duplicate=False):
                    path, _, attr = name.rpartition(".")
                    owner = self.module.get_submodule(path) if path else self.module
                    slot_map.setdefault(canonical[id(t)], []).append((getattr(owner, kind), attr))
            self._slot_map = slot_map
        return self._slot_map

    def _swapped_call(
        self, slots: dict[str, list[tuple[dict[str, Any], str]]], state: Tensors, x: torch.Tensor
    ) -> torch.Tensor:
        """``functional_call`` without its per-call set-up (~20 us, ~3% of a small MLP's CPU step): put the
        tensors in the module's slots, run it, put the originals back. Only outside torch.func transforms."""
        saved = []
        try:
            for name, t in state.items():
                for table, attr in slots[name]:
                    saved.append((table, attr, table[attr]))
                    table[attr] = t
            return self.module(x)
        finally:
            for table, attr, old in reversed(saved):
                table[attr] = old

    def loss(self, params: Tensors, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Mean cross-entropy of a batch ``{x, y, w?, buffers?}``.

        ``buffers`` (a client's copy of e.g. BatchNorm running statistics) travel in the batch because it is
        an argument of the differentiated function: ``torch.func`` lets a forward pass update arguments in
        place, but not tensors it captured.
        """
        logits = self.logits(params, batch["x"], batch.get("buffers"))  # type: ignore[arg-type]  # a tensor dict
        weight = batch.get("w")
        if weight is None:  # one fused kernel: the common case, every batch but padded ones
            return F.cross_entropy(logits, batch["y"])
        return masked_mean(F.cross_entropy(logits, batch["y"], reduction="none"), weight)

    def set_buffers(self, buffers: Tensors) -> None:
        """Make ``buffers`` the global model's (used in evaluation and copied to the next round's clients)."""
        for k, v in buffers.items():
            self.buffers[k].copy_(v)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.module.parameters())

    # ---- body and head (personalised methods: docs/personalised.md) ------------------------------------------
    def layers(self) -> list[str]:
        """The names of the modules that own parameters directly, in registration order (the model's layers)."""
        return [n for n, m in self.module.named_modules() if any(True for _ in m.parameters(recurse=False))]

    def head_layers(self, head: list[str] | None = None, field: str = "algorithm.head") -> list[str]:
        """The layers of the head: ``head`` as given (module names, each a layer or a block of layers), else the
        model's declaration (a ``head_layers`` attribute of its module), else its last layer (the classifier of
        every model in the registry). A name that is no module of the model is one line naming ``field``."""
        if head is None:
            declared = getattr(self.module, "head_layers", None)
            layers = self.layers()
            return list(declared) if declared is not None else layers[-1:]
        modules = dict(self.module.named_modules())
        for name in head:  # "" is the root module: the whole model, not a layer of it
            if not name or name not in modules or not any(True for _ in modules[name].parameters()):
                valid = ", ".join(self.layers())
                raise ConfigError(field, f"{name!r} names no layer of the model; valid: a list of {valid}")
        return list(head)

    def head_keys(self, head: list[str] | None = None, field: str = "algorithm.head") -> list[str]:
        """The parameter names of the head (see :meth:`head_layers`); the rest of the model is the body."""
        prefixes = [h + "." for h in self.head_layers(head, field)]
        return [k for k, _ in self.module.named_parameters() if any(k.startswith(p) for p in prefixes)]

    def norm_keys(self) -> tuple[list[str], list[str]]:
        """(parameter names, buffer names) of the model's BatchNorm layers (FedBN keeps them local)."""
        params, buffers = [], []
        for name, m in self.module.named_modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                params += [f"{name}.{k}" for k, _ in m.named_parameters(recurse=False)]
                buffers += [f"{name}.{k}" for k, _ in m.named_buffers(recurse=False)]
        return params, buffers
