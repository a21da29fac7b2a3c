"""The round loop: sample cohort -> engine trains -> algorithm aggregates -> evaluate -> log."""

from __future__ import annotations

import dataclasses
import json
import math
import sys
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
from fedrun.algorithms.ima import IMA
from fedrun.checkpoint import CHECKPOINT_FILE, Checkpoint, fingerprint, load_checkpoint, save_checkpoint, to_device
from fedrun.config import FLConfig, RunSpec
from fedrun.data.base import Dataset, check_clients_vs_samples
from fedrun.data.corrupt import apply_corruption
from fedrun.data.federated import FederatedData
from fedrun.data.holdout import hold_out
from fedrun.data.memo import load_source
from fedrun.data.partition import class_counts, make_partition, partition_stats
from fedrun.data.partitions.longtail import apply_longtail
from fedrun.data.proxy import ProxySet, carve_proxy
from fedrun.data.standin import with_standin
from fedrun.devices import job_device, multirun_job_num
from fedrun.engines.auto import EngineFactory, precision_context
from fedrun.engines.base import Engine
from fedrun.errors import ConfigError, DivergenceError
from fedrun.metrics.client_weights import CLIENT_WEIGHTS_FILE, effective_weights, resumed_rows, weight_rows
from fedrun.metrics.clients import ClientAccuracy
from fedrun.metrics.diagnostics import round_diagnostics
from fedrun.metrics.evaluate import evaluate
from fedrun.models.base import FunctionalModel
from fedrun.outputs import plot_curves, write_json, write_metrics, write_partition
from fedrun.registry import ENGINES
from fedrun.report.partition import domain_breakdown, domain_counts, write_domain_table
from fedrun.rng import derive, np_rng
from fedrun.sampling import aggregated_part, sample_clients, training_clients
from fedrun.state import ClientStates
from fedrun.tracking import Trackers
from fedrun.tree import Tensors, Tree, all_finite, leaves, nbytes, weighted_mean, zeros_like

DTYPES = {"fp32": torch.float32, "fp64": torch.float64, "bf16": torch.float32}


def resolve_device(name: str) -> torch.device:
    if name == "auto":  # in a multirun: job n takes GPU n % n_gpus (fedrun/devices.py)
        return torch.device(job_device(multirun_job_num(), torch.cuda.device_count()))
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError("hardware.device", f"{name} requested but CUDA is not available here; valid: cpu, auto")
    return torch.device(name)


def load_data(spec: RunSpec) -> Dataset:
    """The run's dataset (subset, long-tailed as configured); stand-in data with a one-line notice when its
    files are missing and ``data.standin`` is set."""
    p = spec.data.params
    data = load_source(spec.data.name, with_standin(spec.data.name, spec.data.obj), p).cap(
        p.max_train_samples, p.max_test_samples, derive(spec.seed, "cap")
    )
    if data.standin is not None:
        print(
            f"fedrun: data.standin: {data.name} files not found, training on stand-in random data of its"
            " shape (the numbers mean nothing)",
            file=sys.stderr,
        )
    if p.longtail_rho is not None:
        data = apply_longtail(data, p.longtail_rho, np_rng(spec.seed, "longtail"))
    data = data.normalised(p.normalize)
    check_clients_vs_samples(spec.fl.clients, len(data.train))
    return data


