"""Files a run writes: atomically, so a crash or kill never leaves a half-written file behind."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

# metrics.csv columns that measure time: everything else must repeat exactly for the same config and seed
TIMING_COLUMNS = ("round_seconds", "seconds", "aggregate_seconds")


def atomic_write(path: Path, data: str | bytes) -> None:
    """Write to a temp file in the same folder, fsync, then rename over ``path``."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_json(path: Path, obj: dict[str, Any]) -> None:
    atomic_write(path, json.dumps(obj, indent=2, sort_keys=True, default=float) + "\n")


def write_metrics(path: Path, rows: list[dict[str, Any]]) -> None:
    atomic_write(path, pd.DataFrame(rows).to_csv(index=False))


def write_partition(
    run_dir: Path, counts: np.ndarray, plots: bool, corrupted: np.ndarray | None = None, title: str | None = None
) -> None:
    """The client-by-class count table (CSV) and its heatmap (PNG, titled with ``title``: the partition and its
    parameters); with ``corrupted`` (client ids) a 0/1 ``corrupted`` column marks the clients whose labels are
    swapped (the counts are the true classes)."""
    df = pd.DataFrame(counts, columns=[f"class_{c}" for c in range(counts.shape[1])])
    df.index.name = "client"
    df.insert(0, "total", counts.sum(1))
    if corrupted is not None:
        df.insert(1, "corrupted", np.isin(np.arange(len(counts)), corrupted).astype(np.int64))
    atomic_write(run_dir / "partition.csv", df.to_csv())
    if plots:
        plot_partition(counts, run_dir / "partition.png", _heatmap_title(title))


def _heatmap_title(partition: str | None) -> str:
    return "samples per client and class" + (f"\n{partition}" if partition else "")


def _plt():  # noqa: ANN202 - matplotlib imported lazily and headless
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: Path, dpi: int = 100) -> None:  # noqa: ANN001 - a matplotlib Figure
    """Lay out, write atomically (temp file, then rename) and close ``fig``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp.png")
    fig.savefig(tmp, dpi=dpi)
    _plt().close(fig)
    os.replace(tmp, path)


def partition_title(name: str, params: dict[str, Any], clients: int, seed: int) -> str:
    """ "dirichlet(alpha=0.1, min_size=10), 20 clients, seed 0": the partition and its parameters, for plot titles."""
    shown = ", ".join(f"{k}={v}" for k, v in params.items() if not isinstance(v, (dict, list)))
    return f"{name}({shown}), {clients} clients, seed {seed}"


def plot_partition(
    counts: np.ndarray,
    path: Path,
    title: str = "samples per client and class",
    xlabel: str = "class",
    xticks: list[str] | None = None,
) -> None:
    """Heatmap of a client-by-column count matrix (classes by default; domains with ``xticks`` names).

    The colour scale is logarithmic from 1 sample, with empty cells white, so a client's few samples of a class
    stand out from none; ticks are whole clients and classes; small matrices print their counts.
    """
    from matplotlib.colors import LogNorm
    from matplotlib.ticker import MaxNLocator

    plt = _plt()
    n_clients, n_cols = counts.shape
    col_width = 0.35 if xticks is None else 0.8
    fig, ax = plt.subplots(figsize=(max(4.5, col_width * n_cols + 2.5), max(3, 0.22 * n_clients + 1.8)))
    cmap = plt.get_cmap("viridis").with_extremes(bad="white")
    shown = np.ma.masked_less_equal(counts, 0)
    im = ax.imshow(shown, aspect="auto", cmap=cmap, interpolation="nearest", norm=LogNorm(1, max(2, counts.max())))
    if xticks is not None:
        ax.set_xticks(range(n_cols), xticks, rotation=30, ha="right")
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    if n_clients * n_cols <= 200:
        for (i, j), v in np.ndenumerate(counts):
            ax.text(j, i, str(int(v)), ha="center", va="center", fontsize=6, color="black" if v <= 0 else "white")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("client")
    ax.set_title(title, fontsize=9)
    fig.colorbar(im, ax=ax, label="samples (log scale; white = none)")
    save_figure(fig, path)


def plot_curves(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    plt = _plt()
    df = pd.DataFrame(rows)
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(df["round"], df["test_acc"], label="test")
    if "train_acc" in df:
        ax.plot(df["round"], df["train_acc"], label="train")
    ax.set_xlabel("round")
    ax.set_ylabel("accuracy")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    save_figure(fig, path)
