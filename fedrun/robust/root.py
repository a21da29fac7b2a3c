"""FLTrust's server update g_0 (Cao et al. 2021, Alg. 2, ``ModelUpdate(w, D_0, b, beta, R_l)``): the server trains the
current global model w^t on its clean root dataset D_0 exactly as a client trains on its own data, with the method's
local step (fedrun/algorithms/base.py ``client_step``), the round's lr, ``fl.batch_size`` and ``fl.local_epochs``
(or ``fl.local_steps``), and momentum when ``fl.momentum`` is set; g_0 = w_0 - w^t.

D_0 is the run's proxy split (``proxy.per_class`` per class carved out of the test split for every method:
fedrun/data/proxy.py): FLTrust's 100 root examples at the default 10 per class of a 10-class dataset. Its batches
come from a generator keyed by (seed, "robust", "root", round), the same on every engine and resume.
"""

from __future__ import annotations

import math

import torch

from fedrun.algorithms.base import Algorithm, ClientContext
from fedrun.core.rng import torch_gen
from fedrun.core.tree import Tensors, Tree, clone, tree_map, zeros_like
from fedrun.data.base import Split
from fedrun.data.federated import FederatedData


def root_batches(n: int, batch: int, epochs: int, steps: int | None, gen: torch.Generator) -> list[torch.Tensor]:
    """Index batches over ``n`` root samples: ``epochs`` fresh permutations cut into ``batch``-sized pieces, or
    ``steps`` batches taken in turn from a stream of permutations (as a client's plan: fedrun/data/federated.py)."""
    if steps is None:
        out: list[torch.Tensor] = []
        for _ in range(epochs):
            perm = torch.randperm(n, generator=gen)
            out.extend(perm[i : i + batch] for i in range(0, n, batch))
        return out
    step = min(batch, n)
    stream = torch.cat([torch.randperm(n, generator=gen) for _ in range(math.ceil(steps * step / n))])
    return [stream[i * step : (i + 1) * step] for i in range(steps)]


def root_update(
    algo: Algorithm, fed: FederatedData, root: Split, params: Tensors, extras: Tree, lr: float, seed: int, rnd: int
) -> torch.Tensor:
    """g_0 = w_0 - w^t as one float32 row in the upload pipeline's layout (the float entries of ``params`` in order,
    each flattened): the method's local training of ``params`` on ``root`` in round ``rnd``."""
    fl = algo.round_fl(rnd)
    dtype = next(iter(params.values())).dtype
    size = torch.tensor(float(len(root)), dtype=dtype, device=fed.device)
    ctx = ClientContext(params, extras, algo.client_init(params), lr, size)
    w = tree_map(lambda t: t.clone(), params)
    opt = zeros_like(params) if fl.momentum else None
    buffers = clone(algo.model.buffers)  # the server's copy of the BatchNorm statistics: not kept
    gen = torch_gen(seed, "robust", "root", rnd)
    for idx in root_batches(len(root), fl.batch_size, fl.local_epochs, fl.local_steps, gen):
        batch = fed.batch(idx.to(root.y.device), root)
        batch = {**batch, "buffers": buffers} if buffers else batch  # type: ignore[dict-item]
        w, opt, state, _ = algo.client_step(w, opt, batch, ctx)
        ctx = ctx._replace(state=state)
    rows = [(w[k] - params[k]).float().reshape(-1) for k, t in params.items() if t.is_floating_point()]
    return torch.cat(rows)
