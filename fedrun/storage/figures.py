"""Figures and partition files a run writes: heatmaps, curves and the client-by-class table (matplotlib, headless)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fedrun.storage.atomic import atomic_write


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


def _plt() -> Any:  # matplotlib.pyplot, imported lazily and headless
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: Path, dpi: int = 100) -> None:  # fig: a matplotlib Figure
    """Lay out, render to memory, write atomically (:func:`atomic_write`) and close ``fig``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    buf = io.BytesIO()
    try:
        fig.savefig(buf, dpi=dpi, format="png")
    finally:
        _plt().close(fig)
    atomic_write(path, buf.getvalue())


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


def write_domain_table(run_dir: Path, counts: np.ndarray, names: list[str] | None) -> None:
    """``partition_domains.csv``: samples per client and domain."""
    names = names or [str(d) for d in range(counts.shape[1])]
    df = pd.DataFrame(counts, columns=[f"domain_{n}" for n in names])
    df.index.name = "client"
    df.insert(0, "total", counts.sum(1))
    atomic_write(run_dir / "partition_domains.csv", df.to_csv())


def plot_domains(counts: np.ndarray, names: list[str], path: Path) -> None:
    """Heatmap of samples per client (rows) and domain (columns, labelled by name)."""
    plot_partition(counts, path, title="samples per client and domain", xlabel="domain", xticks=list(names))