def build_model(spec: RunSpec, data: Dataset, device: torch.device) -> FunctionalModel:
    """The initial model: seeded by (seed, "init") alone, so every algorithm starts from the same weights."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive(spec.seed, "init"))
        module = spec.model.obj(spec.model.params, data.input_shape, data.num_classes)
    return FunctionalModel(module.to(device=device, dtype=DTYPES[spec.hardware.precision]))


def select_engine(
    spec: RunSpec, pinned: str | None = None
) -> Callable[[Algorithm, FederatedData, FLConfig, int], Engine]:
    """A builder of the configured engine; for ``engine=auto`` it times both engines on this run (cached).

    ``pinned`` replaces ``auto`` with the engine a resumed run used before: the engines agree to float
    tolerance, not bit for bit, so a resume must not switch engines.
    """
    hw = spec.hardware
    if pinned is not None and hw.engine == "auto":
        hw = dataclasses.replace(hw, engine=pinned)
    return EngineFactory(hw, spec.cache_dir)


def engine_name(engine: Engine) -> str:
    """The registry name of an engine instance (``sequential``, ``vectorised``...)."""
    return next(n for n in ENGINES.names() if isinstance(engine, ENGINES.get(n).obj))


@dataclass
class Experiment:
    """Everything a run is built from (kept together so tests and tools can build one without running).

    ``data`` is the dataset as loaded; ``fed`` holds what the clients train on, which differs from it only on
    the ``corrupted`` clients' swapped labels (``corrupt.fraction`` > 0).
    """

    spec: RunSpec
    device: torch.device
    data: Dataset
    parts: list[np.ndarray]
    fed: FederatedData
    model: FunctionalModel
    algorithm: Algorithm
    engine: Engine
    corrupted: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, dtype=np.int64))


def build_experiment(spec: RunSpec, pinned_engine: str | None = None) -> Experiment:
    hw = spec.hardware
    if hw.threads:
        torch.set_num_threads(hw.threads)
    device = resolve_device(hw.device)
    data = load_data(spec)
    parts = make_partition(data, spec.partition.name, spec.partition.params, spec.fl.clients, spec.seed, spec.cache_dir)
    px, proxy, test = spec.proxy, None, None
    if px.per_class:  # carved out for every method, so all are evaluated on the same test images
        proxy_split, test = carve_proxy(data.test, data.num_classes, px, spec.seed)
        proxy = ProxySet(proxy_split.to(device), data.num_classes, px.batch_size, px.balanced_sampling)
    client_data, corrupted = apply_corruption(data, parts, spec.corrupt, spec.seed)
    train_parts = hold_out(parts, spec.data.params.client_valid_ratio, spec.seed)  # clients train on the rest
    fed = FederatedData(client_data, train_parts, device, DTYPES[hw.precision], test=test)
    fed.set_augment(spec.data.params.augment, spec.seed)
    model = build_model(spec, data, device)
    algorithm: Algorithm = spec.algorithm.obj(spec.algorithm.params, spec.fl, model)
    if spec.ima.enabled:
        algorithm = IMA(algorithm, spec.ima)
    algorithm.setup({"device": device, "seed": spec.seed, "data": fed, "proxy": proxy, "dataset": spec.data.name})
    engine = select_engine(spec, pinned_engine)(algorithm, fed, spec.fl, spec.seed)
    return Experiment(spec, device, data, parts, fed, model, algorithm, engine, corrupted)


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
    for key in ("client_acc_mean", "client_acc_std"):  # eval.client_acc: FedSAM's "mean (std across clients)"
        if key in rows[-1]:
            out[f"{key}_final"] = float(rows[-1][key])
    if spec.eval.target is not None:
        hit = np.flatnonzero(acc >= spec.eval.target)
        out["round_to_target"] = int(rows[hit[0]]["round"]) if hit.size else None
    return out


def average_buffers(stacked: Tensors, weights: torch.Tensor) -> Tensors:
    """The cohort's buffers combined like a state-dict FedAvg: float statistics (BatchNorm running mean and
    variance) weighted like the parameters; integer counters take the cohort's maximum."""
    return {
        k: weighted_mean({k: v}, weights)[k] if v.is_floating_point() else v.max(0).values for k, v in stacked.items()
    }


def first_nonfinite_client(uploads: Tree, clients: torch.Tensor) -> int | None:
    """The first client of the cohort whose upload holds a NaN/inf (None when all are finite)."""
    bad = torch.zeros(len(clients), dtype=torch.bool)
    for t in leaves(uploads):
        if t.is_floating_point() and t.dim() > 0 and t.shape[0] == len(clients):
            bad |= ~torch.isfinite(t.reshape(len(clients), -1)).all(1).cpu()
    hit = torch.nonzero(bad).flatten()
    return int(clients[hit[0]]) if hit.numel() else None


def pinned_engine(run_dir: Path) -> str | None:
    """The engine an interrupted run in ``run_dir`` used (None when there is nothing to resume)."""
    if not (run_dir / CHECKPOINT_FILE).is_file() or not (run_dir / "summary.json").is_file():
        return None
    try:
        return json.loads((run_dir / "summary.json").read_text()).get("engine")
    except (OSError, ValueError):
        return None


