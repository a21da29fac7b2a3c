"""``fedrun-report``: print a paper-style table from run directories, and write CSV and LaTeX beside it.

fedrun-report outputs/multirun/2026-11-22/10-00-00 --rows algorithm --cols partition.alpha
fedrun-report DIR --table rows=algorithm cols=partition.alpha --metric best
fedrun-report --partition RUN_DIR   (client-by-class heatmap and per-domain breakdown of one run)
fedrun-report line|plane|landscape|coherence ...   (analysis plots: see fedrun/report/landscape.py)
fedrun-report DIR --layout fedlaw --rows tags.method --cols partition.alpha   (a paper's cell format)
fedrun-report DIR --select algorithm.mu   (per method/setting, keep the mu with the best mean over seeds)
fedrun-report DIR --layout fedlaw_corr --cols fl.local_epochs   (FedLAW Table 11: r of accumulated lambda)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fedrun.errors import DataError
from fedrun.outputs import atomic_write
from fedrun.report.collect import load_runs
from fedrun.report.layouts import LAYOUT_METRIC, LAYOUTS, render
from fedrun.report.partition import report_partition
from fedrun.report.provenance import standin_note
from fedrun.report.select import select_best
from fedrun.report.tables import METRICS, make_table

ANALYSIS_COMMANDS = ("line", "plane", "landscape", "coherence", "diagnostics")


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="fedrun-report", description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="*", type=Path, help="run or multirun directories")
    ap.add_argument("--partition", type=Path, metavar="RUN_DIR", help="heatmaps + per-domain breakdown of one run")
    ap.add_argument("--rows", default="algorithm", help="comma-separated config keys for the rows")
    ap.add_argument("--cols", default="", help="comma-separated config keys for the columns")
    ap.add_argument("--table", nargs="*", default=[], metavar="rows=K cols=K", help="alternative rows=/cols= form")
    ap.add_argument("--metric", default="last_k", choices=sorted(METRICS), help="cell value (default: last_k)")
    ap.add_argument("--layout", choices=sorted(LAYOUTS), help="a paper's table format (fedrun.report.layouts)")
    ap.add_argument("--select", metavar="KEY", help="hyperparameter to pick per row/column by best mean over seeds")
    ap.add_argument("--out", type=Path, default=None, help="prefix for .csv/.tex/.md (default: DIR/report_<metric>)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ANALYSIS_COMMANDS:  # subcommands; any other first word is a run directory
        from fedrun.report.landscape import main as analysis_main

        return analysis_main(argv)
    args = parse_args(argv)
    for item in args.table:
        key, _, value = item.partition("=")
        if key not in ("rows", "cols"):
            print(f"fedrun-report: error: --table: unknown part '{key}'; valid: rows, cols", file=sys.stderr)
            return 2
        setattr(args, key, value)
    if args.partition is not None:
        try:
            print(report_partition(args.partition))
        except DataError as e:
            print(f"fedrun-report: error: {e}", file=sys.stderr)
            return 2
        return 0
    if not args.dirs:
        print("fedrun-report: error: give run directories, or --partition RUN_DIR", file=sys.stderr)
        return 2
    for d in args.dirs:
        if not d.is_dir():
            print(f"fedrun-report: error: {d}: no such directory", file=sys.stderr)
            return 2
    runs = load_runs(args.dirs)
    if runs.empty:
        print(f"fedrun-report: error: no runs found under {', '.join(map(str, args.dirs))}", file=sys.stderr)
        return 2
    rows = [k for k in args.rows.split(",") if k]
    cols = [k for k in args.cols.split(",") if k]
    try:
        chosen_md = ""
        if args.select:
            score = "summary." + (LAYOUT_METRIC[args.layout] if args.layout else METRICS[args.metric].split(".", 1)[1])
            group = rows + cols + (["ima.enabled"] if args.layout == "fedima" and "ima.enabled" in runs else [])
            runs, chosen = select_best(runs, args.select, [k for k in group if k != args.select], score)
            head = f"\n\nChosen {args.select} (best mean over seeds of {score}):\n"
            chosen_md = head + chosen.to_markdown(index=False)
        if args.layout:
            table = render(args.layout, runs, rows, cols)
            long = table.reset_index()
        else:
            table, long = make_table(runs, rows, cols, args.metric)
    except ValueError as e:
        print(f"fedrun-report: error: {e}", file=sys.stderr)
        return 2
    note = standin_note(runs)
    md = table.to_markdown() + (f"\n\n{note}" if note else "") + chosen_md
    print(md)
    failed = runs[runs["status"] != "completed"]
    if len(failed):
        print(f"\n{len(failed)} of {len(runs)} runs did not complete:")
        for _, r in failed.iterrows():
            print(f"  {r['run_dir']}: {r['status']}: {r.get('error') or ''}")
    prefix = args.out or args.dirs[0] / f"report_{args.layout or args.metric}"
    atomic_write(prefix.with_suffix(".md"), md + "\n")
    atomic_write(prefix.with_suffix(".csv"), long.to_csv(index=False))
    atomic_write(prefix.with_suffix(".tex"), table.to_latex())
    print(f"\nwritten: {prefix}.md, {prefix}.csv, {prefix}.tex")
    return 0


if __name__ == "__main__":
    sys.exit(main())
