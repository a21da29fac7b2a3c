"""Personalised evaluation's keys of the ``eval`` section (docs/personalised.md): the clients' local test splits,
fine-tuning before evaluation, and clients that never train. They join the ``eval`` section after its own keys
(fedrun/capabilities/local_eval.py)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from fedrun.config.registry import in_range, positive
from fedrun.core.errors import ConfigError

AUTO = "auto"  # eval.local_test's default: the method decides (fedrun/algorithms/base.py ``personal``)


@dataclass(frozen=True)
class LocalEvalSettings:
    """Each client's model on its own local test split (``eval.local_test``): ``local_acc_*`` columns and
    clients.csv."""

    # personalised evaluation (docs/personalised.md): auto (split for a method with a model per client, personal =
    # True; else none) | none | split (each client's own data, PFLlib/FL-bench) | partition (the test set dealt out
    # with each client's label distribution); local_acc_* columns, clients.csv
    local_test: Literal["auto", "none", "split", "partition"] = "auto"
    local_test_fraction: float = 0.25  # split: the share of each client's samples held out (PFLlib's train_ratio 0.75)
    local_test_seed: int | None = None  # the draw of the local test splits (None: the run's seed)
    finetune_steps: int = 0  # k SGD steps of each client's model on its own training data before it is evaluated
    finetune_lr: float | None = None  # the fine-tuning lr (None: the round's local lr)
    finetune_epochs: int = 0  # or E passes over its training data, shuffled, without replacement (FedBABU: 5)
    finetune_momentum: float = 0.0  # the fine-tuning's SGD momentum (0: plain SGD; FedBABU: 0.9)
    unseen_clients: int = 0  # U more clients of the same partition that never train: unseen_acc_* (new clients)

    def __post_init__(self) -> None:
        in_range(
            "local_test_fraction",
            self.local_test_fraction,
            0.0,
            1.0,
            lo_open=True,
            hi_open=True,
            why="0 leaves no local test sample, 1 no training sample",
        )
        positive("finetune_steps", self.finetune_steps, allow_zero=True)
        positive("finetune_lr", self.finetune_lr)
        positive("finetune_epochs", self.finetune_epochs, allow_zero=True)
        in_range("finetune_momentum", self.finetune_momentum, 0.0, 1.0, hi_open=True)
        if self.finetune_steps and self.finetune_epochs:
            raise ConfigError("finetune_epochs", "fine-tune by steps or by epochs; valid: 0 with eval.finetune_steps")
        if self.finetune_momentum and not (self.finetune_steps or self.finetune_epochs):
            why = "no fine-tuning to apply it to; valid: 0, or with eval.finetune_steps or eval.finetune_epochs"
            raise ConfigError("finetune_momentum", why)
        positive("unseen_clients", self.unseen_clients, allow_zero=True)
        if self.unseen_clients and self.local_test == "none":
            raise ConfigError(
                "unseen_clients",
                "unseen clients are evaluated on local test splits; valid: 0, or eval.local_test=split or partition",
            )
        if (self.finetune_steps or self.finetune_epochs) and self.local_test == "none":
            raise ConfigError(
                "finetune_steps" if self.finetune_steps else "finetune_epochs",
                "fine-tuned models are evaluated on local test splits; valid: 0, or"
                " eval.local_test=split or partition with it",
            )

    def resolved(self, personal: bool) -> LocalEvalSettings:
        """``auto`` made definite for a method that keeps a model per client (``personal``: split) or not (none); the
        checks run again on the result (fine-tuning and unseen clients need a split)."""
        if self.local_test != AUTO:
            return self
        return dataclasses.replace(self, local_test="split" if personal else "none")

    @classmethod
    def of(cls, spec: Any) -> LocalEvalSettings:
        """The run's personalised-evaluation settings (a :class:`~fedrun.config.schema.RunSpec`'s)."""
        out: LocalEvalSettings = spec.sections["local_eval"]
        return out
