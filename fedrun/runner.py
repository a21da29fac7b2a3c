"""The round loop: sample cohort -> engine trains -> algorithm aggregates -> evaluate -> log."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from fedrun.algorithms.base import Algorithm, RoundInfo
from fedrun.config import FLConfig, RunSpec
from fedrun.data.base import Dataset, check_clients_vs_samples
from fedrun.data.federated import FederatedData
from fedrun.data.partition import class_counts, make_partition, partition_stats
from fedrun.engines.auto import EngineFactory, precision_context
from fedrun.engines.base import Engine
from fedrun.errors import ConfigError, DivergenceError
from fedrun.metrics.evaluate import evaluate
from fedrun.models.base import FunctionalModel
from fedrun.outputs import plot_curves, write_json, write_metrics, write_partition
from fedrun.rng import derive
from fedrun.sampling import sample_clients
from fedrun.state import ClientStates
from fedrun.tree import Tensors, all_finite, nbytes, zeros_like

DTYPES = {"fp32": torch.float32, "fp64": torch.float64, "bf16": torch.float32}


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError("hardware.device", f"{name} requested but CUDA is not available here; valid: cpu, auto")
    return torch.device(name)


def load_data(spec: RunSpec) -> Dataset:
    p = spec.data.params
    data = spec.data.obj(p).cap(p.max_train_samples, p.max_test_samples, derive(spec.seed, "cap"))
    check_clients_vs_samples(spec.fl.clients, len(data.train))
    return data


def build_model(spec: RunSpec, data: Dataset, device: torch.device) -> FunctionalModel:
    """The initial model: seeded by (seed, "init") alone, so every algorithm starts from the same weights."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive(spec.seed, "init"))
        module = spec.model.obj(spec.model.params, data.input_shape, data.num_classes)
    return FunctionalModel(module.to(device=device, dtype=DTYPES[spec.hardware.precision]))


def select_engine(spec: RunSpec) -> Callable[[Algorithm, FederatedData, FLConfig, int], Engine]:
    """A builder of the configured engine; for ``engine=auto`` it times both engines on this run (cached)."""
    return EngineFactory(spec.hardware, spec.cache_dir)


@dataclass
class Experiment:
    """Everything a run is built from (kept together so tests and tools can build one without running)."""

    spec: RunSpec
    device: torch.device
    data: Dataset
    parts: list[np.ndarray]
    fed: FederatedData
    model: FunctionalModel
    algorithm: Algorithm
    engine: Engine


def build_experiment(spec: RunSpec) -> Experiment:
    hw = spec.hardware
    if hw.threads:
        torch.set_num_threads(hw.threads)
    device = resolve_device(hw.device)
    data = load_data(spec)
    parts = make_partition(data, spec.partition.name, spec.partition.params, spec.fl.clients, spec.seed, spec.cache_dir)
    fed = FederatedData(data, parts, device, DTYPES[hw.precision])
    model = build_model(spec, data, device)
    algorithm: Algorithm = spec.algorithm.obj(spec.algorithm.params, spec.fl, model)
    algorithm.setup({"device": device, "seed": spec.seed, "data": fed})
    engine = select_engine(spec)(algorithm, fed, spec.fl, spec.seed)
    return Experiment(spec, device, data, parts, fed, model, algorithm, engine)


def lr_at(spec: RunSpec, rnd: int) -> float:
    return spec.fl.lr * spec.fl.lr_decay**rnd


def summarize(rows: list[dict[str, Any]], spec: RunSpec) -> dict[str, Any]:
    """Final, best and last-k mean test accuracy, and the first round reaching ``eval.target``."""
    if not rows:
        return {}
    acc = np.array([r["test_acc"] for r in rows])
    k = spec.eval.last_k
    out = {
        "test_acc_final": float(acc[-1]),
        "test_acc_last_k": float(acc[-k:].mean()),
        "last_k": min(k, len(acc)),
        "test_acc_best": float(acc.max()),
        "best_round": int(rows[int(acc.argmax())]["round"]),
        "test_loss_final": float(rows[-1]["test_loss"]),
    }
    if "train_acc" in rows[-1]:
        out["train_acc_final"] = float(rows[-1]["train_acc"])
    if spec.eval.target is not None:
        hit = np.flatnonzero(acc >= spec.eval.target)
        out["round_to_target"] = int(rows[hit[0]]["round"]) if hit.size else None
    return out


