"""A stack of jobs trained as one vectorised cohort (fedrun/engines/stacked.py) gives each job what it gives alone on
the vectorised engine, bit for bit on this CPU: jobs that differ in their seeds, their lr or a method's declared
scalars; for every method that declares it stacks, with the capabilities that say they stack, with jobs at different
rounds, a diverging job, and each job's folder written as its solo run writes it."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch

from fedrun.config.registry import ALGORITHMS, CAPABILITIES
from fedrun.config.schema import RunSpec
from fedrun.config.validate import validate
from fedrun.run.loop import run
from fedrun.run.stacking import run_stacked
from fedrun.storage.atomic import TIMING_COLUMNS
from tests.conftest import compose_cfg

# Dirichlet(0.3) over 4 clients of unequal size: rows finish at different steps and last batches are short
SMALL = (
    "experiment=smoke",
    "data.max_train_samples=240",
    "data.max_test_samples=200",
    "fl.clients=4",
    "fl.rounds=2",
    "fl.batch_size=16",
    "partition.alpha=0.3",
    "model.hidden=[12]",
    "hardware.engine=vectorised",
    "hardware.threads=1",
    "output.quiet=true",
    "output.plots=false",
)


def spec(*overrides: str) -> RunSpec:
    return validate(compose_cfg([*SMALL, *overrides]))


def metrics(run_dir: Path) -> pd.DataFrame:
    return pd.read_csv(run_dir / "metrics.csv").drop(columns=list(TIMING_COLUMNS))


def solo_and_stacked(tmp_path: Path, specs: list[RunSpec]) -> list[tuple[Path, Path]]:
    """Each spec run alone and all of them as one stack: (solo folder, stacked folder) of each."""
    pairs = []
    for i, s in enumerate(specs):
        solo, stacked = tmp_path / f"solo{i}", tmp_path / f"stacked{i}"
        solo.mkdir()
        stacked.mkdir()
        run(s, solo)
        pairs.append((solo, stacked))
    names = [p[1].name for p in pairs]
    ended = run_stacked([lambda s=s, p=p: run(s, p[1]) for s, p in zip(specs, pairs, strict=True)], names)
    for e in ended:
        if e.error is not None:
            raise e.error
    return pairs


def assert_same(pairs: list[tuple[Path, Path]]) -> None:
    for solo, stacked in pairs:
        pd.testing.assert_frame_equal(metrics(solo), metrics(stacked), check_exact=True)


def test_a_stack_of_seeds_writes_each_job_as_its_solo_run_bit_for_bit(tmp_path: Path) -> None:
    specs = [spec(f"seed={s}", "output.plots=true", "fl.rounds=3") for s in range(3)]
    pairs = solo_and_stacked(tmp_path, specs)
    assert_same(pairs)
    for i, (solo, stacked) in enumerate(pairs):
        assert sorted(p.name for p in solo.iterdir()) == sorted(p.name for p in stacked.iterdir())
        a, b = (json.loads((d / "summary.json").read_text()) for d in (solo, stacked))
        assert b["engine"] == a["engine"] == "vectorised" and b["engine_selection"] == {"how": "stacked", "jobs": 3}
        assert b["stack"] == {"jobs": 3, "index": i, "with": [f"stacked{j}" for j in range(3) if j != i]}
        for key in ("test_acc_final", "test_acc_last_k", "train_samples", "rounds_completed", "status"):
            assert a[key] == b[key], key
        ca, cb = (torch.load(d / "checkpoint.pt", weights_only=False) for d in (solo, stacked))
        assert ca.keys() == cb.keys() and torch.equal(ca["torch_rng"], cb["torch_rng"])
        for k, v in ca["params"].items():
            assert torch.equal(v, cb["params"][k]), k


STACKING = sorted(n for n in ALGORITHMS.names() if ALGORITHMS.get(n).obj.declares("stacks"))
METHOD_NEEDS = {"fedrep": ("fl.local_epochs=2",)}  # FedRep's head epochs need more than one local epoch


@pytest.mark.parametrize("method", STACKING)
def test_every_method_that_stacks_gives_each_job_its_solo_run(tmp_path: Path, method: str) -> None:
    extra = (f"algorithm={method}", *METHOD_NEEDS.get(method, ()))
    assert_same(solo_and_stacked(tmp_path, [spec(*extra, "seed=0"), spec(*extra, "seed=1")]))


def test_the_methods_that_do_not_stack_are_the_ones_the_vectorised_engine_cannot_run() -> None:
    assert sorted(set(ALGORITHMS.names()) - set(STACKING)) == ["fedbn"]  # (it needs BatchNorm buffers)


CLIENT_SCALARS = ("mu", "rho", "lam", "alpha")  # (the declared scalars the client step reads; the others: the server)
SCALARS = sorted((n, f) for n in STACKING for f in ALGORITHMS.get(n).obj.stack_scalars if f in CLIENT_SCALARS)


@pytest.mark.parametrize(("method", "field"), SCALARS)
def test_a_method_scalar_and_the_lr_differ_per_job_bit_for_bit(tmp_path: Path, method: str, field: str) -> None:
    base = getattr(ALGORITHMS.get(method).params(), field)
    specs = [
        spec(f"algorithm={method}", "seed=0"),
        spec(f"algorithm={method}", "seed=1", f"algorithm.{field}={2 * base + 0.01}"),
        spec(f"algorithm={method}", "seed=2", "fl.lr=0.03"),
    ]
    pairs = solo_and_stacked(tmp_path, specs)
    assert_same(pairs)
    assert not metrics(pairs[1][0]).equals(metrics(tmp_path / "solo0"))  # (the scalar changed the run)


def test_server_scalars_differ_freely(tmp_path: Path) -> None:
    specs = [spec("algorithm=fedadam", "seed=0"), spec("algorithm=fedadam", "seed=0", "algorithm.server_lr=0.05")]
    assert_same(solo_and_stacked(tmp_path, specs))


CAPABILITY_RUNS = {
    "system": (
        "system=stragglers",
        "system.straggler_policy=partial",
        "system.straggler_work=steps",
    ),  # partial work: each job's own budgets and clock
    "system-async": ("system=fedbuff", "system.buffer=2", "fl.rounds=4"),  # an async server's cohorts
    "privacy": ("privacy=client", "privacy.noise_multiplier=0.5", "privacy.clip=1.0"),  # DP-FedAvg: keyed noise
    "compression": ("compression=topk", "compression.error_feedback=true"),  # error feedback's rows per job
    "local_eval": ("algorithm=ditto", "eval.local_test=split"),  # personal models and their local test splits
    "attack": ("attack=label_flip", "attack.fraction=0.5"),  # data poisoning: each job's attackers and samples
    "attack-backdoor": ("attack=backdoor", "attack.fraction=0.25"),  # its asr column on each job's triggered test
    "attack-model": ("attack=alie", "attack.knowledge=omniscient", "attack.fraction=0.25"),  # on each job's uploads
    "defence": ("defence=centered_clipping", "attack=sign_flip", "attack.fraction=0.25"),  # its centre: run state
    "defence-fltrust": ("defence=fltrust", "attack=gaussian", "attack.fraction=0.25"),  # its root update per job
}


@pytest.mark.parametrize("case", sorted(CAPABILITY_RUNS))
def test_the_capabilities_that_stack_give_each_job_its_solo_run(tmp_path: Path, case: str) -> None:
    name = case.split("-")[0]
    specs = [spec(*CAPABILITY_RUNS[case], f"seed={s}") for s in range(2)]
    cap = CAPABILITIES.get(name).obj
    assert all(cap.active(s.sections[name]) and cap.stack_blocker(s.sections[name]) is None for s in specs)
    assert_same(solo_and_stacked(tmp_path, specs))


def test_jobs_with_different_attacks_and_defences_stack_together(tmp_path: Path) -> None:
    """A robust-FL table's cells (attack x defence) differ in capability settings only: one stack, each its own."""
    specs = [
        spec("seed=0"),
        spec("seed=0", "attack=label_flip", "attack.fraction=0.25", "defence=median"),
        spec("seed=0", "attack=ipm", "attack.fraction=0.25", "defence=trimmed_mean"),
    ]
    from fedrun.run.stacking import Candidate, plan_stacks

    assert plan_stacks([Candidate(i, s) for i, s in enumerate(specs)]).groups == [[0, 1, 2]]
    pairs = solo_and_stacked(tmp_path, specs)
    assert_same(pairs)
    assert not metrics(pairs[1][0]).equals(metrics(pairs[0][0]))  # (the attack changed the run)