def run(spec: RunSpec, run_dir: Path, console: Console | None = None) -> dict[str, Any]:
    """Run one experiment, writing metrics.csv, summary.json, partition and curve files to ``run_dir``.

    When ``run_dir`` holds a checkpoint of this config the run continues from it; the metrics it then
    writes are identical (timings aside) to those of an uninterrupted run.
    """
    t0 = time.perf_counter()
    exp = build_experiment(spec, pinned_engine(run_dir))
    try:
        return _run(spec, run_dir, exp, t0, console or Console(stderr=True))
    finally:
        exp.engine.close()  # Ray actors (and a cluster the engine started) end with the run, however it ends


def _run(spec: RunSpec, run_dir: Path, exp: Experiment, t0: float, console: Console) -> dict[str, Any]:
    """The round loop of :func:`run` on a built experiment."""
    fl, algo, engine = spec.fl, exp.algorithm, exp.engine
    counts = class_counts(exp.data.train.y.numpy(), exp.parts, exp.data.num_classes)
    write_partition(run_dir, counts, spec.output.plots, exp.corrupted if spec.corrupt.fraction else None)
    domains = exp.data.train.domain
    if domains is not None:
        dom, names = domains.numpy(), exp.data.domain_names
        write_domain_table(run_dir, domain_counts(dom, exp.parts, max(int(dom.max()) + 1, len(names or []))), names)
    base = {
        "algorithm": spec.algorithm.name,
        "data": spec.data.name,
        "model": spec.model.name,
        "partition": spec.partition.name,
        "seed": spec.seed,
        "engine": engine_name(engine),
        "engine_selection": getattr(engine, "selection", {}),
        "device": str(exp.device),
        "model_params": exp.model.num_params(),
        "data_standin": exp.data.standin is not None,  # seeded random data replaced missing files (data.standin)
        "partition_stats": partition_stats(counts),
    }
    if spec.corrupt.fraction:
        base["corrupted_clients"] = exp.corrupted.tolist()
        base["corrupt_labels"] = list(spec.corrupt.labels)
    if domains is not None:
        labels = exp.data.train.y.numpy()
        base["partition_domains"] = domain_breakdown(labels, dom, exp.parts, exp.data.num_classes, names)

    params: Tensors = exp.model.init_params()
    server_state = algo.server_init(params)
    template = algo.client_init(params)
    if fl.keep_momentum and fl.momentum:
        template = {**template, "_momentum": zeros_like(params)}
    cuda = exp.device.type == "cuda"  # client rows over 1/4 of the GPU (MOON, FedRobust at 100s of clients) go to host
    big = cuda and fl.clients * nbytes(template) > torch.cuda.get_device_properties(exp.device).total_memory // 4
    states = ClientStates(template, fl.clients, exp.device, offload=big)
    rows: list[dict[str, Any]] = []
    samples, train_time, agg_time = 0, 0.0, 0.0
    status, error, diverged = "completed", None, {}
    ckpt_path, fp, start = run_dir / CHECKPOINT_FILE, fingerprint(spec.raw), 0
    if ckpt_path.is_file():
        ck = load_checkpoint(ckpt_path, fp)
        start, rows = ck.round, ck.rows
        params = to_device(ck.params, exp.device)
        server_state = to_device(ck.server_state, exp.device)
        states.load_state_dict(ck.client_states)
        samples = int(ck.counters["samples"])
        train_time, agg_time = ck.counters["train_time"], ck.counters["agg_time"]
        t0 -= ck.counters["elapsed"]  # timings continue from where the killed run stopped
        if ck.torch_rng is not None:
            torch.set_rng_state(ck.torch_rng)
        if ck.buffers:
            exp.model.set_buffers(to_device(ck.buffers, exp.device))
    # rows past the checkpoint (or a killed run's rows, when there is none) are computed again
    if rows:
        write_metrics(run_dir / "metrics.csv", rows)
    else:
        (run_dir / "metrics.csv").unlink(missing_ok=True)
    weights_path = run_dir / CLIENT_WEIGHTS_FILE
    weight_log = resumed_rows(weights_path, start) if spec.eval.client_weights else []
    if weight_log:
        write_metrics(weights_path, weight_log)
    else:
        weights_path.unlink(missing_ok=True)

    def checkpoint(done: int) -> None:
        counters = {"samples": samples, "train_time": train_time, "agg_time": agg_time}
        counters["elapsed"] = time.perf_counter() - t0
        rng = torch.get_rng_state()
        ck = Checkpoint(done, fp, params, server_state, states.state_dict(), rows, counters, rng, exp.model.buffers)
        save_checkpoint(ckpt_path, ck)

    write_json(run_dir / "summary.json", {**base, "status": "running"})
    ev = spec.eval
    client_acc = None
    if ev.client_acc:
        client_acc = ClientAccuracy.build(exp.model, exp.fed, exp.parts, ev.client_acc_split, ev.batch_size)
    trackers = Trackers.open(spec.tracking.tensorboard, run_dir)

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
            task = progress.add_task(f"{spec.algorithm.name} rounds", total=fl.rounds, completed=start, acc="")
            for rnd in range(start, fl.rounds):
                t_round = time.perf_counter()
                # torch's global RNG (dropout...) re-keyed per round: a resumed round draws what it would have
                torch.manual_seed(derive(spec.seed, "torch-global", rnd))
                clients = torch.as_tensor(sample_clients(fl, spec.seed, rnd), dtype=torch.long)
                trained = training_clients(fl, clients)  # fl.train_all: all train, the sampled are aggregated
                lr = algo.local_lr(rnd, lr_at(spec, rnd))
                extras = algo.broadcast(params, server_state)
                cohort_states = states.gather(trained) if states else {}
                t_train = time.perf_counter()
                with precision_context(spec.hardware.precision, exp.device):
                    res = engine.train_cohort(rnd, params, extras, trained, cohort_states, lr)
                train_time += time.perf_counter() - t_train
                samples += res.samples
                if not math.isfinite(res.loss):
                    raise DivergenceError(rnd, first_nonfinite_client(res.uploads, trained), "non-finite local loss")
                if states:
                    states.scatter(trained, res.states)
                res = aggregated_part(res, trained, clients)
                sizes = exp.fed.sizes[clients].to(torch.float64)
                weights = sizes / sizes.sum() if fl.weighting == "size" else torch.full_like(sizes, 1 / len(sizes))
                info = RoundInfo(rnd, fl.clients, clients, sizes, res.steps, lr)
                weights = weights.to(exp.device)
                dyn = round_diagnostics(params, res.uploads, weights, res.steps, lr) if ev.diagnostics else {}
                t_agg = time.perf_counter()  # after the diagnostics: aggregate_seconds times the method alone
                params, server_state, diag = algo.aggregate(params, server_state, res.uploads, weights, info)
                if "buffers" in res.uploads:
                    exp.model.set_buffers(average_buffers(res.uploads["buffers"], weights))
                agg_seconds = time.perf_counter() - t_agg
                agg_time += agg_seconds
                if not all_finite(params):
                    bad = first_nonfinite_client(res.uploads, clients)
                    raise DivergenceError(rnd, bad, "non-finite global model after aggregation")
                if ev.client_weights:
                    coef = effective_weights(res.uploads["params"], params)
                    weight_log += weight_rows(rnd, clients, sizes, weights, coef)
                    write_metrics(weights_path, weight_log)
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
                            "aggregate_seconds": agg_seconds,
                            "seconds": time.perf_counter() - t0,
                            **diag,
                            **dyn,
                            **(client_acc(params) if client_acc else {}),
                        }
                    )
                    rows.append(row)
                    write_metrics(run_dir / "metrics.csv", rows)
                    trackers.log(row)
                    progress.update(task, acc=f"acc {acc:.4f}")
                every = spec.checkpoint.every
                if (every and (rnd + 1) % every == 0) or (rnd == fl.rounds - 1 and spec.checkpoint.keep_final):
                    checkpoint(rnd + 1)
                progress.advance(task)
        if not spec.checkpoint.keep_final:
            ckpt_path.unlink(missing_ok=True)
    except DivergenceError as e:
        # rounds are 1-based in metrics.csv and summary.json; the last good checkpoint stays in place
        where = f"round {e.round_idx + 1}" + (f", client {e.client}" if e.client is not None else "")
        status, error = "diverged", f"diverged at {where}: {e.what}"
        diverged = {"diverged_round": e.round_idx + 1, "diverged_client": e.client}
    except KeyboardInterrupt:
        status, error = "interrupted", "interrupted by the user"
    finally:
        trackers.close()
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
        **diverged,
        **({"resumed_from_round": start} if start else {}),
    }
    if error:
        summary["error"] = error
    write_json(run_dir / "summary.json", summary)
    if rows and spec.output.plots:
        plot_curves(rows, run_dir / "accuracy.png", f"{spec.algorithm.name} on {spec.data.name}")
    return summary
