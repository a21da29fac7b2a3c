"""What a run carries from round to round, and its checkpoint: start fresh, restore, save.

Everything a killed run needs to continue bit-exactly lives in :class:`RunState`: the global model, the
server state, every client's persistent state, the metrics rows, the client-weight log and the counters.
The checkpoint file is this state plus torch's global RNG and the global model's buffers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from fedrun.checkpoint import CHECKPOINT_FILE, Checkpoint, load_checkpoint, save_checkpoint, to_device
from fedrun.metrics.client_weights import CLIENT_WEIGHTS_FILE, resumed_rows
from fedrun.outputs import write_metrics
from fedrun.state import ClientStates
from fedrun.tree import Tensors, Tree, nbytes, zeros_like

if TYPE_CHECKING:
    from fedrun.runner import Experiment


@dataclass
class RunState:
    """The run after ``done`` finished rounds. ``start`` is the round this process began at (0 unless resumed);
    ``elapsed`` the seconds the run had spent before this process."""

    params: Tensors
    server_state: Tree
    clients: ClientStates
    rows: list[dict[str, Any]] = field(default_factory=list)
    weight_log: list[dict[str, Any]] = field(default_factory=list)
    start: int = 0
    samples: int = 0
    train_time: float = 0.0
    agg_time: float = 0.0
    elapsed: float = 0.0


def fresh_state(exp: Experiment) -> RunState:
    """Round 0: the seeded initial model, the algorithm's server state and one client-state row per client."""
    fl, algo = exp.spec.fl, exp.algorithm
    params = exp.model.init_params()
    template = algo.client_init(params)
    if fl.keep_momentum and fl.momentum:
        template = {**template, "_momentum": zeros_like(params)}
    # client rows over 1/4 of the GPU (MOON, FedRobust at 100s of clients) live in host memory
    cuda = exp.device.type == "cuda"
    big = cuda and fl.clients * nbytes(template) > torch.cuda.get_device_properties(exp.device).total_memory // 4
    clients = ClientStates(template, fl.clients, exp.device, offload=big)
    return RunState(params, algo.server_init(params), clients)


def restore(st: RunState, ck: Checkpoint, exp: Experiment) -> None:
    """Continue ``st`` from checkpoint ``ck``: model, states, rows, counters, torch's RNG and the buffers."""
    st.start, st.rows = ck.round, ck.rows
    st.params = to_device(ck.params, exp.device)
    st.server_state = to_device(ck.server_state, exp.device)
    st.clients.load_state_dict(ck.client_states)
    st.samples = int(ck.counters["samples"])
    st.train_time, st.agg_time = ck.counters["train_time"], ck.counters["agg_time"]
    st.elapsed = ck.counters["elapsed"]
    if ck.torch_rng is not None:
        torch.set_rng_state(ck.torch_rng)
    if ck.buffers:
        exp.model.set_buffers(to_device(ck.buffers, exp.device))


def open_state(exp: Experiment, run_dir: Path, fp: str) -> RunState:
    """The state to run from: the checkpoint in ``run_dir`` when there is one, else :func:`fresh_state`.

    Rows past the checkpoint (or a killed run's rows, when there is none) are computed again, so metrics.csv
    and client_weights.csv are cut back to the checkpoint's round here.
    """
    st = fresh_state(exp)
    if (run_dir / CHECKPOINT_FILE).is_file():
        restore(st, load_checkpoint(run_dir / CHECKPOINT_FILE, fp), exp)
    _rewrite(run_dir / "metrics.csv", st.rows)
    if exp.spec.eval.client_weights:
        st.weight_log = resumed_rows(run_dir / CLIENT_WEIGHTS_FILE, st.start)
    _rewrite(run_dir / CLIENT_WEIGHTS_FILE, st.weight_log)
    return st


def _rewrite(path: Path, rows: list[dict[str, Any]]) -> None:
    if rows:
        write_metrics(path, rows)
    else:
        path.unlink(missing_ok=True)


def save_state(st: RunState, exp: Experiment, run_dir: Path, done: int, fp: str, t0: float) -> None:
    """Checkpoint the run after ``done`` rounds (``t0``: the run's start on this process's clock, shifted
    back by the time spent before a resume)."""
    counters = {"samples": st.samples, "train_time": st.train_time, "agg_time": st.agg_time}
    counters["elapsed"] = time.perf_counter() - t0
    ck = Checkpoint(
        done, fp, st.params, st.server_state, st.clients.state_dict(), st.rows, counters,
        torch.get_rng_state(), exp.model.buffers,
    )  # fmt: skip
    save_checkpoint(run_dir / CHECKPOINT_FILE, ck)
