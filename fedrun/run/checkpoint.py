"""Run-state checkpoints: what a killed run needs to continue bit-exactly, written atomically.

A checkpoint holds the global parameters, the server state, every client's persistent state, torch's
global RNG state, the metrics rows so far, the number of finished rounds, the run's counters and a
fingerprint of the config. It is a plain tensor/container tree saved with ``torch.save`` and loaded with
``torch.load(weights_only=True)``, so loading never executes code from the file.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedrun.config.identity import config_diff, schedule_moved
from fedrun.core.errors import ResumeError
from fedrun.core.tree import Tree, tree_map
from fedrun.storage.atomic import atomic_write
from fedrun.storage.inputs import check_inputs, record_inputs
from fedrun.storage.rundir import CHECKPOINT_FILE as CHECKPOINT_FILE
from fedrun.storage.rundir import CONFIG_FILE as CONFIG_FILE
from fedrun.storage.rundir import RunDir, UnreadableRunFile
from fedrun.storage.status import Status

FORMAT_VERSION = 1
LEGACY_TREES = ("events",)  # trees of files of before the capability contract, handed to the capabilities by name
FINISHED = (Status.COMPLETED, Status.DIVERGED)  # statuses a re-run skips: both are deterministic outcomes


def plain(value: Any) -> Any:
    """numpy scalars and 0-d tensors -> Python numbers, recursively (what ``weights_only`` loading accepts)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, torch.Tensor) and value.dim() == 0:
        return value.item()
    return value


@dataclass
class Checkpoint:
    """The state of a run after ``round`` finished rounds."""

    round: int
    fingerprint: str
    params: Tree
    server_state: Tree
    client_states: Tree
    rows: list[dict[str, Any]] = field(default_factory=list)
    counters: dict[str, float] = field(default_factory=dict)
    torch_rng: torch.Tensor | None = None
    buffers: Tree = field(default_factory=dict)  # the global model's buffers (BatchNorm running statistics)
    events: Tree = field(default_factory=dict)  # (a file of before the capability contract: a capability's tree)
    capabilities: Tree = field(default_factory=dict)  # each capability's state by its name (fedrun/capabilities/)

    def legacy(self, device: torch.device) -> dict[str, Any]:
        """What a file of before the capability contract kept outside its counters (a capability's tree, under its
        old name), on ``device``, for the capability that reads it."""
        return {k: to_device(getattr(self, k), device) for k in LEGACY_TREES if getattr(self, k)}


def to_cpu(tree: Tree) -> Tree:
    return tree_map(lambda t: t.detach().cpu(), tree)


def to_device(tree: Tree, device: torch.device) -> Tree:
    return tree_map(lambda t: t.to(device), tree)


def save_checkpoint(path: Path, ck: Checkpoint) -> None:
    """Serialise to memory, then write atomically (temp file, fsync, rename): a kill never leaves half a file."""
    state = {
        "version": FORMAT_VERSION,
        "round": ck.round,
        "fingerprint": ck.fingerprint,
        "params": to_cpu(ck.params),
        "server_state": to_cpu(ck.server_state),
        "client_states": to_cpu(ck.client_states),
        "rows": plain(ck.rows),
        "counters": plain(ck.counters),
        "torch_rng": ck.torch_rng,
        "buffers": to_cpu(ck.buffers),
    }
    if ck.capabilities:  # only a run with capabilities that keep state holds them (a plain run's file is as it was)
        state["capabilities"] = to_cpu(ck.capabilities)
    buf = io.BytesIO()
    torch.save(state, buf)
    atomic_write(path, buf.getvalue())


