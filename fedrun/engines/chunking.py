"""How many clients the vectorised engine trains at once: an estimate of one client's memory in a chunk.

A chunk of ``c`` clients holds ``c`` stacked copies of what one client step touches: parameters, their
gradients, the optimizer buffer, the step's new values and the ``torch.where`` result, the client state,
and the activations of one minibatch kept for the backward pass. Nothing else scales with ``c``, so the
width is the memory budget divided by that per-client figure. When a chunk runs out of memory all the
same (an estimate too low, memory taken by another process), :func:`oom_error` turns the allocator's
error into one line naming ``hardware.chunk``.
"""

from __future__ import annotations

import os

import torch

from fedrun.algorithms.base import Algorithm
from fedrun.config.schema import FLConfig
from fedrun.core.errors import ConfigError
from fedrun.core.tree import Tensors, Tree, leaves, nbytes
from fedrun.data.federated import FederatedData

# per client: w, grad, new w, where-result (+ opt buffer and its new value when momentum is on)
PARAM_COPIES = 4
OPT_COPIES = 2
# activations are stored in the forward pass and their gradients live in the backward pass; two-pass
# (SAM-style) gradients and elementwise temporaries add more, hence a margin
ACTIVATION_COPIES = 4
# share of free memory a chunk may use: GPU memory is dedicated; host memory is shared with the OS and
# on CPU a working set far beyond the caches buys no speed (the bench's per-width table shows it)
GPU_FRACTION = 0.6
CPU_FRACTION = 0.25
CPU_CAP_BYTES = 2 << 30
MIB = float(1 << 20)


def activation_bytes(algorithm: Algorithm, data: FederatedData, batch_size: int) -> int:
    """Bytes of every module output in one forward pass on ``batch_size`` samples (leaf modules only)."""
    model = algorithm.model
    total = 0

    def hook(_m: torch.nn.Module, _i: object, out: object) -> None:
        nonlocal total
        if isinstance(out, torch.Tensor):
            total += out.numel() * out.element_size()

    leaves_ = [m for m in model.module.modules() if not list(m.children())]
    handles = [m.register_forward_hook(hook) for m in leaves_]
    try:
        n = min(batch_size, len(data.train))
        idx = torch.arange(n, device=data.device)
        # a probe must not draw from the global RNG (dropout): it runs in whichever round comes first in this
        # process, so a resumed run would otherwise see other masks than the uninterrupted one
        devices = [data.device] if data.device.type == "cuda" else []
        with torch.no_grad(), torch.random.fork_rng(devices=devices):
            x = data.batch(idx)["x"]
            total += x.numel() * x.element_size()
            model.module(x)
    finally:
        for h in handles:
            h.remove()
    return total


def client_bytes(algorithm: Algorithm, data: FederatedData, fl: FLConfig, params: Tensors, states: Tree) -> int:
    """Estimated bytes one client adds to a chunk."""
    p = nbytes(params)
    opt = OPT_COPIES * p if fl.momentum else 0
    m = max(int(leaves(states)[0].shape[0]), 1) if leaves(states) else 1  # states are stacked: [cohort, ...]
    state = 2 * nbytes(states) // m if states else 0
    return PARAM_COPIES * p + opt + state + ACTIVATION_COPIES * activation_bytes(algorithm, data, fl.batch_size)


def free_bytes(device: torch.device) -> int:
    """Memory a chunk may use on ``device``."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(GPU_FRACTION * free)
    try:
        with open("/proc/meminfo") as f:
            info = {ln.split(":")[0]: int(ln.split()[1]) * 1024 for ln in f}
        avail = info.get("MemAvailable", 0)
    except OSError:
        avail = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    return int(min(CPU_FRACTION * avail, CPU_CAP_BYTES))


def auto_chunk(per_client: int, device: torch.device, cohort: int) -> int:
    """The widest chunk (<= ``cohort``) whose estimated memory fits the device's budget; at least 1."""
    return max(1, min(cohort, free_bytes(device) // max(per_client, 1)))


def is_oom(e: BaseException) -> bool:
    """Whether ``e`` is an allocation failure: CUDA's out-of-memory error, or the CPU allocator's."""
    if isinstance(e, torch.cuda.OutOfMemoryError):
        return True
    return isinstance(e, RuntimeError) and "can't allocate memory" in str(e)  # DefaultCPUAllocator


def oom_error(device: torch.device, width: int, per_client: int | None) -> ConfigError:
    """The one-line error for a chunk of ``width`` clients that ran out of memory on ``device``."""
    estimate = f" (estimated {per_client / MIB:.3g} MiB per client)" if per_client else ""
    what = f"out of memory on {device} training a chunk of {width} client{'s' if width > 1 else ''} at once{estimate}"
    if width > 1:
        return ConfigError("hardware.chunk", f"{what}; valid: a smaller chunk, e.g. hardware.chunk={width // 2}")
    return ConfigError("hardware.chunk", f"{what}; valid: a smaller fl.batch_size or model, or hardware.device=cpu")
