"""Partition reports: the per-domain breakdown (for summary.json) and ``fedrun-report partition RUN_DIR``.

A run writes ``partition.csv`` (client x class counts) and, when the dataset has domains,
``partition_domains.csv`` (client x domain counts). ``fedrun-report partition`` reads them back and
writes ``<prefix>.png`` (client-by-class heatmap), ``<prefix>_domains.png`` and prints the summary. A run on
stand-in data (``data.standin``) says so under the summary, on each heatmap and in its PNG (fedrun.report.provenance).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from fedrun.core.errors import DataError
from fedrun.data.partition import partition_stats
from fedrun.data.partitions.words import partition_words
from fedrun.report.provenance import run_dirs_note
from fedrun.storage.figures import plot_domains, plot_partition
from fedrun.storage.rundir import RunDir


def _read_counts(path: Path) -> tuple[np.ndarray, list[str]]:
    try:
        df = pd.read_csv(path, index_col="client")
    except (OSError, ValueError, KeyError) as e:
        raise DataError(f"{path}: cannot read the partition table ({e}); re-run the experiment to write it") from None
    cols = [c for c in df.columns if c not in ("total", "corrupted")]
    return df[cols].to_numpy(dtype=np.int64), [c.split("_", 1)[1] for c in cols]


def _partition_of(run_dir: Path) -> str | None:
    """The run's partition and its parameters from its config.yaml (None when unreadable)."""
    try:
        cfg = RunDir(run_dir).read_config() or {}
        part = dict(cfg["partition"])
        name = part.pop("name")
        return partition_words(name, part, int(cfg["fl"]["clients"]), int(cfg["seed"]))
    except (ValueError, KeyError, TypeError):  # an unreadable config.yaml is a ValueError
        return None


def partition_table(run_dir: Path) -> Path:
    """The run's client-by-class table (partition.csv); DataError when there is none."""
    path = RunDir(run_dir).partition_file
    if not path.is_file():
        raise DataError(f"{path}: not found; a fedrun run directory holds {path.name}")
    return path


def report_partition(run_dir: Path, prefix: Path | None = None) -> str:
    """Write the heatmaps for ``run_dir`` as ``<prefix>.png`` and ``<prefix>_domains.png`` (default prefix:
    ``run_dir/partition``; ``fedrun-report partition`` passes one outside the run) and return a Markdown summary
    (statistics and domain breakdown)."""
    prefix = prefix if prefix is not None else run_dir / "partition"
    png, domains_png = prefix.with_name(prefix.name + ".png"), prefix.with_name(prefix.name + "_domains.png")
    counts, _ = _read_counts(partition_table(run_dir))
    partition = _partition_of(run_dir)
    notice = run_dirs_note([run_dir])
    title = "samples per client and class" + (f"\n{partition}" if partition else "")
    plot_partition(counts, png, title, notice=notice)
    lines = ["| statistic | value |", "|---|---|"]
    lines += [
        f"| {k} | {v:.4g} |" if isinstance(v, float) else f"| {k} | {v} |" for k, v in partition_stats(counts).items()
    ]
    written = [png]
    dpath = RunDir(run_dir).partition_domains_file
    if dpath.is_file():
        dcounts, names = _read_counts(dpath)
        plot_domains(dcounts, names, domains_png, notice=notice)
        written.append(domains_png)
        lines += ["", "| domain | samples | clients holding it |", "|---|---|---|"]
        lines += [
            f"| {n} | {int(dcounts[:, d].sum())} | {int((dcounts[:, d] > 0).sum())} |" for d, n in enumerate(names)
        ]
        mixed = int(((dcounts > 0).sum(1) > 1).sum())
        lines.append(f"\nclients holding more than one domain: {mixed} of {len(dcounts)}")
    if notice:
        lines.append(f"\n{notice}")
    lines.append("\nwritten: " + ", ".join(map(str, written)))
    return "\n".join(lines)
