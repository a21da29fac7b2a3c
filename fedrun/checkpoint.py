"""Run-state checkpoints: what a killed run needs to continue bit-exactly, written atomically.

A checkpoint holds the global parameters, the server state, every client's persistent state, torch's
global RNG state, the metrics rows so far, the number of finished rounds, the run's counters and a
fingerprint of the config. It is a plain tensor/container tree saved with ``torch.save`` and loaded with
``torch.load(weights_only=True)``, so loading never executes code from the file.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from fedrun.errors import ResumeError
from fedrun.outputs import atomic_write
from fedrun.tree import Tree, tree_map

CHECKPOINT_FILE = "checkpoint.pt"
CONFIG_FILE = "config.yaml"
FORMAT_VERSION = 1
FINISHED = ("completed", "diverged")  # statuses a re-run skips: both are deterministic outcomes

# Config keys that do not change a run's results, so they may differ between a run and its resume.
_VOLATILE_TOP = ("output", "checkpoint", "cache_dir", "tracking")
_VOLATILE_DATA = ("root", "download")
# data keys added later, left out at their old behaviour so older checkpoints still resume
_DATA_OFF = {"client_valid_ratio": 0.0, "normalize": "dataset", "augment": "none"}


def comparable(raw: dict[str, Any]) -> dict[str, Any]:
    """The part of a composed config that determines the results.

    Sections added later are left out while off (no corrupted clients, no client-weight log), so runs
    checkpointed before they existed still resume.
    """
    out = copy.deepcopy({k: v for k, v in raw.items() if k not in _VOLATILE_TOP})
    if isinstance(out.get("data"), dict):
        for k in _VOLATILE_DATA:
            out["data"].pop(k, None)
        for k, off in _DATA_OFF.items():
            if out["data"].get(k, off) == off:
                out["data"].pop(k, None)
    if isinstance(out.get("corrupt"), dict) and not out["corrupt"].get("fraction"):
        out.pop("corrupt")
    if isinstance(out.get("fl"), dict) and not out["fl"].get("train_all"):
        out["fl"].pop("train_all", None)
    if isinstance(out.get("eval"), dict) and not out["eval"].get("client_weights"):
        out["eval"].pop("client_weights", None)
    return out


def fingerprint(raw: dict[str, Any]) -> str:
    """A stable hash of :func:`comparable` (sorted JSON)."""
    blob = json.dumps(comparable(raw), sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix.rstrip("."): d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}."))
    return out


def config_diff(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``key: old -> new`` for every result-relevant key that differs (sorted)."""
    a, b = _flat(comparable(old)), _flat(comparable(new))
    return [
        f"{k}: {a.get(k, '<unset>')!r} -> {b.get(k, '<unset>')!r}"
        for k in sorted(set(a) | set(b))
        if a.get(k) != b.get(k)
    ]


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
    buf = io.BytesIO()
    torch.save(state, buf)
    atomic_write(path, buf.getvalue())


def load_checkpoint(path: Path, expected_fingerprint: str | None = None) -> Checkpoint:
    """Load without executing code from the file; refuse one written for a different config."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any failure means an unusable file
        raise ResumeError(f"{path}: unreadable checkpoint ({type(e).__name__}); delete it to restart the run") from None
    if not isinstance(state, dict) or state.get("version") != FORMAT_VERSION:
        raise ResumeError(f"{path}: not a fedrun checkpoint of format {FORMAT_VERSION}; delete it to restart the run")
    if expected_fingerprint is not None and state["fingerprint"] != expected_fingerprint:
        raise ResumeError(
            f"{path}: written for a different config; resume with the run's own config or use a new run dir"
        )
    state.pop("version")
    return Checkpoint(**state)


def saved_config(run_dir: Path) -> dict[str, Any] | None:
    """The composed config an earlier run wrote into ``run_dir`` (None when there is none)."""
    f = run_dir / CONFIG_FILE
    if not f.is_file():
        return None
    try:
        cfg = yaml.safe_load(f.read_text())
    except yaml.YAMLError:
        raise ResumeError(f"{f}: unreadable config of an earlier run; use a new run dir") from None
    return cfg if isinstance(cfg, dict) else None


def prior_status(run_dir: Path) -> str | None:
    """``status`` from an earlier run's summary.json in ``run_dir`` (None when there is none)."""
    f = run_dir / "summary.json"
    try:
        return json.loads(f.read_text()).get("status") if f.is_file() else None
    except (OSError, ValueError):
        return None


def check_run_dir(run_dir: Path, raw: dict[str, Any]) -> str | None:
    """Before a run starts in ``run_dir``: the status of an earlier run of the *same* config there, or None.

    Raises ResumeError (one line, naming the first differing keys) when the directory holds a run of a
    different config: it is never overwritten.
    """
    old = saved_config(run_dir)
    if old is None:
        return None
    diff = config_diff(old, raw)
    if diff:
        shown = "; ".join(diff[:3]) + (f"; and {len(diff) - 3} more" if len(diff) > 3 else "")
        raise ResumeError(f"{run_dir} holds a run with a different config ({shown}); use a new run dir")
    return prior_status(run_dir) or "unfinished"
