"""``fedrun-report line|plane|landscape|coherence ...``: the analysis plots of the papers, as PNG (+ NPZ/CSV).

    fedrun-report line RUN_A RUN_B         loss/error along (1-a) w_A + a w_B (FedIMA Sec. 3.2, 1-D)
    fedrun-report plane RUN_A RUN_B RUN_C  loss/error on the plane through three models (FedIMA Fig. 1)
    fedrun-report landscape RUN            loss/error around one model along two random filter-normalised
                                           directions (Li et al. 2018; FedGAM Fig. 4, FedSAM Fig. 3)
    fedrun-report coherence RUN [RUN...]   per-round grad_coherence, global_grad_norm (FedLAW Figs. 5, 2) and
                                           client_dist_mean/max (FedIMA locality); runs need eval.diagnostics=true

A model is a run directory holding checkpoint.pt (or the checkpoint file); the first one's config.yaml
rebuilds the architecture and data. Scores: mean cross-entropy and error rate (1 - accuracy). A run keeps one
colour in every panel (:func:`fedrun.storage.figures.method_styles`); a model trained, or scored, on stand-in
data (``data.standin``) puts the notice on the figure and in its PNG (fedrun.report.provenance).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fedrun.core.errors import ConfigError, DataError, ResumeError
from fedrun.metrics.diagnostics import DIAGNOSTIC_COLUMNS
from fedrun.report.collect import run_labels
from fedrun.report.provenance import run_dirs_note
from fedrun.storage.figures import method_styles, save_figure
from fedrun.storage.metric_words import metric_label
from fedrun.storage.rundir import METRICS_FILE

COMMANDS = ("line", "plane", "landscape", "coherence")


def _plt():  # noqa: ANN202 - matplotlib, headless
    from fedrun.storage.figures import _plt as plt

    return plt()


def _save(fig, path: Path, notice: str = "") -> None:  # noqa: ANN001 - a matplotlib Figure
    save_figure(fig, path, dpi=110, notice=notice)


def plot_line(scan: dict[str, np.ndarray], path: Path, title: str, notice: str = "") -> None:
    """Loss (left axis) and error (right axis) against the interpolation coefficient; the models at 0 and 1.
    ``notice``: see :func:`fedrun.storage.figures.save_figure`."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4), layout="constrained")
    ax.plot(scan["alpha"], scan["loss"], color="tab:blue", marker=".", label="loss")
    ax.set_xlabel("alpha:  (1 - alpha) w_A + alpha w_B")
    ax.set_ylabel("cross-entropy", color="tab:blue")
    ax2 = ax.twinx()
    ax2.plot(scan["alpha"], 100 * scan["error"], color="tab:red", marker=".", label="error")
    ax2.set_ylabel("error (%)", color="tab:red")
    for a in (0.0, 1.0):
        ax.axvline(a, color="grey", lw=0.8, ls="--")
    ax.set_title(title)
    _save(fig, path, notice)


def plot_plane(
    scan: dict[str, np.ndarray],
    anchors: np.ndarray,
    names: list[str],
    path: Path,
    title: str,
    notice: str = "",
    styles: dict[str, dict[str, str]] | None = None,
) -> None:
    """Filled contours of loss and error over the grid, with the anchor models marked in their method's colour
    (``styles``: name -> style, default :func:`method_styles` of ``names``); ``notice``: see
    :func:`fedrun.storage.figures.save_figure`."""
    plt = _plt()
    styles = styles if styles is not None else method_styles(names)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), layout="constrained")
    for ax, key, label in ((axes[0], "loss", "cross-entropy"), (axes[1], "error", "error (%)")):
        z = scan[key] * (100 if key == "error" else 1)
        cs = ax.contourf(scan["x"], scan["y"], z, levels=20, cmap="viridis")
        ax.contour(scan["x"], scan["y"], z, levels=20, colors="k", linewidths=0.3)
        fig.colorbar(cs, ax=ax, label=label)
        for (x, y), n in zip(anchors, names, strict=True):
            colour = styles.get(n, {}).get("color", "white")
            ax.scatter([x], [y], color=colour, edgecolors="white", linewidths=1.5, s=60, zorder=3, label=n)
            ax.annotate(n, (x, y), textcoords="offset points", xytext=(5, 5), color="white")
        ax.set_title(f"{title}: {key}")
        ax.set_aspect("equal", adjustable="box")
    _save(fig, path, notice)


