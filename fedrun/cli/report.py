"""``fedrun-report``: tables and figures from run directories, one subcommand each (``fedrun-report --help``).

fedrun-report table outputs/multirun/2026-11-22/10-00-00   (its sweep's keys: the first the rows, the others columns)
fedrun-report table DIR --metric best   (the cell; default: local_mean for personalised runs, else last_k)
fedrun-report table DIR --rows algorithm --over seed,fl.rounds   (also average over fl.rounds; else it is an error)
fedrun-report table DIR --rows algorithm --split   (every key that varies inside a cell becomes a column)
fedrun-report table DIR --layout fedlaw --rows tags.method --cols partition.alpha   (a paper's cell format)
fedrun-report table DIR --select algorithm.mu   (per method/setting, keep the mu with the best mean over seeds)
fedrun-report table DIR --layout fedlaw_corr --cols fl.local_epochs   (FedLAW Table 11: r of accumulated lambda)
fedrun-report scorecard fedlaw-table3 DIR   (each published cell, ours | paper | difference)
fedrun-report scorecard fedcos-table2   (the scorecard of the evidence records shipped with fedrun)
fedrun-report curves DIR... --rows algorithm   (mean ± std test accuracy against the round, per row)
fedrun-report partition RUN_DIR   (client-by-class heatmap and per-domain breakdown of one run)
fedrun-report line|plane|landscape|coherence ...   (analysis plots: see fedrun/report/landscape.py)

The flag form of earlier versions still works: ``fedrun-report DIR ...`` is ``table`` (``DIR --paper TARGET``:
``scorecard``), ``fedrun-report --partition RUN_DIR`` is ``partition``. ``fedrun-report --version``: fedrun's.

A cell averages over seeds only (``--over`` names more keys); a config key that varies inside a cell is an
error naming it. Under the table: runs that did not complete or were refused, missing runs (a seed that other
cells have), duplicates (two run directories with the same config: counted once), unreadable run dirs and damaged
ones (a summary that disagrees with its ranges or metrics.csv: fedrun/report/collect.py). Folders that are not
fedrun runs are left out and named on stderr, one line each ("foreign: DIR: why").

Where the files go, for every subcommand (tables, curves, heatmaps, landscapes): ``--out PATH``, else ``reports/``
beside the run directories (never inside one), else ``reports/`` in the current directory; an existing report is
never overwritten unless ``--force`` (fedrun/report/output.py). ``--out`` inside a run directory is refused (exit 2).
The table is always printed; a file that cannot be written is one line naming its path, and the exit code is then 1
(0: table and files; 2: bad input, no table).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from fedrun.cli.help import version_line
from fedrun.cli.report_axes import ROWS_HELP, table_axes
from fedrun.cli.report_clients import CLIENTS_LINE, clients
from fedrun.core.errors import DataError
from fedrun.papers.layouts import layout, layout_names, render
from fedrun.report import output
from fedrun.report.collect import FOREIGN, Unreadable, collect_runs
from fedrun.report.listing import listing, n_note
from fedrun.report.pooling import (
    DEFAULT_OVER,
    Duplicate,
    cell_counts,
    check_pooling,
    drop_duplicates,
    empty_cells,
    missing_runs,
    varying_keys,
)
from fedrun.report.provenance import standin_note
from fedrun.report.select import select_best
from fedrun.report.tables import LOWER_IS_BETTER, METRICS, default_metric, make_table

ANALYSIS_COMMANDS = ("line", "plane", "landscape", "coherence", "diagnostics")


# subcommand -> its one line in ``fedrun-report --help``
SUBCOMMANDS = {
    "table": "a paper-style table of runs: Markdown on screen, .md/.csv/.tex files",
    "scorecard": "each published cell of a reproduce target beside ours (fedrun-reproduce list)",
    "curves": "mean ± std of a per-round metric against the round, one line per row group",
    "partition": "client-by-class heatmap and per-domain breakdown of one run",
    "line": "1-D loss/error between two models",
    "plane": "2-D loss/error on the plane through three models (FedIMA Fig. 1)",
    "landscape": "2-D loss/error around one model along two random directions (Li et al. 2018)",
    "coherence": "per-round diagnostics (grad coherence, client drift) of runs with eval.diagnostics=true",
    "clients": CLIENTS_LINE,
}
Handler = Callable[[list[str]], int]
HANDLERS: dict[str, Handler] = {"clients": clients}  # and those added by register_subcommand (docs/extending.md)


def register_subcommand(name: str, line: str) -> Callable[[Handler], Handler]:
    """Add ``fedrun-report NAME``: the decorated function gets the words after NAME and returns the exit code;
    ``line`` is its line in ``fedrun-report --help``. A name taken already is refused."""

    def add(handler: Handler) -> Handler:
        if name in SUBCOMMANDS:
            raise ValueError(f"fedrun-report {name}: a subcommand of that name exists")
        SUBCOMMANDS[name], HANDLERS[name] = line, handler
        return handler

    return add


OUT_HELP = "where the files go (a file prefix or a folder; default: reports/ beside the runs, else in the cwd)"
FORCE_HELP = "overwrite an existing report instead of suffixing _2, _3..."


def top_parser() -> argparse.ArgumentParser:
    """``fedrun-report --help``: the subcommands, each with its one line (each has its own ``--help``)."""
    ap = argparse.ArgumentParser(
        prog="fedrun-report",
        description="Tables and figures from fedrun run directories. Report files go to --out, default reports/"
        " beside the runs (never inside a run dir), and are never silently overwritten (--force).",
        epilog="fedrun-report SUBCOMMAND --help: its options. The flag form of earlier versions still works:"
        " 'fedrun-report DIR ...' is 'table', 'DIR --paper T' is 'scorecard', '--partition RUN_DIR' is 'partition'.",
    )
    ap.add_argument("--version", action="version", version=version_line(), help="as fedrun --version")
    sub = ap.add_subparsers(dest="command", metavar="SUBCOMMAND", title="subcommands")
    for name, line in SUBCOMMANDS.items():
        sub.add_parser(name, help=line, aliases=["diagnostics"] if name == "coherence" else [], add_help=False)
    return ap


def parse_args(argv: list[str], command: str = "") -> argparse.Namespace:
    """The table's options (``command`` "table"), the scorecard's ("scorecard"), or the flag form of earlier
    versions ("": both, and ``--partition``)."""
    prog = f"fedrun-report {command}".strip()
    description = SUBCOMMANDS.get(command, __doc__.split("\n\n")[0])
    ap = argparse.ArgumentParser(prog=prog, description=description)
    if command == "scorecard":
        ap.add_argument("paper", metavar="TARGET", help="a reproduce target, e.g. fedlaw-table3")
        ap.add_argument("dirs", nargs="*", type=Path, help="its run directories (none: the shipped evidence records)")
    else:
        ap.add_argument("dirs", nargs="*", type=Path, help="run or multirun directories")
    if not command:
        ap.add_argument("--partition", type=Path, metavar="RUN_DIR", help="heatmaps + per-domain breakdown of one run")
        ap.add_argument("--paper", metavar="TARGET", help="scorecard against a reproduce target's published cells")
    if command != "scorecard":
        ap.add_argument("--rows", help=ROWS_HELP)
        ap.add_argument("--cols", default="", help="comma-separated config keys for the columns")
        ap.add_argument("--table", nargs="*", default=[], metavar="rows=K cols=K", help="alternative rows=/cols= form")
        ap.add_argument("--over", default=",".join(DEFAULT_OVER), help="keys a cell averages over (default: seed)")
        ap.add_argument("--split", action="store_true", help="keys that vary inside a cell become columns")
        ap.add_argument("--metric", choices=sorted(METRICS), help="cell value (default: local_mean or last_k)")
        ap.add_argument("--layout", metavar="NAME", help=f"a paper's table format: {', '.join(layout_names())}")
        ap.add_argument("--select", metavar="KEY", help="hyperparameter to pick per row/column by best mean over seeds")
    ap.add_argument("--out", type=Path, default=None, help=OUT_HELP + "; files: PREFIX.md/.csv/.tex")
    ap.add_argument("--force", action="store_true", help=FORCE_HELP)
    args = ap.parse_args(argv)
    if command:
        args.partition = None
        if command == "table":
            args.paper = None
    return args


def _error(message: str) -> int:
    print(f"fedrun-report: error: {message}", file=sys.stderr)
    return 2


def _keys(text: str) -> list[str]:
    return [k.strip() for k in text.split(",") if k.strip()]


def main(argv: list[str] | None = None) -> int:
    """The entry point: :func:`report` with a closed stdout (``fedrun-report ... | head``) ending quietly."""
    try:
        code = report(sys.argv[1:] if argv is None else argv)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)  # the reader went away: say nothing, even at exit's flush
        os.dup2(devnull, sys.stdout.fileno())
        return 0


def report(argv: list[str]) -> int:
    """``fedrun-report SUBCOMMAND ...``; a first word that is no subcommand is the flag form of earlier versions."""
    if not argv or argv[0] in ("-h", "--help"):
        top_parser().print_help(sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if argv[0] == "--version":  # what fedrun --version prints (one package, one version)
        return _print(version_line())
    command, rest = argv[0], argv[1:]
    if command in ANALYSIS_COMMANDS:
        return _analysis([command, *rest])
    if command == "curves":
        return _curves(rest)
    if command == "partition":
        return _partition(rest)
    if command in ("table", "scorecard"):
        return _tabulate(parse_args(rest, command))
    if command in HANDLERS:
        return HANDLERS[command](rest)
    return _tabulate(parse_args(argv))  # the flag form: table, or --paper / --partition


def _tabulate(args: argparse.Namespace) -> int:
    """``table`` and ``scorecard``; the flag form's ``--partition`` too."""
    for item in getattr(args, "table", []):
        key, _, value = item.partition("=")
        if key not in ("rows", "cols"):
            return _error(f"--table: unknown part '{key}'; valid: rows, cols")
        setattr(args, key, value)
    if args.partition is not None:
        return _partition_of(args.partition, args.out, args.force)
    if args.paper is not None:
        return _scorecard(args)
    if not args.dirs:
        return _error("give run directories (fedrun-report --help lists the subcommands)")
    if (missing := next((d for d in args.dirs if not d.is_dir()), None)) is not None:
        return _error(f"{missing}: no such directory")
    if (bad := _bad_out(args.out)) is not None:
        return bad
    runs, unreadable = _collect(args.dirs)
    if runs.empty:
        where = ", ".join(map(str, args.dirs))
        return _error(f"no readable runs under {where}" + "".join(f"; {u.run_dir}: {u.why}" for u in unreadable))
    runs, dups = drop_duplicates(runs)
    rows, cols = table_axes(args.dirs, args.rows, args.cols, over := _keys(args.over))
    try:
        return _table(args, runs, rows, cols, over, unreadable, dups)
    except ValueError as e:
        return _error(str(e))


