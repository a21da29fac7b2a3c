"""The round loop: sample cohort -> engine trains -> algorithm aggregates -> evaluate -> log."""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console

from fedrun.algorithms.base import Algorithm
from fedrun.algorithms.ima import IMA
from fedrun.checkpoint import CHECKPOINT_FILE, fingerprint
from fedrun.config import FLConfig, RunSpec
from fedrun.data.base import Dataset, check_clients_vs_samples
from fedrun.data.corrupt import apply_corruption
from fedrun.data.federated import FederatedData
from fedrun.data.holdout import hold_out
from fedrun.data.memo import load_source
from fedrun.data.partition import make_partition
from fedrun.data.partitions.longtail import apply_longtail
from fedrun.data.proxy import ProxySet, carve_proxy
from fedrun.data.standin import with_standin
from fedrun.devices import job_device, multirun_job_num
from fedrun.engines.auto import EngineFactory
from fedrun.engines.base import Engine
from fedrun.errors import ConfigError, DivergenceError
from fedrun.interrupts import signal_name
from fedrun.metrics.clients import ClientAccuracy
from fedrun.models.base import FunctionalModel
from fedrun.outputs import plot_curves, write_json
from fedrun.progress import RoundMonitor, log
from fedrun.rng import derive, np_rng
from fedrun.rounds import evaluates, evaluation_row, lr_at, train_round
from fedrun.run_state import open_state, save_state
from fedrun.run_summary import Outcome, describe_run, final_summary, summary_line
from fedrun.threads import apply_threads

__all__ = ["Experiment", "build_experiment", "build_model", "load_data", "lr_at", "run", "select_engine"]

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
    threads: dict[str, Any] = dataclasses.field(default_factory=dict)  # torch threads used and why (summary.json)


def build_experiment(spec: RunSpec, pinned_engine: str | None = None, pinned_threads: int | None = None) -> Experiment:
    """Build the run's data, partition, model, algorithm and engine. ``pinned_*``: what a resumed run used
    (:func:`pinned`), kept where the config leaves the choice to fedrun (``auto`` engine, 0 threads)."""
    hw = spec.hardware
    threads = apply_threads(hw.threads, pinned_threads)
    device = resolve_device(hw.device)
    data = load_data(spec)
    parts = make_partition(data, spec.partition.name, spec.partition.params, spec.fl.clients, spec.seed, spec.cache_dir)
    px, proxy, test = spec.proxy, None, None
    if px.per_class:  # carved out for every method, so all are evaluated on the same test images
        proxy_split, test = carve_proxy(data.test, data.num_classes, px, spec.seed)
        proxy = ProxySet(proxy_split.to(device), data.num_classes, px.batch_size, px.balanced_sampling)
    check_test_split(spec, len(data.test), len(test) if test is not None else len(data.test))
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
    return Experiment(spec, device, data, parts, fed, model, algorithm, engine, corrupted, threads=threads)


def check_test_split(spec: RunSpec, loaded: int, left: int) -> None:
    """Refuse a run with nothing to evaluate on: an empty test split, or one the proxy set took whole."""
    if left:
        return
    if loaded:
        raise ConfigError(
            "proxy.per_class",
            f"{spec.proxy.per_class} per class takes all {loaded} test samples for the server's proxy set, leaving"
            " none to evaluate on; valid: a smaller proxy.per_class (0: no proxy set) or more test samples"
            " (data.max_test_samples)",
        )
    field = "data.max_test_samples" if spec.data.params.max_test_samples is not None else "data"
    raise ConfigError(
        field, "the test split is empty, so no round could be evaluated; valid: a test split of >= 1 sample"
    )


def pinned(run_dir: Path) -> tuple[str | None, int | None]:
    """The engine and thread count an interrupted (or extended) run in ``run_dir`` used; (None, None) when there is
    nothing to resume."""
    if not (run_dir / CHECKPOINT_FILE).is_file() or not (run_dir / "summary.json").is_file():
        return None, None
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return None, None
    engine, threads = summary.get("engine"), summary.get("threads")
    return (
        engine if isinstance(engine, str) else None,
        threads if isinstance(threads, int) and not isinstance(threads, bool) and threads > 0 else None,
    )


