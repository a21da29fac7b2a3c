"""A run's identity, in one place: the config keys that decide its results (:func:`comparable`), their hash
(:func:`config_key`: a sweep job's directory, fedrun-report's duplicates) and the resume fingerprint a checkpoint
carries (:func:`fingerprint`, with the legacy forms older checkpoints carry: :func:`legacy_fingerprint`,
:func:`legacy_extension_fingerprint`)."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import typing
from collections.abc import Iterator
from typing import Any

from fedrun.config.schema import COMPONENT_GROUPS, FedrunConfig
from fedrun.config.sections import capabilities, owned_sections

# Config keys that do not change a run's results, so they may differ between a run and its resume.
_VOLATILE_TOP = ("output", "checkpoint", "cache_dir", "tracking", "imports")


_VOLATILE_DATA = ("root", "download")


# hardware.device: a run checkpointed on a GPU continues on the CPU (and back). Its later rounds agree with
# an uninterrupted run to float tolerance, not bit for bit (GPU and CPU kernels round differently).
_VOLATILE_HARDWARE = ("device",)
# hardware.stack: whether a sweep's job trains stacked with others, which changes its results by float rounding at
# most (docs/sweeps.md); hardware.parallel: whether it runs beside others in a process of its own, which changes
# nothing of its results; never part of an identity, so the folders and checkpoints of before they existed keep theirs
_UNCOUNTED_HARDWARE = ("stack", "parallel")


# Evaluation settings that change what is measured or summarised, never the training: a resumed or extended
# run may change them (new columns start at the resumed round). eval.every (which rounds have rows),
# eval.client_acc_split (what a column means) and eval.client_weights (a log that must be complete) may not.
_VOLATILE_EVAL = ("target", "last_k", "batch_size", "train_acc", "client_acc", "diagnostics")


# keys added later, per section: left out while at their old behaviour, so older runs keep their identity (each
# capability says its own: :meth:`~fedrun.capabilities.base.Capability.identity`)
_OFF: dict[str, dict[str, Any]] = {
    "data": {"image_size": None, "client_valid_ratio": 0.0, "normalize": "dataset", "augment": "none"},
    "fl": {"train_all": False},
    "eval": {"client_weights": False},
}


_OFF["data"]["merge_test"] = False  # data.merge_test (PFLlib's merged train + test split, fedrun issue 50)


def _schedule_declarers(raw: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """(section, its params class) for every part of ``raw`` whose class may declare ``derived_rounds``:
    the sections of the schema and each group's chosen component (an unknown name declares nothing)."""
    hints = typing.get_type_hints(FedrunConfig)
    sections = {**{k: v for k, v in hints.items() if dataclasses.is_dataclass(v)}, **dict(owned_sections())}
    for section in sorted(sections):
        yield section, sections[section]
    for group, registry in COMPONENT_GROUPS.items():
        name = (raw.get(group) or {}).get("name")
        if isinstance(name, str) and name in registry.names():
            yield group, registry.get(name).params


def round_schedule(raw: dict[str, Any]) -> dict[str, int]:
    """The rounds a config derives from ``fl.rounds`` as fractions of it, ``{"<section>.<key>": round}``, as
    each params class declares them in its ``derived_rounds(node, rounds)`` (IMA's t_s = int(ima.start x R),
    FedFA's first calibrated round floor(calib_start x R) + 1). Extending a run (a larger ``fl.rounds``)
    must keep them."""
    rounds = (raw.get("fl") or {}).get("rounds")
    if not isinstance(rounds, int):
        return {}
    out: dict[str, int] = {}
    for section, params in _schedule_declarers(raw):
        declare = getattr(params, "derived_rounds", None)
        if declare is not None:
            out |= {f"{section}.{key}": r for key, r in declare(raw.get(section) or {}, rounds).items()}
    return out


def comparable(raw: dict[str, Any], legacy: bool = False) -> dict[str, Any]:
    """The part of a composed config that decides a run's results: two configs with the same one are the same
    run (a sweep's job directory, :mod:`fedrun.run.job_dirs`; the report's duplicates).

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
    if isinstance(out.get("hardware"), dict):
        for k in _UNCOUNTED_HARDWARE + (() if legacy else _VOLATILE_HARDWARE):
            out["hardware"].pop(k, None)
    if isinstance(out.get("corrupt"), dict) and not out["corrupt"].get("fraction"):
        out.pop("corrupt")
    for cap in capabilities():  # each capability's part (the ideal system and no compression drop out whole)
        if isinstance(out.get(cap.section), dict):
            part = cap.identity(out[cap.section], raw)
            if part is None:
                out.pop(cap.section)
            else:
                out[cap.section] = part
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
    """A stable hash of :func:`comparable`: the identity of a run's results (a sweep job's directory)."""
    return _hash(comparable(raw))


def saved_config_key(cfg: dict[str, Any]) -> str:
    """:func:`config_key` of a config read back from a run directory (fedrun-report's duplicates); one that does
    not serialise (keys of mixed types, hand-edited) is keyed by its sorted flat items instead."""
    try:
        return config_key(cfg)
    except (TypeError, ValueError):
        return hashlib.sha256(repr(sorted(flat(cfg).items(), key=str)).encode()).hexdigest()


def fingerprint(raw: dict[str, Any]) -> str:
    """A stable hash of :func:`resumable`: what a checkpoint carries, so that only its own config (possibly
    extended, or evaluated differently) continues it."""
    return _hash(resumable(raw))


def legacy_fingerprint(raw: dict[str, Any]) -> str:
    """The fingerprint of checkpoints of before runs could be extended or move device: the hash of the whole
    :func:`comparable` config, ``hardware.device`` and ``fl.rounds`` included."""
    return _hash(comparable(raw, legacy=True))


def legacy_extension_fingerprint(raw: dict[str, Any], done: int) -> str | None:
    """The :func:`legacy_fingerprint` of ``raw`` cut to ``done`` rounds: what a finished run's final checkpoint of
    that time carries when ``raw`` extends it; None when ``raw`` is not an extension of it, or when cutting moves a
    round of :func:`round_schedule` (the rounds already run would differ)."""
    fl = raw.get("fl")
    if not isinstance(fl, dict) or fl.get("rounds") == done:
        return None
    cut = {**raw, "fl": {**fl, "rounds": done}}
    return legacy_fingerprint(cut) if round_schedule(cut) == round_schedule(raw) else None


def fingerprints(raw: dict[str, Any], done: int) -> tuple[str, ...]:
    """The fingerprints a checkpoint after ``done`` rounds may carry to continue this config: today's
    (:func:`fingerprint`), and the legacy forms of this config (a resume, :func:`legacy_fingerprint`) and of this
    config cut to ``done`` rounds (a finished run being extended, :func:`legacy_extension_fingerprint`)."""
    out = [fingerprint(raw), legacy_fingerprint(raw)]
    extension = legacy_extension_fingerprint(raw, done)
    if extension is not None:
        out.append(extension)
    return tuple(out)


def flat(d: Any, prefix: str = "") -> dict[str, Any]:
    """Nested config -> ``{dotted key: leaf value}`` (an empty section has no key)."""
    if not isinstance(d, dict):
        return {prefix.rstrip("."): d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(flat(v, f"{prefix}{k}."))
    return out


def config_diff(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``key: old -> new`` for every result-relevant key that differs (sorted)."""
    a, b = flat(resumable(old)), flat(resumable(new))
    return [
        f"{k}: {a.get(k, '<unset>')!r} -> {b.get(k, '<unset>')!r}"
        for k in sorted(set(a) | set(b))
        if a.get(k) != b.get(k)
    ]


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
