"""Building the configured engine, and ``engine=auto``: the faster engine for this run, by measurement.

``auto`` times a few local steps of the run's own model, algorithm, data and first cohort (up to one
chunk, at most ``PROBE_CLIENTS`` clients) on the sequential and the vectorised engine, and keeps the
faster. The choice is cached in memory and in ``<cache_dir>/engine-auto.json`` under a key of everything
that decides it (device, torch version, threads, model, algorithm, batch size, cohort width, precision),
so a sweep measures once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import torch

from fedrun.algorithms.base import Algorithm
from fedrun.config.registry import ENGINES
from fedrun.config.schema import FLConfig, HardwareConfig
from fedrun.core.tree import Tensors, Tree, tree_map, zeros_like
from fedrun.data.federated import FederatedData
from fedrun.engines.base import Engine
from fedrun.engines.sampling import sample_clients
from fedrun.engines.sequential import SequentialEngine
from fedrun.engines.vectorised import VectorisedEngine, vmap_blocker
from fedrun.storage.cache import cache_file, write_cache

PROBE_STEPS = 2  # local steps per client in the probe
PROBE_CLIENTS = 16  # at most this many clients: enough to show vmap's batching, cheap for a CNN on a CPU
PROBE_REPS = 2
_CHOICES: dict[str, dict[str, Any]] = {}


def precision_context(precision: str, device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """bf16 autocast for ``precision=bf16`` (meant for CUDA; CPU autocast works too, slowly); else nothing."""
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def build_engine(
    name: str, hw: HardwareConfig, algorithm: Algorithm, data: FederatedData, fl: FLConfig, seed: int
) -> Engine:
    """The engine registered as ``name``, given the ``hardware`` options it takes."""
    if name == "vectorised":
        return VectorisedEngine(algorithm, data, fl, seed, chunk=hw.chunk, compile=hw.compile)
    if name == "ray":
        return ENGINES.get(name).obj(algorithm, data, fl, seed, hw=hw)
    return ENGINES.get(name).obj(algorithm, data, fl, seed)


def probe_key(hw: HardwareConfig, algorithm: Algorithm, data: FederatedData, fl: FLConfig, width: int) -> str:
    """What decides which engine is faster: the choice is reused only when all of it is the same."""
    model = algorithm.model
    parts = {
        "device": torch.cuda.get_device_name(data.device) if data.device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "model": repr(model.module),
        "algorithm": f"{type(algorithm).__name__}{algorithm.hp!r}",
        "batch": fl.batch_size,
        "width": width,
        "momentum": bool(fl.momentum),
        "precision": hw.precision,
        "compile": hw.compile,
        "chunk": hw.chunk,
    }
    return json.dumps(parts, sort_keys=True)


def _time_round(engine: Engine, clients: torch.Tensor, states: Tree, hw: HardwareConfig) -> float:
    """Seconds for one probe round of ``clients`` on ``engine``."""
    algorithm = engine.algorithm
    params = algorithm.model.init_params()
    extras = algorithm.broadcast(params, algorithm.server_init(params))
    with precision_context(hw.precision, engine.data.device):
        sync(engine.data.device)
        t0 = time.perf_counter()
        engine.train_cohort(0, params, extras, clients, states, engine.fl.lr)
        sync(engine.data.device)
    return time.perf_counter() - t0


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def stacked_states(algorithm: Algorithm, fl: FLConfig, params: Tensors, c: int) -> Tree:
    """``c`` fresh client states as the runner makes them (with the kept momentum buffer)."""
    template = algorithm.client_init(params)
    if fl.keep_momentum and fl.momentum:
        template = {**template, "_momentum": zeros_like(params)}
    return tree_map(lambda t: t.unsqueeze(0).repeat((c,) + (1,) * t.dim()), template)


def measure(
    hw: HardwareConfig, algorithm: Algorithm, data: FederatedData, fl: FLConfig, seed: int, width: int
) -> dict[str, Any]:
    """Time ``PROBE_STEPS`` local steps of up to ``PROBE_CLIENTS`` clients of round 0's cohort on both engines.

    After an untimed warm-up on two clients (one-time imports, allocator growth), the engines are timed in
    turn ``PROBE_REPS`` times and each keeps its best, so a burst of load from other processes does not
    decide alone. A method whose client step cannot run under ``vmap`` (``.item()`` or a data-dependent
    ``if`` in its loss, say) fails the vectorised warm-up: the sequential engine is chosen, with the reason.
    """
    probe_fl = dataclasses.replace(fl, local_steps=PROBE_STEPS)
    engines = {
        "vectorised": VectorisedEngine(algorithm, data, probe_fl, seed, chunk=hw.chunk, compile=hw.compile),
        "sequential": SequentialEngine(algorithm, data, probe_fl, seed),
    }
    clients = torch.as_tensor(sample_clients(fl, seed, 0), dtype=torch.long)[: min(width, PROBE_CLIENTS)]
    states = stacked_states(algorithm, fl, algorithm.model.init_params(), len(clients))
    few = tree_map(lambda t: t[:2], states)
    try:
        _time_round(engines["vectorised"], clients[:2], few, hw)
    except Exception as e:  # noqa: BLE001 - whatever vmap refuses; the sequential engine runs the method as written
        return {"engine": "sequential", "reason": f"not vmappable: {type(e).__name__}: {_first_line(e)}"}
    _time_round(engines["sequential"], clients[:2], few, hw)
    best = {name: float("inf") for name in engines}
    for _ in range(PROBE_REPS):
        for name, engine in engines.items():
            best[name] = min(best[name], _time_round(engine, clients, states, hw))
    return {
        "engine": min(best, key=best.__getitem__),
        "clients": len(clients),
        "steps": PROBE_STEPS,
        "vectorised_s": best["vectorised"],
        "sequential_s": best["sequential"],
    }


def _first_line(e: BaseException) -> str:
    return next((ln.strip() for ln in str(e).splitlines() if ln.strip()), "")[:200]


def valid_choice(entry: Any) -> bool:
    """A cached decision as :func:`measure` writes it (a measured one, with both timings, or a fallback)."""
    if not isinstance(entry, dict) or entry.get("engine") not in ("sequential", "vectorised"):
        return False
    if "reason" in entry:  # a fallback: the method cannot run under vmap
        return entry["engine"] == "sequential" and isinstance(entry["reason"], str)
    times = [entry.get("vectorised_s"), entry.get("sequential_s")]
    if not all(isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t) and t > 0 for t in times):
        return False
    faster = "vectorised" if times[0] <= times[1] else "sequential"  # type: ignore[operator]  # checked above  # min() keeps the first on a tie
    counts = [entry.get("clients"), entry.get("steps")]
    return entry["engine"] == faster and all(isinstance(c, int) and not isinstance(c, bool) and c > 0 for c in counts)


def read_choices(path: Path) -> dict[str, dict[str, Any]]:
    """The valid decisions of ``engine-auto.json``; a file of any other shape counts as empty (re-measured)."""
    try:
        blob = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return {}
    if not isinstance(blob, dict):
        return {}
    return {k: v for k, v in blob.items() if isinstance(k, str) and valid_choice(v)}


def choose(
    hw: HardwareConfig, algorithm: Algorithm, data: FederatedData, fl: FLConfig, seed: int, cache_dir: str | None
) -> dict[str, Any]:
    """The ``auto`` decision: {engine, reason, ...timings}; measured once per key, then read from cache."""
    reason = vmap_blocker(algorithm)
    if reason:
        return {"engine": "sequential", "reason": f"not vmappable: {reason}"}
    params = algorithm.model.init_params()
    m = fl.cohort_size
    width = VectorisedEngine(algorithm, data, fl, seed, chunk=hw.chunk).chunk_width(
        params, stacked_states(algorithm, fl, params, 1), m
    )
    key = probe_key(hw, algorithm, data, fl, width)
    path = cache_file(cache_dir, "engine-auto.json")
    if key not in _CHOICES and path is not None and path.exists():
        _CHOICES.update(read_choices(path))
    if key in _CHOICES:
        choice = {**_CHOICES[key], "reason": _CHOICES[key].get("reason", "cached measurement")}
    else:
        choice = _CHOICES[key] = measure(hw, algorithm, data, fl, seed, width)
        if path is not None:
            merged = {**(read_choices(path) if path.exists() else {}), **_CHOICES}
            write_cache(path, lambda tmp: tmp.write_text(json.dumps(merged, indent=1)))  # type: ignore[arg-type]
        choice = {"reason": "measured", **choice}
    if choice["reason"].startswith("not vmappable"):
        name = type(algorithm).__name__
        print(f"fedrun: engine=auto: {name} runs on the sequential engine ({choice['reason']})", file=sys.stderr)
    return choice


class EngineFactory:
    """``select_engine(spec)(algorithm, data, fl, seed)``: builds the configured engine (measuring for auto)."""

    def __init__(self, hw: HardwareConfig, cache_dir: str | None) -> None:
        self.hw = hw
        self.cache_dir = cache_dir
        self.choice: dict[str, Any] = {}

    def __call__(self, algorithm: Algorithm, data: FederatedData, fl: FLConfig, seed: int) -> Engine:
        name = self.hw.engine
        if name == "auto":
            self.choice = choose(self.hw, algorithm, data, fl, seed, self.cache_dir)
            name = self.choice["engine"]
        engine = build_engine(name, self.hw, algorithm, data, fl, seed)
        engine.selection = self.choice  # type: ignore[attr-defined]
        return engine