def _bad_out(out: Path | None) -> int | None:
    """``--out`` inside a run directory is refused (exit 2) before anything is read or printed."""
    why = output.bad_out(out)
    return None if why is None else _error(why)


def _partition(argv: list[str]) -> int:
    """``fedrun-report partition RUN_DIR [--out PATH] [--force]``."""
    ap = argparse.ArgumentParser(prog="fedrun-report partition", description=SUBCOMMANDS["partition"])
    ap.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a run directory (it holds partition.csv)")
    ap.add_argument("--out", type=Path, default=None, help=OUT_HELP + "; files: PREFIX.png, PREFIX_domains.png")
    ap.add_argument("--force", action="store_true", help=FORCE_HELP)
    args = ap.parse_args(argv)
    return _partition_of(args.run_dir, args.out, args.force)


def _partition_of(run_dir: Path, out: Path | None, force: bool) -> int:
    from fedrun.report.partition import partition_table, report_partition  # here: it imports torch, the rest need not

    if (bad := _bad_out(out)) is not None:
        return bad
    try:
        partition_table(run_dir)  # before a file is claimed for it
    except DataError as e:
        return _error(str(e))
    name = f"partition_{Path(os.path.abspath(run_dir)).name}"
    draw = lambda prefix: _print(report_partition(run_dir, prefix))  # noqa: E731
    return output.draw(out, [run_dir], name, (".png", "_domains.png"), force, draw)


