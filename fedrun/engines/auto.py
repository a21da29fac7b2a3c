"""Building the configured engine, and ``engine=auto``: the fastest engine for this run, by measurement.

The candidates of ``auto`` are the registered engines that declare they can run here and run this method
(:meth:`Engine.machine_blocker`, :meth:`Engine.method_blocker`: the vectorised engine not for a model with
BatchNorm statistics, Ray only with ``ray`` installed and a cluster given). ``auto`` times a few local steps of
the run's own model, algorithm, data and first cohort (up to one chunk, at most ``PROBE_CLIENTS`` clients) on
each and keeps the fastest. The choice is cached in memory and in ``<cache_dir>/engine-auto.json`` under a key
of everything that decides it (the machine, device, torch version, threads, model, algorithm, batch size, cohort
width, precision, the candidates), so a sweep measures once. A run too small for the probe to cost at most a
tenth of it is not timed (fedrun/engines/auto_budget.py). ``summary.json``'s ``engine_selection`` says which way
the choice was made (``how``: measured, cache, not measured, only engine).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import torch

from fedrun.algorithms.base import Algorithm
from fedrun.config.registry import ENGINES
from fedrun.config.schema import FLConfig, HardwareConfig, engine_options
from fedrun.core.tree import Tensors, Tree, tree_map, zeros_like
from fedrun.data.federated import FederatedData
from fedrun.engines.auto_budget import (
    PROBE_CLIENTS,
    PROBE_REPS,
    PROBE_STEPS,
    WARM_UP_CLIENTS,
    probe_budget,
    unmeasured_engine,
)
from fedrun.engines.base import Engine
from fedrun.engines.sampling import sample_clients
from fedrun.engines.vectorised import VectorisedEngine
from fedrun.storage.cache import cache_file, write_cache

_CHOICES: dict[str, dict[str, Any]] = {}


def precision_context(precision: str, device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """bf16 autocast for ``precision=bf16`` (meant for CUDA; CPU autocast works too, slowly); else nothing."""
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def build_engine(
    name: str, hw: HardwareConfig, algorithm: Algorithm, data: FederatedData, fl: FLConfig, seed: int
) -> Engine:
    """The engine registered as ``name``, given the ``hardware`` section (and its options, typed by the engine)."""
    entry = ENGINES.get(name)
    options = engine_options(entry.params, hw) if entry.params is not None else None
    engine: Engine = entry.obj.build(algorithm, data, fl, seed, hw, options)
    return engine


def candidates(hw: HardwareConfig, algorithm: Algorithm, device: torch.device) -> tuple[list[str], list[str]]:
    """The engines ``auto`` may choose for ``algorithm`` on ``device``, and why each engine that could run here
    cannot run this method."""
    chosen, why = [], []
    for name in ENGINES.names():
        entry = ENGINES.get(name)
        options = engine_options(entry.params, hw) if entry.params is not None else None
        if entry.obj.machine_blocker(device, hw, options) is not None:
            continue
        blocker = entry.obj.method_blocker(algorithm)
        if blocker is None:
            chosen.append(name)
        else:
            why.append(blocker)
    return chosen, why


def probe_key(hw: HardwareConfig, algorithm: Algorithm, data: FederatedData, fl: FLConfig, width: int) -> str:
    """What decides which engine is faster: the choice is reused only when all of it is the same."""
    model = algorithm.model
    parts = {
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cpus",
        "device": torch.cuda.get_device_name(data.device) if data.device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "model": repr(model.module),
        "algorithm": f"{type(algorithm).__name__}{algorithm.hp!r}",
        "batch": fl.batch_size,
        "width": width,
        "momentum": bool(fl.momentum),
        "precision": hw.precision,
        "compile": getattr(hw, "compile", False),
        "chunk": getattr(hw, "chunk", None),
        "engines": candidates(hw, algorithm, data.device)[0],
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
    """Time ``PROBE_STEPS`` local steps of up to ``PROBE_CLIENTS`` clients of round 0's cohort on each candidate.

    After an untimed warm-up on two clients (one-time imports, allocator growth), the engines are timed in
    turn ``PROBE_REPS`` times and each keeps its best, so a burst of load from other processes does not
    decide alone. An engine that fails its warm-up on this method (a client step that cannot run under
    ``vmap``: ``.item()`` or a data-dependent ``if`` in its loss, say) is left out, with the reason; when one
    engine is left it is chosen without timing.
    """
    probe_fl = dataclasses.replace(fl, local_steps=PROBE_STEPS)
    names = candidates(hw, algorithm, data.device)[0]
    # the engines train with the algorithm's round_fl, its own fl: a copy that holds the probe's (before, the
    # probe trained each client's full local epochs, and its start-up cost rounds of the run)
    probe_algorithm = copy.copy(algorithm)
    probe_algorithm.fl = probe_fl
    engines = {name: build_engine(name, hw, probe_algorithm, data, probe_fl, seed) for name in names}
    clients = torch.as_tensor(sample_clients(fl, seed, 0), dtype=torch.long)[: min(width, PROBE_CLIENTS)]
    states = stacked_states(algorithm, fl, algorithm.model.init_params(), len(clients))
    few = tree_map(lambda t: t[:WARM_UP_CLIENTS], states)
    failed = []
    try:
        for name, engine in list(engines.items()):
            try:
                _time_round(engine, clients[:WARM_UP_CLIENTS], few, hw)
            except Exception as e:  # noqa: BLE001 - whatever the engine refuses; another runs the method as written
                if len(engines) == 1:
                    raise
                failed.append(ENGINES.get(name).obj.probe_failure(e))
                engines.pop(name).close()
        if len(engines) == 1:
            return {"engine": next(iter(engines)), "reason": "; ".join(failed) or "the only engine that can run it"}
        best = {name: float("inf") for name in engines}
        for _ in range(PROBE_REPS):
            for name, engine in engines.items():
                best[name] = min(best[name], _time_round(engine, clients, states, hw))
    finally:
        for engine in engines.values():
            engine.close()
    timed = {f"{name}_s": t for name, t in best.items()}
    return {"engine": min(best, key=best.__getitem__), "clients": len(clients), "steps": PROBE_STEPS, **timed}


def valid_choice(entry: Any) -> bool:
    """A cached decision as :func:`measure` writes it (a measured one, with each engine's timing, or a fallback)."""
    if not isinstance(entry, dict) or entry.get("engine") not in ENGINES.names():
        return False
    if "reason" in entry:  # a fallback: the only engine that could run the method, so one that runs every method
        return isinstance(entry["reason"], str) and ENGINES.get(entry["engine"]).obj.runs_every_method
    times = {k.removesuffix("_s"): v for k, v in entry.items() if k.endswith("_s")}
    if len(times) < 2 or entry["engine"] not in times:
        return False
    if not all(
        isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t) and t > 0 for t in times.values()
    ):
        return False
    faster = min(times, key=times.__getitem__)  # min() keeps the first on a tie
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
    names, why = candidates(hw, algorithm, data.device)
    if len(names) == 1:
        reason = "; ".join(why) or "the only engine that can run here"
        choice = {"engine": names[0], "how": "only engine", "reason": reason}
    else:
        choice = _measured(hw, algorithm, data, fl, seed, cache_dir, names)
    if choice["reason"].startswith("not "):  # a method an engine cannot run: say which runs it instead
        name = type(algorithm).__name__
        print(
            f"fedrun: engine=auto: {name} runs on the {choice['engine']} engine ({choice['reason']})", file=sys.stderr
        )
    return choice


