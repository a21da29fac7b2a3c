"""Per-client accuracy of the global model and its spread across clients (``eval.client_acc=true``).

FedSAM (Qu et al. 2022, Tables 1-2) reports validation accuracy as "mean (std across clients' local
accuracies)". fedrun's datasets have one global test split, so a client's *local test split* is defined
as the test split re-weighted to that client's training distribution (``eval.client_acc_split=test``,
the default):

    acc_i = sum_g q_i(g) * acc_g,

where g runs over (domain, class) groups (class alone when the data has no domains), q_i(g) is the
fraction of client i's training samples in g, and acc_g the global model's accuracy on the test samples
of g. This is the expected accuracy on a local test set drawn from the client's own distribution, with
no extra split carved out and no sampling noise; groups with no test sample are left out and q_i
renormalised. ``eval.client_acc_split=train`` instead measures the accuracy on each client's own training
samples. Clients without data are skipped. The spread is the mean and the population standard deviation
(ddof=0) over clients, unweighted, as a per-client table reports it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from fedrun.core.tree import Tensors
from fedrun.data.base import Split
from fedrun.data.federated import FederatedData
from fedrun.metrics.evaluate import batched_logits
from fedrun.models.base import FunctionalModel

CLIENT_SPLITS = ("test", "train")


def correct_mask(
    model: FunctionalModel, params: Tensors, fed: FederatedData, split: Split, batch_size: int = 2048
) -> np.ndarray:
    """Per-sample correctness [N] (bool) of ``params`` on ``split``, the model in eval mode."""
    model.module.eval()
    try:
        with torch.inference_mode():
            out = [logits.argmax(1) == y for logits, y in batched_logits(model, params, fed, split, batch_size)]
            mask = torch.cat(out).cpu().numpy() if out else np.zeros(0, dtype=bool)
    finally:
        model.module.train()
    return mask


def group_ids(split: Split, num_classes: int, by_domain: bool = True) -> np.ndarray:
    """(domain, class) group of every sample: domain * num_classes + class (class alone without domains)."""
    y = split.y.cpu().numpy().astype(np.int64)
    if split.domain is None or not by_domain:
        return y
    return split.domain.cpu().numpy().astype(np.int64) * num_classes + y


def reweighted_accuracy(correct: np.ndarray, test_groups: np.ndarray, client_counts: np.ndarray) -> np.ndarray:
    """acc_i = sum_g q_i(g) acc_g for each row of ``client_counts`` [K, G] (NaN for a client with no usable group)."""
    n_groups = client_counts.shape[1]
    seen = np.bincount(test_groups, minlength=n_groups)[:n_groups]
    hits = np.bincount(test_groups, weights=correct.astype(np.float64), minlength=n_groups)[:n_groups]
    acc_g = np.divide(hits, seen, out=np.zeros(n_groups), where=seen > 0)
    counts = client_counts * (seen > 0)
    totals = counts.sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(totals > 0, (counts * acc_g).sum(1) / totals, np.nan)


def own_data_accuracy(correct: np.ndarray, parts: list[np.ndarray]) -> np.ndarray:
    """Accuracy on each client's own samples (``parts`` index ``correct``; NaN for an empty client)."""
    return np.array([correct[p].mean() if len(p) else np.nan for p in parts])


def spread(accs: np.ndarray) -> dict[str, float]:
    """``client_acc_mean``/``_std`` (ddof=0)/``_min``/``_max`` over the clients with a defined accuracy."""
    a = accs[~np.isnan(accs)]
    if a.size == 0:
        return {k: float("nan") for k in ("client_acc_mean", "client_acc_std", "client_acc_min", "client_acc_max")}
    return {
        "client_acc_mean": float(a.mean()),
        "client_acc_std": float(a.std()),
        "client_acc_min": float(a.min()),
        "client_acc_max": float(a.max()),
    }


@dataclass
class ClientAccuracy:
    """Computes the spread of the global model's per-client accuracy; built once per run."""

    model: FunctionalModel
    fed: FederatedData
    parts: list[np.ndarray]
    split_name: str
    batch_size: int
    client_counts: np.ndarray | None = None  # [K, G] (test mode)
    test_groups: np.ndarray | None = None

    @classmethod
    def build(
        cls, model: FunctionalModel, fed: FederatedData, parts: list[np.ndarray], split_name: str, batch_size: int
    ) -> ClientAccuracy:
        out = cls(model, fed, [np.asarray(p, dtype=np.int64) for p in parts], split_name, batch_size)
        if split_name == "test":
            k, dom = fed.data.num_classes, fed.train.domain is not None and fed.test.domain is not None
            train_groups, out.test_groups = group_ids(fed.train, k, dom), group_ids(fed.test, k, dom)
            n_groups = int(max(train_groups.max(initial=0), out.test_groups.max(initial=0))) + 1
            out.client_counts = np.stack([np.bincount(train_groups[p], minlength=n_groups) for p in out.parts])
        return out

    def per_client(self, params: Tensors) -> np.ndarray:
        """Accuracy of ``params`` for every client [K]."""
        if self.split_name == "train":
            correct = correct_mask(self.model, params, self.fed, self.fed.train, self.batch_size)
            return own_data_accuracy(correct, self.parts)
        correct = correct_mask(self.model, params, self.fed, self.fed.test, self.batch_size)
        assert self.test_groups is not None and self.client_counts is not None
        return reweighted_accuracy(correct, self.test_groups, self.client_counts)

    def __call__(self, params: Tensors) -> dict[str, float]:
        return spread(self.per_client(params))
