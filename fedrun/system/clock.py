"""The simulated clock: what a client's round costs in simulated seconds, from counts fedrun already has.

A client's time is its download, its local computation and its upload (FedScale's completion time):
``t_i = down_bytes / download_i + samples_i x flops_per_sample / flops_i + up_bytes / upload_i``. The bytes are
the ones metrics.csv counts (w^t and the extras down, the client's upload up); ``samples_i`` the samples its
local steps really used (:func:`samples_for_steps`); ``flops_per_sample`` one local gradient of the run's own
method and model on one sample, counted once by :func:`flops_per_sample` (PyTorch's FlopCounterMode counts the
matrix products and convolutions from their shapes: a deterministic number, the same on every machine and
engine). Everything is float64 numpy arithmetic on these numbers, so the clock is bit for bit the same across
runs, resumes and engines; nothing here times anything.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

from fedrun.algorithms.base import Algorithm, ClientContext
from fedrun.config.schema import FLConfig
from fedrun.core.tree import Tensors, Tree, clone
from fedrun.data.federated import FederatedData

PROBE_SAMPLES = 2  # BatchNorm in training mode needs more than one value per channel


def samples_for_steps(n: int, fl: FLConfig, steps: int) -> int:
    """Samples a client of ``n`` samples uses in its first ``steps`` local steps (its :func:`batch_plan` prefix):
    with ``fl.local_steps`` each step takes min(B, n); with epochs each epoch is ceil(n/B) batches of B, its last
    one short, so ``q`` whole epochs and ``r`` more steps use q n + r B."""
    if n == 0 or steps <= 0:
        return 0
    b = fl.batch_size
    if fl.local_steps is not None:
        return steps * min(b, n)
    per_epoch = math.ceil(n / b)
    q, r = divmod(steps, per_epoch)
    return q * n + r * b


def local_steps_array(n: np.ndarray, fl: FLConfig) -> np.ndarray:
    """``num_local_steps`` of each client size in ``n`` (int64): ``fl.local_steps``, or epochs x ceil(n / B); 0 for
    an empty client."""
    n = np.asarray(n, dtype=np.int64)
    full = np.full_like(n, fl.local_steps) if fl.local_steps is not None else fl.local_epochs * (-(-n // fl.batch_size))
    return np.where(n == 0, 0, full)


def samples_for_steps_array(n: np.ndarray, fl: FLConfig, steps: np.ndarray) -> np.ndarray:
    """:func:`samples_for_steps` of each (``n[j]``, ``steps[j]``) at once, in int64 (the same integers), as
    float64: the clock's per-dispatch cost is a few numpy operations, not a Python loop over the cohort."""
    n, steps = np.asarray(n, dtype=np.int64), np.asarray(steps, dtype=np.int64)
    b = fl.batch_size
    if fl.local_steps is not None:
        out = steps * np.minimum(b, n)
    else:
        q, r = np.divmod(steps, np.maximum(-(-n // b), 1))  # ceil(n / B) batches an epoch
        out = q * n + r * b
    return np.where((n == 0) | (steps <= 0), 0, out).astype(np.float64)


def flops_per_sample(algorithm: Algorithm, fed: FederatedData, params: Tensors, extras: Tree, lr: float) -> float:
    """FLOPs of one local gradient (:meth:`Algorithm.local_grad`: forward and backward, a SAM-style method's two
    passes) per training sample, counted on a batch of :data:`PROBE_SAMPLES` samples of the first non-empty client,
    from w^t and the round's ``extras`` (a count from shapes: the same whichever round it is counted in).

    The probe draws nothing from torch's global RNG (forked), so a resumed run counts the same number; a method
    whose gradient cannot run outside a round falls back to 3x the model's forward pass (FedScale's factor)."""
    cid = next(c for c, idx in enumerate(fed.clients) if idx.numel())
    idx = fed.clients[cid][:PROBE_SAMPLES]
    batch = fed.batch(idx)
    model = algorithm.model
    if model.buffers:
        batch = {**batch, "buffers": clone(model.buffers)}  # type: ignore[dict-item]
    devices = [fed.device] if fed.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        try:
            n_i = torch.tensor(float(fed.sizes[cid]), dtype=next(iter(params.values())).dtype, device=fed.device)
            ctx = ClientContext(params, extras, algorithm.client_init(params), lr, n_i)
            with FlopCounterMode(display=False) as counter:
                algorithm.local_grad(params, batch, ctx)
            total = 0.0 + counter.get_total_flops()
        except Exception:  # noqa: BLE001 - any method-specific need (a proxy set, a state): the model's cost instead
            buffers = clone(model.buffers) if model.buffers else None
            with torch.no_grad(), FlopCounterMode(display=False) as counter:
                model.logits(params, batch["x"], buffers)
            total = 3.0 * counter.get_total_flops()
    return float(total) / int(idx.numel())
