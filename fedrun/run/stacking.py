"""Which jobs of a sweep train together, stacked: the decision, as pure functions of the jobs' validated configs.

Jobs that differ only in values that leave the model's shapes and the method's client step as they are (the seed,
``fl.lr`` and its decay, ``fl.rounds``, the method's scalars it declares in ``stack_scalars`` such as FedProx's mu,
the partition's parameters, the evaluation, the sections of capabilities that act outside the client step) can run
as one vectorised job with a run dimension beside the client dimension (fedrun/engines/stacked.py). A job stacks
only when its engine is the vectorised one (``hardware.engine`` auto or vectorised), its method declares that it
stacks (``Algorithm.stacks``), its model draws no random numbers in training (dropout masks come from torch's one
global generator, which the stacked jobs would share) and has no buffers, and every capability it turns on says it
stacks (:meth:`~fedrun.capabilities.base.Capability.stack_blocker`). ``hardware.stack`` (``auto``, ``off``, or a
width) bounds how many train together; ``auto`` stacks as many as the memory estimate allows.

:func:`plan_stacks` turns a sweep's jobs into groups of jobs that train together, and says why, in one line, a job
that shares its key with others (it would have stacked) runs alone.

While a stack runs, the objects its jobs hold once every run is built (each job's data, model, evaluation, records)
are kept out of Python's cyclic garbage collector (``gc.freeze``, until the stack ends): with each collection
scanning them all, a stack of 80 ``robust-fmnist --smoke`` jobs spent about 20% more CPU time than its jobs one
after another; frozen, about the same (docs/hardware.md "Stacked sweeps").
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import math
import os
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedrun.config.fit import model_buffers, model_draws
from fedrun.config.identity import comparable
from fedrun.config.schema import RunSpec
from fedrun.config.sections import capabilities
from fedrun.config.validate import validate
from fedrun.storage.rundir import RunDir
from fedrun.storage.status import Status

STACK_ENGINES = ("auto", "vectorised")  # the hardware.engine values a stacked job may have
FINISHED = (Status.COMPLETED.value, Status.DIVERGED.value)  # a job found so is skipped: it trains with nobody
# keys of the root sections that may differ between stacked jobs: each job's own value reaches the stacked step as
# an argument (the lr) or is used outside it (the rounds, the schedule)
FREE_FL = ("lr", "lr_decay", "rounds")


@dataclass(frozen=True)
class Candidate:
    """A job of a sweep as the planner sees it: its number, its validated config (None: it does not validate, and
    its attempt refuses it alone), and why it runs alone whatever the others (``alone``: it finished before, or it
    resumes a run begun on another engine; None: nothing of its folder stops it)."""

    num: int
    spec: RunSpec | None
    alone: str | None = None


def candidate(num: int, task: Any, folder: Path | None, imports: Collection[str] = ()) -> Candidate:
    """Job ``num`` as the planner sees it, composed as ``task`` (its config without Hydra's node) to run in
    ``folder``: validated (None when it does not validate: its attempt refuses it alone, in one line; none either when
    ``folder`` is unknown), and what of its folder keeps it alone (a finished run is skipped; a run begun on another
    engine resumes on it). ``imports``: the modules the command named (fedrun/config/imports.py)."""
    try:
        spec = validate(task, imports=imports)
    except Exception:  # noqa: BLE001 - its attempt refuses it, in one line, when it runs
        return Candidate(num, None)
    if folder is None:
        return Candidate(num, None)
    rd = RunDir(folder)
    with contextlib.suppress(Exception):
        if rd.status() in FINISHED:
            return Candidate(num, spec, alone="finished")
        summary = rd.summary() if rd.checkpoint_file.is_file() else None
        if summary is not None and summary.engine not in (None, "vectorised"):
            return Candidate(num, spec, alone=f"resumes a run begun on the {summary.engine} engine")
    return Candidate(num, spec)


@dataclass
class StackPlan:
    """The sweep's stacks: ``groups`` (job numbers that train together, two or more each, in job order) and
    ``why_not`` (``(job numbers, why)`` of jobs that could have stacked with each other but run one after another)."""

    groups: list[list[int]] = field(default_factory=list)
    why_not: list[tuple[list[int], str]] = field(default_factory=list)

    def group_of(self, num: int) -> list[int] | None:
        """The group job ``num`` trains in (None: it runs alone)."""
        return next((g for g in self.groups if num in g), None)


def chosen_alone(spec: RunSpec) -> str | None:
    """The hardware settings by which a job is run as it always was, alone, without a word: ``hardware.stack=off``,
    another engine named (``hardware.engine=sequential``: a stack trains on the vectorised one), a compiled step."""
    hw = spec.hardware
    if hw.stack == "off":
        return "hardware.stack=off"
    if hw.engine not in STACK_ENGINES:
        return f"hardware.engine={hw.engine}: a stack trains on the vectorised engine"
    if getattr(hw, "compile", False):
        return "hardware.compile=true: the stacked step is not compiled"
    return None


def job_blocker(spec: RunSpec) -> str | None:
    """Why this job cannot train stacked with any other, in a few words naming the setting; None: it can."""
    chosen = chosen_alone(spec)
    if chosen is not None:
        return chosen
    algo = spec.algorithm.obj
    if not algo.declares("stacks"):
        return f"algorithm={spec.algorithm.name}: its client step has not been checked to stack"
    draws = model_draws(spec)
    if draws:
        return (
            f"model={spec.model.name} draws dropout masks (module {draws[0]!r}) from torch's one global generator,"
            " which stacked jobs would share"
        )
    if model_buffers(spec):
        return f"model={spec.model.name} has buffers (BatchNorm statistics): the vectorised engine cannot run it"
    for cap in capabilities():
        settings = spec.sections.get(cap.name)
        if settings is not None and cap.active(settings):
            why = cap.stack_blocker(settings)
            if why is not None:
                return f"{cap.section}: {why}"
    return arithmetic_bound(spec)


# On a CPU, ``hardware.stack=auto`` stacks a job only while one client step's arithmetic, per torch thread, is at most
# this many FLOPs. A stack saves each step's dispatch (Python, autograd), not its arithmetic, and its wider ``vmap``
# runs a step's arithmetic more slowly per row than a lone job does: measured on this project's 2-core CPU, one
# thread (docs/hardware.md "Stacked sweeps"), McMahan et al.'s CNN (3.7 GFLOP a step of 50) stacked took 1.5x the CPU
# time of its jobs one after another; fedrun's default MLP (60 MFLOP) on a quiet machine 1.09x and 1.13x (5 seeds;
# 3 methods x 3 seeds), where under load it had measured about the same; an MLP 784-32-10 on batches of 10
# (1.5 MFLOP) 0.65x. The bound lies between the last two, not measured closer.
CPU_STEP_FLOPS = 1e7


def arithmetic_bound(spec: RunSpec) -> str | None:
    """Why ``hardware.stack=auto`` leaves this job alone on a CPU (:data:`CPU_STEP_FLOPS`): one client step of its model
    (:func:`step_flops`) is that much arithmetic per thread; None on a GPU, for a width set (``hardware.stack=N``
    stacks as told) and when the step's FLOPs cannot be told. A function of the config's shapes and the machine's CPU
    count, never of a timing, so a sweep's stacks do not change with the machine's load."""
    hw = spec.hardware
    if hw.stack != "auto" or not _on_cpu(hw.device):
        return None
    flops = step_flops(spec)
    threads = hw.threads or os.cpu_count() or 1
    if flops is None or flops / threads <= CPU_STEP_FLOPS:
        return None
    return (
        f"hardware.stack=auto on a CPU: a client step of model={spec.model.name} is {flops / 1e9:.2g} GFLOP on"
        f" {threads} thread{'s' if threads > 1 else ''}, arithmetic a stack does not save and runs more slowly;"
        " hardware.stack=N stacks them anyway"
    )


def _on_cpu(device: str) -> bool:
    """Whether ``hardware.device`` trains on the CPU (``auto`` without a GPU)."""
    if device == "cpu":
        return True
    if device != "auto":
        return False
    import torch

    return not torch.cuda.is_available()


def step_flops(spec: RunSpec) -> float | None:
    """FLOPs of one client step of the run's model: 6 x its forward multiply-adds per sample (2 FLOPs each, the
    backward pass twice the forward: FedScale's factor 3) x ``fl.batch_size``; None when they cannot be told."""
    macs = forward_macs(spec)
    return None if macs is None else 6.0 * macs * spec.fl.batch_size


_MACS: dict[tuple[str, str, Any], int | None] = {}


def forward_macs(spec: RunSpec) -> int | None:
    """Multiply-adds of the run's model's forward pass on one sample, over its Linear and Conv layers (what the
    others add is left out: a lower bound), from the shapes of their outputs on a zero input of the dataset's
    registered signature, kept for the process; None when the dataset registered no signature or the model cannot
    be built or run so."""
    from fedrun.config.registry import DATASETS, MODELS

    entry = DATASETS.get(spec.data.name)
    if entry.signature is None:
        return None
    data = entry.signature(spec.data.params)
    key = (spec.model.name, repr(spec.model.params), data)
    if key not in _MACS:
        _MACS[key] = _count_macs(MODELS.get(spec.model.name).obj, spec.model.params, data)
    return _MACS[key]


def _count_macs(build: Callable[..., Any], params: Any, data: Any) -> int | None:
    """:func:`forward_macs` of the model ``build`` makes: built on PyTorch's meta device, run on CPU with zero weights
    (up to fedrun/config/fit.py's ``PROBE_ON_CPU`` numbers, as its fit check runs it), else on the meta device."""
    import torch

    from fedrun.config.fit import PROBE_ON_CPU

    total = [0]

    def count(module: torch.nn.Module, inputs: Any, out: Any) -> None:
        if isinstance(module, torch.nn.Linear):
            total[0] += out.numel() * module.in_features
        elif isinstance(module, torch.nn.modules.conv._ConvNd):  # noqa: SLF001 - torch's conv base
            total[0] += out.numel() * (module.in_channels // module.groups) * math.prod(module.kernel_size)

    dtype = torch.int64 if data.inputs == "tokens" else torch.float32
    try:
        with torch.device("meta"):
            model = build(params, data.input_shape, data.num_classes).eval()
        on_cpu = sum(t.numel() for t in (*model.parameters(), *model.buffers())) <= PROBE_ON_CPU
        if on_cpu:
            model = model._apply(lambda t: torch.zeros(t.shape, dtype=t.dtype))
        for m in model.modules():
            m.register_forward_hook(count)
        with torch.no_grad(), torch.device("cpu" if on_cpu else "meta"):
            model(torch.zeros((1, *data.input_shape), dtype=dtype))
    except Exception:  # noqa: BLE001 - the fit check names why the model does not run; here it is not counted
        return None
    return total[0]


def stack_key(spec: RunSpec) -> str:
    """A hash of what must be equal for jobs to stack: the job's identity (:func:`comparable`) less the seed, the
    free ``fl`` keys, the evaluation, the partition's parameters, the method's ``stack_scalars``, the sections of
    capabilities, the ``tags`` (labels for the report: a reproduce target's commands each tag their method) and
    ``hardware.stack`` (never part of an identity)."""
    part = comparable(spec.raw)
    for key in ("seed", "eval", "tags"):
        part.pop(key, None)
    for key in FREE_FL:
        part.get("fl", {}).pop(key, None)
    if isinstance(part.get("partition"), dict):
        part["partition"] = {"name": part["partition"].get("name")}
    for name in spec.algorithm.obj.stack_scalars:
        part.get("algorithm", {}).pop(name, None)
    for cap in capabilities():
        if not cap.joins:  # (a joined capability's keys are in a root section: eval's are out already)
            part.pop(cap.section, None)
    return hashlib.sha256(json.dumps(part, sort_keys=True, default=str).encode()).hexdigest()


def plan_stacks(jobs: Sequence[Candidate], fit: Callable[[RunSpec], int | None] = lambda spec: None) -> StackPlan:
    """The stacks of a sweep's ``jobs``: the jobs that may stack, grouped by :func:`stack_key` in job order and cut
    into groups of at most the width (the smallest ``hardware.stack`` of the group, and ``fit(spec)``: how many such
    jobs the memory holds at once, None: no bound); and, for each key shared by jobs that may not, why not (the
    first job's blocker). Jobs that chose to run alone (:func:`chosen_alone`), that do not validate or whose folder
    keeps them alone are left out without a word."""
    keyed: dict[str, list[Candidate]] = {}
    for job in jobs:
        if job.spec is None or job.alone is not None or chosen_alone(job.spec) is not None:
            continue
        keyed.setdefault(stack_key(job.spec), []).append(job)
    plan = StackPlan()
    for same in keyed.values():
        why = {j.num: job_blocker(j.spec) for j in same if j.spec is not None}
        ok = [j for j in same if why.get(j.num) is None]
        if len(same) > 1:
            for reason in dict.fromkeys(r for r in why.values() if r is not None):
                plan.why_not.append(([n for n, r in why.items() if r == reason], reason))
        width = _width([j.spec for j in ok if j.spec is not None], fit)
        for lo in range(0, len(ok), width):
            group = [j.num for j in ok[lo : lo + width]]
            if len(group) > 1:
                plan.groups.append(group)
    plan.groups.sort(key=lambda g: g[0])
    plan.why_not.sort(key=lambda w: w[0][0])
    return plan


def _width(specs: list[RunSpec], fit: Callable[[RunSpec], int | None]) -> int:
    """How many of these jobs (of one key) train together at most: their smallest ``hardware.stack`` width, and what
    the memory holds (``fit`` of the first: they share their shapes); at least 1."""
    if not specs:
        return 1
    widths = [w for s in specs if (w := s.hardware.stack_width) is not None]
    held = fit(specs[0])
    if held is not None:
        widths.append(held)
    return max(1, min(widths)) if widths else len(specs)


# share of the memory free now that the stacked jobs' estimated needs may take together: the estimate is a lower
# bound (fedrun/config/resources.py) and each job also holds its data, its evaluation and Python's own
MEMORY_SHARE = 0.5
# bytes one stored sample takes, by the kind of input (images as uint8, features as float32, token ids as int64)
SAMPLE_BYTES = {"images": 1, "features": 4, "tokens": 8}
FULL_DATA = 100_000  # samples assumed of a dataset without data.max_train_samples and max_test_samples


def memory_fit(spec: RunSpec) -> int | None:
    """How many jobs like ``spec`` the memory free now holds at once (a stack's width): :data:`MEMORY_SHARE` of the
    free memory of its device over the job's estimated need (:func:`~fedrun.config.resources.estimate`) and its
    data; None when either is unknown."""
    need, free = job_bytes(spec), _free_memory(spec.hardware.device)
    if need is None or free is None:
        return None
    return max(1, int(MEMORY_SHARE * free // max(need, 1)))


def job_bytes(spec: RunSpec) -> int | None:
    """What one job like ``spec`` holds at least: its estimated need (:func:`~fedrun.config.resources.estimate`)
    and its data; None when either is unknown."""
    from fedrun.config.registry import DATASETS
    from fedrun.config.resources import estimate

    need, entry = estimate(spec), DATASETS.get(spec.data.name)
    if need is None or entry.signature is None:
        return None
    sig, p = entry.signature(spec.data.params), spec.data.params
    samples = (getattr(p, "max_train_samples", None) or FULL_DATA) + (getattr(p, "max_test_samples", None) or 0)
    return int(need.total + samples * SAMPLE_BYTES[sig.inputs] * math.prod(sig.input_shape))


def _free_memory(device: str) -> int | None:
    """Bytes free now on the device ``hardware.device`` names (the first GPU for ``cuda`` and ``auto`` with one)."""
    if device.startswith("cuda") or device == "auto":
        import torch

        if torch.cuda.is_available():
            return int(torch.cuda.mem_get_info(torch.device("cuda" if device == "auto" else device))[0])
        if device != "auto":
            return None
    from fedrun.host.memory import available_memory

    return available_memory()


def record(names: Sequence[str], index: int) -> dict[str, Any]:
    """summary.json's ``stack`` of the job ``names[index]`` of a stack of the jobs ``names`` (their folders)."""
    return {"jobs": len(names), "index": index, "with": [n for i, n in enumerate(names) if i != index]}


def run_stacked(jobs: Sequence[Callable[[], Any]], names: Sequence[str]) -> list[Any]:
    """Run ``jobs`` (each a whole run's attempt, whose runs build their engines in its thread) as one stack: in turns
    (fedrun/host/turns.py), their cohorts trained together (fedrun/engines/stacked.py); ``names``: their folders,
    for each run's ``stack`` record. How each ended (:class:`~fedrun.host.turns.Ended`), in order."""
    from fedrun.engines.stacked import in_stack, serve
    from fedrun.host.turns import Turns

    frozen: list[bool] = []

    def serve_frozen(requests: list[Any]) -> list[Any]:
        if not frozen:  # every job's run is built: what they hold now lives as long as the stack (module docstring)
            frozen.append(gc.get_freeze_count() == 0)
            if frozen[0]:
                gc.freeze()
        return serve(requests)

    turns = Turns(serve_frozen)

    def in_turn(job: Callable[[], Any], i: int) -> Callable[[], Any]:
        def go() -> Any:
            with in_stack(turns, record(names, i)):
                return job()

        return go

    try:
        return turns.run([in_turn(job, i) for i, job in enumerate(jobs)])
    finally:
        if frozen and frozen[0]:
            gc.unfreeze()


def raise_ended(ended: Sequence[Any]) -> None:
    """Raise what stopped a stack's jobs (:func:`run_stacked`'s :class:`~fedrun.host.turns.Ended`): an interrupt
    first (it stops the sweep, naming the first job it stopped), else the first job's error; nothing if none."""
    for e in ended:
        if isinstance(e.error, KeyboardInterrupt):
            raise e.error
    for e in ended:
        if e.error is not None:
            raise e.error
