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
import math
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
_VOLATILE_TOP = ("output", "checkpoint", "cache_dir", "tracking", "imports")
_VOLATILE_DATA = ("root", "download")
# hardware.device: a run checkpointed on a GPU continues on the CPU (and back). Its later rounds agree with
# an uninterrupted run to float tolerance, not bit for bit (GPU and CPU kernels round differently).
_VOLATILE_HARDWARE = ("device",)
# Evaluation settings that change what is measured or summarised, never the training: a resumed or extended
# run may change them (new columns start at the resumed round). eval.every (which rounds have rows),
# eval.client_acc_split (what a column means) and eval.client_weights (a log that must be complete) may not.
_VOLATILE_EVAL = ("target", "last_k", "batch_size", "train_acc", "client_acc", "diagnostics")
# keys added later, per section: left out while at their old behaviour, so older runs keep their identity
_OFF = {
    "data": {"image_size": None, "client_valid_ratio": 0.0, "normalize": "dataset", "augment": "none"},
    "fl": {"train_all": False},
    "eval": {"client_weights": False},
}


def round_schedule(raw: dict[str, Any]) -> dict[str, int]:
    """The rounds a config derives from ``fl.rounds`` as fractions of it: IMA's t_s = int(ima.start x R)
    (fedrun/algorithms/ima.py) and FedFA's first calibrated round, the first t > calib_start x R
    (fedrun/algorithms/fedfa.py). Extending a run (a larger ``fl.rounds``) must keep them."""
    rounds = (raw.get("fl") or {}).get("rounds")
    if not isinstance(rounds, int):
        return {}
    out = {}
    ima, algo = raw.get("ima") or {}, raw.get("algorithm") or {}
    if ima.get("enabled"):
        out["ima.start"] = int(ima.get("start", 0.75) * rounds)
    if algo.get("name") == "fedfa":
        out["algorithm.calib_start"] = math.floor(algo.get("calib_start", 0.25) * rounds) + 1
    return out


def comparable(raw: dict[str, Any], legacy: bool = False) -> dict[str, Any]:
    """The part of a composed config that decides a run's results: two configs with the same one are the same
    run (a sweep's job directory, :mod:`fedrun.sweeps`; the report's duplicates).

    Sections and keys added later are left out while off (no corrupted clients, the keys of ``_OFF`` at their
    old behaviour), so runs of before they existed keep their identity. ``legacy=True`` keeps
    ``hardware.device``, as fingerprints did before a run could move device.
    """
    out = copy.deepcopy({k: v for k, v in raw.items() if k not in _VOLATILE_TOP})
    if isinstance(out.get("data"), dict):
        for k in _VOLATILE_DATA:
            out["data"].pop(k, None)
    for section, keys in _OFF.items():
        if isinstance(out.get(section), dict):
            for k, off in keys.items():
                if out[section].get(k, off) == off:
                    out[section].pop(k, None)
    if not legacy and isinstance(out.get("hardware"), dict):
        for k in _VOLATILE_HARDWARE:
            out["hardware"].pop(k, None)
    if isinstance(out.get("corrupt"), dict) and not out["corrupt"].get("fraction"):
        out.pop("corrupt")
    return out


def resumable(raw: dict[str, Any]) -> dict[str, Any]:
    """:func:`comparable` less what a resumed or extended run may change: evaluation-only keys, and
    ``fl.rounds``, for which the rounds it decides (IMA's t_s, FedFA's calibration start,
    :func:`round_schedule`) stand in, with the fractions they come from."""
    out = comparable(raw)
    if isinstance(out.get("eval"), dict):
        for k in _VOLATILE_EVAL:
            out["eval"].pop(k, None)
    schedule = round_schedule(raw)
    if schedule:
        out["round_schedule"] = schedule
        for key in schedule:
            section, name = key.split(".")
            out[section].pop(name, None)
    if isinstance(out.get("fl"), dict):
        out["fl"].pop("rounds", None)
    return out


def _hash(part: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(part, sort_keys=True, default=str).encode()).hexdigest()


def config_key(raw: dict[str, Any]) -> str:
    """A stable hash of :func:`comparable`: the identity of a run's results."""
    return _hash(comparable(raw))


def fingerprint(raw: dict[str, Any]) -> str:
    """A stable hash of :func:`resumable`: what a checkpoint carries, so that only its own config (possibly
    extended, or evaluated differently) continues it."""
    return _hash(resumable(raw))


