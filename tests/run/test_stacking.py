"""Which jobs of a sweep train together (fedrun/run/stacking.py): same shapes and step, differing only in the seed, the
lr, the method's declared scalars, the partition's parameters, the evaluation or a stacking capability's settings; a
job that would have stacked but cannot says why in one line; ``hardware.stack`` and the memory bound the width."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from fedrun.algorithms.fedavg import FedAvg
from fedrun.capabilities.base import Capability
from fedrun.config.registry import CAPABILITIES
from fedrun.config.schema import RunSpec
from fedrun.config.validate import validate
from fedrun.run.stacking import (
    CPU_STEP_FLOPS,
    Candidate,
    arithmetic_bound,
    candidate,
    chosen_alone,
    forward_macs,
    job_blocker,
    memory_fit,
    plan_stacks,
    record,
    stack_key,
    step_flops,
)
from tests.conftest import compose_cfg

# MLP 784-32-10: a step (7.6 MFLOP) that stacks on a CPU (see test_a_step_of_many_flops_stays_alone_on_a_cpu...)
BASE = ["experiment=smoke", "hardware.threads=1", "model.hidden=[32]"]
_SPECS: dict[tuple[str, ...], RunSpec] = {}


def spec(*overrides: str) -> RunSpec:
    if overrides not in _SPECS:
        base = BASE[:2] if any(o.startswith("model=") for o in overrides) else BASE  # another model: its own shapes
        cfg = compose_cfg([*base, *overrides])
        _SPECS[overrides] = validate(OmegaConf.to_container(cfg, resolve=True))
    return _SPECS[overrides]


def plan(*jobs: tuple[str, ...], fit: Any = lambda s: None) -> Any:
    return plan_stacks([Candidate(i, spec(*o)) for i, o in enumerate(jobs)], fit)


@pytest.mark.parametrize(
    "other",
    [("seed=1",), ("fl.lr=0.1",), ("fl.lr_decay=0.9",), ("fl.rounds=7",), ("partition.alpha=0.1",), ("eval.every=2",),
     ("++tags.method='FedAvg(b)'",)],
)  # fmt: skip
def test_jobs_that_differ_in_a_free_value_stack(other: tuple[str, ...]) -> None:
    assert stack_key(spec("seed=0")) == stack_key(spec(*other))
    assert plan(("seed=0",), other).groups == [[0, 1]]


@pytest.mark.parametrize(
    "other",
    [("algorithm=fedprox",), ("model.hidden=[16]",), ("fl.batch_size=20",), ("fl.clients=5",),
     ("partition=iid",), ("fl.momentum=0.5",), ("data.max_train_samples=500",)],
)  # fmt: skip
def test_jobs_that_differ_in_shapes_or_step_do_not(other: tuple[str, ...]) -> None:
    assert stack_key(spec("seed=0")) != stack_key(spec(*other))
    assert plan(("seed=0",), other).groups == []


def test_a_declared_method_scalar_is_free_an_undeclared_one_is_not(monkeypatch: pytest.MonkeyPatch) -> None:
    from fedrun.algorithms.fedprox import FedProx

    a, b = spec("algorithm=fedprox", "algorithm.mu=0.1"), spec("algorithm=fedprox", "algorithm.mu=0.01")
    monkeypatch.setattr(FedProx, "stack_scalars", ())
    assert stack_key(a) != stack_key(b)
    monkeypatch.setattr(FedProx, "stack_scalars", ("mu",))
    assert stack_key(a) == stack_key(b)


def test_the_width_is_the_smallest_setting_and_what_memory_holds() -> None:
    seeds = [(f"seed={s}",) for s in range(5)]
    assert plan(*seeds).groups == [[0, 1, 2, 3, 4]]
    assert plan(*[(*o, "hardware.stack=2") for o in seeds]).groups == [[0, 1], [2, 3]]  # job 4 alone
    assert plan(*seeds, fit=lambda s: 3).groups == [[0, 1, 2], [3, 4]]
    assert plan(*[(*o, "hardware.stack=off") for o in seeds]).groups == []
    assert plan(*[(*o, "hardware.stack=1") for o in seeds]).groups == []
    mixed = plan(("seed=0", "hardware.stack=2"), ("seed=1",), ("seed=2",))
    assert mixed.groups == [[0, 1]]  # (job 2 alone)


def test_groups_keep_job_order_across_keys() -> None:
    p = plan(("seed=0",), ("model.hidden=[16]", "seed=0"), ("seed=1",), ("model.hidden=[16]", "seed=1"))
    assert p.groups == [[0, 2], [1, 3]]
    assert p.group_of(2) == [0, 2] and p.group_of(5) is None


def test_finished_unvalidated_and_off_jobs_are_left_out_without_a_word() -> None:
    jobs = [
        Candidate(0, spec("seed=0"), alone="completed before"),
        Candidate(1, None),
        Candidate(2, spec("seed=2")),
        Candidate(3, spec("seed=3")),
        Candidate(4, spec("seed=4", "hardware.stack=off")),
    ]
    p = plan_stacks(jobs)
    assert p.groups == [[2, 3]] and p.why_not == []


def test_a_job_that_cannot_stack_says_why_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    drop = plan(("seed=0", "model.dropout=0.5"), ("seed=1", "model.dropout=0.5"))
    assert drop.why_not[0][0] == [0, 1] and "model=mlp draws dropout masks (module '3')" in drop.why_not[0][1]
    monkeypatch.setattr(FedAvg, "stacks", False)
    method = plan(("seed=0",), ("seed=1",))
    assert method.why_not == [([0, 1], "algorithm=fedavg: its client step has not been checked to stack")]
    alone = plan(("seed=0",))
    assert alone.why_not == []  # nothing to stack with: nothing to say


@pytest.mark.parametrize("setting", ["hardware.engine=sequential", "hardware.compile=true", "hardware.stack=off"])
def test_a_job_whose_hardware_settings_chose_to_run_alone_does_so_without_a_word(setting: str) -> None:
    p = plan(("seed=0", setting), ("seed=1", setting), ("seed=2",))
    assert p.groups == [] and p.why_not == []
    assert job_blocker(spec("seed=0", setting)) == chosen_alone(spec("seed=0", setting)) is not None


def test_a_capability_refuses_by_default_and_the_line_names_its_section(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Capability.stack_blocker(None) == " has not been checked to stack"
    comp = CAPABILITIES.get("compression").obj
    monkeypatch.setattr(comp, "stack_blocker", classmethod(lambda cls, s: "its rows are kept in the step"))
    p = plan(("seed=0", "compression=topk"), ("seed=1", "compression=topk"), ("seed=2",))
    assert p.groups == []  # the plain job is left with nobody to stack with
    assert p.why_not == [([0, 1], "compression: its rows are kept in the step")]
    assert job_blocker(spec("seed=2")) is None


def test_the_memory_fit_is_a_positive_width() -> None:
    fit = memory_fit(spec("seed=0"))
    assert fit is None or fit >= 1


def test_the_record_names_the_other_jobs() -> None:
    assert record(["a", "b", "c"], 1) == {"jobs": 3, "index": 1, "with": ["a", "c"]}


def test_a_candidate_is_its_validated_config_and_what_of_its_folder_keeps_it_alone(tmp_path: Path) -> None:
    """:func:`candidate` (fedrun -m's and fedrun-reproduce's planners): a config that does not validate, or a job
    whose folder is not known, is no candidate (its attempt refuses it alone); a new folder keeps nobody alone."""
    task = OmegaConf.to_container(compose_cfg([*BASE, "seed=3"]), resolve=True)
    job = candidate(4, task, tmp_path / "job")
    assert job.num == 4 and job.spec is not None and job.spec.seed == 3 and job.alone is None
    assert candidate(4, task, None).spec is None
    assert candidate(4, {**task, "algorithm": {"name": "nope"}}, tmp_path / "job").spec is None


CNN = ("model=cnn", "fl.batch_size=50", "hardware.device=cpu")  # McMahan et al.'s, on a CPU


def test_a_step_of_many_flops_stays_alone_on_a_cpu_under_auto_only() -> None:
    """The CPU bound (:data:`CPU_STEP_FLOPS`): McMahan's CNN (24.5 MFLOP forward a sample, 3.7 GFLOP a step of 50)
    runs alone under ``hardware.stack=auto`` on a CPU, in one line naming its FLOPs; a width set, a GPU, more threads
    or a small step stack it; so does the default MLP (784-200-200-10, 60 MFLOP a step) on 8 threads, not on one."""
    mlp = ("hardware.device=cpu", "model.hidden=[200,200]")  # fedrun's default MLP
    assert forward_macs(spec(*mlp)) == 784 * 200 + 200 * 200 + 200 * 10
    assert step_flops(spec(*mlp)) == 6 * 198_800 * 50 > CPU_STEP_FLOPS
    assert step_flops(spec("seed=0")) == 6 * (784 * 32 + 32 * 10) * 50 < CPU_STEP_FLOPS
    cnn = spec(*CNN)
    why = arithmetic_bound(cnn)
    assert why is not None and "\n" not in why and "model=cnn is 3.7 GFLOP on 1 thread" in why
    jobs = (CNN, (*CNN, "seed=1"))
    assert job_blocker(cnn) == why and plan(*jobs).why_not == [([0, 1], why)] and plan(*jobs).groups == []
    for alone in [("hardware.stack=4",), ("hardware.device=cuda",), ("fl.batch_size=1", "hardware.threads=8")]:
        assert arithmetic_bound(spec(*CNN, *alone)) is None, alone  # (the last setting of a key wins)
    assert "model=mlp is 0.06 GFLOP on 1 thread" in (arithmetic_bound(spec(*mlp)) or "")
    assert arithmetic_bound(spec(*mlp, "hardware.threads=8")) is None  # 7.5 MFLOP a thread
    assert arithmetic_bound(spec(*mlp, "model.hidden=[32]", "fl.batch_size=10")) is None  # 1.5 MFLOP
    assert arithmetic_bound(spec("seed=0")) is None
