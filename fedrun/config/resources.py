"""Refuse, at validation, a run the machine cannot hold: more torch threads than make sense
(:func:`~fedrun.host.threads.max_threads`), or an estimated memory need above the most this process can have
(:func:`~fedrun.host.memory.memory_ceiling`).

The estimate is a lower bound, so that no run that fits is refused: the model's parameters and buffers (counted
on PyTorch's meta device, which allocates nothing) held ``2 + cohort`` times (the global model, the client's
working copy, and each cohort client's upload, which the engines keep until they aggregate), plus every client's
persistent state, held for all ``fl.clients`` from the start (fedrun/run/client_states.py stacks one row per
client): what the method's ``client_init`` makes of the parameters (a personal model, control variates), its kept
momentum buffer (``fl.keep_momentum``), and each capability's rows (error feedback's residuals:
:meth:`~fedrun.capabilities.base.Capability.client_numel`), with the cohort's copy of them that a round reads and
writes. Activations, data and optimiser buffers come on top.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from fedrun.config.registry import DATASETS
from fedrun.config.sections import capabilities
from fedrun.core.errors import ConfigError
from fedrun.host.memory import GB, memory_ceiling
from fedrun.host.threads import max_threads

BYTES = {"fp32": 4, "fp64": 8, "bf16": 4}  # bf16 autocast keeps fp32 parameters
_COUNTS: dict[tuple[Any, ...], tuple[int, int] | None] = {}


@dataclass(frozen=True)
class Need:
    """A run's memory lower bound in bytes, by what holds it."""

    model: int  # the global model and a client's working copy
    cohort: int  # one upload per cohort client
    state: int  # the method's per-client state, of every client that can have trained

    @property
    def total(self) -> int:
        return self.model + self.cohort + self.state


def check_threads(threads: int) -> None:
    """Refuse ``hardware.threads`` above :func:`~fedrun.host.threads.max_threads`."""
    cap = max_threads()
    if threads > cap:
        raise ConfigError(
            "hardware.threads",
            f"{threads} threads only oversubscribe this machine's {os.cpu_count() or 1} CPUs (and each reserves"
            f" its stack); valid: 0 (one per idle core) to {cap}",
        )


def check_resources(spec: Any) -> None:
    """Refuse a run (a :class:`~fedrun.config.schema.RunSpec`) whose threads or estimated memory cannot fit."""
    check_threads(spec.hardware.threads)
    if spec.hardware.device != "cpu":  # on a GPU the parameters live in device memory, which is not counted here
        return
    ceiling = memory_ceiling()
    need = estimate(spec)
    if ceiling is None or need is None or need.total <= ceiling[0]:
        return
    limit, what = ceiling
    if need.model * 3 // 2 > limit:  # the model and one upload alone: no cohort fits
        field = "model.hidden" if hasattr(spec.model.params, "hidden") else "model.name"
    else:
        field = "fl.participation" if need.cohort >= need.state else "fl.clients"
    raise ConfigError(
        field,
        f"the run needs at least {need.total / GB:.1f} GB (model={spec.model.name}: {need.model / GB:.1f} GB for"
        f" two copies of its parameters; {need.cohort / GB:.1f} GB for the cohort's uploads;"
        f" {need.state / GB:.1f} GB of per-client state), more than {what} ({limit / GB:.1f} GB); valid: a smaller"
        " model (model.*), fewer clients per round (fl.participation, fl.clients), or a machine with more memory",
    )


def estimate(spec: Any) -> Need | None:
    """The lower bound of the module docstring; None when the dataset registered no signature (a user's) or the
    model cannot be built (the fit check names why)."""
    entry = DATASETS.get(spec.data.name)
    if entry.signature is None:
        return None
    data = entry.signature(spec.data.params)
    key = (spec.model.name, repr(spec.model.params), spec.algorithm.name, data)
    if key not in _COUNTS:  # a sweep's jobs share their models
        _COUNTS[key] = _count(spec, data)
    counted = _COUNTS[key]
    if counted is None:
        return None
    params, state = counted
    width, fl = BYTES[spec.hardware.precision], spec.fl
    cohort = fl.clients if fl.train_all or fl.sampling == "bernoulli" else fl.cohort_size
    state += params if fl.keep_momentum and fl.momentum else 0  # the kept momentum buffer
    state += sum(
        cap.client_numel(spec.sections[cap.name], params) for cap in capabilities() if cap.name in spec.sections
    )
    return Need(2 * params * width, cohort * params * width, (fl.clients + 2 * cohort) * state * width)


def _count(spec: Any, data: Any) -> tuple[int, int] | None:
    """(parameter and buffer elements of the model, elements of the method's state of one client)."""
    import torch  # only here, as the fit check: the rest of validation runs without it

    try:
        with torch.device("meta"):
            module = spec.model.obj(spec.model.params, data.input_shape, data.num_classes)
    except Exception:  # noqa: BLE001 - check_model_fits_data names why it cannot be built
        return None
    tensors = dict(module.named_parameters())
    params = sum(t.numel() for t in tensors.values()) + sum(b.numel() for b in module.buffers())
    return params, _client_state(spec.algorithm.obj, tensors)


def _client_state(algorithm: type, params: dict[str, Any]) -> int:
    """Elements of ``algorithm``'s ``client_init(params)`` on meta tensors (a personal model, control variates); 0 when
    it needs more than the parameters to tell (its set-up, its head's keys, a feature extractor): a lower bound."""
    import torch

    try:
        state: Any = object.__new__(algorithm).client_init(params)
    except Exception:  # noqa: BLE001 - a method whose state needs its set-up: not counted
        return 0
    leaves: list[Any] = [state]
    total = 0
    while leaves:
        leaf = leaves.pop()
        if isinstance(leaf, dict):
            leaves.extend(leaf.values())
        elif isinstance(leaf, list | tuple):
            leaves.extend(leaf)
        elif isinstance(leaf, torch.Tensor):
            total += leaf.numel()
    return total
