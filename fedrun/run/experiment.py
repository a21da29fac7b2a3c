"""The composition root: a run's config -> its data, partition, model, algorithm and engine (:class:`Experiment`)."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedrun.algorithms.base import Algorithm, SetupEnv
from fedrun.algorithms.ima import IMA
from fedrun.capabilities.base import Capabilities, Capability, DataSplit, RunView, active
from fedrun.config.schema import FLConfig, RunSpec
from fedrun.core.errors import ConfigError
from fedrun.core.rng import derive, np_rng
from fedrun.data.base import Dataset, check_clients_vs_samples
from fedrun.data.corrupt import apply_corruption
from fedrun.data.federated import FederatedData
from fedrun.data.holdout import hold_out
from fedrun.data.local_test import partition_with_unseen
from fedrun.data.memo import load_source
from fedrun.data.partition import make_partition
from fedrun.data.partitions.longtail import apply_longtail
from fedrun.data.proxy import ProxySet, carve_proxy
from fedrun.data.standin import with_standin
from fedrun.engines.auto import EngineFactory
from fedrun.engines.base import Engine
from fedrun.engines.stacked import stacked_engine
from fedrun.host.devices import job_device, multirun_job_num
from fedrun.host.threads import apply_threads
from fedrun.models.base import FunctionalModel
from fedrun.storage.rundir import RunDir
from fedrun.upload.pipeline import UploadPipeline

DTYPES = {"fp32": torch.float32, "fp64": torch.float64, "bf16": torch.float32}


def resolve_device(name: str) -> torch.device:
    if name == "auto":  # in a multirun: job n takes GPU n % n_gpus (fedrun/host/devices.py)
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
    """A builder of the configured engine; for ``engine=auto`` it times the engines that can run it here (cached).

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
    the ``corrupted`` clients' swapped labels (``corrupt.fraction`` > 0). ``capabilities``: the run's capabilities
    (fedrun/capabilities/), each hook called on every one; ``upload``: their upload stages as one pipeline (None
    when there are none).
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
    capabilities: Capabilities = dataclasses.field(default_factory=lambda: Capabilities([]))
    view: RunView | None = None  # what the capabilities see of the run

    def capability(self, name: str) -> Capability | None:
        """The run's capability ``name`` when it is on (for tools and tests), else None."""
        return next((c for c in self.capabilities if c.name == name), None)

    @property
    def upload(self) -> UploadPipeline | None:
        """The capabilities' upload stages as one pipeline (None when there are none)."""
        return self.capabilities.pipeline


def build_experiment(spec: RunSpec, pinned_engine: str | None = None, pinned_threads: int | None = None) -> Experiment:
    """Build the run's data, partition, model, algorithm, capabilities and engine. ``pinned_*``: what a resumed run
    used (:func:`earlier_engine_and_threads`), kept where the config leaves the choice to fedrun (``auto`` engine,
    0 threads)."""
    hw, on = spec.hardware, active(spec)
    threads = apply_threads(hw.threads, pinned_threads)
    device = resolve_device(hw.device)
    data = load_data(spec)
    extra = sum(cls.extra_clients(settings) for cls, settings in on)  # clients that never train: the last parts
    parts = partition_with_unseen(
        lambda n, cache: make_partition(data, spec.partition.name, spec.partition.params, n, spec.seed, cache),
        spec.fl.clients, extra, spec.cache_dir,
    )  # fmt: skip
    px, proxy, test = spec.proxy, None, None
    if px.per_class:  # carved out for every method, so all are evaluated on the same test images
        proxy_split, test = carve_proxy(data.test, data.num_classes, px, spec.seed)
        proxy = ProxySet(proxy_split.to(device), data.num_classes, px.batch_size, px.balanced_sampling)
    check_test_split(spec, len(data.test), len(test) if test is not None else len(data.test))
    split = DataSplit(data, parts, hold_out(parts, spec.data.params.client_valid_ratio, spec.seed), test)
    for cls, settings in on:  # (local test splits, unseen clients)
        cls.split_data(settings, spec, split)
    parts = split.parts
    client_data, corrupted = apply_corruption(data, parts, spec.corrupt, spec.seed)
    for cls, settings in on:  # (a data-poisoning attack's clients)
        client_data = cls.client_data(settings, spec, client_data, parts)
    fed = FederatedData(client_data, split.train_parts, device, DTYPES[hw.precision], test=test)
    fed.set_augment(spec.data.params.augment, spec.seed)
    model = build_model(spec, data, device)
    algorithm: Algorithm = spec.algorithm.obj(spec.algorithm.params, spec.fl, model)
    view = RunView(spec, device, fed, model, algorithm, split.prepared, parts)
    caps = [cls(settings, view) for cls, settings in on]
    for cap in caps:  # (DP-SGD's form of the method)
        algorithm = cap.wrap(algorithm)
    if spec.ima.enabled:
        algorithm = IMA(algorithm, spec.ima)
    algorithm.setup(SetupEnv(device, spec.seed, fed, proxy, spec.data.name))
    view.algorithm = algorithm
    for cap in caps:
        cap.bind(view)
    capabilities = Capabilities(caps)
    capabilities.bind_uploads(algorithm, model.init_params())  # (their settings checked against the method's uploads)
    # a sweep's job that trains stacked with others gets its stack's engine (fedrun/engines/stacked.py)
    engine = stacked_engine(hw, pinned_engine, algorithm, fed, spec.fl, spec.seed) or select_engine(
        spec, pinned_engine
    )(algorithm, fed, spec.fl, spec.seed)
    return Experiment(
        spec, device, data, parts, fed, model, algorithm, engine, corrupted, threads=threads,
        capabilities=capabilities, view=view,
    )  # fmt: skip


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


def earlier_engine_and_threads(run_dir: Path) -> tuple[str | None, int | None]:
    """The engine and thread count an interrupted (or extended) run in ``run_dir`` used; (None, None) when there is
    nothing to resume."""
    rd = RunDir(run_dir)
    summary = rd.summary() if rd.checkpoint_file.is_file() else None
    return (summary.engine, summary.threads) if summary else (None, None)