def test_every_capability_that_says_it_stacks_is_run_stacked_above() -> None:
    """A capability stacks only by saying so (its own stack_blocker); each that does has its runs above, bit for bit.
    The others refuse in one line naming themselves (the base class's default)."""
    says = {n for n in CAPABILITIES.names() if "stack_blocker" in vars(CAPABILITIES.get(n).obj)}
    assert says == {case.split("-")[0] for case in CAPABILITY_RUNS}
    for name in set(CAPABILITIES.names()) - says:
        why = CAPABILITIES.get(name).obj.stack_blocker(None)
        assert why is not None and "\n" not in why and name in why


def test_dp_sgd_refuses_to_stack_in_one_line() -> None:
    privacy = CAPABILITIES.get("privacy").obj
    why = privacy.stack_blocker(spec("privacy=sample", "privacy.noise_multiplier=1.0").sections["privacy"])
    assert why is not None and "\n" not in why and "DP-SGD" in why


def test_jobs_of_different_lengths_and_one_that_diverges(tmp_path: Path) -> None:
    specs = [spec("seed=0", "fl.rounds=1"), spec("seed=1", "fl.rounds=3"), spec("seed=2", "fl.lr=1e18", "fl.rounds=3")]
    pairs = solo_and_stacked(tmp_path, specs)
    assert_same(pairs[:2])  # (the diverging job's lr differs: each row has its own, as a tensor)
    solo, stacked = (json.loads((d / "summary.json").read_text()) for d in pairs[2])
    assert solo["status"] == stacked["status"] == "diverged"
    assert solo["diverged_round"] == stacked["diverged_round"] and solo["diverged_client"] == stacked["diverged_client"]


