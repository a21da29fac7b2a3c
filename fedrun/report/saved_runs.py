"""Saved models for analysis: global parameters from checkpoints, and the run's model and data to score them.

A model is named by a run directory (its ``checkpoint.pt``, kept at the end of a run by default:
``checkpoint.keep_final=true``) or by a checkpoint file inside one. The run's ``config.yaml`` rebuilds the
same architecture and the same data (subset cap, long-tail, proxy carve-out) the run used.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from fedrun.config.schema import RunSpec
from fedrun.config.validate import validate
from fedrun.core.errors import DataError
from fedrun.core.tree import Tensors
from fedrun.data.base import Split
from fedrun.data.federated import FederatedData
from fedrun.data.partition import make_partition
from fedrun.data.proxy import carve_proxy
from fedrun.metrics.evaluate import evaluate
from fedrun.metrics.landscape import Evaluate
from fedrun.metrics.local_settings import LocalEvalSettings
from fedrun.models.base import FunctionalModel
from fedrun.run.checkpoint import CHECKPOINT_FILE, load_checkpoint, saved_config
from fedrun.run.experiment import build_model, load_data


def checkpoint_path(path: Path) -> Path:
    """``path`` itself when it is a file, else ``path/checkpoint.pt``; DataError when there is none."""
    f = path if path.is_file() else path / CHECKPOINT_FILE
    if not f.is_file():
        raise DataError(f"{path}: no checkpoint (a run keeps one with checkpoint.keep_final=true)")
    return f


def load_params(path: Path) -> Tensors:
    """The global parameters saved in the checkpoint of ``path`` (run dir or file), on CPU."""
    return dict(load_checkpoint(checkpoint_path(path)).params)


def load_spec(path: Path) -> RunSpec:
    """The validated config of the run that wrote ``path`` (trackers dropped: analysis does not need them)."""
    run_dir = checkpoint_path(path).parent
    raw = saved_config(run_dir)
    if raw is None:
        raise DataError(f"{run_dir}: no config.yaml, so the model cannot be rebuilt")
    raw.pop("tracking", None)
    return validate(raw)


@dataclass
class EvalSet:
    """A model and the samples it is scored on; ``standin``: the dataset whose files were missing here, so that
    seeded random data of its shape (``data.standin``) replaced them (None: the real data)."""

    model: FunctionalModel
    fed: FederatedData
    split: Split
    standin: str | None = None

    def evaluator(self, batch_size: int = 2048) -> Evaluate:
        """``params -> (mean cross-entropy, error rate)`` on this set."""

        def score(params: Tensors) -> tuple[float, float]:
            acc, loss = evaluate(self.model, params, self.fed, self.split, batch_size)
            return loss, 1.0 - acc

        return score

    def check(self, params: Tensors, name: str) -> Tensors:
        """``params`` on the model's device, after checking names and shapes against the architecture."""
        want = {k: tuple(v.shape) for k, v in self.model.module.named_parameters()}
        got = {k: tuple(v.shape) for k, v in params.items()}
        if want != got:
            diff = sorted(set(want.items()) ^ set(got.items()))[:3]
            raise DataError(f"{name}: parameters do not fit the first model's architecture (e.g. {diff})")
        dev = next(iter(self.model.module.parameters())).device
        dtype = next(iter(self.model.module.parameters())).dtype
        return {k: v.to(device=dev, dtype=dtype) for k, v in params.items()}


def eval_set(
    spec: RunSpec,
    split: str = "test",
    max_samples: int | None = None,
    client: int | None = None,
    device: str = "cpu",
) -> EvalSet:
    """The run's model and ``split`` (test or train; ``client`` k: that client's training samples),
    optionally a seeded random subset of ``max_samples``."""
    dev = torch.device(device)
    data = load_data(spec)
    test = None
    if spec.proxy.per_class:  # the run scored its models on the test split without the proxy samples
        _, test = carve_proxy(data.test, data.num_classes, spec.proxy, spec.seed)
    fed = FederatedData(data, [], dev, test=test)
    chosen = fed.test if split == "test" else fed.train
    if client is not None:
        clients = spec.fl.clients + LocalEvalSettings.of(spec).unseen_clients
        parts = make_partition(
            data, spec.partition.name, spec.partition.params, clients, spec.seed, spec.cache_dir
        )  # fmt: skip
        if not 0 <= client < len(parts):
            raise DataError(f"--client {client}: the run has {len(parts)} clients")
        chosen = fed.train.subset(torch.as_tensor(parts[client], device=dev))
    if max_samples is not None and max_samples < len(chosen):
        keep = np.sort(np.random.default_rng(0).choice(len(chosen), max_samples, replace=False))
        chosen = chosen.subset(torch.as_tensor(keep, device=dev))
    return EvalSet(build_model(spec, data, dev), fed, chosen, data.name if data.standin is not None else None)