def _print(text: str) -> int:
    print(text)
    return 0


def _curves(argv: list[str]) -> int:
    """``fedrun-report curves DIR... [--out PATH] [--force]`` (fedrun/report/curves.py draws)."""
    from fedrun.report import curves

    args = curves.parse_args(argv)  # --help, and bad options, exit here
    if (bad := _bad_out(args.out)) is not None:
        return bad
    run = lambda prefix: curves.main([*argv, "--out", f"{prefix}.png"])  # noqa: E731 - the last --out wins
    return output.draw(args.out, args.dirs, f"curves_{args.metric}", (".png", ".csv"), args.force, run)


# what each analysis plot writes beside its PNG (fedrun/report/landscape.py)
ANALYSIS_SUFFIXES = {"line": (".png", ".csv"), "plane": (".png", ".npz"), "landscape": (".png", ".npz")}


def _analysis(argv: list[str]) -> int:
    """``fedrun-report line|plane|landscape|coherence ... [--out PATH] [--force]`` (fedrun/report/landscape.py)."""
    from fedrun.report import landscape

    args = landscape.parse_args(argv)
    if (bad := _bad_out(args.out)) is not None:
        return bad
    sources = args.runs if args.command in ("coherence", "diagnostics") else args.models
    first = output.inside_run(sources[0]) or Path(os.path.abspath(sources[0]))
    name = "diagnostics" if args.command in ("coherence", "diagnostics") else f"landscape_{args.command}"
    suffixes = ANALYSIS_SUFFIXES.get(args.command, (".png",))
    run = lambda prefix: landscape.main([*argv, "--out", f"{prefix}.png"])  # noqa: E731
    return output.draw(args.out, sources, f"{name}_{first.name}", suffixes, args.force, run)


