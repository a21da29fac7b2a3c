"""Accuracy and loss of a model on a split: large batches under ``torch.inference_mode``."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from fedrun.core.tree import Tensors
from fedrun.data.base import Split
from fedrun.data.federated import FederatedData
from fedrun.models.base import FunctionalModel


def evaluate(
    model: FunctionalModel, params: Tensors, fed: FederatedData, split: Split, batch_size: int = 2048
) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) of ``params`` on ``split``, the model in eval mode."""
    model.module.eval()
    correct, loss, n = 0, 0.0, len(split)
    with torch.inference_mode():
        for i in range(0, n, batch_size):
            idx = torch.arange(i, min(i + batch_size, n), device=split.y.device)
            b = fed.batch(idx, split)
            logits = model.logits(params, b["x"]).float()
            loss += float(F.cross_entropy(logits, b["y"], reduction="sum"))
            correct += int((logits.argmax(1) == b["y"]).sum())
    model.module.train()
    return correct / max(n, 1), loss / max(n, 1)
