"""summary.json: what the run is (written when it starts) and how it ended (written when it stops)."""

from __future__ import annotations

import functools
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

import fedrun
from fedrun.config.registry import ENGINES
from fedrun.config.sections import capabilities
from fedrun.data.partition import class_counts, domain_breakdown, domain_counts, partition_stats
from fedrun.data.partitions.words import partition_words
from fedrun.run.state import RunState
from fedrun.storage.figures import write_domain_table, write_partition
from fedrun.storage.status import Status
from fedrun.storage.summary import Summary

if TYPE_CHECKING:
    from fedrun.config.schema import RunSpec
    from fedrun.engines.base import Engine
    from fedrun.run.experiment import Experiment


def engine_name(engine: Engine) -> str:
    """The registry name of an engine instance (``sequential``, ``vectorised``...)."""
    return next(n for n in ENGINES.names() if isinstance(engine, ENGINES.get(n).obj))


def _git(root: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=20, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


@functools.cache
def code_provenance(root: Path | None = None) -> dict[str, Any]:
    """The code a run ran: ``{"commit", "dirty"}`` when fedrun is imported from a git checkout (``dirty``: tracked
    files differ from the commit), else ``{"version"}`` (the installed package's). ``root``: the checkout to
    ask, by default the folder holding the imported ``fedrun`` package. Cached: a process runs the code it
    imported, whatever the checkout becomes later."""
    root = Path(fedrun.__file__).resolve().parent.parent if root is None else root
    top = _git(root, "rev-parse", "--show-toplevel")
    if top and Path(top).resolve() == root.resolve() and (root / "fedrun").is_dir():
        commit = _git(root, "rev-parse", "HEAD")
        status = _git(root, "status", "--porcelain", "--untracked-files=no")
        if commit and status is not None:
            return {"commit": commit, "dirty": bool(status)}
    return {"version": fedrun.__version__}


def ray_node() -> str | None:
    """The id of the Ray node this process runs on when it runs inside Ray (a job of the ``ray_cluster`` launcher,
    or the driver of ``hardware=ray``): where a sweep's job ran, from Ray itself. None outside Ray (ray is never
    imported for it)."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return None
    return str(ray.get_runtime_context().get_node_id())


def describe_run(experiment: Experiment, run_dir: Path) -> dict[str, Any]:
    """Write the partition files (counts, heatmap, domains) and return what summary.json says of the run's
    setup: names, seed, engine, device, model size, stand-in data, partition statistics."""
    spec, data = experiment.spec, experiment.data
    counts = class_counts(data.train.y.numpy(), experiment.parts, data.num_classes)
    title = partition_words(spec.partition.name, asdict(spec.partition.params), spec.fl.clients, spec.seed)
    write_partition(run_dir, counts, spec.output.plots, experiment.corrupted if spec.corrupt.fraction else None, title)
    info = {
        "algorithm": spec.algorithm.name,
        "data": spec.data.name,
        "model": spec.model.name,
        "partition": spec.partition.name,
        "seed": spec.seed,
        "engine": engine_name(experiment.engine),
        "engine_selection": getattr(experiment.engine, "selection", {}),
        "device": str(experiment.device),
        **experiment.threads,  # threads: torch's intra-op threads (hardware.threads, or measured when 0)
        "model_params": experiment.model.num_params(),
        "data_standin": data.standin is not None,  # seeded random data replaced missing files (data.standin)
        "data_stats": data.stats or None,  # the data source and its statistics, where the loader gives them
        "partition_stats": partition_stats(counts),
        "code": code_provenance(),  # the commit (and whether the checkout was modified) or package version
    }
    from fedrun.engines.stacked import alone_record  # (torch: not at the import of this module, which the CLI makes)

    stack = getattr(experiment.engine, "stack", None) or alone_record()
    if stack:
        info["stack"] = stack  # the sweep's jobs it trained with, stacked, or why not (fedrun/engines/stacked.py)
    node = ray_node()
    if node is not None:
        info["ray_node"] = node
    words = capability_words(spec)
    if words:
        info["capabilities"] = words  # what the run is beyond its method (fedrun/capabilities/), in words
    info.update(experiment.capabilities.describe())
    if (step := experiment.capabilities.step_word()) != "round":
        info["step"] = step  # what one step of the run is (an async server's "server update"), for the screens
    if spec.corrupt.fraction:
        info["corrupted_clients"] = experiment.corrupted.tolist()
        info["corrupt_labels"] = list(spec.corrupt.labels)
    if data.train.domain is not None:
        dom, names = data.train.domain.numpy(), data.domain_names
        write_domain_table(
            run_dir, domain_counts(dom, experiment.parts, max(int(dom.max()) + 1, len(names or []))), names
        )
        info["partition_domains"] = domain_breakdown(
            data.train.y.numpy(), dom, experiment.parts, data.num_classes, names
        )
    return info


def summarize(rows: list[dict[str, Any]], spec: RunSpec) -> dict[str, Any]:
    """Final, best and last-k mean test accuracy, and the first round reaching ``eval.target``."""
    if not rows:
        return {}
    acc = np.array([r["test_acc"] for r in rows])
    k = spec.eval.last_k
    out: dict[str, Any] = {
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


@dataclass
class Outcome:
    """How the round loop ended: ``completed``, ``diverged`` (with where) or ``interrupted`` (with the signal,
    from which fedrun.cli.main exits or stops a sweep once the summary is written)."""

    status: Status = Status.COMPLETED
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def final_summary(
    info: dict[str, Any],
    state: RunState,
    experiment: Experiment,
    outcome: Outcome,
    t0: float,
    t_loop: float,
    run_dir: Path,
) -> dict[str, Any]:
    """summary.json of a run that stopped: ``info``, the accuracy summary, status, counters and timings, and what
    each capability says of the run's end."""
    now = time.perf_counter()
    spec = experiment.spec
    summary = {
        **info,
        **summarize(state.rows, spec),
        **experiment.capabilities.summarize(state.rows),
        "status": outcome.status,
        "rounds_completed": state.rows[-1]["round"] if state.rows else 0,
        "wall_time_s": now - t0,
        "loop_time_s": now - t_loop,
        "train_time_s": state.train_time,
        "aggregate_time_s": state.agg_time,
        "train_samples": state.samples,
        "samples_per_s": state.samples / state.train_time if state.train_time else 0.0,
        "run_dir": str(run_dir),
        **outcome.extra,
        **({"resumed_from_round": state.start} if state.start else {}),
    }
    if outcome.error:
        summary["error"] = outcome.error
    return summary


def capability_words(spec: RunSpec) -> str:
    """What the run is beyond its method, in the capabilities' words ("DP-FedAvg (eps 8), topk 0.01 +EF"); ""
    when none is on (fedrun/config/sections.py)."""
    return ", ".join(w for cap in capabilities() if (w := cap.words(spec.sections[cap.name])))


def run_title(spec: RunSpec) -> str:
    """The run's title (its plots', its summary table's): "fedavg on fmnist", and its capabilities' words."""
    words = capability_words(spec)
    return f"{spec.algorithm.name} on {spec.data.name}" + (f", {words}" if words else "")


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.2f}%"


def last_k_words(k: int | None, step: str = "round") -> str:
    """What ``test_acc_last_k`` is, in words: the mean of the last k evaluated rounds (k = 1: the last one), or of
    the run's ``step`` (an async server's "server update")."""
    return f"last {step}" if k == 1 else f"mean of last {k or 0} {step}s"


def summary_line(summary: Summary | dict[str, Any]) -> str:
    """The log line of a run's end: status, rounds, accuracies, time (and the error of a run that did not complete)."""
    s = summary if isinstance(summary, Summary) else Summary.of(summary)
    best_round = "-" if s.best_round is None else s.best_round
    line = (
        f"{s.status}: {s.rounds_completed} rounds, final test_acc {_pct(s.test_acc_final)},"
        f" {last_k_words(s.last_k).removesuffix(' rounds')} {_pct(s.test_acc_last_k)},"
        f" best {_pct(s.test_acc_best)} (round {best_round}), {s.wall_time_s or 0.0:.1f} s"
    )
    return line + (f"; {s.error}" if s.error else "")
