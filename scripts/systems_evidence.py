"""The evidence records of the system section (docs/systems.md, docs/fedprox.md).

Two records, each written as JSON into ``docs/evidence/`` from finished run directories (nothing is run here):

- ``fedprox``: FedProx Figure 1's Synthetic(1, 1) column (``make reproduce-fedprox-stragglers``'s sweep folder):
  per method and straggler share, the last round's training loss and test accuracy, the best test accuracy, the
  curves at a few rounds, and the checks of the paper's claims about the figure (Li et al. 2020, Sec. 5.2);
- ``async``: FedBuff and FedAsync against FedAvg on Fashion-MNIST on a device trace (docs/systems.md's three
  commands): simulated time to 75% and 80% test accuracy, final accuracy, the clock at the end, staleness, CPU.

Each record names the commit the runs recorded (``summary.json`` ``code``) and refuses runs of different commits
or a dirty checkout (exit 2, one line).
"""

from __future__ import annotations

import argparse
import csv
import json
import shlex
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
FEDPROX_ROUNDS = (1, 10, 20, 50, 100, 150, 200)  # where the record keeps each curve's value
THRESHOLDS = (0.75, 0.80)


def _metrics(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "metrics.csv").open() as f:
        return list(csv.DictReader(f))


def _summary(run_dir: Path) -> dict[str, Any]:
    return dict(json.loads((run_dir / "summary.json").read_text()))


def _config(run_dir: Path) -> dict[str, Any]:
    return dict(yaml.safe_load((run_dir / "config.yaml").read_text()))


def _command(run_dir: Path) -> str:
    overrides = yaml.safe_load((run_dir / ".hydra" / "overrides.yaml").read_text()) or []
    return shlex.join(["fedrun", *overrides])


def _commit(runs: list[Path]) -> str:
    codes = {json.dumps(_summary(r).get("code", {}), sort_keys=True) for r in runs}
    if len(codes) != 1:
        raise SystemExit(f"systems_evidence: the runs ran different code ({' / '.join(sorted(codes))}); one per record")
    code = json.loads(codes.pop())
    if code.get("dirty") or "commit" not in code:
        raise SystemExit(f"systems_evidence: the runs ran {code}; valid: a clean commit")
    return str(code["commit"])[:7]


def _finished(run_dir: Path) -> bool:
    return (run_dir / "summary.json").is_file() and _summary(run_dir).get("status") == "completed"