def _collect(dirs: list[Path]) -> tuple[pd.DataFrame, list[Unreadable]]:
    """:func:`collect_runs`, with each foreign folder named on stderr (and left out); the rest of what was left out
    (unreadable, damaged) is listed under the table."""
    runs, left_out = collect_runs(dirs)
    for u in left_out:
        if u.kind == FOREIGN:
            print(f"fedrun-report: foreign (not a fedrun run, left out): {u.run_dir}: {u.why}", file=sys.stderr)
    return runs, [u for u in left_out if u.kind != FOREIGN]


def _scorecard(args: argparse.Namespace) -> int:
    """``--paper TARGET``: the scorecard of the runs under ``dirs`` (none: the shipped evidence records)."""
    from fedrun.papers.card import render_card
    from fedrun.papers.claims import orders
    from fedrun.papers.scorecard import evidence_runs, no_scorecard, scorecard
    from fedrun.papers.targets import BY_NAME

    if (why := no_scorecard(args.paper)) is not None:  # unknown, or nothing published (a figure, fedrun's table)
        return _error(why)
    target = BY_NAME[args.paper]
    if (missing := next((d for d in args.dirs if not d.is_dir()), None)) is not None:
        return _error(f"{missing}: no such directory")
    if (bad := _bad_out(args.out)) is not None:
        return bad
    if args.dirs:
        runs, unreadable = _collect(args.dirs)
        if runs.empty:
            return _error(f"no readable runs under {', '.join(map(str, args.dirs))}")
        runs, dups = drop_duplicates(runs)
        found = list(runs["run_dir"]) + [d.run_dir for d in dups]
        source = ""
    else:
        runs, source = evidence_runs(), "from the evidence records in fedrun/papers/evidence/"
    card = scorecard(runs, target)
    if args.dirs and card.empty:
        where = ", ".join(map(str, args.dirs))
        return _error(f"no run under {where} is a cell of {target.name}; valid: runs of its presets")
    print(render_card(card, orders(card), target) + (f"\n\n{source}" if source else ""))
    if args.dirs:
        return _write(args, found, f"scorecard_{target.name}", {".csv": card.to_csv(index=False)})
    return 0


