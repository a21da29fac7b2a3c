"""A bench sketch for robust aggregation (fedrun/robust/; issue 52 point 6, not yet part of ``make bench``): the cost
of each defence, pre-aggregator and upload attack on one cohort of uploads the size of the FMNIST MLP's
(784-200-200-10: 199,210 parameters), against the weighted mean FedAvg does, on the CPU with one torch thread.

Each rule runs ``--reps`` times on the same float32 uploads [m, d] (m = 100, f = 20 attackers by default) and keeps
its best wall time and its best CPU time (the machine is shared: the best of several is the least disturbed).
Prints one line per rule: milliseconds and the ratio to the weighted mean.

    python scripts/bench_robust.py [--clients 100] [--dim 199210] [--byzantine 20] [--reps 7] [--threads 1]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fedrun.robust.base import ATTACKS, DEFENCES, PREAGGREGATORS, AttackView, ServerView  # noqa: E402
from fedrun.robust.defences.krum import krum_scores  # noqa: E402
from fedrun.robust.distances import sq_dists  # noqa: E402

MLP_PARAMS = 784 * 200 + 200 + 200 * 200 + 200 + 200 * 10 + 10  # 199,210


def best_of(fn: Callable[[], object], reps: int) -> tuple[float, float]:
    """(best wall seconds, best CPU seconds) of ``fn`` over ``reps`` runs, after one warm-up."""
    fn()
    wall, cpu = float("inf"), float("inf")
    for _ in range(reps):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall, cpu = min(wall, time.perf_counter() - w0), min(cpu, time.process_time() - c0)
    return wall, cpu


def cases(x: torch.Tensor, f: int) -> dict[str, Callable[[], object]]:
    """What is timed: every defence (defaults), Krum's scores alone, each pre-aggregator then the mean, and the
    model attacks that read the honest updates (omniscient) or the attackers' own."""
    m = x.shape[0]
    p = torch.full((m,), 1.0 / m)
    view = ServerView(f=f, weights=p, root=x[f:].mean(0), previous=torch.zeros(x.shape[1]))
    out: dict[str, Callable[[], object]] = {"weighted mean (FedAvg)": lambda: p @ x}
    for name in DEFENCES.names():
        e = DEFENCES.get(name)
        rule = e.obj(e.params())
        out[name] = lambda rule=rule: rule(x, dataclasses.replace(view, generator=torch.Generator()))
    out["  sq_dists (Gram) alone"] = lambda: sq_dists(x)
    d2 = sq_dists(x)
    out["  krum_scores on [m, m]"] = lambda: krum_scores(d2, f)
    for name in PREAGGREGATORS.names():
        e = PREAGGREGATORS.get(name)
        pre = e.obj(e.params())
        out[f"{name} (pre-aggregation only)"] = lambda pre=pre: pre(
            x, dataclasses.replace(view, generator=torch.Generator())
        )
    own, honest = x[:f], x[f:]
    for name in ATTACKS.names():
        e = ATTACKS.get(name)
        if e.obj.kind != "model":
            continue
        fields = {fl.name for fl in dataclasses.fields(e.params)}
        for knowledge in ("own", "omniscient") if "knowledge" in fields else ("own",):
            attack = e.obj(e.params(**({"knowledge": knowledge} if "knowledge" in fields else {})))
            out[f"attack {name} ({knowledge})"] = lambda attack=attack: attack(
                own, honest, AttackView(n=m, generator=torch.Generator())
            )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--dim", type=int, default=MLP_PARAMS)
    ap.add_argument("--byzantine", type=int, default=20)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    x = 0.01 * torch.randn(args.clients, args.dim, generator=g)
    print(
        f"m={args.clients} uploads of d={args.dim:,} float32, f={args.byzantine}, {args.threads} thread(s), "
        f"best of {args.reps}; torch {torch.__version__}"
    )
    timed = {name: best_of(fn, args.reps) for name, fn in cases(x, args.byzantine).items()}
    base_wall, base_cpu = timed["weighted mean (FedAvg)"]
    print(f"{'rule':44} {'wall ms':>9} {'cpu ms':>9} {'x mean (wall)':>14}")
    for name, (wall, cpu) in timed.items():
        print(f"{name:44} {wall * 1e3:9.2f} {cpu * 1e3:9.2f} {wall / base_wall:14.1f}")


if __name__ == "__main__":
    main()
