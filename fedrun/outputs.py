"""Files a run writes: atomically, so a crash or kill never leaves a half-written file behind."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

# metrics.csv columns that measure time: everything else must repeat exactly for the same config and seed
TIMING_COLUMNS = ("round_seconds", "seconds", "aggregate_seconds")


class WriteError(OSError):
    """A run file that could not be written (a full disk, a read-only directory): names the file and its folder.

    Raised by :func:`atomic_write` after removing its temp file; ``errno`` is the cause's (ENOSPC, EACCES...).
    """

    def __init__(self, path: Path, cause: OSError) -> None:
        super().__init__(cause.errno, cause.strerror or str(cause), str(path))
        self.path = Path(path)

    def __str__(self) -> str:
        return f"cannot write {self.path.name} in {self.path.parent}: {self.strerror}"


TEMP_SUFFIX = re.compile(r"\.(\d+)\.tmp(\.\w+)?$")  # <name>.<pid>.tmp[.ext]: fedrun's temp files of atomic writes


def temp_path(path: Path, ext: str = "") -> Path:
    """The temp file an atomic write of ``path`` goes through: ``.<name>.<pid>.tmp[ext]`` beside it."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp{ext}")


def atomic_write(path: Path, data: str | bytes) -> None:
    """Write to a temp file in the same folder, fsync, then rename over ``path``.

    Any failure (a full disk, an interrupt) removes the temp file and leaves ``path`` as it was; an OSError
    is raised as :class:`WriteError`.
    """
    path = Path(path)
    raw = data.encode() if isinstance(data, str) else data
    tmp = temp_path(path)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            view = memoryview(raw)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(e, OSError) and not isinstance(e, WriteError):
            raise WriteError(path, e) from e
        raise


def remove_stale_temps(folder: Path, any_pid: bool = False) -> list[Path]:
    """Delete temp files of atomic writes (``*.<pid>.tmp*``) in ``folder`` left by processes that died mid-write
    (all of them with ``any_pid``: the caller holds the folder's lock, so no live writer can own one)."""
    removed = []
    for f in folder.iterdir() if folder.is_dir() else []:
        m = TEMP_SUFFIX.search(f.name)
        if m and f.is_file() and (any_pid or not _alive(int(m.group(1)))):
            with contextlib.suppress(OSError):
                f.unlink()
                removed.append(f)
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists, owned by someone else
        return True
    return True


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