def test_a_job_resuming_mid_run_stacks_with_a_new_one(tmp_path: Path) -> None:
    """Job 0 has run 2 of 4 rounds (its checkpoint), job 1 starts: they train together at different rounds."""
    first, second = spec("seed=0", "fl.rounds=4", "checkpoint.every=1"), spec("seed=1", "fl.rounds=4")
    (tmp_path / "solo0").mkdir()
    run(first, tmp_path / "solo0")
    (tmp_path / "half").mkdir()
    run(spec("seed=0", "fl.rounds=2", "checkpoint.every=1"), tmp_path / "half")  # (extended to 4 below)
    (tmp_path / "solo1").mkdir()
    run(second, tmp_path / "solo1")
    (tmp_path / "new").mkdir()
    ended = run_stacked([lambda: run(first, tmp_path / "half"), lambda: run(second, tmp_path / "new")], ["a", "b"])
    assert [e.error for e in ended] == [None, None]
    assert_same([(tmp_path / "solo0", tmp_path / "half"), (tmp_path / "solo1", tmp_path / "new")])


def test_a_stack_in_chunks_of_rows_of_several_jobs_bit_for_bit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """hardware.chunk=1: one client of each job at a time, so 3 jobs' 12 rows train in 4 chunks of 3 rows, sorted by
    their plans across the jobs, each job as alone."""
    from fedrun.engines import stacked

    widths: list[int] = []
    real = stacked._width
    monkeypatch.setattr(stacked, "_width", lambda requests, total: widths.append(real(requests, total)) or widths[-1])
    specs = [spec(f"seed={s}", "algorithm=fedprox", f"fl.lr={0.05 + 0.01 * s}", "hardware.chunk=1") for s in range(3)]
    assert_same(solo_and_stacked(tmp_path, specs))
    assert widths and set(widths) == {3}


def test_a_tensor_lr_rounds_as_the_number_does() -> None:
    """A row's own lr is a tensor in the stacked step; its update w + g (-lr) is one fused multiply-add, as the
    number's torch.add(w, g, alpha=-lr): the same bits, alone or under vmap."""
    from torch.func import vmap

    from fedrun.algorithms.base import sgd_step

    gen = torch.Generator().manual_seed(0)
    w, g = torch.randn(3, 500, 20, generator=gen), torch.randn(3, 500, 20, generator=gen) * 1e-2
    lrs = [0.05, 0.1, 0.0371]
    alone = [sgd_step({"w": w[i]}, {"w": g[i]}, None, lr, 0.0, 0.0, None)[0]["w"] for i, lr in enumerate(lrs)]
    step = vmap(lambda w, g, lr: sgd_step({"w": w}, {"w": g}, None, lr, 0.0, 0.0, None)[0]["w"])
    assert torch.equal(step(w, g, torch.tensor(lrs)), torch.stack(alone))


def test_the_lr_of_equal_jobs_stays_a_number() -> None:
    """Where the stacked jobs share their lr the step gets the Python number a lone job gets."""
    from fedrun.engines.stacked import _varying

    class E:
        def __init__(self, lr: float) -> None:
            self.algorithm = ALGORITHMS.get("fedprox").obj.__new__(ALGORITHMS.get("fedprox").obj)
            self.algorithm.hp = ALGORITHMS.get("fedprox").params()

    class R:
        def __init__(self, lr: float) -> None:
            self.engine, self.lr = E(lr), lr

    jobs = torch.tensor([0, 1, 0])
    assert _varying([R(0.1), R(0.1)], jobs, torch.float32, torch.device("cpu")) == {}  # type: ignore[list-item]
    varying: Any = _varying([R(0.1), R(0.2)], jobs, torch.float32, torch.device("cpu"))  # type: ignore[list-item]
    assert list(varying) == ["lr"] and torch.allclose(varying["lr"], torch.tensor([0.1, 0.2, 0.1]))
    assert math.isclose(float(varying["lr"][1]), 0.2, rel_tol=1e-7)