def run(spec: RunSpec, run_dir: Path, console: Console | None = None) -> dict[str, Any]:
    """Run one experiment, writing metrics.csv, summary.json, partition and curve files to ``run_dir``."""
    t0 = time.perf_counter()
    console = console or Console(stderr=True)
    exp = build_experiment(spec)
    fl, algo, engine = spec.fl, exp.algorithm, exp.engine
    counts = class_counts(exp.data.train.y.numpy(), exp.parts, exp.data.num_classes)
    write_partition(run_dir, counts, spec.output.plots)
    base = {
        "algorithm": spec.algorithm.name,
        "data": spec.data.name,
        "model": spec.model.name,
        "partition": spec.partition.name,
        "seed": spec.seed,
        "engine": type(engine).__name__,
        "device": str(exp.device),
        "model_params": exp.model.num_params(),
        "partition_stats": partition_stats(counts),
    }

    params: Tensors = exp.model.init_params()
    server_state = algo.server_init(params)
    template = algo.client_init(params)
    if fl.keep_momentum and fl.momentum:
        template = {**template, "_momentum": zeros_like(params)}
    states = ClientStates(template, fl.clients, exp.device)
    rows: list[dict[str, Any]] = []
    samples, train_time, agg_time = 0, 0.0, 0.0
    status, error = "completed", None
    write_json(run_dir / "summary.json", {**base, "status": "running"})

    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[acc]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        disable=spec.output.quiet,
        transient=False,
    )
    t_loop = time.perf_counter()
    try:
        with progress:
            task = progress.add_task(f"{spec.algorithm.name} rounds", total=fl.rounds, acc="")
            for rnd in range(fl.rounds):
                t_round = time.perf_counter()
                clients = torch.as_tensor(sample_clients(fl, spec.seed, rnd), dtype=torch.long)
                lr = algo.local_lr(rnd, lr_at(spec, rnd))
                extras = algo.broadcast(params, server_state)
                cohort_states = states.gather(clients) if states else {}
                t_train = time.perf_counter()
                with precision_context(spec.hardware.precision, exp.device):
                    res = engine.train_cohort(rnd, params, extras, clients, cohort_states, lr)
                train_time += time.perf_counter() - t_train
                samples += res.samples
                if states:
                    states.scatter(clients, res.states)
                sizes = exp.fed.sizes[clients].to(torch.float64)
                weights = sizes / sizes.sum() if fl.weighting == "size" else torch.full_like(sizes, 1 / len(sizes))
                info = RoundInfo(rnd, fl.clients, clients, sizes, res.steps, lr)
                t_agg = time.perf_counter()
                weights = weights.to(exp.device)
                params, server_state, diag = algo.aggregate(params, server_state, res.uploads, weights, info)
                agg_time += time.perf_counter() - t_agg
                if not all_finite(params):
                    raise DivergenceError(rnd, None, "non-finite global model after aggregation")
                if (rnd + 1) % spec.eval.every == 0 or rnd == fl.rounds - 1:
                    acc, loss = evaluate(exp.model, params, exp.fed, exp.fed.test, spec.eval.batch_size)
                    row: dict[str, Any] = {"round": rnd + 1, "test_acc": acc, "test_loss": loss}
                    if spec.eval.train_acc:
                        row["train_acc"], row["train_loss"] = evaluate(
                            exp.model, params, exp.fed, exp.fed.train, spec.eval.batch_size
                        )
                    row.update(
                        {
                            "lr": lr,
                            "clients": len(clients),
                            "local_loss": res.loss,
                            "bytes_down": len(clients) * (nbytes(params) + nbytes(extras)),
                            "bytes_up": nbytes(res.uploads),
                            "round_seconds": time.perf_counter() - t_round,
                            "seconds": time.perf_counter() - t0,
                            **diag,
                        }
                    )
                    rows.append(row)
                    write_metrics(run_dir / "metrics.csv", rows)
                    progress.update(task, acc=f"acc {acc:.4f}")
                progress.advance(task)
    except DivergenceError as e:
        status, error = "diverged", str(e)
    except KeyboardInterrupt:
        status, error = "interrupted", "interrupted by the user"
    wall = time.perf_counter() - t0
    summary = {
        **base,
        **summarize(rows, spec),
        "status": status,
        "rounds_completed": rows[-1]["round"] if rows else 0,
        "wall_time_s": wall,
        "loop_time_s": time.perf_counter() - t_loop,
        "train_time_s": train_time,
        "aggregate_time_s": agg_time,
        "train_samples": samples,
        "samples_per_s": samples / train_time if train_time else 0.0,
        "run_dir": str(run_dir),
    }
    if error:
        summary["error"] = error
    write_json(run_dir / "summary.json", summary)
    if rows and spec.output.plots:
        plot_curves(rows, run_dir / "accuracy.png", f"{spec.algorithm.name} on {spec.data.name}")
    return summary