def plot_diagnostics(
    runs: dict[str, pd.DataFrame],
    path: Path,
    notice: str = "",
    styles: dict[str, dict[str, str]] | None = None,
) -> list[str]:
    """One panel per diagnostic column present in any run, each run a line of one colour in every panel
    (``styles``: run name -> style, default :func:`method_styles` of the names); returns the columns drawn.
    ``notice``: see :func:`fedrun.storage.figures.save_figure`."""
    cols = [c for c in DIAGNOSTIC_COLUMNS if any(c in df for df in runs.values())]
    if not cols:
        return []
    plt = _plt()
    styles = styles if styles is not None else method_styles(runs)
    fig, axes = plt.subplots(
        len(cols), 1, figsize=(7, 2.3 * len(cols)), sharex=True, squeeze=False, layout="constrained"
    )
    handles: dict[str, Any] = {}  # every run in the legend, also one lacking the first panel's column
    for ax, col in zip(axes[:, 0], cols, strict=True):
        for name, df in runs.items():
            if col in df:
                handles.setdefault(name, ax.plot(df["round"], df[col], label=name, **styles.get(name, {}))[0])
        if col == "grad_coherence":
            ax.axhline(0, color="grey", lw=0.8)
        ax.set_ylabel(metric_label(col), fontsize=8)
        ax.grid(alpha=0.3)
    axes[0, 0].legend(list(handles.values()), list(handles), fontsize=7)
    axes[-1, 0].set_xlabel("round")
    _save(fig, path, notice)
    return cols


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="fedrun-report", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)

    def scored(name: str, n_models: int, help_: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_)
        p.add_argument("models", nargs=n_models, type=Path, help="run dirs with checkpoint.pt, or checkpoint files")
        p.add_argument("--split", choices=("test", "train"), default="test", help="samples scored (default: test)")
        p.add_argument("--client", type=int, default=None, help="score on this client's training samples instead")
        p.add_argument("--max-samples", type=int, default=None, help="a seeded random subset of the split")
        p.add_argument("--batch-size", type=int, default=2048)
        p.add_argument("--device", default="cpu")
        p.add_argument(
            "--out", type=Path, default=None, help="PNG path (arrays beside it as .npz/.csv; default: reports/)"
        )
        p.add_argument("--force", action="store_true", help="overwrite an existing figure instead of suffixing _2...")
        return p

    p = scored("line", 2, "1-D loss/error between two models")
    p.add_argument("--points", type=int, default=25)
    p.add_argument("--range", nargs=2, type=float, default=(-0.25, 1.25), metavar=("LO", "HI"))
    p = scored("plane", 3, "2-D loss/error on the plane through three models (FedIMA Fig. 1)")
    p.add_argument("--points", type=int, default=21, help="grid points per axis")
    p.add_argument("--margin", type=float, default=0.25, help="padding around the anchors, x their extent")
    p = scored("landscape", 1, "2-D loss/error along two random filter-normalised directions (Li et al.)")
    p.add_argument("--points", type=int, default=21, help="grid points per axis")
    p.add_argument("--span", type=float, default=1.0, help="coordinates in [-span, span]")
    p.add_argument("--seed", type=int, default=0, help="seed of the random directions")
    p = sub.add_parser("coherence", aliases=["diagnostics"], help="per-round diagnostics of runs (eval.diagnostics)")
    p.add_argument("runs", nargs="+", type=Path)
    p.add_argument("--out", type=Path, default=None, help="PNG path (default: reports/ beside the runs)")
    p.add_argument("--force", action="store_true", help="overwrite an existing figure instead of suffixing _2...")
    args = ap.parse_args(argv)
    if getattr(args, "points", 2) < 2:
        ap.error("--points must be >= 2")
    if getattr(args, "max_samples", None) is not None and args.max_samples < 1:
        ap.error("--max-samples must be >= 1")
    return args


