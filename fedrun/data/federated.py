"""The federated view of a dataset on the compute device: the whole split as one tensor, clients as
index tensors, a minibatch as a gather. No DataLoader in the hot path, no per-sample Python."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from fedrun.config.schema import FLConfig
from fedrun.core.errors import ConfigError
from fedrun.core.rng import torch_gen
from fedrun.data.augment import augment_batch, base_key
from fedrun.data.base import Dataset, Preprocess, Split


class FederatedData:
    """Training split + client index tensors + test split, all on ``device``."""

    def __init__(
        self,
        data: Dataset,
        parts: list[np.ndarray],
        device: torch.device,
        dtype: torch.dtype = torch.float32,
        test: Split | None = None,
    ) -> None:
        self.data = data
        self.device = device
        self.train = data.train.to(device)
        self.test = (test if test is not None else data.test).to(device)
        self.clients = [torch.as_tensor(p, dtype=torch.long, device=device) for p in parts]
        self.sizes = torch.tensor([len(p) for p in parts], dtype=torch.long)
        self.pre = Preprocess(data.mean, data.std, dtype).to(device)
        self.augment_key: int | None = None  # set by set_augment: client training batches are augmented
        self.augment = "none"
        self.swap: Swap | None = None  # set by set_swap: some samples read otherwise in some training rounds

    def set_augment(self, mode: str, seed: int) -> None:
        """Augment client training batches (``data.augment``): none | crop_flip | flip_crop_half (images)."""
        self.augment, self.augment_key = mode, None
        if mode == "none":
            return
        if self.train.x.dim() != 4 or self.train.x.dtype != torch.uint8:
            raise ConfigError("data.augment", f"{mode} needs image data; valid: none")
        self.augment_key = base_key(seed)

    def set_swap(self, rows: Split, at: torch.Tensor, first: int, last: int | None) -> None:
        """In training rounds ``first``..``last`` (0-based, inclusive; None: to the end) the samples at ``at`` are read
        from ``rows`` (row i for sample ``at[i]``) in client training batches; every other read sees the split as it is
        (a data attack in a window of rounds: fedrun/capabilities/attack.py)."""
        pos = torch.full((len(self.train),), -1, dtype=torch.long)
        pos[at.cpu()] = torch.arange(len(at))
        self.swap = Swap(rows.to(self.device), pos.to(self.device), first, last)

    def _swapped(
        self, idx: torch.Tensor, rnd: int, x: torch.Tensor, y: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``x`` and ``y`` gathered at ``idx`` with the swapped samples' rows in round ``rnd`` (:meth:`set_swap`)."""
        sw = self.swap
        if sw is None or rnd < sw.first or (sw.last is not None and rnd > sw.last):
            return x, y
        pos = sw.pos.index_select(0, idx.reshape(-1)).reshape(idx.shape)
        hit = pos >= 0
        if bool(hit.any()):
            x, y = x.clone(), y.clone()
            x[hit], y[hit] = sw.rows.x.index_select(0, pos[hit]), sw.rows.y.index_select(0, pos[hit])
        return x, y

    def _gather(self, idx: torch.Tensor, split: Split | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The stored ``x`` and ``y`` at ``idx`` (any leading shape), not yet preprocessed."""
        s = self.train if split is None else split
        flat = idx.reshape(-1)
        x = s.x.index_select(0, flat)
        return x.reshape(*idx.shape, *x.shape[1:]), s.y.index_select(0, flat).reshape(idx.shape)

    def batch(self, idx: torch.Tensor, split: Split | None = None) -> dict[str, torch.Tensor]:
        """Gather the samples at ``idx`` (any leading shape) as model input ``{x, y}``."""
        x, y = self._gather(idx, split)
        return {"x": self.pre(x), "y": y}

    def train_batch(
        self,
        idx: torch.Tensor,
        rnd: int,
        clients: int | torch.Tensor,
        step: int,
        extras: Callable[[int, torch.Tensor, int], dict[str, torch.Tensor]] | None = None,
    ) -> dict[str, torch.Tensor]:
        """A client training minibatch: :meth:`batch`, augmented when ``data.augment`` is set, with the method's
        ``extras`` (:attr:`Algorithm.batch_extras`: DP-SGD's noise) for (``rnd``, the clients, ``step``).

        ``idx`` is [B] for one client or [k, B] for k clients (``clients`` their ids, in row order); the
        augmentation draws are keyed by (seed, ``rnd``, client, ``step``, position in the batch), so every
        engine sees the same images.
        """
        if extras is not None:
            cl = torch.as_tensor(clients, dtype=torch.long).reshape(idx.shape[:-1])
            return {**self._train_batch(idx, rnd, clients, step), **extras(rnd, cl, step)}
        return self._train_batch(idx, rnd, clients, step)

    def _train_batch(
        self, idx: torch.Tensor, rnd: int, clients: int | torch.Tensor, step: int
    ) -> dict[str, torch.Tensor]:
        if self.augment_key is None and self.swap is None:
            return self.batch(idx)
        x, y = self._swapped(idx, rnd, *self._gather(idx))
        if self.augment_key is None:
            return {"x": self.pre(x), "y": y}
        cl = torch.as_tensor(clients, dtype=torch.long, device=idx.device).reshape(idx.shape[:-1])
        if self.augment == "crop_flip":  # on the stored image: black padding, as transforms before Normalize
            return {"x": self.pre(augment_batch(x, self.augment_key, rnd, cl, step)), "y": y}
        # flip_crop_half: on the normalised image (FL-Simulator stores it normalised), zero padding
        return {"x": augment_batch(self.pre(x), self.augment_key, rnd, cl, step, half_crop=True), "y": y}


@dataclass(frozen=True)
class Swap:
    """Samples read from other rows in a window of training rounds (:meth:`FederatedData.set_swap`): ``pos[i]`` the
    row of ``rows`` sample i is read from (-1: its own)."""

    rows: Split
    pos: torch.Tensor
    first: int
    last: int | None


def num_local_steps(n: int, fl: FLConfig) -> int:
    """Local steps for a client of ``n`` samples: ``fl.local_steps`` or epochs x ceil(n / batch)."""
    if n == 0:
        return 0
    if fl.local_steps is not None:
        return fl.local_steps
    return fl.local_epochs * math.ceil(n / fl.batch_size)


def batch_plan(client_idx: torch.Tensor, fl: FLConfig, seed: int, rnd: int, client: int) -> list[torch.Tensor]:
    """The minibatches (as global sample indices) client ``client`` uses in round ``rnd``.

    With epochs: each epoch a fresh permutation cut into batches of ``fl.batch_size`` (the last one
    smaller, like a DataLoader without drop_last). With ``fl.local_steps``: batches are taken in turn from
    a stream of permutations, so a client smaller than steps x batch reshuffles at each epoch's end. The
    order is drawn from a generator keyed by (seed, round, client), the same for every engine/algorithm.
    """
    n = int(client_idx.numel())
    if n == 0:
        return []
    g = torch_gen(seed, "batches", rnd, client)
    b = fl.batch_size
    if fl.local_steps is None:
        out: list[torch.Tensor] = []
        for _ in range(fl.local_epochs):
            perm = client_idx[torch.randperm(n, generator=g).to(client_idx.device)]
            out.extend(perm[i : i + b] for i in range(0, n, b))
        return out
    need = fl.local_steps * min(b, n)
    stream = torch.cat([torch.randperm(n, generator=g) for _ in range(math.ceil(need / n))])
    stream = client_idx[stream.to(client_idx.device)]
    step = min(b, n)
    return [stream[i * step : (i + 1) * step] for i in range(fl.local_steps)]
