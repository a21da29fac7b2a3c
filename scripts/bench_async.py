"""``make bench``'s async section: the share of an async run's CPU spent outside training and evaluation.

Workload: FMNIST, MLP 784-200-200-10, 1,000 clients x 60 (IID), 1 local epoch of batch 50, devices drawn from
the three tiers (fedrun/system/devices.py), evaluation every 10 server updates; FedBuff (C = 100, K = 10) and
FedAsync (C = 100, polynomial staleness), 200 server updates each, on the vectorised engine. Process CPU time
(``time.process_time``, one torch thread) is counted over the round loop (``fedrun.run.loop._run``), inside
``engine.train_cohort`` and FedBuff's client deltas (``client_uploads``: Delta_i = y_i - w_tau, computed by the
client in Nguyen et al. 2022, Alg. 1, so counted with its training), inside the evaluation
(``fedrun.run.rounds.evaluate``) and in the server's update arithmetic (``server_step``: reading the arrivals'
uploads and the mixing or the buffer's sum); the rest is the bookkeeping: the event queue, the clock, sampling,
dispatching, metrics rows, the loop. Of the bookkeeping,
two parts that are not the async server's own are shown apart: writing metrics.csv at the evaluated updates
(``write_metrics``) and the loop's copy of the state after each update (``finished_round``, what an interrupted
run saves). Checkpoints are off in the timed runs (an async checkpoint holds C clients' finished updates: I/O,
not bookkeeping); one save is timed apart.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

ASYNC_WORKLOAD = [
    "data=fmnist",
    "model=mlp",
    "partition=iid",
    "fl.clients=1000",
    "fl.participation=0.1",
    "fl.rounds=200",
    "eval.every=10",
    "system.devices=tiers",
    "system.concurrency=100",
    "hardware.engine=vectorised",
    "checkpoint.every=0",
    "checkpoint.keep_final=false",
]
ASYNC_SERVERS = {
    "fedbuff": ["system.server=fedbuff", "system.buffer=10"],
    "fedasync": ["system.server=fedasync", "system.staleness=polynomial"],
}
ASYNC_DESC = "FMNIST, MLP, 1,000 clients x 60, C = 100, 200 server updates (FedBuff K = 10; FedAsync poly)"


def measure_async(make_spec: Any, base: list[str], device: str, run_dir: Path) -> dict[str, Any]:
    """Per server (:func:`measure_server`), and the settings measured."""
    out: dict[str, Any] = {}
    for name, overrides in ASYNC_SERVERS.items():
        spec = make_spec([*base, *ASYNC_WORKLOAD, *overrides], device, run_dir / name)
        out[name] = measure_server(spec, run_dir / name)
    return out


def measure_server(spec: Any, run_dir: Path) -> dict[str, Any]:
    """CPU seconds of the round loop, of training (``train``: ``engine.train_cohort``; ``deltas``: FedBuff's
    client deltas), of evaluation, of the update arithmetic (``server_step``: reading the arrivals' uploads and
    the mixing or the buffer's average), of writing metrics.csv and of the loop's state copies; the share outside
    training and evaluation and, of it, outside the update arithmetic too (the bookkeeping); one checkpoint
    save's wall seconds and size."""
    from fedrun.run import loop, recorder, rounds
    from fedrun.run.state import save_state
    from fedrun.system.servers.base import AsyncServer
    from fedrun.system.servers.fedasync import FedAsync
    from fedrun.system.servers.fedbuff import FedBuff

    cpu = {"train": 0.0, "deltas": 0.0, "eval": 0.0, "server": 0.0, "rows": 0.0, "copies": 0.0, "loop": 0.0}
    seen: dict[str, Any] = {}

    def timed(key: str, fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                cpu[key] += time.process_time() - t

        return wrapper

    def patched_loop(spec: Any, rd: Any, experiment: Any, state: Any, t0: float, monitor: Any) -> Any:
        experiment.engine.train_cohort = timed("train", experiment.engine.train_cohort)
        seen["experiment"], seen["state"] = experiment, state
        return timed("loop", run_loop)(spec, rd, experiment, state, t0, monitor)

    patches = [
        (loop, "_run", patched_loop),
        (rounds, "evaluate", timed("eval", rounds.evaluate)),
        (AsyncServer, "uploads", timed("deltas", AsyncServer.uploads)),
        (FedBuff, "uploads", timed("deltas", FedBuff.uploads)),
        (FedAsync, "step", timed("server", FedAsync.step)),
        (FedBuff, "step", timed("server", FedBuff.step)),
        (recorder, "write_metrics", timed("rows", recorder.write_metrics)),
        (loop, "finished_round", timed("copies", loop.finished_round)),
    ]
    run_loop, originals = loop._run, [(m, name, getattr(m, name)) for m, name, _ in patches]
    for module, name, fn in patches:
        setattr(module, name, fn)
    try:
        run_dir.mkdir(parents=True)
        summary = loop.run(spec, run_dir)
    finally:
        for module, name, fn in originals:
            setattr(module, name, fn)
    outside = cpu["loop"] - cpu["train"] - cpu["deltas"] - cpu["eval"]
    state = seen["state"]
    t = time.perf_counter()
    save_state(state, seen["experiment"], run_dir, spec.fl.rounds, "bench", 0.0)
    return {
        "cpu_s": cpu,
        "outside_share": outside / cpu["loop"],
        "bookkeeping_share": (outside - cpu["server"]) / cpu["loop"],
        "updates": spec.fl.rounds,
        "clients_trained": driver.queue.seq if (driver := seen["experiment"].capabilities.driver) else None,
        "sim_clock": summary.get("sim_clock"),
        "test_acc_final": summary.get("test_acc_final"),
        "checkpoint_save_s": time.perf_counter() - t,
        "checkpoint_mib": (run_dir / "checkpoint.pt").stat().st_size / 2**20,
    }


def print_async(r: dict[str, Any]) -> None:
    if "error" in r:
        print(f"    error: {r['error']}")
        return
    for name, m in r.items():
        if not isinstance(m, dict) or "cpu_s" not in m:
            continue
        c = m["cpu_s"]
        print(
            f"    {name}: loop {c['loop']:.2f} CPU s (train {c['train']:.2f} + client deltas {c['deltas']:.2f},"
            f" eval {c['eval']:.2f}, update arithmetic {c['server']:.2f}); outside training and evaluation"
            f" {100 * m['outside_share']:.1f}% (target <= 5%), of which bookkeeping {100 * m['bookkeeping_share']:.1f}%"
            f" (writing metrics.csv {100 * c['rows'] / c['loop']:.1f}%, the loop's state copies"
            f" {100 * c['copies'] / c['loop']:.1f}%); {m['updates']} updates, {m['clients_trained']} clients trained,"
            f" clock {m['sim_clock']:.1f} s; one checkpoint {m['checkpoint_mib']:.0f} MiB in"
            f" {m['checkpoint_save_s']:.2f} s"
        )
