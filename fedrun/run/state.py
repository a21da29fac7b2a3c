"""What a run carries from round to round, and its checkpoint: start fresh, restore, save.

Everything a killed run needs to continue bit-exactly lives in :class:`RunState`: the global model, the
server state, every client's persistent state, the metrics rows, the client-weight log and the counters.
The checkpoint file is this state plus torch's global RNG and the global model's buffers.

A run interrupted mid-round saves the state after its last *finished* round (:class:`FinishedRound`): a round's
writes to the client states wait in :class:`StagedClientStates` until the round is finished, and the model and
server state of the last finished round are kept as copies (a method may update its server state in place: IMA's
window), so nothing of a half round reaches the checkpoint.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from fedrun.config.identity import fingerprints
from fedrun.core.errors import ResumeError
from fedrun.core.tree import Tensors, Tree, all_finite, clone, nbytes, tree_map, zeros_like
from fedrun.metrics.client_weights import CLIENT_WEIGHTS_FILE, resumed_rows
from fedrun.run.checkpoint import CHECKPOINT_FILE, Checkpoint, load_checkpoint, save_checkpoint, to_device
from fedrun.run.client_states import ClientStates
from fedrun.storage.atomic import write_metrics
from fedrun.storage.rundir import METRICS_FILE

if TYPE_CHECKING:
    from fedrun.run.experiment import Experiment


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


def fresh_state(experiment: Experiment) -> RunState:
    """Round 0: the seeded initial model, the algorithm's server state and one client-state row per client."""
    fl, algo = experiment.spec.fl, experiment.algorithm
    params = experiment.model.init_params()
    template = algo.client_init(params)
    if fl.keep_momentum and fl.momentum:
        template = {**template, "_momentum": zeros_like(params)}
    template = {**template, **experiment.capabilities.client_state()}  # e.g. error feedback's residuals
    # client rows over 1/4 of the GPU (MOON, FedRobust at 100s of clients) live in host memory
    cuda = experiment.device.type == "cuda"
    big = cuda and fl.clients * nbytes(template) > torch.cuda.get_device_properties(experiment.device).total_memory // 4
    clients = ClientStates(template, fl.clients, experiment.device, offload=big)
    clients.rows = algo.client_rows(clients.rows)
    return RunState(params, algo.server_init(params), clients)


class StagedClientStates(ClientStates):
    """The client states as a round sees them: it reads the rows of the last finished round, and its writes
    (:meth:`scatter`) wait until :meth:`commit` (the round finished) or are dropped (:meth:`rollback`)."""

    def __init__(self, base: ClientStates) -> None:  # noqa: D107 - shares base's rows, copies nothing
        self.base, self.device, self.home, self.rows = base, base.device, base.home, base.rows
        self.pending: list[tuple[torch.Tensor, Tree]] = []

    def scatter(self, clients: torch.Tensor, values: Tree) -> None:
        self.pending.append((clients, values))

    def gather(self, clients: torch.Tensor) -> Tree:
        """The rows of ``clients`` with this round's pending writes on top: what the round's evaluation of
        personal models (``eval.local_test``) must see once its clients trained."""
        out = self.base.gather(clients)
        for ids, values in self.pending:
            where = {int(c): i for i, c in enumerate(ids.tolist())}
            pos = [(j, where[int(c)]) for j, c in enumerate(clients.tolist()) if int(c) in where]
            if not pos:
                continue
            dst, src = (torch.tensor(ix, dtype=torch.long) for ix in zip(*pos, strict=True))
            written = tree_map(  # only the keys ``values`` holds (a partial write: the upload pipeline's rows)
                lambda v, o, d=dst, s=src: o.index_copy(0, d.to(o.device), v.index_select(0, s.to(v.device)).to(o)),
                values,
                {k: out[k] for k in values},
            )
            out = {**out, **written}
        return out

    def commit(self) -> None:
        """The round finished: its writes go into the rows."""
        for clients, values in self.pending:
            self.base.scatter(clients, values)
        self.pending.clear()

    def rollback(self) -> None:
        self.pending.clear()

    def load_state_dict(self, rows: Tree) -> None:
        self.pending.clear()
        self.base.load_state_dict(rows)
        self.rows = self.base.rows


