"""``make gpu-check``: fedrun's GPU path on this machine, checked in one command, reported in one table.

1. the environment: torch, its CUDA build, the GPU (stops with one line when torch sees no GPU);
2. the ``cuda`` tests (``pytest tests/cuda``): every engine on the GPU against the CPU result, bf16,
   chunking and the memory-sized chunk, out of memory, resume across devices, the partition cache,
   ``hardware.device=auto`` in a multirun;
3. the bench (``scripts/bench.py --device cuda``, workload (d) included): vectorised vs sequential
   samples/s per workload, peak GPU memory per cohort width;
4. FedIMA's CIFAR-10 CNN setting (``experiment=fedima_table1_cifar10_cnn_dir ima.enabled=true``) for
   ``--fedima-rounds`` rounds: the measured seconds per round, and the measured time of all 400 rounds
   only when 400 were run (nothing is extrapolated). CIFAR-10's files are used when present, else random
   data of its size and shape (the time per round does not depend on the pixels).

Prints the table (Markdown) and writes it with the raw numbers and the logs to ``outputs/gpu-check/<time>/``.
Exit code 0 when every check passed, 1 when one failed, 2 when there is no GPU.

    python scripts/gpu_check.py [--quick] [--fedima-rounds 10] [--bench-args "--workloads a,d"] [--skip-bench]
    python scripts/gpu_check.py --device cpu --quick   # a dry run of this script without a GPU (numbers mean nothing)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
FEDIMA = ["experiment=fedima_table1_cifar10_cnn_dir", "ima.enabled=true"]
Row = tuple[str, str, str]  # check, result, detail


def env_for(device: str) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1", "FEDRUN_TEST_DEVICE": device}


def stream(cmd: list[str], log: Path, env: dict[str, str]) -> int:
    """Run ``cmd`` in the repository, its output shown and kept in ``log``; its exit code."""
    print(f"$ {shlex.join(cmd)}  (log: {log})", flush=True)
    with open(log, "w") as f:
        p = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert p.stdout is not None
        for line in p.stdout:
            sys.stdout.write(line)
            f.write(line)
        return p.wait()


# ---- 1. the environment ----------------------------------------------------------------------------------------
def environment(device: str) -> tuple[dict[str, Any], str | None]:
    """Facts about torch and the GPU, and why the check cannot run (None when it can)."""
    import torch

    info: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "gpus": torch.cuda.device_count(),
    }
    if device == "cpu":
        info["device_name"] = f"CPU dry run ({platform.processor() or platform.machine()})"
        return info, None
    if torch.version.cuda is None:
        return info, (
            f"torch {torch.__version__} is a CPU-only build; gpu-check needs a CUDA build (on x86-64 Linux the package"
            " index's torch==2.13.0 is one) on a machine with an NVIDIA GPU and its driver"
        )
    if not torch.cuda.is_available():
        return info, f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no GPU: none here, or no driver"
    props = torch.cuda.get_device_properties(0)
    info.update(
        device_name=props.name,
        memory_gib=props.total_memory / 2**30,
        capability=f"{props.major}.{props.minor}",
        all_gpus=[torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
    )
    x = torch.randn(256, 256, device="cuda")
    ok = torch.allclose((x @ x).cpu(), x.cpu() @ x.cpu(), rtol=1e-3, atol=1e-3)
    info["matmul_matches_cpu"] = bool(ok)
    return info, None if ok else "a 256x256 matrix product on the GPU differs from the CPU's"


# ---- 2. the cuda tests -----------------------------------------------------------------------------------------
def run_tests(out: Path, device: str, extra: list[str]) -> tuple[list[Row], dict[str, Any]]:
    junit = out / "cuda-tests.xml"
    cmd = [sys.executable, "-m", "pytest", "tests/cuda", "-rs", "-p", "no:cacheprovider", f"--junitxml={junit}", *extra]
    code = stream(cmd, out / "cuda-tests.log", env_for(device))
    if not junit.is_file():
        return [("cuda tests", "FAILED", f"pytest exited {code} before reporting (see cuda-tests.log)")], {}
    groups: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for case in ET.parse(junit).getroot().iter("testcase"):
        func, _, params = case.get("name", "").partition("[")
        label = params.rstrip("]")
        skipped = case.find("skipped")
        if case.find("failure") is not None or case.find("error") is not None:
            outcome, label = "failed", label or "failed"
        elif skipped is not None:
            outcome = "skipped"
            label = ": ".join(x for x in (label, skipped.get("message", "")) if x)
        else:
            outcome = "passed"
        groups[f"{case.get('classname', '').rsplit('.', 1)[-1]}::{func}"][outcome].append(label)
    rows = []
    for name, res in groups.items():
        n = sum(len(v) for v in res.values())
        if res["failed"]:
            rows.append((name, f"FAILED {len(res['failed'])}/{n}", ", ".join(res["failed"])))
        elif res["passed"]:
            skipped = f"; skipped {len(res['skipped'])}: {res['skipped'][0]}" if res["skipped"] else ""
            rows.append((name, f"passed {len(res['passed'])}/{n}", skipped.lstrip("; ")))
        else:
            rows.append((name, f"skipped {n}/{n}", res["skipped"][0]))
    if code not in (0, 1, 5) and not any(r[1].startswith("FAILED") for r in rows):
        rows.append(("cuda tests", "FAILED", f"pytest exited {code} (see cuda-tests.log)"))
    return rows, {name: dict(res) for name, res in groups.items()}


# ---- 3. the bench ------------------------------------------------------------------------------------------------
def rate(tp: dict[str, Any], engine: str) -> float | None:
    return (tp.get(engine) or {}).get("samples_per_s")


def run_bench(out: Path, device: str, args: list[str]) -> tuple[list[Row], dict[str, Any]]:
    bench_dir = out / "bench"
    cmd = [sys.executable, "scripts/bench.py", "--device", device, "--out", str(bench_dir), *args]
    code = stream(cmd, out / "bench.log", env_for(device))
    reports = sorted(bench_dir.glob("bench-*.json"))
    if not reports:
        return [("bench", "FAILED", f"scripts/bench.py exited {code} without a report (see bench.log)")], {}
    report = json.loads(reports[-1].read_text())
    rows: list[Row] = []
    for key, w in report.get("workloads", {}).items():
        name = f"bench ({key}): " + ", ".join(w.get("desc", "").split(", ")[1:4])  # dataset, model, clients
        if "skipped" in w:
            failed = device != "cpu" and key == "d"  # (d) is the GPU workload: it must run on a GPU
            rows.append((name, "FAILED" if failed else "skipped", w["skipped"]))
            continue
        tp = w.get("throughput", {})
        parts = ("throughput", "sequential", "vectorised", "auto")
        errors = [f"{part}: {w[part]['error']}" for part in parts if "error" in w.get(part, {})]
        seq, vec, central = rate(tp, "sequential"), rate(tp, "vectorised"), rate(tp, "centralized")
        detail = f"samples/s: sequential {fmt(seq, ',.0f')}, vectorised {fmt(vec, ',.0f')}"
        detail += f" ({fmt(vec / seq if vec and seq else None, '.2f')}x), centralized {fmt(central, ',.0f')}"
        chosen = (w.get("auto", {}).get("auto") or {}).get("engine")
        detail += (
            f"; auto chose {chosen or '-'}; run peak GPU {fmt(w.get('auto', {}).get('cuda_max_allocated_gib'))} GiB"
        )
        rows.append((name, "FAILED" if errors else "passed", "; ".join(errors) if errors else detail))
    if device != "cpu" and "d" not in report.get("workloads", {}):
        rows.append(("bench (d)", "FAILED", "workload (d), the GPU workload, was not run"))
    for m in report.get("memory_per_width", []):
        width = m.get("width", "?")
        label = "one client at a time (sequential)" if width == "loop" else f"{width} clients at once"
        if "error" in m:
            rows.append((f"memory, {label}", "FAILED", m["error"]))
            continue
        gpu = m.get("cuda_max_allocated_gib")
        where = f"peak GPU {fmt(gpu)} GiB" if gpu is not None else f"peak RSS {fmt(m.get('peak_rss_gib'))} GiB"
        rows.append((f"memory, {label}", "passed", f"{where}, {fmt(m.get('samples_per_s'), ',.0f')} samples/s"))
    if code != 0:
        rows.append(("bench", "FAILED", f"scripts/bench.py exited {code} (see bench.log)"))
    return rows, report


# ---- 4. FedIMA's CIFAR-10 CNN ------------------------------------------------------------------------------------
def fedima_child(device: str, rounds: int, run_dir: Path) -> None:
    """In a child process: FedIMA's CIFAR-10 CNN run for ``rounds`` rounds in ``run_dir``, on CIFAR-10's files when
    they are there, else on random data of CIFAR-10's size and shape (bench.py's, 50,000 + 10,000 images)."""
    sys.path.insert(0, str(REPO / "scripts"))
    import bench

    from fedrun.core.errors import DataMissing
    from fedrun.host.allocator import tune_glibc_malloc
    from fedrun.run import experiment as runner
    from fedrun.run import loop

    tune_glibc_malloc()  # as the fedrun CLI does
    hw = ["hardware=cuda"] if device != "cpu" else ["hardware=cpu", "hardware.threads=1"]
    overrides = [*FEDIMA, *hw, f"fl.rounds={rounds}", "checkpoint.every=0"]
    spec = bench.make_spec(overrides, device, run_dir)
    try:
        runner.load_data(spec)
        data = "CIFAR-10"
    except DataMissing:
        runner.load_data = bench.fake_cifar
        data = "random data of CIFAR-10's size and shape (CIFAR-10's files not found)"
    run_dir.mkdir(parents=True, exist_ok=True)
    summary = loop.run(spec, run_dir)
    print(json.dumps({**summary, "data_source": data}, default=str))


def run_fedima(out: Path, device: str, rounds: int) -> tuple[list[Row], dict[str, Any]]:
    run_dir = out / "fedima-cifar10-cnn"
    cmd = [sys.executable, __file__, "--fedima-child", "--device", device, "--fedima-rounds", str(rounds)]
    t0 = time.perf_counter()
    code = stream([*cmd, "--out", str(run_dir)], out / "fedima.log", env_for(device))
    wall = time.perf_counter() - t0
    lines = (out / "fedima.log").read_text().strip().splitlines()
    summary = next((json.loads(ln) for ln in reversed(lines) if ln.startswith('{"')), {})  # the child's last word
    name = "FedIMA, CIFAR-10 CNN, 100 clients Dir(0.1), 10/round, 5 epochs"
    if code != 0 or summary.get("status") != "completed":
        return [(name, "FAILED", f"exit {code}: {summary.get('error') or (lines or ['no output'])[-1]}")], summary
    import csv

    with open(run_dir / "metrics.csv") as f:
        per_round = [float(r["round_seconds"]) for r in csv.DictReader(f)]
    steady = per_round[1:] or per_round  # the first round also pays the engine choice and CUDA's warm-up
    if rounds == 400:
        all_rounds = f"400 rounds measured: {summary['loop_time_s']:.0f} s of rounds, {wall:.0f} s end to end"
    else:
        all_rounds = "400 rounds: not measured (--fedima-rounds 400)"
    which = f"median of rounds 2-{len(per_round)}; round 1 {per_round[0]:.2f} s" if len(per_round) > 1 else "1 round"
    detail = (
        f"{statistics.median(steady):.2f} s/round ({which}; evaluation included), engine {summary.get('engine')},"
        f" {summary['data_source']}; {all_rounds}"
    )
    result = {"per_round_s": per_round, "wall_s": wall, "rounds": rounds, "summary": summary}
    return [(name, "passed", detail)], result


def describe(info: dict[str, Any]) -> str:
    gpus = info.get("all_gpus", [])
    text = info["device_name"] + (f" x{len(gpus)}" if len(gpus) > 1 else "")
    if "memory_gib" in info:
        text += f", {info['memory_gib']:.1f} GiB, compute capability {info['capability']}"
    return f"{text}; torch {info['torch']} (CUDA {info['torch_cuda']}), Python {info['python']}"


# ---- the table ---------------------------------------------------------------------------------------------------
def fmt(v: Any, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def table(rows: list[Row]) -> str:
    esc = lambda s: s.replace("|", "\\|")  # noqa: E731
    lines = ["| check | result | detail |", "| --- | --- | --- |"]
    lines += [f"| {esc(a)} | {esc(b)} | {esc(c)} |" for a, b, c in rows]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", help="cuda (default), cuda:N, or cpu: a dry run of this script")
    ap.add_argument("--quick", action="store_true", help="bench --quick and 3 FedIMA rounds")
    ap.add_argument("--fedima-rounds", type=int, default=None, help="FedIMA rounds to time (default 10; 400: all)")
    ap.add_argument("--bench-args", default="", help="more arguments for scripts/bench.py (e.g. '--workloads a,d')")
    ap.add_argument("--pytest-args", default="", help="more arguments for pytest (e.g. '-x' or '-k resume')")
    ap.add_argument("--skip-tests", action="store_true")
    ap.add_argument("--skip-bench", action="store_true")
    ap.add_argument("--skip-fedima", action="store_true")
    ap.add_argument("--out", default=str(REPO / "outputs" / "gpu-check"))
    ap.add_argument("--fedima-child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.fedima_child:
        fedima_child(args.device, args.fedima_rounds, Path(args.out))
        return 0

    info, problem = environment(args.device)
    if problem:
        print(f"gpu-check: error: {problem}", file=sys.stderr)
        return 2
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    out = Path(args.out) / stamp
    out.mkdir(parents=True, exist_ok=True)
    rows: list[Row] = [("environment", "passed", describe(info))]
    raw: dict[str, Any] = {"environment": info, "started": stamp}
    t0 = time.perf_counter()
    if not args.skip_tests:
        r, raw["tests"] = run_tests(out, args.device, shlex.split(args.pytest_args))
        rows += r
    if not args.skip_bench:
        bench_args = (["--quick"] if args.quick else []) + shlex.split(args.bench_args)
        r, raw["bench"] = run_bench(out, "cpu" if args.device == "cpu" else "cuda", bench_args)
        rows += r
    if not args.skip_fedima:
        rounds = args.fedima_rounds or (3 if args.quick else 10)
        r, raw["fedima"] = run_fedima(out, args.device, rounds)
        rows += r
    raw["wall_s"] = time.perf_counter() - t0
    raw["rows"] = rows
    text = table(rows)
    title = f"fedrun gpu-check, {stamp} UTC, {info['device_name']}, {raw['wall_s'] / 60:.1f} min"
    (out / "gpu-check.md").write_text(f"{title}\n\n{text}\n")
    (out / "gpu-check.json").write_text(json.dumps(raw, indent=1, default=str))
    print(f"\n{title}\n\n{text}\n\nwritten to {out}/gpu-check.md (raw numbers: gpu-check.json, logs beside)")
    return 1 if any(r[1].startswith("FAILED") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
