"""Helpers of the ``cuda`` tests: the device under test, short runs on it, comparisons with the CPU result."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch

from fedrun.algorithms.base import RoundInfo
from fedrun.config.schema import RunSpec
from fedrun.config.validate import validate
from fedrun.core.tree import Tree, leaves, zeros_like
from fedrun.engines.auto import precision_context
from fedrun.engines.base import Engine
from fedrun.engines.sampling import sample_clients
from fedrun.engines.sequential import SequentialEngine
from fedrun.run.checkpoint import CHECKPOINT_FILE, Checkpoint, load_checkpoint, to_device
from fedrun.run.client_states import ClientStates
from fedrun.run.experiment import Experiment
from fedrun.run.loop import lr_at, run
from fedrun.storage.atomic import TIMING_COLUMNS
from tests.conftest import compose_cfg

DEVICE = os.environ.get("FEDRUN_TEST_DEVICE", "cuda")
if not (DEVICE in ("cpu", "cuda") or (DEVICE.startswith("cuda:") and DEVICE[5:].isdigit())):
    raise ValueError(f"FEDRUN_TEST_DEVICE={DEVICE!r}; valid: cuda, cuda:N, cpu (a dry run of the tests' logic)")
ON_GPU = DEVICE != "cpu"

# Dirichlet(0.3) over 5 clients (unequal sizes: clients finish at different steps, last batches are short), an
# MLP (no convolution: cuDNN's TF32 stays out of fp32 comparisons; no dropout: CUDA draws other masks), 600
# test images of which the proxy set takes 100 (FedLAW's server step trains on it).
SMALL = (
    "data.max_train_samples=400",
    "data.max_test_samples=600",
    "fl.clients=5",
    "fl.batch_size=16",
    "partition.alpha=0.3",
    "model=mlp",
    "model.hidden=[24]",
    "hardware.threads=1",
    "output.plots=false",
)
# kept momentum, weight decay, clipping and partial participation: every client-side path at once
HARD = ("fl.momentum=0.5", "fl.keep_momentum=true", "fl.weight_decay=0.001", "fl.grad_clip=5.0", "fl.participation=0.8")
# a few methods of each family (client correction, SAM, dynamic regulariser, server proxy step, IMA)
METHODS: dict[str, tuple[str, ...]] = {
    "fedavg": ("algorithm=fedavg",),
    "scaffold": ("algorithm=scaffold",),
    "fedsam": ("algorithm=fedsam",),
    "feddyn": ("algorithm=feddyn",),
    "fedlaw": ("algorithm=fedlaw", "algorithm.server_epochs=5"),  # the proxy set: 10 test images per class
    "ima": ("algorithm=fedavg", "ima.enabled=true", "ima.start=0.5", "ima.window=2"),
}
ENGINES = ("sequential", "vectorised", "auto", "ray")


def skip_reason() -> str | None:
    """Why the ``cuda`` tests cannot run here (None: they can), in one line."""
    if not ON_GPU:
        return None
    if not torch.cuda.is_available():
        return (
            f"needs a CUDA GPU; torch {torch.__version__} sees none here "
            "(FEDRUN_TEST_DEVICE=cpu dry-runs these tests' logic on the CPU)"
        )
    if DEVICE.startswith("cuda:") and int(DEVICE[5:]) >= torch.cuda.device_count():
        return f"FEDRUN_TEST_DEVICE={DEVICE}, but only {torch.cuda.device_count()} GPU(s) here"
    return None


def engine_overrides(engine: str) -> tuple[str, ...]:
    """The overrides that select ``engine`` (Ray: one actor, a GPU one when the device is a GPU)."""
    if engine == "ray":
        return ("hardware=ray", "hardware.engine=ray", "hardware.actors=1", "hardware.threads=1")
    return (f"hardware.engine={engine}",)


def spec_of(cache_dir: Path, *overrides: str) -> RunSpec:
    """A validated spec of ``SMALL`` + ``overrides`` (quiet; the sequential engine unless one is named)."""
    base = ["output.quiet=true", f"cache_dir={cache_dir}", *SMALL]
    if not any(o.startswith(("hardware=", "hardware.engine=")) for o in overrides):
        base.append("hardware.engine=sequential")
    return validate(compose_cfg([*base, *overrides]))


def run_on(
    run_dir: Path, device: str, *overrides: str, cache_dir: Path | None = None
) -> tuple[dict[str, Any], pd.DataFrame, Checkpoint]:
    """A whole run on ``device`` in ``run_dir``: its summary, metrics (timings dropped) and final checkpoint."""
    run_dir.mkdir(parents=True)
    spec = spec_of(cache_dir or run_dir.parent / "cache", *overrides, f"hardware.device={device}")
    summary = run(spec, run_dir)
    assert summary["status"] == "completed", summary.get("error")
    metrics = pd.read_csv(run_dir / "metrics.csv").drop(columns=list(TIMING_COLUMNS))
    return summary, metrics, load_checkpoint(run_dir / CHECKPOINT_FILE)


def flat(tree: Tree, prefix: str = "") -> dict[str, torch.Tensor]:
    """``{"a.b": tensor}`` for a nested tensor tree, every tensor on the CPU."""
    out: dict[str, torch.Tensor] = {}
    for k, v in tree.items():
        out.update(flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v.detach().cpu()})
    return out


def assert_close_trees(actual: Tree, expected: Tree, rtol: float, atol: float) -> None:
    """Same keys and dtypes; every tensor within tolerance (compared on the CPU, wherever they live)."""
    a, e = flat(actual), flat(expected)
    assert sorted(a) == sorted(e)
    for k in e:
        torch.testing.assert_close(a[k], e[k], rtol=rtol, atol=atol, msg=lambda m, k=k: f"{k}: {m}")


def assert_same_metrics(actual: pd.DataFrame, expected: pd.DataFrame, rtol: float, acc_atol: float) -> None:
    """Per evaluated round: losses within ``rtol``, accuracies within ``acc_atol``; other columns equal."""
    assert list(actual.columns) == list(expected.columns) and len(actual) == len(expected)
    for col in expected.columns:
        if col in ("test_acc", "train_acc") or col.startswith("client_acc"):
            assert actual[col].to_numpy() == pytest.approx(expected[col].to_numpy(), abs=acc_atol), col
        elif pd.api.types.is_float_dtype(expected[col]):
            assert actual[col].to_numpy() == pytest.approx(expected[col].to_numpy(), rel=rtol, abs=1e-7), col
        else:
            assert actual[col].tolist() == expected[col].tolist(), col


def assert_rounds_match_cpu(
    ref: Experiment, exp: Experiment, engine: Engine, rounds: int, rtol: float, atol: float
) -> None:
    """Each round, ``engine`` (on ``exp.device``) trains the cohort from the same w^t, extras and states as the
    CPU sequential reference (``ref``): steps, samples, loss, uploads and states must agree.

    The CPU reference drives the run (aggregation, client states), so what is compared is one round of
    client training at a time, not differences grown over rounds.
    """
    spec, algo, fl = ref.spec, ref.algorithm, ref.spec.fl
    seq = SequentialEngine(algo, ref.fed, fl, spec.seed)
    params = ref.model.init_params()
    server_state = algo.server_init(params)
    template = algo.client_init(params)
    if fl.keep_momentum and fl.momentum:
        template = {**template, "_momentum": zeros_like(params)}
    states = ClientStates(template, fl.clients, ref.device)
    dev = exp.device
    for rnd in range(rounds):
        clients = torch.as_tensor(sample_clients(fl, spec.seed, rnd), dtype=torch.long)
        lr = algo.local_lr(rnd, lr_at(spec, rnd))
        extras = algo.broadcast(params, server_state)
        cohort = states.gather(clients) if states else {}
        a = seq.train_cohort(rnd, params, extras, clients, cohort, lr)
        with precision_context(exp.spec.hardware.precision, dev):
            b = engine.train_cohort(
                rnd, to_device(params, dev), to_device(extras, dev), clients, to_device(cohort, dev), lr
            )
        assert torch.equal(a.steps.cpu(), b.steps.cpu())
        assert a.samples == b.samples
        assert b.loss == pytest.approx(a.loss, rel=rtol, abs=atol)
        assert set(a.uploads) == set(b.uploads) and set(a.states) == set(b.states)
        assert all(t.device.type == dev.type for t in leaves(b.uploads))  # trained there, not on the CPU
        assert_close_trees(b.uploads, a.uploads, rtol, atol)
        assert_close_trees(b.states, a.states, rtol, atol)
        if states:
            states.scatter(clients, a.states)
        sizes = ref.fed.sizes[clients].to(torch.float64)
        weights = sizes / sizes.sum() if fl.weighting == "size" else torch.full_like(sizes, 1 / len(sizes))
        info = RoundInfo(rnd, fl.clients, clients, sizes, a.steps, lr)
        params, server_state, _ = algo.aggregate(params, server_state, a.uploads, weights, info)