@dataclass(frozen=True)
class FinishedRound:
    """The run state after ``done`` finished rounds, kept while the next round runs: copies of the model, the
    server state and the model's buffers, how many metrics and client-weight rows it had, its counters and RNG."""

    done: int
    params: Tensors
    server_state: Tree
    buffers: Tree
    rows: int
    weight_rows: int
    counters: tuple[int, float, float]  # samples, train_time, agg_time
    torch_rng: torch.Tensor
    capabilities: dict[str, Any] = field(default_factory=dict)  # each capability's snapshot (fedrun/capabilities/)


def finished_round(state: RunState, experiment: Experiment, done: int) -> FinishedRound:
    """Keep the state after ``done`` finished rounds (its client states: :class:`StagedClientStates`' rows). A
    driver whose step returns new tensors and never writes w in place (an async server's update) has its model kept
    by reference: the copy made after every update would only cost time."""
    caps = experiment.capabilities
    fresh = caps.driver is not None and caps.driver.fresh_params
    params = state.params if fresh else clone(state.params)
    return FinishedRound(
        done, params, clone(state.server_state), clone(experiment.model.buffers), len(state.rows),
        len(state.weight_log), (state.samples, state.train_time, state.agg_time), torch.get_rng_state(),
        caps.snapshot(),
    )  # fmt: skip


def rewind(state: RunState, experiment: Experiment, last: FinishedRound, run_dir: Path) -> None:
    """Put ``state`` (its client states staged) back to ``last``, and metrics.csv and client_weights.csv with it:
    what an unfinished round changed is dropped."""
    if isinstance(state.clients, StagedClientStates):
        state.clients.rollback()
    state.params, state.server_state = clone(last.params), clone(last.server_state)
    if last.buffers:
        experiment.model.set_buffers(last.buffers)
    state.samples, state.train_time, state.agg_time = last.counters
    torch.set_rng_state(last.torch_rng)
    experiment.capabilities.restore(last.capabilities)
    del state.rows[last.rows :], state.weight_log[last.weight_rows :]
    _rewrite(run_dir / METRICS_FILE, state.rows)  # (a row may be in the file and not yet in ``rows``)
    _rewrite(run_dir / CLIENT_WEIGHTS_FILE, state.weight_log)


def restore(state: RunState, ck: Checkpoint, experiment: Experiment) -> None:
    """Continue ``state`` from checkpoint ``ck``: model, states, rows, counters, torch's RNG and the buffers."""
    state.start, state.rows = ck.round, ck.rows
    state.params = to_device(ck.params, experiment.device)
    state.server_state = to_device(ck.server_state, experiment.device)
    state.clients.load_state_dict(ck.client_states)
    state.samples = int(ck.counters["samples"])
    state.train_time, state.agg_time = ck.counters["train_time"], ck.counters["agg_time"]
    state.elapsed = ck.counters["elapsed"]
    # each capability's state; a checkpoint of before the contract kept it in its counters and one tree of its own
    legacy = {k: v for k, v in ck.counters.items() if k not in COUNTERS}
    trees = {name: to_device(tree, experiment.device) for name, tree in ck.capabilities.items()}
    experiment.capabilities.load_state_dict(trees, {**legacy, **ck.legacy(experiment.device)})
    if ck.torch_rng is not None:
        torch.set_rng_state(ck.torch_rng)
    if ck.buffers:
        experiment.model.set_buffers(to_device(ck.buffers, experiment.device))


