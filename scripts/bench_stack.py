"""``make bench``'s stacked-sweep section (issue 53): whole ``fedrun -m`` sweeps through the CLI, timed side by side in
one sitting, stacked (``hardware.stack=auto``, the default) against the same jobs one after another
(``hardware.stack=off``: what a sweep did before stacking, each job on the engine ``hardware.engine=auto`` picks,
and the same on the vectorised engine, which a stack trains on);
and the float tolerance of a stack whose jobs differ in their lr or FedProx's mu (the same jobs alone on the
vectorised engine; a stack of seeds alone is bit-identical, tests/engines/test_stacked.py).

Sweeps (FMNIST, MLP 784-200-200-10, fedrun's default experiment: 20 clients Dirichlet(0.5), 1 epoch of batch 50,
30 rounds unless ``--stack-rounds``):
  seeds    FedAvg, ``seed=0,1,2,3,4``: one stack of 5
  methods  ``algorithm=fedavg,fedprox,scaffold seed=0,1,2``: three stacks of 3
Each wall time is the whole command's (start-up, data, evaluation, checkpoints and plots included).

    python scripts/bench_stack.py [--rounds 5] [--threads 1] [--only seeds,methods,tolerance]   (this section alone)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

STACK_DESC = "FMNIST MLP 784-200-200-10, fedrun's default experiment (20 clients, 1 epoch of batch 50)"
SWEEPS = {
    "seeds": ["algorithm=fedavg", "seed=0,1,2,3,4"],
    "methods": ["algorithm=fedavg,fedprox,scaffold", "seed=0,1,2"],
}
TOLERANCE = ["algorithm=fedprox", "algorithm.mu=0.01,0.1", "fl.lr=0.05,0.1", "seed=0"]
TIMING = {"seconds", "round_seconds", "aggregate_seconds"}


def sweep(args: list[str], folder: Path, threads: int, device: str, timeout: float) -> dict[str, Any]:
    """``fedrun -m *args`` into ``folder``: its wall time, exit code and the stack lines it printed."""
    cmd = [sys.executable, "-m", "fedrun.cli", "-m", *args, f"hardware.threads={threads}", f"hardware.device={device}",
           "output.plots=false", f"hydra.sweep.dir={folder}", f"cache_dir={folder.parent / 'cache'}"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=folder.parent, timeout=timeout)
    wall = time.perf_counter() - t0
    lines = p.stdout.splitlines()
    return {
        "wall_s": wall,
        "returncode": p.returncode,
        "stacks": [ln for ln in lines if ln.startswith(("stack ", "not stacked"))],
        "error": (p.stderr.strip().splitlines() or [""])[-1] if p.returncode else None,
    }


def metrics(folder: Path) -> dict[str, list[dict[str, Any]]]:
    """Each job's metrics rows (timing columns dropped), by the part of its folder's name before the hash."""
    import pandas as pd

    out = {}
    for p in sorted(folder.iterdir()):
        if (p / "metrics.csv").is_file():
            frame = pd.read_csv(p / "metrics.csv")
            out[p.name.rsplit("-", 1)[0]] = frame.drop(columns=[c for c in frame if c in TIMING]).to_dict("records")
    return out


def max_difference(a: dict[str, list[dict[str, Any]]], b: dict[str, list[dict[str, Any]]]) -> dict[str, float]:
    """The largest absolute and relative difference of any numeric cell between the same jobs' metrics."""
    worst_abs = worst_rel = 0.0
    for name, rows in a.items():
        for ra, rb in zip(rows, b[name], strict=True):
            for k, va in ra.items():
                vb = rb[k]
                if isinstance(va, int | float) and isinstance(vb, int | float) and va == va and vb == vb:
                    d = abs(va - vb)
                    worst_abs = max(worst_abs, d)
                    worst_rel = max(worst_rel, d / max(abs(va), 1e-12))
    return {"max_abs": worst_abs, "max_rel": worst_rel}


