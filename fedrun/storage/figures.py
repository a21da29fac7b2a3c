"""Figures and partition files a run writes: heatmaps, curves and the client-by-class table (matplotlib, headless).

Every figure goes through :func:`save_figure`: constrained layout, titles and axis labels wrapped to the room
they have (:func:`fit_texts`, so none is clipped), an optional notice (stand-in data) drawn on the figure and
written into the PNG's ``Warning`` text chunk. Lines of one method keep one colour in every panel and figure
that takes its styles from one :func:`method_styles` map.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fedrun.storage.atomic import atomic_write
from fedrun.storage.rundir import RunDir

# 20 colours told apart in print: matplotlib's tab10, then the dark shades of tab20b/tab20c
PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
    "#393b79",
    "#637939",
    "#8c6d31",
    "#843c39",
    "#7b4173",
    "#3182bd",
    "#e6550d",
    "#31a354",
    "#756bb1",
    "#636363",
)
LINESTYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")  # drawn open: two markers on one point both show
PNG_NOTICE_KEY = "Warning"  # a PNG keyword of the standard's own list (tEXt chunk)
NOTICE_COLOR = "#b00000"
_PAD_PX = 4.0  # room kept between a wrapped text and the figure's (or a neighbouring panel's) edge


def _natural(name: str) -> list[Any]:
    return [(0, int(t)) if t.isdigit() else (1, t) for t in re.split(r"(\d+)", name)]


def method_styles(names: Iterable[str], order: Sequence[str] = ()) -> dict[str, dict[str, str]]:
    """A line style (``color``, ``linestyle``, ``marker``, ``markerfacecolor``: keyword arguments of
    ``Axes.plot``) per method name, the same whatever order or subset of the names a panel draws: the names of
    ``order`` first (the paper's method order, when the caller knows it), then the others sorted by name, each
    taking the next palette colour, line style and marker. Neighbours differ in all three, so two methods whose
    curves coincide both stay visible (dashes and open markers show the line beneath). The map's order is the
    order a legend lists them in."""
    distinct = set(map(str, names))
    ranked = [n for n in dict.fromkeys(map(str, order)) if n in distinct]
    ranked += sorted(distinct - set(ranked), key=_natural)
    return {n: _style(i) for i, n in enumerate(ranked)}


def marker_every(points: int, rank: int = 0) -> tuple[int, int]:
    """``Axes.plot``'s ``markevery`` for a line of ``points`` points: about 10 markers, the ``rank``-th line's
    shifted by ``rank`` points so that the markers of coinciding lines fall on different rounds."""
    step = max(1, points // 10)
    return rank % step, step


def _style(i: int) -> dict[str, str]:
    # past the palette the line style shifts by one, so (colour, style) pairs stay distinct for 80 names
    dash = LINESTYLES[(i + i // len(PALETTE)) % len(LINESTYLES)]
    marker = MARKERS[i % len(MARKERS)]
    return {"color": PALETTE[i % len(PALETTE)], "linestyle": dash, "marker": marker, "markerfacecolor": "none"}


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
    rd = RunDir(run_dir)
    atomic_write(rd.partition_file, df.to_csv())
    if plots:
        plot_partition(counts, rd.partition_plot, _heatmap_title(title))


def _heatmap_title(partition: str | None) -> str:
    return "samples per client and class" + (f"\n{partition}" if partition else "")


def _plt() -> Any:  # matplotlib.pyplot, imported lazily and headless
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _length(text: Any, renderer: Any) -> float:  # text: a matplotlib Text
    """The extent of ``text`` along its own direction, in pixels (a rotated y label: its height)."""
    box = text.get_window_extent(renderer)
    return float(box.height if round(text.get_rotation()) % 180 == 90 else box.width)


def _wrap(text: Any, room: float, renderer: Any) -> bool:  # text: a matplotlib Text
    """Break ``text`` after spaces and commas so that each line fits ``room`` pixels; a word longer than the
    room shrinks the font (down to 5 pt). True when it changed."""
    original = text.get_text()
    if not original or room <= 0 or _length(text, renderer) <= room:
        return False
    lines: list[str] = []
    for paragraph in original.split("\n"):
        line = ""
        for word in re.split(r"(?<=[ ,])", paragraph):
            candidate = line + word
            text.set_text(candidate.rstrip())
            if line and _length(text, renderer) > room:
                lines.append(line.rstrip())
                line = word.lstrip()
            else:
                line = candidate
        lines.append(line.rstrip())
    text.set_text("\n".join(lines))
    length = _length(text, renderer)
    if length > room:
        text.set_fontsize(max(5.0, text.get_fontsize() * room / length))
    return True


def _is_panel(ax: Any) -> bool:
    return getattr(ax, "_colorbar", None) is None and ax.get_visible()


def _horizontal_room(ax: Any, fig: Any) -> tuple[float, float]:
    """(left, right) pixel bounds a text centred on ``ax`` may span: the figure's edges, or the nearest panels
    beside it on the same row (a colorbar or a twin axis is not a neighbour)."""
    box = ax.get_window_extent()
    left, right = fig.bbox.x0, fig.bbox.x1
    for other in fig.axes:
        o = other.get_window_extent()
        if other is ax or not _is_panel(other) or o.y1 <= box.y0 or o.y0 >= box.y1:
            continue
        if o.x1 <= box.x0:
            left = max(left, o.x1)
        elif o.x0 >= box.x1:
            right = min(right, o.x0)
    return left, right


def _rooms(fig: Any) -> list[tuple[str, Any, float]]:
    """Each title, suptitle and axis label of ``fig``: (its band: texts of one band stack above or below the
    panels, texts beside each other do not), the text, the pixels it may take along its direction."""
    out = []
    for band, t in (("suptitle", fig._suptitle), ("supxlabel", fig._supxlabel)):
        if t is not None and t.get_text():
            out.append((band, t, fig.bbox.width - 2 * _PAD_PX))
    for ax in fig.axes:
        if not _is_panel(ax):  # a colorbar: its label may take the figure's height (or width)
            out += [("ylabel", ax.yaxis.label, fig.bbox.height - 2 * _PAD_PX)]
            out += [("xlabel", ax.xaxis.label, fig.bbox.width - 2 * _PAD_PX)]
            continue
        left, right = _horizontal_room(ax, fig)
        centre = (ax.bbox.x0 + ax.bbox.x1) / 2
        across = 2 * min(centre - left, right - centre) - 2 * _PAD_PX
        out += [("title", ax.title, across), ("xlabel", ax.xaxis.label, across)]
        out.append(("ylabel", ax.yaxis.label, ax.bbox.height))
    return out


def fit_texts(fig: Any, grow: bool = True) -> None:  # fig: a matplotlib Figure
    """Wrap the titles, suptitle and axis labels of ``fig`` that are wider than their room (the figure, or the
    panel's share of it) and lay it out again, so that no title is clipped at the figure's edge or runs into
    the next panel's. ``grow``: the figure grows by the height the wrapped lines add, so the panels keep theirs."""
    for _ in range(3):  # wrapping makes texts taller, and the layout then moves the panels a little
        fig.draw_without_rendering()
        renderer = fig.canvas.get_renderer()
        added: dict[str, float] = {}
        for band, text, room in _rooms(fig):
            before = text.get_window_extent(renderer).height if text.get_text() else 0.0
            if _wrap(text, room, renderer) and band != "ylabel":
                after = text.get_window_extent(renderer).height
                added[band] = max(added.get(band, 0.0), after - before)
        if not added:
            return
        if grow:
            fig.set_figheight(fig.get_figheight() + sum(added.values()) / fig.dpi)


def add_notice(fig: Any, notice: str) -> None:  # fig: a matplotlib Figure
    """Draw ``notice`` (red) above the panels (below them when the figure has a suptitle); the figure grows by
    its height, so the panels keep theirs."""
    kw = {"color": NOTICE_COLOR, "fontsize": 8, "fontweight": "bold"}
    text = fig.supxlabel(notice, **kw) if fig.get_suptitle() else fig.suptitle(notice, **kw)
    fig.draw_without_rendering()
    fig.set_figheight(fig.get_figheight() + text.get_window_extent().height / fig.dpi)


def save_figure(fig: Any, path: Path, dpi: int = 100, notice: str = "") -> None:  # fig: a matplotlib Figure
    """Lay out (constrained layout, texts wrapped to fit: :func:`fit_texts`), render to memory, write atomically
    (:func:`atomic_write`) and close ``fig``. A ``notice`` (stand-in data) is drawn on the figure
    (:func:`add_notice`) and kept in the PNG's ``Warning`` text chunk."""
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    try:
        if notice:
            add_notice(fig, notice)
        if fig.get_layout_engine() is None:
            fig.set_layout_engine("constrained")
        fit_texts(fig)
        metadata = {PNG_NOTICE_KEY: notice} if notice else None
        fig.savefig(buf, dpi=dpi, format="png", bbox_inches="tight", pad_inches=0.05, metadata=metadata)
    finally:
        _plt().close(fig)
    atomic_write(path, buf.getvalue())


def png_notice(path: Path) -> str:
    """The notice :func:`save_figure` wrote into the PNG at ``path`` ("" when none)."""
    from PIL import Image

    with Image.open(path) as im:
        return str(im.text.get(PNG_NOTICE_KEY, ""))


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
    notice: str = "",
) -> None:
    """Heatmap of a client-by-column count matrix (classes by default; domains with ``xticks`` names).

    The colour scale is logarithmic from 1 sample, with empty cells white, so a client's few samples of a class
    stand out from none; ticks are whole clients and classes; small matrices print their counts. The title is
    wrapped to the figure's width (:func:`save_figure`); ``notice``: see :func:`save_figure`.
    """
    from matplotlib.colors import LogNorm
    from matplotlib.ticker import MaxNLocator

    plt = _plt()
    n_clients, n_cols = counts.shape
    col_width = 0.35 if xticks is None else 0.8
    fig, ax = plt.subplots(
        figsize=(max(4.5, col_width * n_cols + 2.5), max(3, 0.22 * n_clients + 1.8)), layout="constrained"
    )
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
    save_figure(fig, path, notice=notice)


def run_setting(run_dir: Path) -> str:
    """The setting of the run in ``run_dir`` as :func:`partition_title` words it, from its config.yaml ("" when
    it has none, or one without a partition)."""
    from fedrun.storage.summary import UnreadableRunFile

    try:
        cfg = RunDir(run_dir).read_config()
    except UnreadableRunFile:
        return ""
    cfg = cfg or {}
    part = cfg.get("partition")
    if not isinstance(part, dict) or "name" not in part:
        return ""
    params = {k: v for k, v in part.items() if k != "name"}
    return partition_title(str(part["name"]), params, (cfg.get("fl") or {}).get("clients", "?"), cfg.get("seed", "?"))


# the curves of accuracy.png beyond the global model's test accuracy: (column, label), drawn when a run has them
EXTRA_CURVES = (
    ("train_acc", "train"),
    ("local_acc_mean", "personalised, mean over clients"),
    ("local_acc_worst10", "personalised, worst 10% of clients"),
)


def plot_curves(rows: list[dict[str, Any]], path: Path, title: str, step: str = "round") -> None:
    """A run's ``accuracy.png``: the global model's test accuracy in % against the round (whole rounds; ``step``: what
    one is, an async server's "server update"), with the training accuracy and the clients' own models' (personalised
    runs: mean and worst 10% over the clients' local tests) when the run has them, titled ``title`` and, beneath, the
    setting read from the run's config.yaml beside ``path`` (:func:`run_setting`)."""
    from matplotlib.ticker import MaxNLocator

    plt = _plt()
    df = pd.DataFrame(rows)
    fig, ax = plt.subplots(figsize=(6, 4), layout="constrained")
    every = marker_every(len(df))
    ax.plot(df["round"], 100 * df["test_acc"], label="global model, test", markevery=every, **_style(0))
    for i, (column, label) in enumerate((c for c in EXTRA_CURVES if c[0] in df), start=1):
        ax.plot(df["round"], 100 * df[column], label=label, markevery=every, **_style(i))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(step)
    ax.set_ylabel("accuracy (%)")
    setting = run_setting(path.parent)
    ax.set_title(f"{title}\n{setting}" if setting else title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend()
    save_figure(fig, path)


def write_domain_table(run_dir: Path, counts: np.ndarray, names: list[str] | None) -> None:
    """``partition_domains.csv``: samples per client and domain."""
    names = names or [str(d) for d in range(counts.shape[1])]
    df = pd.DataFrame(counts, columns=[f"domain_{n}" for n in names])
    df.index.name = "client"
    df.insert(0, "total", counts.sum(1))
    atomic_write(RunDir(run_dir).partition_domains_file, df.to_csv())


def plot_domains(counts: np.ndarray, names: list[str], path: Path, notice: str = "") -> None:
    """Heatmap of samples per client (rows) and domain (columns, labelled by name); ``notice``: see
    :func:`save_figure`."""
    plot_partition(
        counts, path, title="samples per client and domain", xlabel="domain", xticks=list(names), notice=notice
    )
