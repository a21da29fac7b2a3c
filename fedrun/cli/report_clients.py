"""``fedrun-report clients DIR... [--rows KEYS] [--column acc|global_acc] [--out PATH] [--force]``: the distribution of
the clients' accuracies of personalised runs (``eval.local_test``), one violin per row group (seeds pooled), from each
run's clients.csv (fedrun/report/personal.py); the table of its statistics on screen and in PREFIX.csv."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fedrun.core.errors import DataError
from fedrun.report import output
from fedrun.report.collect import collect_runs
from fedrun.report.personal import client_accuracies, distribution_table, draw_distribution

CLIENTS_LINE = "per-client accuracy distribution of personalised runs (clients.csv): a violin per method, its table"


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="fedrun-report clients", description=CLIENTS_LINE)
    ap.add_argument("dirs", nargs="+", type=Path, help="run or multirun directories")
    ap.add_argument("--rows", default="algorithm", help="comma-separated config keys for the groups")
    ap.add_argument("--column", default="acc", choices=("acc", "global_acc"), help="clients' own or the global model")
    ap.add_argument("--out", type=Path, default=None, help="where the files go; PREFIX.png/.csv")
    ap.add_argument("--force", action="store_true", help="overwrite an existing report")
    return ap.parse_args(argv)


def clients(argv: list[str]) -> int:
    """``fedrun-report clients``: 0, 1 when a file cannot be written, 2 on bad input (one line)."""
    args = parse_args(argv)
    for d in args.dirs:
        if not d.is_dir():
            return _error(f"{d}: no such directory")
    if (why := output.bad_out(args.out)) is not None:
        return _error(why)
    runs, _ = collect_runs(args.dirs)
    rows = [k.strip() for k in args.rows.split(",") if k.strip()]
    for key in rows:
        if key not in runs:
            return _error(f"--rows: no config key '{key}' in these runs; try one of: {', '.join(sorted(runs)[:30])}")
    try:
        accs = client_accuracies(runs, rows, args.column)
    except DataError as e:  # no clients.csv
        return _error(str(e))
    table = distribution_table(accs)
    print(table.to_markdown(index=False))
    model = "each client's own model" if args.column == "acc" else "the global model"
    title = f"Accuracy of {model} on the client's test data, last evaluated round"

    def draw(prefix: Path) -> int:
        png, csv = (prefix.with_name(prefix.name + suffix) for suffix in (".png", ".csv"))
        draw_distribution(accs, png, title)
        table.to_csv(csv, index=False)
        print(f"written: {png}, {csv}")  # as table and curves say where their files went
        return 0

    sys.stdout.flush()
    return output.draw(args.out, args.dirs, f"clients_{args.column}", (".png", ".csv"), args.force, draw)


def _error(message: str) -> int:
    print(f"fedrun-report: error: {message}", file=sys.stderr)
    return 2
