"""Accuracy and loss of a model on a split: large batches under ``torch.inference_mode``.

No autograd state is built (``inference_mode``), and the per-batch results stay on the split's device until
the end: the correct count and the loss sum (float64, as the former per-batch ``float()`` sums) are read back
once, so a GPU evaluation does not wait for the host after every batch.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.nn.functional as F

from fedrun.core.tree import Tensors
from fedrun.data.base import Split
from fedrun.data.federated import FederatedData
from fedrun.models.base import FunctionalModel


def batched_logits(
    model: FunctionalModel, params: Tensors, fed: FederatedData, split: Split, batch_size: int
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(logits as float32, labels) of consecutive batches of ``split``; call under ``torch.inference_mode``."""
    n = len(split)
    for i in range(0, n, batch_size):
        idx = torch.arange(i, min(i + batch_size, n), device=split.y.device)
        b = fed.batch(idx, split)
        yield model.logits(params, b["x"]).float(), b["y"]


def evaluate(
    model: FunctionalModel, params: Tensors, fed: FederatedData, split: Split, batch_size: int = 2048
) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) of ``params`` on ``split``, the model in eval mode."""
    n = len(split)
    model.module.eval()
    try:
        with torch.inference_mode():
            correct = torch.zeros((), dtype=torch.long, device=split.y.device)
            loss = torch.zeros((), dtype=torch.float64, device=split.y.device)
            for logits, y in batched_logits(model, params, fed, split, batch_size):
                loss += F.cross_entropy(logits, y, reduction="sum").double()
                correct += (logits.argmax(1) == y).sum()
            hits, total = int(correct), float(loss)
    finally:
        model.module.train()
    return hits / max(n, 1), total / max(n, 1)
