"""The next-character LSTM for Shakespeare (FedCos paper; LEAF's model uses 256 hidden units)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from fedrun.errors import ConfigError
from fedrun.models.base import ModelParams
from fedrun.registry import MODELS, positive


@dataclass
class LSTMParams(ModelParams):
    """``model=lstm``: embedding ``embed_dim`` (8), ``layers`` (2) LSTM layers of ``hidden`` (FedCos 100, LEAF 256)."""

    embed_dim: int = 8
    hidden: int = 100
    layers: int = 2

    def __post_init__(self) -> None:
        positive("embed_dim", self.embed_dim)
        positive("hidden", self.hidden)
        positive("layers", self.layers)


class CharLSTM(nn.Module):
    """Token ids [B, T] -> logits [B, vocab] of the character after the window (from the last step's state)."""

    def __init__(self, vocab: int, embed_dim: int, hidden: int, layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, embed_dim)
        self.lstm = nn.LSTM(embed_dim, hidden, layers, batch_first=True)
        self.fc = nn.Linear(hidden, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.embed(x))
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