def run(spec: RunSpec, run_dir: Path, console: Console | None = None) -> dict[str, Any]:
    """Run one experiment, writing metrics.csv, summary.json, partition and curve files to ``run_dir``.

    When ``run_dir`` holds a checkpoint of this config the run continues from it; the metrics it then
    writes are identical (timings aside) to those of an uninterrupted run.
    """
    t0 = time.perf_counter()
    exp = build_experiment(spec, *pinned(run_dir))
    try:
        return _run(spec, run_dir, exp, t0, console or Console(stderr=True))
    finally:
        exp.engine.close()  # Ray actors (and a cluster the engine started) end with the run, however it ends


def _run(spec: RunSpec, run_dir: Path, exp: Experiment, t0: float, console: Console) -> dict[str, Any]:
    """The round loop of :func:`run` on a built experiment: restore, train and aggregate each round, evaluate,
    checkpoint, summarise."""
    info = describe_run(exp, run_dir)
    fp = fingerprint(spec.raw)
    st = open_state(exp, run_dir)
    t0 -= st.elapsed  # timings continue from where a killed run stopped
    write_json(run_dir / "summary.json", {**info, "status": "running"})
    log.info(start_line(spec, info, st.start))
    outcome, client_acc = Outcome(), client_accuracy(exp)
    t_loop = time.perf_counter()
    try:
        with RoundMonitor(spec, run_dir, st, console) as monitor:
            for rnd in range(st.start, spec.fl.rounds):
                result = train_round(exp, st, rnd)
                monitor.weights(result.weight_rows)
                if evaluates(spec, rnd):
                    monitor.record(evaluation_row(exp, st, result, t0, client_acc))
                if checkpoint_due(spec, rnd):
                    save_state(st, exp, run_dir, rnd + 1, fp, t0)
                monitor.advance()
        if not spec.checkpoint.keep_final:
            (run_dir / CHECKPOINT_FILE).unlink(missing_ok=True)
    except DivergenceError as e:
        # rounds are 1-based in metrics.csv and summary.json; the last good checkpoint stays in place
        where = f"round {e.round_idx + 1}" + (f", client {e.client}" if e.client is not None else "")
        extra = {"diverged_round": e.round_idx + 1, "diverged_client": e.client}
        outcome = Outcome("diverged", f"diverged at {where}: {e.what}", extra)
    except KeyboardInterrupt as e:  # Ctrl-C, SIGTERM, SIGHUP (fedrun/interrupts.py): the last checkpoint stays
        outcome = Outcome("interrupted", f"interrupted by {signal_name(e)}", {"signal": signal_name(e)})
    if st.rows and spec.output.plots:  # before summary.json says how the run ended
        plot_curves(st.rows, run_dir / "accuracy.png", f"{spec.algorithm.name} on {spec.data.name}")
    summary = final_summary(info, st, spec, outcome, t0, t_loop, run_dir)
    write_json(run_dir / "summary.json", summary)
    log.info(summary_line(summary))
    return summary


def start_line(spec: RunSpec, info: dict[str, Any], start: int) -> str:
    """The log line of a run's start: what runs, where, from which round."""
    what = f"{info['algorithm']} on {info['data']} ({info['model']}, {info['partition']}), seed {info['seed']}"
    how = f"engine {info['engine']}, {info.get('threads', '?')} thread(s), {info['device']}"
    begin = f"resumed after round {start} of {spec.fl.rounds}" if start else f"started: {spec.fl.rounds} rounds"
    return f"{begin}: {what}; {how}"


def client_accuracy(exp: Experiment) -> ClientAccuracy | None:
    """The per-client accuracy evaluator of ``eval.client_acc`` (None when off)."""
    ev = exp.spec.eval
    if not ev.client_acc:
        return None
    return ClientAccuracy.build(exp.model, exp.fed, exp.parts, ev.client_acc_split, ev.batch_size)


def checkpoint_due(spec: RunSpec, rnd: int) -> bool:
    """Whether the run state is saved after round ``rnd`` (0-based): every ``checkpoint.every`` rounds, and
    after the last one when the final checkpoint is kept."""
    every = spec.checkpoint.every
    return bool(every and (rnd + 1) % every == 0) or (rnd == spec.fl.rounds - 1 and spec.checkpoint.keep_final)