def _measured(
    hw: HardwareConfig,
    algorithm: Algorithm,
    data: FederatedData,
    fl: FLConfig,
    seed: int,
    cache_dir: str | None,
    names: list[str],
) -> dict[str, Any]:
    """The timed choice among ``names``: read from the cache when its key was measured before, else measured."""
    params = algorithm.model.init_params()
    width = fl.cohort_size  # the cohort in one piece, unless the vectorised engine would cut it in chunks
    if "vectorised" in names:
        width = VectorisedEngine(algorithm, data, fl, seed, chunk=getattr(hw, "chunk", None)).chunk_width(
            params, stacked_states(algorithm, fl, params, 1), width
        )
    key = probe_key(hw, algorithm, data, fl, width)
    path = cache_file(cache_dir, "engine-auto.json")
    if key not in _CHOICES and path is not None and path.exists():
        _CHOICES.update(read_choices(path))
    if key in _CHOICES:
        return {**_CHOICES[key], "how": "cache", "reason": _CHOICES[key].get("reason", "cached measurement")}
    budget = probe_budget(names, fl, data.sizes, width)
    if not budget.fits:
        engine = unmeasured_engine(names)
        reason = (
            f"the run is too small to time: the probe (~{budget.probe_steps:,.0f} local steps) would be "
            f"{budget.share:.0%} of the run (~{budget.run_steps:,.0f}); the {engine} engine, untimed"
        )
        return {"engine": engine, "how": "not measured", "reason": reason, **budget.record()}
    t0 = time.perf_counter()
    choice = _CHOICES[key] = measure(hw, algorithm, data, fl, seed, width)
    took = time.perf_counter() - t0
    if path is not None:
        merged = {**(read_choices(path) if path.exists() else {}), **_CHOICES}
        write_cache(path, lambda tmp: tmp.write_text(json.dumps(merged, indent=1)))  # type: ignore[arg-type]
    return {"reason": "measured", **choice, "how": "measured", "probe_seconds": round(took, 3), **budget.record()}


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
