"""The per-client evaluation's shortcut when the clients' models differ only in a linear head (FedPer, FedRep,
FedRoD: :meth:`Algorithm.personal_keys` names the parameters of one ``nn.Linear``).

Client i's logits are then W_i z + b_i with z = phi(x) the shared body's output, the same for every client. The
global evaluation's one pass over the concatenated local test samples already computes phi(x) for every sample
(the head's input, caught by a forward pre-hook), so each client's own accuracy costs one batched matrix
product of its samples' features with its head, not a second forward pass per client (fedrun issue 35, point 6:
``scripts/bench.py``'s ``--what personal``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from fedrun.core.tree import Tensors
from fedrun.data.federated import FederatedData
from fedrun.models.base import FunctionalModel


def linear_head(model: FunctionalModel, keys: list[str] | None) -> str | None:
    """The name of the model's head (its declared head, one ``nn.Linear``, the layer that gives the logits) when its
    parameters are exactly ``keys``; None otherwise (LG-FedAvg's personal body, a whole personal model)."""
    if not keys or model.buffers or len(model.head_layers()) != 1:
        return None
    layer = keys[0].rpartition(".")[0]
    if layer != model.head_layers()[0]:
        return None
    try:
        module = model.module.get_submodule(layer)
    except AttributeError:
        return None
    own = {f"{layer}.{n}" for n, _ in module.named_parameters(recurse=False)}
    return layer if isinstance(module, nn.Linear) and set(keys) == own else None


def hits_and_features(
    model: FunctionalModel,
    params: Tensors,
    fed: FederatedData,
    split: Any,
    idx: torch.Tensor,
    batch_size: int,
    layer: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(per-sample correctness of ``params``, the input of layer ``layer`` [S, d]) at the samples ``idx``."""
    feats: list[torch.Tensor] = []
    hook = model.module.get_submodule(layer).register_forward_pre_hook(lambda _m, args: feats.append(args[0]))
    out = []
    try:
        with torch.inference_mode():
            for i in range(0, int(idx.numel()), batch_size):
                b = fed.batch(idx[i : i + batch_size], split)
                out.append(model.logits(params, b["x"]).argmax(1) == b["y"])
    finally:
        hook.remove()
    if not out:
        return torch.zeros(0, dtype=torch.bool, device=idx.device), torch.zeros(0, 0, device=idx.device)
    return torch.cat(out), torch.cat(feats).flatten(1)


def head_hits(
    feats: torch.Tensor, labels: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, pos: torch.Tensor,
    mask: torch.Tensor,
) -> torch.Tensor:  # fmt: skip
    """Correct counts [c] of c clients' heads (``weight`` [c, C, d], ``bias`` [c, C]) on their samples, the rows
    ``pos`` [c, L] (padded, ``mask``) of ``feats`` [S, d] and ``labels`` [S]."""
    with torch.inference_mode():
        z = feats[pos]  # [c, L, d]
        logits = torch.bmm(z, weight.transpose(1, 2))
        if bias is not None:
            logits = logits + bias.unsqueeze(1)
        return ((logits.argmax(-1) == labels[pos]) & mask).sum(1)
