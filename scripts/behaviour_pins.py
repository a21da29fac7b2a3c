"""Pinned runs of every capability, written before and after a change and compared column by column.

``run OUT``: each pinned configuration below, on the sequential engine and on the vectorised one (one torch thread
each), as ``fedrun`` runs it from the command line, into ``OUT/<name>-<engine>/``. ``compare A B``: for every run
in both, ``metrics.csv`` and ``clients.csv`` compared on every column but the timings (``round_seconds``,
``aggregate_seconds``, ``seconds``) as the text the run wrote, so equal means equal to the last digit; a table
in Markdown, and exit 1 on any difference. Columns only one side has are listed, not failed (a change may add
one).

    PYTHONPATH=<old checkout> python scripts/behaviour_pins.py run /tmp/pins-before
    python scripts/behaviour_pins.py run /tmp/pins-after
    python scripts/behaviour_pins.py compare /tmp/pins-before /tmp/pins-after
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
from pathlib import Path

SMALL = [
    "experiment=smoke",
    "data.max_train_samples=2000",
    "data.max_test_samples=500",
    "model=mlp",
    "model.hidden=[32]",
    "fl.clients=10",
    "fl.rounds=4",
    "hardware.threads=1",
    "output.plots=false",
    "output.quiet=true",
    "checkpoint.every=2",
]

PINS: dict[str, list[str]] = {
    "system": [
        "system.dropout=0.2", "system.stragglers=0.3", "system.straggler_policy=partial", "fl.local_epochs=2",
        "system.devices=tiers", "system.deadline=0.106", "system.over_selection=1.3", "fl.participation=0.5",
    ],
    "fedbuff": ["system=fedbuff", "system.concurrency=5", "system.buffer=3", "system.devices=tiers", "fl.rounds=8"],
    "fedasync": [
        "system=fedasync", "system.concurrency=5", "system.staleness=polynomial", "system.devices=tiers",
        "fl.rounds=8",
    ],
    "client_dp": ["privacy=client", "fl.participation=0.5", "privacy.noise_multiplier=0.8", "privacy.clip=0.5"],
    "client_dp_target": ["privacy=client", "fl.participation=0.5", "privacy.target_epsilon=8"],
    "adaptive_clip": [
        "privacy=client", "fl.participation=0.5", "privacy.adaptive_clip=true", "privacy.clip=0.1",
        "privacy.clip_count_stddev=1.0",
    ],
    "dp_sgd": ["privacy=sample", "privacy.noise_multiplier=1.0", "privacy.clip=1.0"],
    "topk_ef": ["compression=topk", "compression.ratio=0.05", "compression.error_feedback=true"],
    "qsgd": ["compression=qsgd", "compression.levels=4"],
    "ditto_local": ["algorithm=ditto", "eval.local_test=split"],
    "fedrep_local": ["algorithm=fedrep", "fl.local_epochs=2", "eval.local_test=split", "eval.unseen_clients=2"],
    "fedavg_ft": ["experiment=fedavg_ft", *SMALL[1:], "eval.finetune_steps=3"],
}  # fmt: skip
ENGINES = ("sequential", "vectorised")
TIMINGS = {"round_seconds", "aggregate_seconds", "seconds"}
FILES = ("metrics.csv", "clients.csv")


def command(name: str, engine: str, out: Path) -> list[str]:
    extra = PINS[name]
    base = [] if extra and extra[0].startswith("experiment=") and extra[0] != "experiment=smoke" else SMALL
    return [
        sys.executable, "-m", "fedrun.cli", *base, *extra, f"hardware.engine={engine}",
        f"hydra.run.dir={out / f'{name}-{engine}'}",
    ]  # fmt: skip


def run_all(out: Path, only: list[str]) -> int:
    failed = 0
    for name in only or list(PINS):
        for engine in ENGINES:
            cmd = command(name, engine, out)
            done = subprocess.run(cmd, capture_output=True, text=True, env=os.environ.copy(), check=False)
            print(f"{name}-{engine}: exit {done.returncode}", flush=True)
            if done.returncode:
                failed += 1
                print(done.stderr[-2000:], file=sys.stderr)
    return 1 if failed else 0


def read(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def compare_file(a: Path, b: Path) -> tuple[str, str]:
    """(verdict, columns only one side has)."""
    if not a.is_file() and not b.is_file():
        return "-", ""
    if not (a.is_file() and b.is_file()):
        return f"only in {'before' if a.is_file() else 'after'}", ""
    (ca, ra), (cb, rb) = read(a), read(b)
    shared = [c for c in ca if c in cb and c not in TIMINGS]
    one_side = sorted((set(ca) ^ set(cb)) - TIMINGS)
    if len(ra) != len(rb):
        return f"rows {len(ra)} vs {len(rb)}", ", ".join(one_side)
    bad = sorted({c for x, y in zip(ra, rb, strict=True) for c in shared if x[c] != y[c]})
    verdict = f"equal ({len(ra)} rows x {len(shared)} cols)" if not bad else "DIFFER: " + ", ".join(bad)
    return verdict, ", ".join(one_side)


def compare(before: Path, after: Path) -> int:
    runs = sorted({p.name for p in before.iterdir() if p.is_dir()} & {p.name for p in after.iterdir() if p.is_dir()})
    print("| run | metrics.csv | clients.csv | columns on one side only |")
    print("|---|---|---|---|")
    differ = 0
    for run in runs:
        cells, extra = [], []
        for f in FILES:
            verdict, one_side = compare_file(before / run / f, after / run / f)
            cells.append(verdict)
            differ += verdict.startswith(("DIFFER", "rows", "only"))
            if one_side:
                extra.append(f"{f}: {one_side}")
        print(f"| {run} | {cells[0]} | {cells[1]} | {'; '.join(extra) or '-'} |")
    return 1 if differ else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("out", type=Path)
    r.add_argument("--only", default="", help="comma-separated pin names")
    c = sub.add_parser("compare")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    args = parser.parse_args()
    if args.cmd == "run":
        return run_all(args.out, [n for n in args.only.split(",") if n])
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