def scan_notice(models: list[Path], scored_on: str | None) -> str:
    """The stand-in notice of a scan: models trained on stand-in data (their runs' summary.json), and
    ``scored_on``, the dataset replaced by stand-in data here to score them (None: the real data)."""
    parts = [run_dirs_note(m if m.is_dir() else m.parent for m in models)]
    if scored_on is not None:
        parts.append(f"scored on stand-in data ({scored_on} files not found here), so the scores are not results")
    return "; ".join(p for p in parts if p)


def _model_params(path: Path) -> Any:
    """The global parameters saved in the checkpoint of ``path`` (run dir or file); DataError naming it when they
    are not ``{name: tensor}`` (a damaged or foreign checkpoint), ResumeError when the file is refused."""
    import torch

    from fedrun.report.saved_runs import checkpoint_path
    from fedrun.run.checkpoint import load_checkpoint

    where = checkpoint_path(path)
    params = load_checkpoint(where).params
    if not isinstance(params, dict) or not all(isinstance(v, torch.Tensor) for v in params.values()):
        raise DataError(f"{where}: damaged checkpoint (its params are not named tensors)")
    return dict(params)


def _scan_models(args: argparse.Namespace) -> str:
    """Run the line/plane/landscape scan of ``args``; returns what was written."""
    from fedrun.metrics.landscape import grid_scan, line_scan, plane_axes, plane_through, random_plane
    from fedrun.report.saved_runs import eval_set, load_spec

    names = run_labels(args.models)  # by method (and what tells runs of one method apart), not job number
    es = eval_set(load_spec(args.models[0]), args.split, args.max_samples, args.client, args.device)
    notice = scan_notice(args.models, es.standin)
    params = [es.check(_model_params(m), str(m)) for m in args.models]
    score = es.evaluator(args.batch_size)
    where = f"client {args.client}" if args.client is not None else args.split
    title = f"{where}, {len(es.split)} samples"
    out = args.out or args.models[0] / f"landscape_{args.command}.png"
    if args.command == "line":
        scan = line_scan(params[0], params[1], np.linspace(*args.range, args.points), score)  # type: ignore[call-overload]
        plot_line(scan, out, f"{names[0]} -> {names[1]} ({title})", notice=notice)
        pd.DataFrame(scan).to_csv(out.with_suffix(".csv"), index=False)
        return f"{out}, {out.with_suffix('.csv')}"
    if args.command == "plane":
        plane = plane_through(*params)
        xs, ys = plane_axes(plane.anchors, args.points, args.margin)
        anchor_scores = [score(p) for p in params]
    else:
        plane = random_plane(params[0], args.seed)
        xs = ys = np.linspace(-args.span, args.span, args.points)
        anchor_scores = [score(params[0])]
    scan = grid_scan(plane, xs, ys, score)
    plot_plane(scan, plane.anchors, names, out, f"{args.command} ({title})", notice=notice)
    sc = np.array(anchor_scores)
    arrays: dict[str, Any] = {**scan, "anchors": plane.anchors, "anchor_loss": sc[:, 0], "anchor_error": sc[:, 1]}
    np.savez(out.with_suffix(".npz"), **arrays)
    return f"{out}, {out.with_suffix('.npz')}"


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    try:
        if args.command in ("coherence", "diagnostics"):
            runs = {}
            for r, name in zip(args.runs, run_labels(args.runs), strict=True):
                if not (r / METRICS_FILE).is_file():
                    raise DataError(f"{r}: no metrics.csv")
                runs[name] = pd.read_csv(r / METRICS_FILE)
            out = args.out or args.runs[0] / "diagnostics.png"
            if not plot_diagnostics(runs, out, notice=run_dirs_note(args.runs)):
                raise DataError("no diagnostic columns in these runs: run them with eval.diagnostics=true")
            written = str(out)
        else:
            written = _scan_models(args)
    except (DataError, ConfigError, ResumeError, ValueError, OSError) as e:  # ResumeError: a refused checkpoint
        print(f"fedrun-report {args.command}: error: {e}", file=sys.stderr)
        return 2
    print(f"written: {written}")
    return 0