def open_state(experiment: Experiment, run_dir: Path) -> RunState:
    """The state to run from: the checkpoint in ``run_dir`` when there is one (checked against this run's model
    and config first: :func:`check_checkpoint`), else :func:`fresh_state`.

    Rows past the checkpoint (or a killed run's rows, when there is none) are computed again, so metrics.csv
    and client_weights.csv are cut back to the checkpoint's round here. A finished run being extended drops
    its final row when the longer run does not evaluate that round, so it ends as a run of the new length.
    """
    state = fresh_state(experiment)
    path = run_dir / CHECKPOINT_FILE
    if path.is_file():
        ck = load_checkpoint(path)
        check_checkpoint(ck, state, experiment, path)
        restore(state, ck, experiment)
        if (
            state.rows
            and state.rows[-1]["round"] == state.start < experiment.spec.fl.rounds
            and state.start % experiment.spec.eval.every
        ):
            state.rows.pop()
    _rewrite(run_dir / METRICS_FILE, state.rows)
    if experiment.spec.eval.client_weights:
        state.weight_log = resumed_rows(run_dir / CLIENT_WEIGHTS_FILE, state.start)
    _rewrite(run_dir / CLIENT_WEIGHTS_FILE, state.weight_log)
    return state


COUNTERS = ("samples", "train_time", "agg_time", "elapsed")
ROW_KEYS = ("round", "test_acc", "test_loss")


def check_checkpoint(ck: Checkpoint, state: RunState, experiment: Experiment, path: Path) -> None:
    """Refuse, in one line naming ``path``, a checkpoint this run cannot continue from: one of another config, a
    round past ``fl.rounds``, rows that do not match its round, counters or torch's RNG state missing or ill-typed,
    and any tensor missing, extra, misshapen, of another dtype (or non-finite, for the model) compared with the
    fresh state ``state`` of this run's model, algorithm and clients."""
    spec = experiment.spec

    def bad(what: str, fix: str = "delete it to restart the run") -> ResumeError:
        return ResumeError(f"{path}: {what}; {fix}")

    if ck.fingerprint not in fingerprints(spec.raw, ck.round):
        raise bad("written for a different config", "resume with the run's own config or use a new run dir")
    if not _is_int(ck.round) or ck.round < 0:
        raise bad(f"round: {ck.round!r} is not a number of finished rounds")
    if ck.round > spec.fl.rounds:
        past = f"round: holds {ck.round} finished rounds, past fl.rounds={spec.fl.rounds}"
        raise bad(past, f"valid: fl.rounds >= {ck.round}")
    for name, got, want in (
        ("params", ck.params, state.params),
        ("server_state", ck.server_state, state.server_state),
        ("client_states", ck.client_states, state.clients.state_dict()),
        ("buffers", ck.buffers, experiment.model.buffers),
    ):
        problem = tree_mismatch(got, want, name)
        if problem:
            raise bad(problem)
    for name, tree in (("params", ck.params), ("buffers", ck.buffers)):
        if not all_finite(tree):
            raise bad(f"{name}: holds NaN or inf")
    rng = torch.get_rng_state()
    if not isinstance(ck.torch_rng, torch.Tensor) or ck.torch_rng.dtype != rng.dtype or ck.torch_rng.shape != rng.shape:
        raise bad(f"torch_rng: not torch's RNG state (a {rng.dtype} tensor of shape {tuple(rng.shape)})")
    c = ck.counters
    if not isinstance(c, dict) or any(not _is_number(c.get(k)) or not 0 <= c[k] < math.inf for k in COUNTERS):
        raise bad(f"counters: must hold {', '.join(COUNTERS)} as finite numbers >= 0")
    for key, what in experiment.capabilities.legacy_counters.items():  # a checkpoint of before the contract
        if key in c and (not _is_number(c[key]) or not what[1] <= c[key] < math.inf or (what[2] and c[key] == 0)):
            raise bad(f"counters: {key} ({what[0]}) must be a finite number {'> 0' if what[2] else '>= 0'}")
    problem = state_mismatch(ck.capabilities, experiment.capabilities.state_dict())
    if problem:
        raise bad(problem)
    # (a driver evaluating on its own clock, system.eval_every_seconds: any increasing rounds <= done)
    driver = experiment.capabilities.driver
    every = None if driver is not None and driver.irregular_eval else spec.eval.every
    problem = rows_mismatch(ck.rows, ck.round, every)
    if problem:
        raise bad(f"rows: {problem}")


