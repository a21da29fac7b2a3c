"""``make bench``'s stacked-sweep section (issue 53): whole ``fedrun -m`` sweeps through the CLI, timed side by side in
one sitting, stacked (``hardware.stack=auto``, the default) against the same jobs one after another
(``hardware.stack=off``: what a sweep did before stacking, each job on the engine ``hardware.engine=auto`` picks,
and the same on the vectorised engine, which a stack trains on);
and the largest difference between the metrics of a stack whose jobs differ in their lr and FedProx's mu and the
same jobs alone on the vectorised engine (0 on a CPU: bit for bit, as tests/engines/test_stacked.py checks).

Sweeps (FMNIST, MLP 784-200-200-10, fedrun's default experiment: 20 clients Dirichlet(0.5), 1 epoch of batch 50,
30 rounds unless ``--rounds``, make bench's ``--stack-rounds``):
  seeds    FedAvg, ``seed=0,1,2,3,4``: one stack of 5
  methods  ``algorithm=fedavg,fedprox,scaffold seed=0,1,2``: three stacks of 3
  small    the seeds' sweep with MLP 784-32-10 and batches of 10 (``--only small``): a step's dispatch outweighs its
           arithmetic, as on a GPU
  cnn      the seeds' sweep with McMahan et al.'s CNN (``model=cnn``) on 2,000 training samples (100 a client, 2 steps
           of 50; ``--only cnn``): a step's arithmetic outweighs its dispatch many times over; stacked as told
           (``hardware.stack=5``), which ``hardware.stack=auto`` declines on a CPU
Reproduce targets (``--only fedcos_smoke``, in ``make bench``): ``fedrun-reproduce run fedcos-table2 --smoke`` (FedCos
Table II's 36 jobs: 9 methods x 4 IID fractions, 2 rounds of 5 clients x 1 step, in fedrun-reproduce's in-process
runner, fedrun/cli/reproduce_sweep.py), stacked (``--override hardware.engine=auto``: a -smoke target pins the
sequential engine, which does not stack) against ``--override hardware.stack=off``, both in one process
(``--parallel off``), and side by side (``--parallel <CPU count>``: its commands in forked processes,
fedrun/cli/reproduce_side.py); with ``--before CHECKOUT`` also as that checkout of fedrun runs it (a git worktree of
an earlier commit: the baseline "today" of an issue); and the largest difference between the metrics of the first
two modes. ``--only robust_smoke``: ``robust-fmnist --smoke`` the same way (80 jobs, 10 attacks
x 8 defences on the MLP 784-200-200-10, one command per defence, all 80 one stack).
Modes (``--modes``, default all): ``one_after_another`` (``hardware.stack=off``), ``stacked``,
``one_after_another_vectorised``, each in the sweep's one process (``hardware.parallel=off``), and ``side_by_side``
(``hardware.parallel=<CPU count>``: its stacks split for the workers) and ``side_by_side_unstacked`` (the same with
``hardware.stack=off``), whose wall time is the one that counts (two workers spend more CPU time, in less time).
Each sweep runs in each mode ``--repeats`` times, the order of the modes rotated each time (a busy machine's load
changes from minute to minute), after a warm-up of its first job; medians of wall and CPU time (the child's user
+ system: what a quiet machine would take, with one thread), and the ratios of the medians.
Each wall time is the whole command's (start-up, data, evaluation, checkpoints and plots included).

    python scripts/bench_stack.py [--rounds 5] [--repeats 3] [--threads 1]
                                  [--only seeds,methods,small,cnn,tolerance,fedcos_smoke,robust_smoke]
                                  [--before CHECKOUT]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
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
    # where a step's Python and autograd dispatch outweighs its arithmetic: MLP 784-32-10, batches of 10
    "small": ["algorithm=fedavg", "seed=0,1,2,3,4", "model.hidden=[32]", "fl.batch_size=10"],
    # where a step is all arithmetic: McMahan et al.'s CNN (conv 5x5 32 and 64, FC 512), 100 samples a client; stacked
    # as told (hardware.stack=5): under auto a CPU runs its jobs alone (fedrun/run/stacking.py, CPU_STEP_FLOPS)
    "cnn": ["algorithm=fedavg", "seed=0,1,2,3,4", "model=cnn", "data.max_train_samples=2000", "hardware.stack=5"],
}
REPRODUCE = {"fedcos_smoke": "fedcos-table2", "robust_smoke": "robust-fmnist"}  # name: the target whose -smoke is timed
TOLERANCE = ["algorithm=fedprox", "algorithm.mu=0.01,0.1", "fl.lr=0.05,0.1", "seed=0"]
TIMING = {"seconds", "round_seconds", "aggregate_seconds"}


MODES = {  # how each sweep is run: the overrides added to its own
    "one_after_another": ["hardware.stack=off", "hardware.parallel=off"],
    "stacked": ["hardware.parallel=off"],
    "one_after_another_vectorised": ["hardware.stack=off", "hardware.engine=vectorised", "hardware.parallel=off"],
    # stacked, and its units side by side in a worker per core (a stack split for idle workers): what a sweep of
    # hardware.threads=0 gets under hardware.parallel=auto on an idle machine; the jobs' threads as the bench's
    "side_by_side": [f"hardware.parallel={os.cpu_count() or 1}"],
    "side_by_side_unstacked": ["hardware.stack=off", f"hardware.parallel={os.cpu_count() or 1}"],  # each job alone
}


def sweep(args: list[str], folder: Path, threads: int, device: str, timeout: float,
          repo: Path | None = None) -> dict[str, Any]:  # fmt: skip
    """``fedrun -m *args`` into ``folder`` (with ``repo``'s fedrun: ``--before``): its wall and CPU time (the
    child's user + system), exit code and the stack lines it printed."""
    cmd = [sys.executable, "-m", "fedrun.cli", "-m", *args, f"hardware.threads={threads}", f"hardware.device={device}",
           "output.plots=false", f"hydra.sweep.dir={folder}", f"cache_dir={folder.parent / 'cache'}"]  # fmt: skip
    return timed(cmd, folder.parent, timeout, repo or REPO)


def reproduce(target: str, overrides: list[str], folder: Path, threads: int, timeout: float,
              flags: tuple[str, ...] = (), repo: Path | None = None) -> dict[str, Any]:  # fmt: skip
    """``fedrun-reproduce run TARGET --smoke *flags`` into ``folder``, each run with ``overrides`` (``--override``):
    as :func:`sweep`. ``repo``: fedrun as a checkout there has it (``--before``), with neither ``overrides`` nor
    ``flags``, which it may not know."""
    settings = [f"hardware.threads={threads}", f"cache_dir={folder.parent / 'cache'}", *overrides]
    options = [] if repo else [*flags, *(w for o in settings for w in ("--override", o))]
    cmd = [sys.executable, "-m", "fedrun.cli.reproduce", "run", target, "--smoke", "--out", str(folder), *options]
    return timed(cmd, folder.parent, timeout, repo or REPO)


def timed(cmd: list[str], cwd: Path, timeout: float, repo: Path = REPO) -> dict[str, Any]:
    """``cmd`` run in ``cwd`` with ``repo``'s fedrun: its wall and CPU time (the child's user + system), exit code
    and stack lines."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(repo), os.environ.get("PYTHONPATH")) if p)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    lines = p.stdout.splitlines()
    return {
        "wall_s": wall,
        "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "returncode": p.returncode,
        "stacks": [ln.strip() for ln in lines if ln.strip().startswith(("stack ", "not stacked", "side by side"))],
        "error": (p.stderr.strip().splitlines() or [""])[-1] if p.returncode else None,
    }


def metrics(folder: Path) -> dict[str, list[dict[str, Any]]]:
    """Each job's metrics rows (timing columns dropped), by its folder's path below ``folder`` less the hash."""
    import pandas as pd

    out = {}
    for p in sorted(folder.rglob("metrics.csv")):
        frame = pd.read_csv(p)
        name = str(p.parent.relative_to(folder)).rsplit("-", 1)[0]
        out[name] = frame.drop(columns=[c for c in frame if c in TIMING]).to_dict("records")
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
    return {"max_abs": worst_abs, "max_rel": worst_rel, "jobs": len(a)}


def summarise(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Medians of each mode's wall and CPU time over the repeats, and the speed-ups of stacking: the ratio of the
    medians, and the median of the ratios of each repeat (the runs of one repeat ran next to each other)."""
    out: dict[str, Any] = {}
    for mode, rs in runs.items():
        out[mode] = {k: statistics.median(r[k] for r in rs) for k in ("wall_s", "cpu_s")}
        out[mode].update({f"{k}_range": [min(r[k] for r in rs), max(r[k] for r in rs)] for k in ("wall_s", "cpu_s")})
    for base in [b for b in ("one_after_another", "one_after_another_vectorised", "before") if b in runs]:
        tag = {"one_after_another": "", "one_after_another_vectorised": "_vs_vectorised"}.get(base, f"_vs_{base}")
        for mode, keys in (("stacked", ("wall_s", "cpu_s")), ("side_by_side", ("wall_s",)),
                           ("side_by_side_unstacked", ("wall_s",)),
                           *((("one_after_another", ("wall_s", "cpu_s")),) if base == "before" else ())):  # fmt: skip
            if mode not in runs or base not in runs:
                continue
            for k in keys:
                name = f"speedup_{k.split('_')[0]}{tag}" + ("" if mode == "stacked" else f"_{mode}")
                if base == "before":
                    name = f"speedup_{k.split('_')[0]}_{mode}{tag}"
                out[name] = out[base][k] / out[mode][k]
                pairs = [a[k] / b[k] for a, b in zip(runs[base], runs[mode], strict=True)]
                out[f"{name}_paired_median"] = statistics.median(pairs)
                out[f"{name}_paired_range"] = [min(pairs), max(pairs)]
    return out


def measure_sweep(name: str, extra: list[str], root: Path, threads: int, device: str, timeout: float,
                  repeats: int, only_modes: list[str] | None = None,
                  before: Path | None = None) -> dict[str, Any]:  # fmt: skip
    """One sweep in each mode, ``repeats`` times, the modes' order rotated each repeat (the machine's load changes
    from minute to minute: each mode gets the same chances), after a warm-up of its first seed (the data and
    partition caches, ``engine=auto``'s cached choice: what a second sweep finds). ``before``: also the mode
    ``before``, the sweep as that checkout of fedrun runs it (none of the modes' settings, which it may not know)."""
    args = [*SWEEPS[name], *extra]
    warm = [a if not a.startswith("seed=") else "seed=0" for a in args]
    res: dict[str, Any] = {"args": args, "repeats": repeats, "load_start": os.getloadavg()[0]}
    res["warm_up"] = sweep([*warm, "hardware.stack=off"], root / f"{name}-warm", threads, device, timeout)
    modes = [m for m in MODES if m in (only_modes or MODES)] + (["before"] if before else [])
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    for rep in range(repeats):
        for mode in modes[rep % len(modes) :] + modes[: rep % len(modes)]:
            settings, where = (MODES[mode], None) if mode != "before" else ([], before)
            r = sweep([*args, *settings], root / f"{name}-{mode}-{rep}", threads, device, timeout, where)
            runs[mode].append(r)
            print(f"    {name} {mode} #{rep}: {r['wall_s']:.1f} s wall, {r['cpu_s']:.1f} s CPU", flush=True)
    res["runs"] = runs
    res["load_end"] = os.getloadavg()[0]
    res["stacks"] = runs["stacked"][0]["stacks"] if "stacked" in runs else []
    res["side_stacks"] = runs["side_by_side"][0]["stacks"] if "side_by_side" in runs else []
    res["errors"] = [f"{m} #{i}: {r['error']}" for m, rs in runs.items() for i, r in enumerate(rs) if r["error"]]
    res.update(summarise(runs))
    return res


REPRODUCE_MODES = {  # mode: (--override settings, fedrun-reproduce flags); a -smoke target pins the sequential engine
    "one_after_another": (["hardware.stack=off"], ("--parallel", "off")),
    "stacked": (["hardware.engine=auto"], ("--parallel", "off")),
    "side_by_side": (["hardware.stack=off"], ("--parallel", str(os.cpu_count() or 1))),  # a forked process per core
    "before": ([], ()),  # fedrun of the checkout --before names, as it ran the target (in one process)
}


def measure_reproduce(name: str, root: Path, threads: int, timeout: float, repeats: int,
                      before: Path | None = None) -> dict[str, Any]:  # fmt: skip
    """A reproduce target's -smoke (:data:`REPRODUCE`) in each of :data:`REPRODUCE_MODES` (``before`` only with a
    checkout ``before``), ``repeats`` times, the modes rotated, after a warm-up run (its stand-in data and
    partitions cached); and the largest difference between the metrics of one after another and stacked."""
    target = REPRODUCE[name]
    res: dict[str, Any] = {"target": f"{target} --smoke", "repeats": repeats, "load_start": os.getloadavg()[0]}
    res["warm_up"] = reproduce(target, ["hardware.stack=off"], root / f"{name}-warm", threads, timeout)
    modes = {m: v for m, v in REPRODUCE_MODES.items() if m != "before" or before is not None}
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    for rep in range(repeats):
        for mode in list(modes)[rep % len(modes) :] + list(modes)[: rep % len(modes)]:
            settings, flags = modes[mode]
            where = before if mode == "before" else None
            r = reproduce(target, settings, root / f"{name}-{mode}-{rep}", threads, timeout, flags, where)
            runs[mode].append(r)
            print(f"    {name} {mode} #{rep}: {r['wall_s']:.1f} s wall, {r['cpu_s']:.1f} s CPU", flush=True)
    res["runs"] = runs
    res["load_end"] = os.getloadavg()[0]
    res["stacks"] = runs["stacked"][0]["stacks"]
    res["errors"] = [f"{m} #{i}: {r['error']}" for m, rs in runs.items() for i, r in enumerate(rs) if r["error"]]
    res.update(summarise(runs))
    res["difference"] = max_difference(
        metrics(root / f"{name}-one_after_another-0"), metrics(root / f"{name}-stacked-0")
    )
    return res


def measure_stack(rounds: int | None, threads: int, device: str, timeout: float, only: list[str],
                  repeats: int = 1, modes: list[str] | None = None,
                  before: Path | None = None) -> dict[str, Any]:  # fmt: skip
    """Each sweep one after another (``hardware.stack=off``) and stacked, in one sitting; and the tolerance."""
    extra = [f"fl.rounds={rounds}"] if rounds else []
    out: dict[str, Any] = {"rounds": rounds or "the experiment's (30)", "threads": threads, "device": device}
    with tempfile.TemporaryDirectory(prefix="fedrun-bench-stack-") as tmp:
        root = Path(tmp)
        for name in [n for n in SWEEPS if n in only]:
            out[name] = measure_sweep(name, extra, root, threads, device, timeout, repeats, modes, before)
        if "tolerance" in only:
            args = [*TOLERANCE, *extra, "hardware.engine=vectorised"]
            alone = sweep([*args, "hardware.stack=off"], root / "tol-off", threads, device, timeout)
            stacked = sweep(args, root / "tol-stacked", threads, device, timeout)
            diff = max_difference(metrics(root / "tol-off"), metrics(root / "tol-stacked"))
            out["tolerance"] = {"args": args, "alone": alone, "stacked": stacked, **diff}
        for name in [n for n in REPRODUCE if n in only]:
            out[name] = measure_reproduce(name, root, threads, timeout, repeats, before)
    return out


def print_stack(r: dict[str, Any]) -> None:
    for name in SWEEPS:
        s = r.get(name)
        if not s:
            continue
        modes = ", ".join(f"{m} {s[m]['wall_s']:.1f} s wall / {s[m]['cpu_s']:.1f} s CPU" for m in s["runs"])
        ups = ", ".join(
            f"{k.removeprefix('speedup_')} {v:.2f}x (each repeat's {s[k + '_paired_range'][0]:.2f}-"
            f"{s[k + '_paired_range'][1]:.2f}x)"
            for k, v in s.items()
            if k.startswith("speedup_") and not k.endswith(("_paired_median", "_paired_range"))
        )
        print(
            f"  {name} ({' '.join(s['args'])}; median of {s['repeats']}): {modes}; speed-ups: {ups};"
            f" load {s['load_start']:.1f} -> {s['load_end']:.1f}; stacked: {'; '.join(s['stacks'])}"
            + (f"; side by side: {'; '.join(s['side_stacks'])}" if s.get("side_stacks") else "")
            + (f"; errors: {s['errors']}" if s["errors"] else "")
        )
    for name in REPRODUCE:
        s = r.get(name)
        if not s:
            continue
        off, on, diff = s["one_after_another"], s["stacked"], s["difference"]
        spread = ", ".join(
            f"{m} {x[k][0]:.1f}-{x[k][1]:.1f}" for m, x in (("off", off), ("stacked", on)) for k in ("cpu_s_range",)
        )
        print(
            f"  {name} (fedrun-reproduce run {s['target']}; median of {s['repeats']}): one after another"
            f" (hardware.stack=off) {off['wall_s']:.1f} s wall / {off['cpu_s']:.1f} s CPU, stacked {on['wall_s']:.1f}"
            f" / {on['cpu_s']:.1f} -> {s['speedup_wall']:.2f}x wall, {s['speedup_cpu']:.2f}x CPU (each repeat's CPU"
            f" ratio {s['speedup_cpu_paired_range'][0]:.2f}-{s['speedup_cpu_paired_range'][1]:.2f}; CPU s {spread});"
            f" load {s['load_start']:.1f} -> {s['load_end']:.1f}; {len(s['stacks'])} stack lines"
            f" ({'; '.join(s['stacks'][:2])}{' ...' if len(s['stacks']) > 2 else ''}); metrics of the"
            f" {diff['jobs']} jobs differ by at most {diff['max_abs']:.3g} ({diff['max_rel']:.3g} relative)"
            + (f"; errors: {s['errors']}" if s["errors"] else "")
        )
        if "side_by_side" in s:
            side, up = s["side_by_side"]["wall_s"], s["speedup_wall_side_by_side"]
            print(f"    side by side (--parallel {os.cpu_count()}): {side:.1f} s wall -> {up:.2f}x wall")
        if "before" in s:
            ups = ", ".join(
                f"{k.removeprefix('speedup_wall_').removesuffix('_vs_before')} {v:.2f}x"
                for k, v in s.items()
                if k.startswith("speedup_wall_") and k.endswith("_vs_before")
            )
            print(f"    before (--before's checkout): {s['before']['wall_s']:.1f} s wall; speed-ups over it: {ups}")
    t = r.get("tolerance")
    if t:
        print(
            f"  tolerance ({' '.join(t['args'])}): stacked vs alone on the vectorised engine, {t['jobs']} jobs,"
            f" largest difference {t['max_abs']:.3g} absolute, {t['max_rel']:.3g} relative, over every metrics cell"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=None, help="fl.rounds of every job (default: the experiment's 30)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--timeout", type=float, default=3600.0)
    ap.add_argument("--only", default="seeds,methods,tolerance")
    ap.add_argument("--repeats", type=int, default=1, help="each sweep in each mode this many times (medians)")
    ap.add_argument("--out", default=None, help="write the JSON result here")
    ap.add_argument("--modes", default=None, help=f"only these of the sweeps' modes ({', '.join(MODES)})")
    ap.add_argument("--before", type=Path, default=None, help="a checkout (worktree) of fedrun: the targets' baseline")
    args = ap.parse_args()
    print(f"stacked sweeps ({STACK_DESC}), load average {os.getloadavg()[0]:.1f} ...", flush=True)
    modes = args.modes.split(",") if args.modes else None
    only = args.only.split(",")
    r = measure_stack(args.rounds, args.threads, args.device, args.timeout, only, args.repeats, modes, args.before)
    print_stack(r)
    if args.out:
        Path(args.out).write_text(json.dumps(r, indent=1))


if __name__ == "__main__":
    main()
