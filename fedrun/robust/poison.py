"""Data poisoning in a run: the malicious clients' training samples changed once, before the clients' data is built
(:meth:`fedrun.robust.base.DataAttack.poison_client`: label flipping flips all of an attacker's labels, the
backdoor triggers and relabels a share of its samples), and the triggered test split a backdoor's attack success
rate is measured on.

Only the attackers' samples change, and only in the training split: the test split and the proxy set carved out of
it stay clean. The choice of a backdoor's samples is keyed by (seed, "robust", "poison", client), the same for
every method, engine and resume.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from fedrun.core.errors import ConfigError
from fedrun.core.rng import torch_gen
from fedrun.data.base import Dataset, Split
from fedrun.robust.attacks.backdoor import Backdoor, apply_trigger
from fedrun.robust.base import DataAttack


def shared_samples(parts: list[np.ndarray], clients: np.ndarray) -> bool:
    """Whether a sample of ``clients`` also belongs to another client (or twice to one): a partition with
    duplicates, whose poisoning would reach honest clients."""
    if len(clients) == 0:
        return False
    counts = np.bincount(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)
    mine = np.concatenate([parts[c] for c in clients])
    return bool(len(mine) and counts[mine].max() > 1)


def poisoned_rows(data: Dataset, parts: list[np.ndarray], malicious: np.ndarray, attack: DataAttack,
                  seed: int) -> tuple[torch.Tensor, Split] | None:  # fmt: skip
    """The training samples of the ``malicious`` clients (``parts``: each client's sample indices) poisoned by
    ``attack``: (their indices, their poisoned rows in that order); None when no client is malicious."""
    attackers = np.asarray([c for c in malicious if c < len(parts)], dtype=np.int64)
    if len(attackers) == 0:
        return None
    if shared_samples(parts, attackers):
        raise ConfigError("attack.name", f"{attack.name} needs a partition whose clients share no training sample")
    ats, xs, ys = [], [], []
    for c in attackers.tolist():
        at = torch.as_tensor(parts[c], dtype=torch.long)
        if at.numel():
            x, y = attack.poison_client(data.train.x[at], data.train.y[at], data.num_classes,
                                        torch_gen(seed, "robust", "poison", c))  # fmt: skip
            ats.append(at)
            xs.append(x)
            ys.append(y)
    if not ats:
        return torch.zeros(0, dtype=torch.long), Split(data.train.x[:0], data.train.y[:0])
    return torch.cat(ats), Split(torch.cat(xs), torch.cat(ys))


def poison_clients(data: Dataset, parts: list[np.ndarray], malicious: np.ndarray, attack: DataAttack,
                   seed: int) -> Dataset:  # fmt: skip
    """A copy of ``data`` whose training samples of the ``malicious`` clients (``parts``: each client's sample
    indices) are poisoned by ``attack``; ``data`` itself when no client is malicious."""
    poisoned = poisoned_rows(data, parts, malicious, attack, seed)
    if poisoned is None:
        return data
    at, rows = poisoned
    x, y = data.train.x.clone(), data.train.y.clone()
    x[at], y[at] = rows.x, rows.y
    return dataclasses.replace(data, train=dataclasses.replace(data.train, x=x, y=y))


def triggered_test(test: Split, attack: Backdoor) -> Split:
    """The test inputs whose true class is not the backdoor's target, with the trigger stamped on, labelled with the
    target: a model's accuracy on it is the attack success rate (Bagdasaryan et al. 2020)."""
    keep = (test.y != attack.hp.label).nonzero().flatten()
    x = apply_trigger(test.x.index_select(0, keep), attack.hp)
    return Split(x, torch.full_like(keep, attack.hp.label).to(test.y.dtype))
