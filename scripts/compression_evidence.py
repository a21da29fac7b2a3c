"""The bytes-to-accuracy evidence of upload compression (docs/compression.md; ``make compression-evidence``).

Runs FedAvg on the preset ``compression_fmnist_mlp`` once per compressor (each run's directory under
``--out``; a finished run is skipped, so the target resumes), then writes the table (bytes up to reach the
preset's target accuracy, total bytes up, final accuracy) as JSON and Markdown and one figure (test accuracy
against cumulative bytes up) into ``--record``.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import subprocess
import sys
from pathlib import Path

PRESET = "compression_fmnist_mlp"
TARGET = 0.75  # conf/experiment/compression_fmnist_mlp.yaml's eval.target
SETTINGS: dict[str, list[str]] = {
    "dense (none)": [],
    "top-k 1%": ["compression=topk", "compression.ratio=0.01"],
    "top-k 1% + EF": ["compression=topk", "compression.ratio=0.01", "compression.error_feedback=true"],
    "top-k 10%": ["compression=topk", "compression.ratio=0.1"],
    "top-k 10% + EF": ["compression=topk", "compression.ratio=0.1", "compression.error_feedback=true"],
    "random-k 10% + EF": ["compression=randk", "compression.ratio=0.1", "compression.error_feedback=true"],
    "QSGD s=4": ["compression=qsgd", "compression.levels=4"],
    "QSGD s=16": ["compression=qsgd", "compression.levels=16"],
    "sign + EF (EF-signSGD)": ["compression=sign"],
}


def command(label: str, out: Path) -> list[str]:
    """The fedrun command of one setting (threads=1 and the vectorised engine: the timings of a shared machine)."""
    run_dir = out / re.sub(r"[^A-Za-z0-9]+", "_", label.replace("%", "pct")).strip("_")
    fedrun = str(Path(sys.executable).with_name("fedrun"))
    return [
        fedrun, f"experiment={PRESET}", *SETTINGS[label], "hardware.threads=1", "hardware.engine=vectorised",
        "output.plots=false", f"hydra.run.dir={run_dir}",
    ]  # fmt: skip


def row(label: str, run_dir: Path) -> dict[str, object]:
    """One line of the table from a run's metrics.csv: cumulative bytes up to the first round at ``TARGET``."""
    with (run_dir / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    total, curve, reached = 0, [], None
    for r in rows:
        total += int(r["bytes_up"])
        curve.append((total, float(r["test_acc"])))
        if reached is None and float(r["test_acc"]) >= TARGET:
            reached = (int(r["round"]), total)
    return {
        "setting": label,
        "round_at_target": reached[0] if reached else None,
        "bytes_up_to_target": reached[1] if reached else None,
        "bytes_up_total": total,
        "bytes_up_per_round": int(rows[-1]["bytes_up"]),
        "final_acc": float(rows[-1]["test_acc"]),
        "curve": curve,
    }


def markdown(rows: list[dict[str, object]]) -> str:
    """The table as Markdown, bytes in MB (10^6) and against dense FedAvg."""
    dense = rows[0]["bytes_up_per_round"]
    lines = [
        f"| setting | MB up per round | x smaller | round at {TARGET:.0%} | MB up to {TARGET:.0%} | final acc (%) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        per, to = r["bytes_up_per_round"], r["bytes_up_to_target"]
        assert isinstance(per, int) and isinstance(dense, int)
        lines.append(
            f"| {r['setting']} | {per / 1e6:.3f} | {dense / per:.1f} | {r['round_at_target'] or 'not reached'} |"
            f" {'-' if to is None else f'{int(to) / 1e6:.2f}'} | {100 * float(r['final_acc']):.2f} |"  # type: ignore[arg-type]
        )
    return "\n".join(lines)


def figure(rows: list[dict[str, object]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    styles = ["-", "--", ":", "-."]
    for i, r in enumerate(rows):
        xs, ys = zip(*r["curve"], strict=True)  # type: ignore[call-overload]
        ax.plot(xs, [100 * y for y in ys], styles[i % 4], marker="o", ms=3, mfc="none", label=r["setting"])
    ax.axhline(100 * TARGET, color="grey", lw=0.5)
    ax.set(xscale="log", xlabel="cumulative bytes up (all clients)", ylabel="test accuracy (%)")
    ax.set_title("FedAvg, Fashion-MNIST MLP, Dir(0.5), 10 of 20 clients, 20 rounds")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("outputs/compression"), help="the runs' directories")
    ap.add_argument("--record", type=Path, default=Path("docs/assets"), help="where the JSON, table and figure go")
    ap.add_argument("--only", help="comma-separated settings to run (default: all)")
    args = ap.parse_args()
    labels = args.only.split(",") if args.only else list(SETTINGS)
    rows, commands = [], []
    for label in labels:
        cmd = command(label, args.out)
        commands.append(" ".join(["fedrun", *cmd[1:]]))
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        rows.append(row(label, Path(cmd[-1].split("=", 1)[1])))
    args.record.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    record = {"preset": PRESET, "target": TARGET, "commit": commit or None, "commands": commands, "rows": rows}
    (args.record / f"{PRESET}.json").write_text(json.dumps(record, indent=1) + "\n")
    table = markdown(rows)
    (args.record / f"{PRESET}.md").write_text(table + "\n")
    figure(rows, args.record / f"{PRESET}.png")
    print(table)


if __name__ == "__main__":
    main()
