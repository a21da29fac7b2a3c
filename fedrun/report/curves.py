"""``fedrun-report curves DIR... --rows algorithm``: mean ± std of a per-round metric against the round, one line
per row group (one panel per ``--cols`` group), over the seeds of each group, as every FL paper draws it. An
accuracy is drawn (and written) in percent, as the tables print it, its axis in words (fedrun/storage/metric_words.py).

A group pools its runs over ``--over`` (seeds) only; another config key that varies inside it is an error, as in
the tables, unless ``--split`` makes each such key name lines too. Only completed runs are drawn; the others are
listed. Writes ``curves_<metric>.png`` and a CSV of the drawn values (group, round, mean, std, n) beside it. A
line keeps one colour, line style and marker in every panel, and the legend lists the lines in that order
(:func:`fedrun.storage.figures.method_styles`); a panel whose lines are single runs says so instead of "mean ±
std". Runs on stand-in data put the notice on the figure, in the PNG and as the CSV's first ``#`` line
(fedrun.report.provenance).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from fedrun.report.collect import collect_runs
from fedrun.report.pooling import DEFAULT_OVER, check_pooling, drop_duplicates, label, varying_keys
from fedrun.report.provenance import csv_text, standin_note
from fedrun.report.tables import value_key as norm
from fedrun.storage.atomic import atomic_write
from fedrun.storage.figures import marker_every, method_styles, save_figure
from fedrun.storage.metric_words import is_accuracy, metric_label, metric_name
from fedrun.storage.rundir import METRICS_FILE
from fedrun.storage.status import Status


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="fedrun-report curves", description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="+", type=Path, help="run or multirun directories")
    ap.add_argument("--rows", default="algorithm", help="config keys of a line (comma-separated)")
    ap.add_argument("--cols", default="", help="config keys of a panel (comma-separated)")
    ap.add_argument("--over", default=",".join(DEFAULT_OVER), help="keys a line averages over (default: seed)")
    ap.add_argument("--split", action="store_true", help="keys that vary inside a line become line keys (--rows)")
    ap.add_argument("--metric", default="test_acc", help="a metrics.csv column (default: test_acc)")
    ap.add_argument("--x", default="round", help="the x axis: round, or a column such as sim_clock (docs/systems.md)")
    ap.add_argument(
        "--out", type=Path, default=None, help="PNG path (default: reports/curves_<metric>.png beside the runs)"
    )
    ap.add_argument("--force", action="store_true", help="overwrite an existing figure instead of suffixing _2, _3...")
    return ap.parse_args(argv)


def group_curves(runs: pd.DataFrame, keys: list[str], metric: str, x: str = "round") -> dict[tuple, pd.DataFrame]:
    """Per group of ``keys``: round, mean, std (ddof 1; 0 for one run) and n of ``metric`` over its runs; ``x``
    another column in the place of the round (the simulated clock: runs then pool only at equal values)."""
    out = {}
    groups = runs.groupby(keys, dropna=False, sort=False) if keys else [((), runs)]
    for vals, grp in groups:
        vals = vals if isinstance(vals, tuple) else (vals,)
        frames = []
        for i, d in enumerate(grp["run_dir"]):
            m = pd.read_csv(Path(d) / METRICS_FILE)
            for col in (metric, x):
                if col not in m:
                    raise ValueError(f"{d}/metrics.csv: no '{col}' column; columns: {', '.join(m.columns)}")
            frames.append(m[[x, metric]].rename(columns={x: "round"}).assign(run=i))
        if not frames:
            continue
        long = pd.concat(frames)
        scale = 100.0 if is_accuracy(metric) else 1.0  # percent, as the tables print it
        stats = long.groupby("round")[metric].agg(["mean", "std", "count"]).reset_index()
        stats = stats.rename(columns={"count": "n"})
        stats["std"] = stats["std"].fillna(0.0)
        stats[["mean", "std"]] *= scale
        out[vals] = stats
    return out


def line_name(rows: list[str], key: tuple) -> str:
    """The name of a line (its row group, the same in every panel): ``algorithm=fedavg``, or ``all runs``."""
    return label(rows, key[: len(rows)]) or "all runs"


def what_is_drawn(curves: list[pd.DataFrame], over: list[str]) -> str:
    """A panel's words for its lines: "mean ± std over seed" where a line pools runs, else "1 run per line"
    (a std of one run is no std)."""
    if all(int(c["n"].max()) <= 1 for c in curves):
        return "1 run per line"
    return f"mean ± std over {', '.join(over) or 'the runs'} (n = runs per line)"


def plot(
    curves: dict[tuple, pd.DataFrame],
    rows: list[str],
    cols: list[str],
    metric: str,
    path: Path,
    notice: str = "",
    styles: dict[str, dict[str, str]] | None = None,
    over: list[str] | None = None,
    xlabel: str = "round",
) -> None:
    """One panel per column group, one line (mean, with a ± std band) per row group, the legend in the styles'
    order. ``styles``: line name -> ``Axes.plot`` style (default: :func:`method_styles` of these lines; pass one
    map to several figures to keep their colours); ``over``: the keys a line pools (the title says so, or that
    each line is one run); ``notice``: see :func:`fedrun.storage.figures.save_figure`."""
    from matplotlib.ticker import MaxNLocator

    from fedrun.storage.figures import _plt

    plt = _plt()
    styles = styles if styles is not None else method_styles(line_name(rows, k) for k in curves)
    panels = list({norm(k[len(rows) :]): k[len(rows) :] for k in curves}.values())
    fig, axes = plt.subplots(
        1, len(panels), figsize=(6 * len(panels), 4.2), squeeze=False, sharey=True, layout="constrained"
    )
    rank = {name: i for i, name in enumerate(styles)}
    ordered = sorted(curves, key=lambda k: rank.get(line_name(rows, k), len(rank)))
    for ax, panel in zip(axes[0], panels, strict=True):
        mine = [k for k in ordered if norm(k[len(rows) :]) == norm(panel)]
        for key in mine:
            c = curves[key]
            n = int(c["n"].max())
            name = line_name(rows, key)
            style = styles.get(name, {})
            every = marker_every(len(c), rank.get(name, 0))
            ax.plot(c["round"], c["mean"], label=f"{name} (n={n})", markevery=every, **style)
            ax.fill_between(
                c["round"], c["mean"] - c["std"], c["mean"] + c["std"], color=style.get("color"), alpha=0.2, lw=0
            )
        ax.set_xlabel(metric_label(xlabel))
        if xlabel == "round":
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        what = what_is_drawn([curves[k] for k in mine], list(DEFAULT_OVER) if over is None else over)
        ax.set_title(f"{label(cols, panel)}: {what}" if cols else f"{metric_name(metric)}: {what}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[0, 0].set_ylabel(metric_label(metric))
    save_figure(fig, path, dpi=120, notice=notice)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    rows = [k for k in args.rows.split(",") if k]
    cols = [k for k in args.cols.split(",") if k]
    over = [k for k in args.over.split(",") if k]
    try:
        for d in args.dirs:
            if not d.is_dir():
                raise ValueError(f"{d}: no such directory")
        runs, unreadable = collect_runs(args.dirs)
        if runs.empty:
            raise ValueError(f"no readable runs under {', '.join(map(str, args.dirs))}")
        runs, _ = drop_duplicates(runs)
        for key in rows + cols:
            if key not in runs:
                raise ValueError(f"no config key '{key}' in these runs")
        if args.split:  # each key that varies inside a line names lines too, as the tables' --split makes columns
            rows += [k for k in varying_keys(runs, rows + cols, over) if k not in rows + cols]
        check_pooling(runs, rows + cols, over)
        has_metrics = runs["run_dir"].map(lambda d: (Path(d) / METRICS_FILE).is_file())
        done = runs[(runs["status"] == Status.COMPLETED) & has_metrics]
        if done.empty:
            raise ValueError("no completed run with a metrics.csv to draw")
        curves = group_curves(done, rows + cols, args.metric, args.x)
    except (ValueError, OSError, pd.errors.ParserError) as e:
        print(f"fedrun-report curves: error: {e}", file=sys.stderr)
        return 2
    out = args.out or args.dirs[0] / f"curves_{args.metric}.png"
    notice = standin_note(done)
    plot(curves, rows, cols, args.metric, out, notice=notice, over=over, xlabel=args.x)
    table = pd.concat(
        [c.assign(group=label(rows + cols, k) or "all runs") for k, c in curves.items()], ignore_index=True
    )[["group", "round", "mean", "std", "n"]].rename(columns={"round": args.x})
    atomic_write(out.with_suffix(".csv"), csv_text(table, notice))
    left = runs[~runs["run_dir"].isin(done["run_dir"])]
    for _, r in left.iterrows():
        print(f"not drawn: {r['run_dir']}: {r['status']}")
    for u in unreadable:
        print(f"{u.kind}: {u.run_dir}: {u.why}")  # unreadable, damaged or foreign: left out
    print(f"written: {out}, {out.with_suffix('.csv')}")
    return 0