def load_checkpoint(path: Path, expected_fingerprint: str | tuple[str, ...] | None = None) -> Checkpoint:
    """Load without executing code from the file; refuse one written for a different config (``expected_fingerprint``:
    the config's fingerprint, or the accepted ones, :func:`fingerprints`).

    Only the file's format is checked here; fedrun.run.state checks every field against the run's model and
    config before using it.
    """
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any failure means an unusable file
        raise ResumeError(f"{path}: unreadable checkpoint ({type(e).__name__}); delete it to restart the run") from None
    if not isinstance(state, dict) or state.get("version") != FORMAT_VERSION:
        raise ResumeError(f"{path}: not a fedrun checkpoint of format {FORMAT_VERSION}; delete it to restart the run")
    fields = set(Checkpoint.__dataclass_fields__)
    missing = sorted(fields - set(state) - {"buffers", "capabilities", *LEGACY_TREES})  # absent from older files
    unknown = sorted(set(state) - fields - {"version"})
    if missing or unknown:
        what = f"missing {', '.join(missing)}" if missing else f"unknown key {', '.join(map(str, unknown))}"
        raise ResumeError(f"{path}: damaged checkpoint ({what}); delete it to restart the run")
    accepted = (expected_fingerprint,) if isinstance(expected_fingerprint, str) else expected_fingerprint
    if accepted is not None and state["fingerprint"] not in accepted:
        raise ResumeError(
            f"{path}: written for a different config; resume with the run's own config or use a new run dir"
        )
    state.pop("version")
    return Checkpoint(**state)


def saved_config(run_dir: Path | RunDir) -> dict[str, Any] | None:
    """The composed config an earlier run wrote into ``run_dir`` (None when there is none)."""
    rd = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    try:
        return rd.read_config()
    except UnreadableRunFile as e:
        if str(e).endswith("not a mapping of config keys"):
            return None
        raise ResumeError(f"{rd.config_file}: unreadable config of an earlier run; use a new run dir") from None


def prior_status(run_dir: Path | RunDir) -> Status | None:
    """``status`` from an earlier run's summary.json in ``run_dir`` (None when there is none)."""
    return (run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)).status()


def check_run_dir(run_dir: Path | RunDir, raw: dict[str, Any]) -> str | None:
    """Before a run starts in ``run_dir``: the status of an earlier run of the *same* config there, or None.

    ``extending`` when that run completed with fewer rounds than ``raw``'s ``fl.rounds``: it continues from its
    final checkpoint. Raises ResumeError (one line, naming the first differing keys) when the directory holds a
    run of a different config (it is never overwritten), a completed run with more rounds than asked, or one
    that cannot be extended; ConfigError (naming the key and the file) when a file the run reads by path differs
    from the one it started with (fedrun/storage/inputs.py: a new run records them here).
    """
    rd = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    prior = _prior_run(rd, raw)
    if prior is None:
        record_inputs(rd, raw)
    else:
        check_inputs(rd, raw, goes_on=prior not in FINISHED)
    return prior


def _prior_run(rd: RunDir, raw: dict[str, Any]) -> str | None:
    """What :func:`check_run_dir` returns, and its refusals but those of the files the run reads."""
    run_dir = rd.path
    old = saved_config(rd)
    if old is None:
        if rd.config_file.exists():  # a YAML list or scalar (or an empty file): never overwritten
            raise ResumeError(
                f"{rd.config_file} is not a fedrun config (a mapping of config keys), so fedrun leaves it as it is;"
                " valid: a new or empty run dir, or one of a fedrun run"
            )
        return None
    moved = schedule_moved(old, raw)
    if moved:
        raise ResumeError(f"{run_dir}: {moved}")
    diff = config_diff(old, raw)
    if diff:
        shown = "; ".join(diff[:3]) + (f"; and {len(diff) - 3} more" if len(diff) > 3 else "")
        raise ResumeError(f"{run_dir} holds a run with a different config ({shown}); use a new run dir")
    status = rd.status() or "unfinished"
    done, rounds = (old.get("fl") or {}).get("rounds"), (raw.get("fl") or {}).get("rounds")
    if status != Status.COMPLETED or not isinstance(done, int) or not isinstance(rounds, int) or rounds == done:
        return status
    if rounds < done:
        raise ResumeError(
            f"fl.rounds: {run_dir} holds a completed run of {done} rounds; valid: fl.rounds >= {done} (more extends it)"
        )
    if not rd.checkpoint_file.is_file():
        raise ResumeError(
            f"fl.rounds: the completed {done}-round run in {run_dir} kept no final checkpoint"
            f" (checkpoint.keep_final=false), so it cannot be extended to {rounds} rounds; run them in a new run dir"
        )
    return "extending"
