"""``make bench``'s Ray section: training samples/s of one round's cohort against the number of Ray actors.

Workload: FedAvg, FMNIST, MLP 784-200-200-10, 100 clients x 600, full participation, 4 local steps of
batch 50 (20,000 samples a round). Every measurement uses the same chunks (ceil(100 / most actors)
clients), so the work and its arithmetic are the same: only the number of processes changes. The
single-process vectorised engine with that chunk is the baseline. One local Ray cluster serves every
actor count; each engine's first round (actor start-up, shipping the data) is reported apart, then
``reps`` rounds are timed and the best kept. Actors get ``--threads`` torch threads each.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from typing import Any

RAY_WORKLOAD = [
    "data=fmnist",
    "model=mlp",
    "partition=iid",
    "fl.clients=100",
    "fl.participation=1.0",
    "fl.local_steps=4",
]
RAY_DESC = "FedAvg, FMNIST, MLP 784-200-200-10, 100 clients x 600, 4 local steps of 50"


def measure_ray(spec: Any, actor_counts: list[int], reps: int) -> dict[str, Any]:
    """{baseline, per actor count: samples/s (best of ``reps``) and first-round seconds}."""
    import ray
    import torch

    from fedrun.engines.auto import stacked_states
    from fedrun.engines.ray_engine import RayEngine
    from fedrun.engines.sampling import sample_clients
    from fedrun.engines.vectorised import VectorisedEngine
    from fedrun.run import experiment as runner

    hw = dataclasses.replace(spec.hardware, engine="sequential")
    exp = runner.build_experiment(dataclasses.replace(spec, hardware=hw))
    algo, fl = exp.algorithm, spec.fl
    params = exp.model.init_params()
    extras = algo.broadcast(params, algo.server_init(params))
    clients = torch.as_tensor(sample_clients(fl, spec.seed, 0), dtype=torch.long)
    states = stacked_states(algo, fl, params, len(clients))
    width = math.ceil(len(clients) / max(actor_counts))

    def best_rate(engine: Any) -> tuple[float, float]:
        t0 = time.perf_counter()
        samples = engine.train_cohort(0, params, extras, clients, states, fl.lr).samples
        first = time.perf_counter() - t0
        best = 0.0
        for _ in range(reps):
            t0 = time.perf_counter()
            engine.train_cohort(0, params, extras, clients, states, fl.lr)
            best = max(best, samples / (time.perf_counter() - t0))
        return best, first

    out: dict[str, Any] = {"desc": RAY_DESC, "cohort": len(clients), "chunk": width, "reps": reps, "actors": {}}
    rate, first = best_rate(VectorisedEngine(algo, exp.fed, fl, spec.seed, chunk=width))
    out["single_process"] = {"samples_per_s": rate, "first_round_s": first}
    cpus = max(max(actor_counts), os.cpu_count() or 1)
    ray.init(address="local", num_cpus=cpus, include_dashboard=False, log_to_driver=False)
    try:
        for n in actor_counts:
            rhw = dataclasses.replace(spec.hardware, engine="ray", actors=n, chunk=width)
            engine = RayEngine(algo, exp.fed, fl, spec.seed, hw=rhw)
            try:
                rate, first = best_rate(engine)
            finally:
                engine.close()
            out["actors"][str(n)] = {"samples_per_s": rate, "first_round_s": first}
    finally:
        ray.shutdown()
    return out


def print_ray(res: dict[str, Any]) -> None:
    if "error" in res:
        print(f"    ray scaling error: {res['error']}")
        return
    base = res["single_process"]["samples_per_s"]
    print(f"    cohort of {res['cohort']} clients, chunks of {res['chunk']}, best of {res['reps']}; samples/s:")
    print(f"    single process (vectorised) {base:>9,.0f}")
    for n, v in res["actors"].items():
        print(
            f"    ray, {n} actor(s)           {v['samples_per_s']:>9,.0f}  ({v['samples_per_s'] / base:.2f}x)"
            f"  first round incl. actor start {v['first_round_s']:.1f} s"
        )