def state_mismatch(got: Any, want: dict[str, Tree]) -> str | None:
    """How a checkpoint's capability states differ from this run's (a capability missing or extra, a tensor
    misshapen): None when they match or the checkpoint is of before the contract (none saved)."""
    if not got:
        return None
    if not isinstance(got, dict) or set(got) != set(want):
        names = sorted(got) if isinstance(got, dict) else got
        return f"capabilities: holds {names}, this run has {sorted(want)}"
    for name, tree in want.items():
        if isinstance(tree, dict) and _fixed_shapes(tree):
            problem = tree_mismatch(got[name], tree, f"capabilities[{name!r}]")
            if problem:
                return problem
    return None


def _fixed_shapes(tree: Tree) -> bool:
    """Whether a capability's state has the same tensors whatever happened (an async queue's does not)."""
    return all(not isinstance(v, dict) for v in tree.values())


def tree_mismatch(got: Any, want: Tree, name: str) -> str | None:
    """The first difference of a loaded tensor tree from the expected one (keys, shapes, dtypes), or None."""
    if not isinstance(got, dict):
        return f"{name}: not a dict of tensors"
    for k in sorted(set(want) | set(got), key=str):
        where = f"{name}[{k!r}]"
        if k not in got:
            return f"{where}: missing"
        if k not in want:
            return f"{where}: not part of this run's model or algorithm"
        if isinstance(want[k], dict):
            problem = tree_mismatch(got[k], want[k], where)
            if problem:
                return problem
        elif not isinstance(got[k], torch.Tensor):
            return f"{where}: not a tensor"
        elif got[k].shape != want[k].shape or got[k].dtype != want[k].dtype:
            return f"{where}: {got[k].dtype} {tuple(got[k].shape)}, expected {want[k].dtype} {tuple(want[k].shape)}"
    return None


def rows_mismatch(rows: Any, done: int, every: int | None) -> str | None:
    """Why ``rows`` are not the metrics rows of a run after ``done`` rounds evaluated every ``every`` rounds (one
    per evaluated round, plus the final round of a finished run), or None."""
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        return "not a list of metrics rows"
    for r in rows:
        if any(not _is_number(r.get(k)) for k in ROW_KEYS) or not _is_int(r["round"]):
            return f"a row lacks {', '.join(ROW_KEYS)} as numbers: {str(r)[:80]}"
    got = [r["round"] for r in rows]
    if every is None:
        ok = all(0 < a < b for a, b in zip(got, got[1:], strict=False)) and all(0 < g <= done for g in got)
        return None if ok else f"rounds {got[:8]} are not increasing rounds of the {done} done"
    want = [t for t in range(1, done + 1) if t % every == 0]
    if got != want and got != [*want, done]:
        shown = got if len(got) <= 8 else [*got[:3], "...", *got[-3:]]
        return f"rounds {shown} are not those evaluated in {done} rounds with eval.every={every}"
    return None


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and not (isinstance(v, float) and math.isnan(v))


def _rewrite(path: Path, rows: list[dict[str, Any]]) -> None:
    if rows:
        write_metrics(path, rows)
    else:
        path.unlink(missing_ok=True)


def save_state(state: RunState, experiment: Experiment, run_dir: Path, done: int, fp: str, t0: float) -> None:
    """Checkpoint the run after ``done`` rounds (``t0``: the run's start on this process's clock, shifted
    back by the time spent before a resume)."""
    counters = {"samples": state.samples, "train_time": state.train_time, "agg_time": state.agg_time}
    counters["elapsed"] = time.perf_counter() - t0
    ck = Checkpoint(
        done, fp, state.params, state.server_state, state.clients.state_dict(), state.rows, counters,
        torch.get_rng_state(), experiment.model.buffers, capabilities=experiment.capabilities.state_dict(),
    )  # fmt: skip
    save_checkpoint(run_dir / CHECKPOINT_FILE, ck)