def fingerprints(raw: dict[str, Any], done: int) -> tuple[str, ...]:
    """The fingerprints a checkpoint after ``done`` rounds may carry to continue this config: today's, and a
    checkpoint's from before runs could be extended or move device (the whole config, ``hardware.device``
    included), of this config (a resume) or of this config cut to ``done`` rounds (a finished run being
    extended; only when that keeps :func:`round_schedule`)."""
    out = [fingerprint(raw), _hash(comparable(raw, legacy=True))]
    fl = raw.get("fl")
    if isinstance(fl, dict) and fl.get("rounds") != done:
        cut = {**raw, "fl": {**fl, "rounds": done}}
        if round_schedule(cut) == round_schedule(raw):
            out.append(_hash(comparable(cut, legacy=True)))
    return tuple(out)


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix.rstrip("."): d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}."))
    return out


def config_diff(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``key: old -> new`` for every result-relevant key that differs (sorted)."""
    a, b = _flat(resumable(old)), _flat(resumable(new))
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


def load_checkpoint(path: Path, expected_fingerprint: str | tuple[str, ...] | None = None) -> Checkpoint:
    """Load without executing code from the file; refuse one written for a different config (``expected_fingerprint``:
    the config's fingerprint, or the accepted ones, :func:`fingerprints`).

    Only the file's format is checked here; fedrun.run_state checks every field against the run's model and
    config before using it.
    """
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any failure means an unusable file
        raise ResumeError(f"{path}: unreadable checkpoint ({type(e).__name__}); delete it to restart the run") from None
    if not isinstance(state, dict) or state.get("version") != FORMAT_VERSION:
        raise ResumeError(f"{path}: not a fedrun checkpoint of format {FORMAT_VERSION}; delete it to restart the run")
    fields = set(Checkpoint.__dataclass_fields__)
    missing = sorted(fields - set(state) - {"buffers"})  # buffers: absent from checkpoints of before them
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

    ``extending`` when that run completed with fewer rounds than ``raw``'s ``fl.rounds``: it continues from its
    final checkpoint. Raises ResumeError (one line, naming the first differing keys) when the directory holds a
    run of a different config (it is never overwritten), a completed run with more rounds than asked, or one
    that cannot be extended.
    """
    old = saved_config(run_dir)
    if old is None:
        return None
    moved = schedule_moved(old, raw)
    if moved:
        raise ResumeError(f"{run_dir}: {moved}")
    diff = config_diff(old, raw)
    if diff:
        shown = "; ".join(diff[:3]) + (f"; and {len(diff) - 3} more" if len(diff) > 3 else "")
        raise ResumeError(f"{run_dir} holds a run with a different config ({shown}); use a new run dir")
    status = prior_status(run_dir) or "unfinished"
    done, rounds = (old.get("fl") or {}).get("rounds"), (raw.get("fl") or {}).get("rounds")
    if status != "completed" or not isinstance(done, int) or rounds == done:
        return status
    if rounds < done:
        raise ResumeError(
            f"fl.rounds: {run_dir} holds a completed run of {done} rounds; valid: fl.rounds >= {done} (more extends it)"
        )
    if not (run_dir / CHECKPOINT_FILE).is_file():
        raise ResumeError(
            f"fl.rounds: the completed {done}-round run in {run_dir} kept no final checkpoint"
            f" (checkpoint.keep_final=false), so it cannot be extended to {rounds} rounds; run them in a new run dir"
        )
    return "extending"


def schedule_moved(old: dict[str, Any], new: dict[str, Any]) -> str | None:
    """Why ``new`` cannot continue a run of ``old``: a round of :func:`round_schedule` that moved (a longer
    ``fl.rounds`` moves IMA's t_s = int(ima.start x fl.rounds)), with the fraction that keeps it; else None."""
    before, after = round_schedule(old), round_schedule(new)
    if before.keys() != after.keys() or before == after:
        return None  # the generic config diff names a switch that was turned on or off
    key = next(k for k in before if before[k] != after[k])
    section, name = key.split(".")
    r0, r1 = old["fl"]["rounds"], new["fl"]["rounds"]
    keep = None
    for x in (before[key], before[key] + 0.5, before[key] - 1, before[key] - 0.5):
        fraction = float(f"{x / r1:.6g}")
        if round_schedule({**new, section: {**new[section], name: fraction}})[key] == before[key]:
            keep = f"{key}={fraction:g}"
            break
    return (
        f"{key}: its round moves from {before[key]} to {after[key]} (fl.rounds {r0} -> {r1}), so the rounds already"
        f" run differ from this config's; valid: keep it at round {before[key]}"
        + (f" ({keep})" if keep else "")
        + ", or a new run dir"
    )
