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


# ---- many stateful clients over actors (issue 37, point 3) ---------------------------------------------------------
RAY_STATE_WORKLOAD = [
    "data=fmnist",
    "model=mlp",
    "model.hidden=[24]",
    "partition=iid",
    "fl.clients=1000",
    "fl.participation=0.1",
    "fl.local_steps=2",
    "fl.batch_size=10",
    "data.max_train_samples=20000",
]
RAY_STATE_DESC = "1,000 clients x 20 FMNIST samples, MLP 784-24-10, cohort of 100, 2 local steps of 10"
RAY_STATE_METHODS = ("scaffold", "ditto")


def rss_mib(pid: int) -> float:
    """A process's resident set size now, from /proc (Linux)."""
    for line in open(f"/proc/{pid}/status").read().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure_ray_state(make: Any, actors: int, rounds: int) -> dict[str, Any]:
    """Per method: the driver's store of every client's state, what each round moves (pickled bytes: w^t and the
    extras once, each shard's client states to its actor only, the shards' results back) and each actor's RSS.

    ``make(method)`` -> a RunSpec. The cohort of each round is sampled as the runner samples it; client states
    live on the driver (one stacked tree of all 1,000 clients), as the runner keeps them, and the rows of the
    cohort are gathered for the round and scattered back after it.
    """
    import pickle

    import ray
    import torch

    from fedrun.core.tree import tree_map
    from fedrun.engines.auto import stacked_states
    from fedrun.engines.ray_engine import RayEngine
    from fedrun.engines.sampling import sample_clients
    from fedrun.run import experiment as runner
    from fedrun.run.client_states import ClientStates

    out: dict[str, Any] = {"desc": RAY_STATE_DESC, "actors": actors, "rounds": rounds, "methods": {}}
    os.environ.setdefault("RAY_worker_niceness", "0")  # actors at the driver's priority (Ray's default: 15)
    ray.init(address="local", num_cpus=actors, include_dashboard=False, log_to_driver=False)
    try:
        for method in RAY_STATE_METHODS:
            spec = make(method)
            exp = runner.build_experiment(
                dataclasses.replace(spec, hardware=dataclasses.replace(spec.hardware, engine="sequential"))
            )
            algo, fl = exp.algorithm, spec.fl
            params = exp.model.init_params()
            server = algo.server_init(params)
            template = tree_map(lambda t: t[0], stacked_states(algo, fl, params, 1))
            every = ClientStates(template, fl.clients, torch.device("cpu"))  # the runner's store, on the driver
            rhw = dataclasses.replace(spec.hardware, engine="ray", actors=actors, chunk=None)
            engine = RayEngine(algo, exp.fed, fl, spec.seed, hw=rhw)
            engine.traffic = {}
            per_round = []
            try:
                for rnd in range(rounds):
                    clients = torch.as_tensor(sample_clients(fl, spec.seed, rnd), dtype=torch.long)
                    states = every.gather(clients)
                    t0 = time.perf_counter()
                    res = engine.train_cohort(rnd, params, algo.broadcast(params, server), clients, states, fl.lr)
                    seconds = time.perf_counter() - t0
                    every.scatter(clients, res.states)
                    per_round.append({**engine.traffic, "seconds": seconds, "cohort": len(clients)})
                rss = [rss_mib(pid) for pid in engine.worker_pids()]
            finally:
                engine.close()
            all_bytes = len(pickle.dumps(every.state_dict(), protocol=pickle.HIGHEST_PROTOCOL))
            out["methods"][method] = {
                "all_states_bytes": all_bytes,
                "rounds": per_round,
                "actor_rss_mib": rss,
                "driver_rss_mib": rss_mib(os.getpid()),
            }
    finally:
        ray.shutdown()
    return out


def print_ray_state(res: dict[str, Any]) -> None:
    if "error" in res:
        print(f"    ray client-state error: {res['error']}")
        return
    mib = 1024 * 1024
    for method, r in res["methods"].items():
        last = r["rounds"][-1]
        moved = last["broadcast"] + last["states_out"] + last["returned"]
        print(
            f"    {method}: every client's state {r['all_states_bytes'] / mib:.1f} MiB on the driver (to every actor "
            f"each round: {res['actors'] * r['all_states_bytes'] / mib:.1f}); a round of "
            f"{last['cohort']} clients moves {moved / mib:.2f} MiB (w^t+extras {last['broadcast'] / mib:.2f}, "
            f"cohort states out {last['states_out'] / mib:.2f}, results back {last['returned'] / mib:.2f}); "
            f"actor RSS {', '.join(f'{x:.0f}' for x in r['actor_rss_mib'])} MiB; {last['seconds']:.2f} s"
        )
