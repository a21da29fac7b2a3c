"""The next-character LSTM for Shakespeare (FedCos paper; LEAF's model uses 256 hidden units).

Eagerly (the sequential engine, evaluation) the LSTM runs as ``nn.LSTM``'s fused kernel. Under a ``torch.func``
transform (the vectorised engine's ``vmap``) it runs as the same recurrence in plain tensor operations
(fedrun/models/lstm_cell.py), which ``vmap`` batches over the clients; the fused kernel has no batching rule and
would run once per client. Both compute the same function of the same parameters (tested to float tolerance).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from fedrun.config.registry import MODELS, positive
from fedrun.core.autodiff import eager
from fedrun.core.errors import ConfigError
from fedrun.models.base import ModelParams
from fedrun.models.lstm_cell import lstm_forward

# Rows per fused-kernel call when no gradient is taken on CPU. The recurrence is T small matrix products a step;
# at eval.batch_size's 2048 rows its [rows, 4H] gate blocks fall out of cache. One evaluation of FedCos Table V's
# 98,248 test windows, 1 thread, this machine's CPU: 33-38 s in one call per 2048 rows, 25-26 s at 128 or 64 rows,
# 30-31 s at 256 (accuracy and loss bit-identical).
INFERENCE_ROWS = 128


@dataclass
class LSTMParams(ModelParams):
    """``model=lstm``: embedding ``embed_dim`` (8), ``layers`` (2) LSTM layers of ``hidden`` (FedCos 100, LEAF 256)."""

    embed_dim: int = 8  # character embedding (FedCos, LEAF: 8)
    hidden: int = 100  # LSTM units (FedCos: 100; LEAF's reference model: 256)
    layers: int = 2  # stacked LSTM layers (FedCos, LEAF: 2)

    def __post_init__(self) -> None:
        positive("embed_dim", self.embed_dim)
        positive("hidden", self.hidden)
        positive("layers", self.layers)


class CharLSTM(nn.Module):
    """Token ids [B, T] -> logits [B, vocab] of the character after the window (from the last step's state).

    ``cell``: ``auto`` (fused eagerly, plain tensor operations under ``torch.func`` transforms), ``fused`` or
    ``plain`` (always that one; for tests and measurements).
    """

    def __init__(self, vocab: int, embed_dim: int, hidden: int, layers: int, cell: str = "auto") -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, embed_dim)
        self.lstm = nn.LSTM(embed_dim, hidden, layers, batch_first=True)
        self.fc = nn.Linear(hidden, vocab)
        self.cell = cell

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        plain = self.cell == "plain" or (self.cell == "auto" and not eager() and not torch.compiler.is_compiling())
        if not plain and x.device.type == "cpu" and not torch.is_grad_enabled() and len(x) > INFERENCE_ROWS:
            # inference (evaluation) on CPU: the same rows in cache-sized chunks; each row's result is unchanged
            return torch.cat([self._logits(c, plain) for c in x.split(INFERENCE_ROWS)])
        return self._logits(x, plain)

    def _logits(self, x: torch.Tensor, plain: bool) -> torch.Tensor:
        e = self.embed(x)
        out = lstm_forward(self.lstm, e) if plain else self.lstm(e)[0]
        return self.fc(out[:, -1])


@MODELS.register("lstm", LSTMParams)
def lstm(p: LSTMParams, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """Embedding(C, 8) - 2-layer LSTM(100) - FC(100, C); the vocabulary is the label set (Shakespeare: 80)."""
    if len(input_shape) != 1:
        raise ConfigError(
            "model.name",
            f"lstm needs token sequences [T] (e.g. data=shakespeare); the dataset gives {list(input_shape)}",
        )
    return CharLSTM(num_classes, p.embed_dim, p.hidden, p.layers)