def _write(args: argparse.Namespace, runs: list[str], name: str, files: dict[str, str]) -> int:
    """Write the report's files after its table was printed: 0, or 1 with one line naming the path that failed."""
    sys.stdout.flush()
    try:
        prefix, notes = output.write_report(args.out, args.force, runs, name, files)
    except output.OutputUnwritable as e:
        print(str(e), file=sys.stderr)
        return 1
    for note in notes:
        print(note, file=sys.stderr)
    print("\nwritten: " + ", ".join(f"{prefix}{s}" for s in files))
    return 0


def _table(
    args: argparse.Namespace,
    runs: pd.DataFrame,
    rows: list[str],
    cols: list[str],
    over: list[str],
    unreadable: list[Unreadable],
    dups: list[Duplicate],
) -> int:
    from fedrun.papers.captions import layout_caption, layout_direction, table_caption
    from fedrun.report.latex import to_latex

    for key in rows + cols:
        if key not in runs:
            raise ValueError(f"no config key '{key}' in these runs; try one of: {', '.join(sorted(runs.columns)[:30])}")
    record, args.metric = layout(args.layout) if args.layout else None, args.metric or default_metric(runs)
    split = [k for k in (record.split if record else ()) if k in runs]
    chosen_md = ""
    if args.select:
        score = "summary." + (record.metric if record else METRICS[args.metric].split(".", 1)[1])
        group = rows + cols + split
        runs, chosen = select_best(runs, args.select, [k for k in group if k != args.select], score)
        head = f"\n\nChosen {args.select} (best mean over seeds of {score}):\n"
        chosen_md = head + chosen.to_markdown(index=False)
    if args.split:
        cols = cols + [k for k in varying_keys(runs, rows + cols + split, over) if k not in cols]
    group = rows + cols + split
    check_pooling(runs, group, over)
    counts = cell_counts(runs, group)
    if record:
        from fedrun.papers.order import paper_sorted

        table = render(args.layout, paper_sorted(runs), rows, cols)
        long = table.reset_index()
        caption, md_caption = (layout_caption(args.layout, runs, list(counts.values()), over, b) for b in (True, False))
        direction: dict[str, str | None] | str | None = layout_direction(args.layout, [str(c) for c in table.columns])
        note = n_note(counts, group)
    else:
        table, long = make_table(runs, rows, cols, args.metric, over)
        caption, md_caption = (table_caption(args.metric, runs, list(counts.values()), over, b) for b in (True, False))
        direction = "min" if args.metric in LOWER_IS_BETTER else "max"
        note = ""
    notes = [n for n in (standin_note(runs), note) if n]
    md = table.to_markdown(disable_numparse=True) + "\n\n" + md_caption + "".join(f"\n\n{n}" for n in notes) + chosen_md
    missing = empty_cells(runs, rows, cols) + missing_runs(runs, group, over)
    under = listing(runs, missing, dups, unreadable)
    files = {
        ".md": md + ("\n" + under if under else "") + "\n",
        ".csv": long.to_csv(index=False),
        ".tex": to_latex(table, caption, direction),
    }
    print(md + ("\n" + under if under else ""))
    found = list(runs["run_dir"]) + [d.run_dir for d in dups]  # where the report goes: beside all of them
    return _write(args, found, f"report_{args.layout or args.metric}", files)


if __name__ == "__main__":
    sys.exit(main())
