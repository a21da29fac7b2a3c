"""Per-client evaluation on local test splits (``eval.local_test``), batched over clients: docs/personalised.md.

Every evaluated round reports two models on every client's local test split (:mod:`fedrun.data.local_test`):

- the global model (``local_global_acc_*``): one pass over the concatenation of the clients' local test
  samples, each client's accuracy a segment sum of the correct mask;
- each client's own model (``local_acc_*``): the method's :meth:`Algorithm.personal_model` of the global model
  and the client's state (the global model itself for FedAvg), fine-tuned for ``eval.finetune_steps`` SGD
  steps on the client's training data first when that is set. Clients are evaluated in chunks, one ``vmap``
  over a chunk's stacked models and its padded ``[clients, samples]`` inputs (no Python loop over clients;
  models with BatchNorm statistics, which the vectorised engine refuses too, are evaluated one client at a
  time). The chunks are cut where padding and per-chunk overhead cost least (:func:`chunk_cuts`), and they
  take their inputs, like the global pass, from the preprocessed local test samples, kept for the run when they
  fit in ``INPUTS_BYTES``.

Aggregates over the clients that have local test samples: ``_mean`` (unweighted), ``_wmean`` (weighted by local
test size), ``_std`` (ddof 0), ``_worst10``/``_best10`` (the mean accuracy of the worst/best ceil(K/10)
clients). Per-client values go to ``clients.csv`` (round, client, test_samples, global_acc, acc).

Fine-tuning (``eval.finetune_steps`` with replacement, or ``eval.finetune_epochs`` without, with
``eval.finetune_momentum``) is :mod:`fedrun.metrics.finetune`'s, in eval mode (no dropout), at
``eval.finetune_lr`` or the round's local lr. A method whose personalised model is such a fine-tuning
(Per-FedAvg: one step of alpha) declares it (:attr:`Algorithm.adaptation`); ``eval.finetune_*`` override it.
A client's own model is scored through the method's :meth:`Algorithm.own_logits` (an output mixture for
APFL's ``form=code``).

A method whose authors select each client's best local model on its test data (:attr:`Algorithm.select_on_test`:
LG-FedAvg's ``select_on_test``) also gets ``local_best_acc_*``: every client's best accuracy so far over the
evaluated rounds (clients.csv's ``best_acc``), restored from clients.csv when a run resumes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch.func import vmap

from fedrun.algorithms.base import Algorithm
from fedrun.core import autodiff
from fedrun.core.tree import Tensors, Tree, tree_map, unstack
from fedrun.data.federated import FederatedData
from fedrun.data.local_test import LocalTest
from fedrun.metrics.finetune import FineTune, sgd, tune_plan
from fedrun.metrics.head_eval import head_hits, hits_and_features, linear_head
from fedrun.models.base import FunctionalModel

STATS = ("mean", "wmean", "std", "worst10", "best10")
# A chunk's fixed cost (one vmap call over the model, the gathers), in padded samples' worth of forward pass: on
# the MLP of `scripts/bench.py --what personal` (Ditto, 100 clients) a chunk costs ~0.4 ms and a padded sample
# ~8 us, so ~50 samples (fedrun issue 35, point 6). It only moves the cuts, never a value.
CHUNK_OVERHEAD = 64
INPUTS_BYTES = 1 << 27  # the local test samples' preprocessed inputs are kept (for every round) up to this size


def chunk_cuts(widths: np.ndarray, cap: int, overhead: int = CHUNK_OVERHEAD) -> list[tuple[int, int]]:
    """Cut clients sorted by local test size (``widths``, descending) into contiguous chunks [a, b) that minimise
    the padded samples (each chunk padded to its first, largest, width) plus ``overhead`` per chunk, a chunk of
    several clients holding at most ``cap`` padded samples: a shortest path over the cut points, O(n x chunk)."""
    n = len(widths)
    w = np.asarray(widths, dtype=np.float64)
    best, prev = np.full(n + 1, np.inf), np.zeros(n + 1, dtype=np.int64)
    best[0], lo = 0.0, 0
    for j in range(1, n + 1):
        while lo < j - 1 and (j - lo) * w[lo] > max(cap, w[lo]):  # chunk [lo, j) too wide; stays so as j grows
            lo += 1
        i = np.arange(lo, j)
        cost = best[lo:j] + (j - i) * w[lo:j] + overhead
        at = int(np.argmin(cost))
        best[j], prev[j] = cost[at], lo + at
    out, j = [], n
    while j > 0:
        out.append((int(prev[j]), j))
        j = int(prev[j])
    return out[::-1]


def spread_stats(acc: np.ndarray, sizes: np.ndarray, prefix: str) -> dict[str, float]:
    """``<prefix>_mean/_wmean/_std/_worst10/_best10`` of the per-client accuracies ``acc`` (clients of size 0
    and NaN accuracies left out); NaN for every statistic when no client is left."""
    keep = (sizes > 0) & ~np.isnan(acc)
    a, n = acc[keep], sizes[keep].astype(np.float64)
    if a.size == 0:
        return {f"{prefix}_{s}": float("nan") for s in STATS}
    tail = math.ceil(a.size / 10)
    ordered = np.sort(a)
    return {
        f"{prefix}_mean": float(a.mean()),
        f"{prefix}_wmean": float((a * n).sum() / n.sum()),
        f"{prefix}_std": float(a.std()),
        f"{prefix}_worst10": float(ordered[:tail].mean()),
        f"{prefix}_best10": float(ordered[-tail:].mean()),
    }


def hits_at(
    model: FunctionalModel, params: Tensors, fed: FederatedData, split: Any, idx: torch.Tensor, batch_size: int
) -> torch.Tensor:
    """Per-sample correctness (bool) of one model at the samples ``idx`` of ``split``; call in eval mode."""
    out = []
    with torch.inference_mode():
        for i in range(0, int(idx.numel()), batch_size):
            b = fed.batch(idx[i : i + batch_size], split)
            out.append(model.logits(params, b["x"]).argmax(1) == b["y"])
    return torch.cat(out) if out else torch.zeros(0, dtype=torch.bool, device=idx.device)


def hits_on(model: FunctionalModel, params: Tensors, x: torch.Tensor, y: torch.Tensor, batch_size: int) -> torch.Tensor:
    """:func:`hits_at` on inputs already gathered and preprocessed (``x`` [S, ...], ``y`` [S]), the same batches."""
    with torch.inference_mode():
        out = [model.logits(params, x[i : i + batch_size]).argmax(1) == y[i : i + batch_size]
               for i in range(0, int(y.numel()), batch_size)]  # fmt: skip
    return torch.cat(out) if out else torch.zeros(0, dtype=torch.bool, device=y.device)


@dataclass
class ChunkSpec:
    """One chunk of clients: their ids, padded local test indices [c, L], its mask and their positions."""

    clients: list[int]
    idx: torch.Tensor
    mask: torch.Tensor
    pos: torch.Tensor  # [c, L]: the samples' positions in the concatenated local test samples (0 where padded)


class LocalEvaluation:
    """Evaluates the global model and every client's model on the clients' local test splits (one per run)."""

    def __init__(
        self,
        model: FunctionalModel,
        fed: FederatedData,
        local: LocalTest,
        batch_size: int,
        finetune: tuple[Any, ...],
        seed: int,
        clients_csv: Path | None = None,
        train_parts: list[np.ndarray] | None = None,
    ) -> None:
        self.model, self.fed, self.local, self.batch_size, self.seed = model, fed, local, batch_size, seed
        self.train_parts = fed.clients  # the clients' training samples, which fine-tuning draws from
        if train_parts is not None:  # clients outside fed (the unseen ones)
            self.train_parts = [torch.as_tensor(p, dtype=torch.long, device=fed.device) for p in train_parts]
        self.unseen: LocalEvaluation | None = None  # eval.unseen_clients: the clients that never train
        self.first_id = 0  # the first client's id (the unseen clients': after the trained ones)
        # eval.finetune_* as (steps, lr, batch[, epochs, momentum]); none on: the method's own adaptation
        self.configured = FineTune.of(finetune)
        self.ft = self.configured
        self.best: np.ndarray | None = None  # select_on_test: each client's best accuracy so far
        self.split = fed.train if local.on_train else fed.test
        self.sizes = local.sizes
        dev = fed.device
        self.flat = torch.as_tensor(np.concatenate(local.parts), dtype=torch.long, device=dev)
        self.owner = np.repeat(np.arange(len(local.parts)), self.sizes)
        self.flat_y = self.split.y[self.flat]
        self.chunks = self._chunks()
        self.clients_csv = clients_csv
        self._inputs: tuple[torch.Tensor | None] | None = None  # local_inputs(), once

    def _chunks(self) -> list[ChunkSpec]:
        """Clients with local test samples, largest first, cut (:func:`chunk_cuts`) into chunks of at most
        ``batch_size`` padded samples (or one client)."""
        order = [int(i) for i in np.argsort(-self.sizes, kind="stable") if self.sizes[i] > 0]
        offsets = np.concatenate([[0], np.cumsum(self.sizes)])
        out = []
        for a, z in chunk_cuts(self.sizes[order], self.batch_size):
            ids = order[a:z]
            width = int(self.sizes[ids[0]])
            idx = torch.zeros(len(ids), width, dtype=torch.long)
            mask = torch.zeros(len(ids), width, dtype=torch.bool)
            pos = torch.zeros(len(ids), width, dtype=torch.long)
            for j, cid in enumerate(ids):
                n = int(self.sizes[cid])
                idx[j, :n], mask[j, :n] = torch.as_tensor(self.local.parts[cid]), True
                pos[j, :n] = torch.arange(int(offsets[cid]), int(offsets[cid]) + n)
            dev = self.fed.device
            out.append(ChunkSpec(ids, idx.to(dev), mask.to(dev), pos.to(dev)))
        return out

    def local_inputs(self) -> torch.Tensor | None:
        """The preprocessed inputs of the concatenated local test samples [S, ...], built on the first call and kept
        (the samples never change); None when they would take more than ``INPUTS_BYTES`` (every pass then gathers
        its own batches)."""
        if self._inputs is None:
            one = self.fed.batch(self.flat[:1], self.split)["x"]
            if one.numel() * one.element_size() * int(self.flat.numel()) > INPUTS_BYTES:
                self._inputs = (None,)
            else:
                bs = self.batch_size
                xs = [
                    self.fed.batch(self.flat[i : i + bs], self.split)["x"] for i in range(0, int(self.flat.numel()), bs)
                ]
                self._inputs = (torch.cat(xs) if xs else one[:0],)
        return self._inputs[0]

    # ---- fine-tuning ------------------------------------------------------------------------------------------
    def finetuned(self, stacked: Tensors, clients: list[int], rnd: int, lr: float, loss: Any = None) -> Tensors:
        """Each client's model (stacked [c]) fine-tuned on its own training data (:mod:`fedrun.metrics.finetune`),
        one vmap per step; ``loss``: the objective (the model's cross-entropy by default)."""
        if not self.ft.on:
            return stacked
        plan = tune_plan(self.ft, [self.train_parts[c] for c in clients], self.seed, rnd,
                         [self.first_id + c for c in clients])  # fmt: skip
        step_lr = self.ft.lr if self.ft.lr is not None else lr
        grad = vmap(autodiff.grad(loss or self.model.loss))
        return sgd(stacked, plan, self.fed.batch, grad, step_lr, self.ft.momentum)

    # ---- the clients' own models ------------------------------------------------------------------------------
    def own_models(self, algo: Algorithm, params: Tensors, rows: Tree, c: int) -> Tensors:
        """The chunk's models stacked [c]: the method's personal model of each client's state (or w, repeated)."""
        if algo.personal and rows:
            return vmap(lambda st: algo.personal_model(params, st))(rows)  # type: ignore[no-any-return]
        return tree_map(lambda t: t.unsqueeze(0).expand(c, *t.shape).clone(), params)

    def own_hits(
        self, algo: Algorithm, params: Tensors, states: Any, rnd: int, lr: float, inputs: torch.Tensor | None = None
    ) -> np.ndarray:
        """Correct counts [K] of every client's own model on its local test split; ``inputs``: the kept local test
        inputs (:meth:`local_inputs`), which the chunks index instead of gathering and preprocessing their own."""
        hits = np.zeros(len(self.sizes))
        for ch in self.chunks:
            ids = torch.as_tensor(ch.clients, dtype=torch.long)
            rows = states.gather(ids) if states else {}
            if self.model.buffers:
                hits[ch.clients] = self._hits_one_by_one(algo, params, rows, ch, rnd, lr)
                continue
            own = bool(algo.personal and rows)  # the method's models (its predictor), else copies of w
            forward, loss = (algo.own_logits, algo.own_loss) if own else (self.model.logits, None)
            stacked = self.finetuned(self.own_models(algo, params, rows, len(ch.clients)), ch.clients, rnd, lr, loss)
            with torch.inference_mode():
                if inputs is None:
                    b = self.fed.batch(ch.idx, self.split)
                else:
                    x = inputs.index_select(0, ch.pos.reshape(-1))
                    b = {"x": x.reshape(*ch.pos.shape, *x.shape[1:]), "y": self.flat_y[ch.pos]}
                logits = vmap(forward)(stacked, b["x"])
                hits[ch.clients] = ((logits.argmax(-1) == b["y"]) & ch.mask).sum(1).cpu().numpy()
        return hits

    def head_own_hits(
        self, algo: Algorithm, params: Tensors, states: Any, feats: torch.Tensor, layer: str
    ) -> np.ndarray:
        """Correct counts [K] of every client's own linear head on the body's features ``feats`` of its samples."""
        hits = np.zeros(len(self.sizes))
        keys = algo.personal_keys() or []
        for ch in self.chunks:
            rows = states.gather(torch.as_tensor(ch.clients, dtype=torch.long))
            heads = vmap(lambda st: {k: algo.personal_model(params, st)[k] for k in keys})(rows)
            bias = heads.get(f"{layer}.bias")
            got = head_hits(feats, self.flat_y, heads[f"{layer}.weight"], bias, ch.pos, ch.mask)
            hits[ch.clients] = got.cpu().numpy()
        return hits

    def _hits_one_by_one(
        self, algo: Algorithm, params: Tensors, rows: Tree, ch: ChunkSpec, rnd: int, lr: float
    ) -> np.ndarray:
        """Models with buffers (BatchNorm statistics): one client at a time, with its own buffers (FedBN)."""
        out = np.zeros(len(ch.clients))
        for j, cid in enumerate(ch.clients):
            state = unstack(rows, j) if rows else {}
            mine = bool(algo.personal and state)
            own = algo.personal_model(params, state) if mine else params
            buffers = {**self.model.buffers, **(algo.personal_buffers(state) if mine else {})}
            forward, loss = (algo.own_logits, algo.own_loss) if mine else (self.model.logits, self.model.loss)
            if self.ft.on:
                step_lr = self.ft.lr if self.ft.lr is not None else lr
                plan = tune_plan(self.ft, [self.train_parts[cid]], self.seed, rnd, [self.first_id + cid]).client(0)
                batch = lambda i, bufs=buffers: {**self.fed.batch(i), "buffers": bufs}  # noqa: E731
                own = sgd(own, plan, batch, autodiff.grad(loss), step_lr, self.ft.momentum)
            n = int(self.sizes[cid])
            with torch.inference_mode():
                b = self.fed.batch(ch.idx[j, :n], self.split)
                out[j] = int((forward(own, b["x"], buffers).argmax(1) == b["y"]).sum())
        return out

    # ---- selection on test data (LG-FedAvg's authors) -------------------------------------------------------
    def best_so_far(self, acc: np.ndarray) -> np.ndarray:
        """Each client's best accuracy over the evaluated rounds so far, this one's ``acc`` included."""
        if self.best is None:
            self.best = self.restored_best()
        self.best = np.fmax(self.best, acc)
        return self.best.copy()

    def restored_best(self) -> np.ndarray:
        """Each client's best accuracy in the rounds clients.csv holds (a resumed run's; NaN where none)."""
        best = np.full(len(self.sizes), np.nan)
        if self.clients_csv is None or not self.clients_csv.is_file():
            return best
        rows = pd.read_csv(self.clients_csv)
        if "unseen" in rows:
            rows = rows[rows["unseen"] != 1]
        got = rows.groupby("client")["acc"].max()
        best[got.index.to_numpy()] = got.to_numpy()
        return best

    # ---- one evaluation -----------------------------------------------------------------------------------------
    def __call__(self, algo: Algorithm, params: Tensors, states: Any, rnd: int, lr: float) -> dict[str, float]:
        """metrics.csv's local_* (and unseen_*) columns of round ``rnd`` (0-based); appends the round's rows to
        clients.csv (the unseen clients' too, numbered after the others, with ``unseen`` = 1)."""
        self.ft = self.configured if self.configured.on else FineTune(*algo.adaptation, self.configured.batch)
        g_acc, acc = self.accuracies(algo, params, states, rnd, lr)
        out = {**spread_stats(acc, self.sizes, "local_acc"), **spread_stats(g_acc, self.sizes, "local_global_acc")}
        rows = {"client": np.arange(len(self.sizes)), "test_samples": self.sizes, "global_acc": g_acc, "acc": acc}
        if algo.select_on_test:
            rows["best_acc"] = self.best_so_far(acc)
            out |= spread_stats(rows["best_acc"], self.sizes, "local_best_acc")
        if self.unseen is not None:
            ev = self.unseen
            ev.ft = self.ft
            u_global, u_acc = ev.accuracies(algo, params, None, rnd, lr)  # the global model, fine-tuned when k > 0
            out |= {
                **spread_stats(u_acc, ev.sizes, "unseen_acc"),
                **spread_stats(u_global, ev.sizes, "unseen_global_acc"),
            }
            new = {"client": ev.first_id + np.arange(len(ev.sizes)), "test_samples": ev.sizes, "global_acc": u_global,
                   "acc": u_acc}  # fmt: skip
            if "best_acc" in rows:
                new["best_acc"] = np.full(len(ev.sizes), np.nan)  # never selected: they have no model of their own
            rows = {k: np.concatenate([v, new[k]]) for k, v in rows.items()}
            rows["unseen"] = np.repeat([0, 1], [len(self.sizes), len(ev.sizes)])
        if self.clients_csv is not None:
            frame = pd.DataFrame({"round": rnd + 1, **rows})
            frame.to_csv(self.clients_csv, mode="a", header=not self.clients_csv.is_file(), index=False)
        return out

    def accuracies(self, algo: Algorithm, params: Tensors, states: Any, rnd: int, lr: float) -> tuple[Any, Any]:
        """(the global model's, each client's own model's) accuracy per client, NaN for a client without samples."""
        personal = algo.personal and states is not None
        layer = linear_head(self.model, algo.personal_keys()) if personal and not self.ft.on else None
        self.model.module.eval()
        try:
            whole = layer is None and (personal or self.ft.on) and not self.model.buffers  # own models by vmap
            inputs = self.local_inputs() if whole else None
            if layer is not None:  # the clients differ only in a linear head: one forward pass (head_eval.py)
                hits, feats = hits_and_features(self.model, params, self.fed, self.split, self.flat, self.batch_size,
                                                layer)  # fmt: skip
            elif inputs is not None:
                hits = hits_on(self.model, params, inputs, self.flat_y, self.batch_size)
            else:
                hits = hits_at(self.model, params, self.fed, self.split, self.flat, self.batch_size)
            g_hits = np.bincount(self.owner, weights=hits.cpu().numpy().astype(np.float64), minlength=len(self.sizes))
            if layer is not None:
                own = self.head_own_hits(algo, params, states, feats, layer)
            else:
                own = self.own_hits(algo, params, states, rnd, lr, inputs) if personal or self.ft.on else g_hits
        finally:
            self.model.module.train()
        with np.errstate(invalid="ignore", divide="ignore"):
            return g_hits / self.sizes, own / self.sizes


def resume_clients_csv(path: Path, start: int) -> None:
    """clients.csv as a run resumed after ``start`` rounds continues it: its rows of rounds <= ``start`` (none
    for a fresh run); the rounds after are evaluated again."""
    if not path.is_file():
        return
    if start == 0:
        path.unlink()
        return
    rows = pd.read_csv(path)
    rows[rows["round"] <= start].to_csv(path, index=False)