def fedprox_record(sweep: Path, load: str) -> dict[str, Any]:
    """Figure 1's column from the sweep folder of ``fedprox-stragglers`` (its m00, m01, m02 multiruns)."""
    runs = sorted(d for d in sweep.glob("*/*/*/") if (d / "config.yaml").is_file())
    missing = [str(d) for d in runs if not _finished(d)]
    if len(runs) != 9 or missing:
        raise SystemExit(f"systems_evidence: {len(runs)} runs under {sweep}, unfinished: {missing}; valid: all 9")
    cells: list[dict[str, Any]] = []
    for d in runs:
        cfg, rows, s = _config(d), _metrics(d), _summary(d)
        by_round = {int(r["round"]): r for r in rows}
        loss = [float(r["train_loss"]) for r in rows]
        acc = [float(r["test_acc"]) for r in rows]
        late = loss[len(loss) // 2 :]  # the second half of the run: how much the training loss still swings
        mean_late = sum(late) / len(late)
        cells.append(
            {
                "method": cfg["tags"]["method"],
                "stragglers": cfg["system"]["stragglers"],
                "train_loss_last": loss[-1],
                "train_loss_last10": sum(loss[-10:]) / 10,
                "train_loss_std_second_half": (sum((x - mean_late) ** 2 for x in late) / len(late)) ** 0.5,
                "test_acc_last": acc[-1],
                "test_acc_last10": sum(acc[-10:]) / 10,
                "test_acc_best": max(acc),
                "curve": {
                    str(k): {"train_loss": float(by_round[k]["train_loss"]), "test_acc": float(by_round[k]["test_acc"])}
                    for k in FEDPROX_ROUNDS
                    if k in by_round
                },
                "wall_time_s": round(float(s["wall_time_s"]), 1),
                "command": _command(d),
                "run": str(d.relative_to(sweep)),
            }
        )
    get = {(c["method"], c["stragglers"]): c for c in cells}
    claims = []
    for share in (0.5, 0.9):
        avg, mu0, mu1 = (get[(m, share)] for m in ("FedAvg", "FedProx (μ=0)", "FedProx (μ=1)"))
        claims.append(
            {
                "stragglers": share,
                "claim": "aggregating the stragglers' partial work (FedProx, mu=0) converges better than dropping"
                " them (FedAvg): a lower training loss over the last 10 rounds",
                "train_loss_last10": [avg["train_loss_last10"], mu0["train_loss_last10"]],
                "holds": mu0["train_loss_last10"] < avg["train_loss_last10"],
            }
        )
        claims.append(
            {
                "stragglers": share,
                "claim": "the proximal term (mu=1) makes the training more stable than FedAvg's: a smaller swing of"
                " the training loss over rounds 101-200, and a higher last-10 test accuracy",
                "train_loss_std_second_half": [avg["train_loss_std_second_half"], mu1["train_loss_std_second_half"]],
                "test_acc_last10": [avg["test_acc_last10"], mu1["test_acc_last10"]],
                "holds": mu1["train_loss_std_second_half"] < avg["train_loss_std_second_half"]
                and mu1["test_acc_last10"] > avg["test_acc_last10"],
            }
        )
    return {
        "id": "fedprox_fig1_synthetic_1_1",
        "paper": "FedProx (Li et al., MLSys 2020), Figure 1, Synthetic(1, 1) column; a figure: no published cell",
        "target": "fedprox-stragglers",
        "preset": "fedprox_fig1_synthetic_1_1",
        "commit": _commit(runs),
        "data": "Synthetic(1, 1) of FedProx's generator (data.variant=code, data.seed=0), generated here",
        "seeds": [0],
        "load": load,
        "full_length": True,
        "published": "none as numbers: Figure 1 is a plot, and litian96/FedProx commits no logs (docs/fedprox.md)",
        "cells": cells,
        "claims": claims,
    }


def _reach(rows: list[dict[str, str]], threshold: float) -> dict[str, Any] | None:
    for r in rows:
        if r.get("test_acc") not in (None, "") and float(r["test_acc"]) >= threshold:
            return {"round": int(r["round"]), "sim_clock": float(r["sim_clock"])}
    return None


def async_record(root: Path, load: str, cpu: dict[str, float]) -> dict[str, Any]:
    """The three runs ``root``/{fedavg,fedbuff,fedasync} of docs/systems.md's comparison."""
    runs = {name: root / name for name in ("fedavg", "fedbuff", "fedasync")}
    missing = [str(d) for d in runs.values() if not _finished(d)]
    if missing:
        raise SystemExit(f"systems_evidence: unfinished runs {missing}; valid: the three finished")
    servers = []
    for name, d in runs.items():
        rows = [r for r in _metrics(d) if r.get("test_acc") not in (None, "")]
        stale = [float(r["staleness_mean"]) for r in _metrics(d) if r.get("staleness_mean") not in (None, "")]
        smax = [int(float(r["staleness_max"])) for r in _metrics(d) if r.get("staleness_max") not in (None, "")]
        servers.append(
            {
                "server": name,
                **{f"reach_{int(100 * t)}": _reach(rows, t) for t in THRESHOLDS},
                "test_acc_final": float(rows[-1]["test_acc"]),
                "test_acc_last10": sum(float(r["test_acc"]) for r in rows[-10:]) / len(rows[-10:]),
                "sim_clock_end": float(rows[-1]["sim_clock"]),
                "updates": int(rows[-1]["round"]),
                "staleness_mean": sum(stale) / len(stale) if stale else None,
                "staleness_max": max(smax) if smax else None,
                "cpu_user_s": cpu.get(name),
                "command": _command(d),
            }
        )
    return {
        "id": "async_fmnist_trace",
        "what": "FedBuff and FedAsync against FedAvg on Fashion-MNIST on a device trace; fedrun's own comparison",
        "commit": _commit(list(runs.values())),
        "data": "real Fashion-MNIST (no stand-in); devices tests/system/fmnist_trace_100.json",
        "seeds": [0],
        "load": load,
        "servers": servers,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python scripts/systems_evidence.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("fedprox", "async"))
    ap.add_argument("runs", type=Path, help="the sweep folder (fedprox) or the folder of the three runs (async)")
    ap.add_argument("--load", required=True, help="the machine's load while the runs ran")
    ap.add_argument("--cpu", default="", help="async: user CPU seconds per server, e.g. fedavg=29.7,fedbuff=81.3")
    ap.add_argument("--out", type=Path, help="default docs/evidence/<id>.json")
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    if args.what == "fedprox":
        record = fedprox_record(args.runs, args.load)
    else:
        cpu = {k: float(v) for k, v in (p.split("=") for p in args.cpu.split(",") if p)}
        record = async_record(args.runs, args.load, cpu)
    out = args.out or REPO / "docs" / "evidence" / f"{record['id']}.json"
    out.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