def measure_stack(rounds: int | None, threads: int, device: str, timeout: float, only: list[str]) -> dict[str, Any]:
    """Each sweep one after another (``hardware.stack=off``) then stacked, in one sitting; and the tolerance."""
    extra = [f"fl.rounds={rounds}"] if rounds else []
    out: dict[str, Any] = {"rounds": rounds or "the experiment's (30)", "threads": threads, "device": device}
    with tempfile.TemporaryDirectory(prefix="fedrun-bench-stack-") as tmp:
        root = Path(tmp)
        for name in [n for n in SWEEPS if n in only]:
            args = [*SWEEPS[name], *extra]
            res: dict[str, Any] = {"args": args, "load_start": os.getloadavg()[0]}
            res["one_after_another"] = sweep([*args, "hardware.stack=off"], root / f"{name}-off", threads, device,
                                             timeout)  # fmt: skip
            res["stacked"] = sweep(args, root / f"{name}-stacked", threads, device, timeout)
            # the jobs one after another on the engine a stack trains on: what stacking itself buys
            res["one_after_another_vectorised"] = sweep([*args, "hardware.stack=off", "hardware.engine=vectorised"],
                                                        root / f"{name}-vec", threads, device, timeout)  # fmt: skip
            res["load_end"] = os.getloadavg()[0]
            off, on = res["one_after_another"]["wall_s"], res["stacked"]["wall_s"]
            res["speedup"] = off / on if on else None
            res["speedup_vs_vectorised"] = res["one_after_another_vectorised"]["wall_s"] / on if on else None
            out[name] = res
        if "tolerance" in only:
            args = [*TOLERANCE, *extra, "hardware.engine=vectorised"]
            alone = sweep([*args, "hardware.stack=off"], root / "tol-off", threads, device, timeout)
            stacked = sweep(args, root / "tol-stacked", threads, device, timeout)
            diff = max_difference(metrics(root / "tol-off"), metrics(root / "tol-stacked"))
            out["tolerance"] = {"args": args, "alone": alone, "stacked": stacked, **diff}
    return out


def print_stack(r: dict[str, Any]) -> None:
    for name in SWEEPS:
        s = r.get(name)
        if not s:
            continue
        off, on = s["one_after_another"], s["stacked"]
        bad = [f"{k}: {v['error']}" for k, v in (("one after another", off), ("stacked", on)) if v.get("error")]
        vec = s["one_after_another_vectorised"]
        print(
            f"  {name} ({' '.join(s['args'])}): one after another {off['wall_s']:.1f} s (on the vectorised engine"
            f" {vec['wall_s']:.1f} s), stacked {on['wall_s']:.1f} s -> {s['speedup']:.2f}x"
            f" ({s['speedup_vs_vectorised']:.2f}x); load {s['load_start']:.1f} -> {s['load_end']:.1f};"
            f" {'; '.join(on['stacks'])}" + (f"; errors: {bad}" if bad else "")
        )
    t = r.get("tolerance")
    if t:
        print(
            f"  tolerance ({' '.join(t['args'])}): stacked vs alone on the vectorised engine, largest difference"
            f" {t['max_abs']:.3g} absolute, {t['max_rel']:.3g} relative, over every metrics cell"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=None, help="fl.rounds of every job (default: the experiment's 30)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--timeout", type=float, default=3600.0)
    ap.add_argument("--only", default="seeds,methods,tolerance")
    ap.add_argument("--out", default=None, help="write the JSON result here")
    args = ap.parse_args()
    print(f"stacked sweeps ({STACK_DESC}), load average {os.getloadavg()[0]:.1f} ...", flush=True)
    r = measure_stack(args.rounds, args.threads, args.device, args.timeout, args.only.split(","))
    print_stack(r)
    if args.out:
        Path(args.out).write_text(json.dumps(r, indent=1))


if __name__ == "__main__":
    main()
