"""Each client's device: compute speed, upload and download bandwidth, dropout rate and availability.

Three sources (``system.devices``): ``uniform`` (every client the ``mid`` tier), ``tiers`` (each client draws a
tier once, keyed by (seed, client)) and ``trace`` (a file, :func:`read_trace`). The tiers' numbers are fedrun's
illustration of a phone fleet's spread (a 16x compute and 10x bandwidth range, as FedScale's device traces show),
not measurements of any device.

A trace gives, per client, either ``flops`` (FLOP/s, fedrun's unit: compute time = the samples' FLOPs / flops)
or FedScale's ``computation`` (ms per sample of inference of FedScale's reference model; training costs 3x it:
FedScale's ``augmentation_factor``), and either ``upload``/``download`` (bytes/s) or FedScale's ``communication``
(kbit/s, both directions); optionally ``dropout`` (its own rate) and FedScale's behaviour trace ``active``,
``inactive`` (interval starts and ends, seconds) and ``finish_time`` (the trace's period): the client is online
at simulated time t when some ``active[j] <= t mod finish_time <= inactive[j]`` (FedScale's
``ClientMetadata.is_active``, written without its hidden cursor so that it is a pure function of t).
"""

from __future__ import annotations

import io
import json
import math
import os
import pickle
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedrun.core.errors import ConfigError
from fedrun.core.rng import np_rng
from fedrun.storage.inputs import PICKLES, NotRegularFile, behaviour_file, read_regular

# name: (FLOP/s, upload bytes/s, download bytes/s, share of the fleet under devices=tiers)
TIERS: dict[str, tuple[float, float, float, float]] = {
    "high": (4e10, 2.5e6, 1.25e7, 0.25),  # 40 GFLOP/s, 20 Mbit/s up, 100 Mbit/s down
    "mid": (1e10, 1.25e6, 5e6, 0.5),  # 10 GFLOP/s, 10 Mbit/s up, 40 Mbit/s down
    "low": (2.5e9, 2.5e5, 1.25e6, 0.25),  # 2.5 GFLOP/s, 2 Mbit/s up, 10 Mbit/s down
}
FEDSCALE_TRAIN_FACTOR = 3.0  # FedScale's augmentation_factor: a training pass ~ 3 inference passes
KBIT = 1000.0 / 8.0  # bytes per kbit (FedScale's communication is in kbit/s)
# A trace's speeds and bandwidths (FLOP/s, bytes/s, kbit/s) and FedScale's ms per sample. The clock adds, per round,
# work / speed (bytes, FLOPs) and samples x ms: no round's work comes near 1e30 FLOPs or bytes, so within this range
# a round lasts under ~1e130 s and the clock, over any number of rounds, stays far below float64's 1.8e308 (a speed
# of 1e-300 made every round's seconds inf).
SPEED_RANGE = (1e-100, 1e100)
CLIENT_ID = re.compile(r"[0-9]+")  # ASCII digits only: str.isdigit() also takes "²" and Arabic-Indic digits


@dataclass
class Devices:
    """Per-client arrays (index = client id). ``flops`` is NaN where the trace gave FedScale's ``computation``
    (then ``ms_per_sample`` holds it, else NaN); ``dropout`` NaN where the config's rate applies; ``windows`` the
    behaviour trace (None: always online)."""

    flops: np.ndarray
    ms_per_sample: np.ndarray
    upload: np.ndarray
    download: np.ndarray
    dropout: np.ndarray
    windows: list[tuple[np.ndarray, np.ndarray, float] | None]

    def seconds_per_sample(self, flops_per_sample: float) -> np.ndarray:
        """Each client's simulated seconds to train on one sample (a model costing ``flops_per_sample``)."""
        by_flops = flops_per_sample / self.flops
        by_ms = FEDSCALE_TRAIN_FACTOR * self.ms_per_sample / 1000.0
        return np.where(np.isnan(self.flops), by_ms, by_flops)

    def online(self, clients: np.ndarray, t: float) -> np.ndarray:
        """Whether each client of ``clients`` is online at simulated time ``t`` (seconds)."""
        out = np.ones(len(clients), dtype=bool)
        for j, c in enumerate(clients.tolist()):
            w = self.windows[c]
            if w is not None:
                active, inactive, period = w
                now = math.fmod(t, period)
                out[j] = bool(np.any((active <= now) & (now <= inactive)))
        return out


def profile_devices(name: str, n: int, seed: int) -> Devices:
    """``uniform``: every client the ``mid`` tier; ``tiers``: each client's tier drawn by (seed, "device", client)."""
    names = list(TIERS)
    if name == "uniform":
        picks = [names.index("mid")] * n
    else:
        share = np.array([TIERS[k][3] for k in names])
        picks = [int(np_rng(seed, "device", c).choice(len(names), p=share)) for c in range(n)]
    table = np.array([TIERS[names[i]][:3] for i in picks], dtype=np.float64).reshape(n, 3)
    nan = np.full(n, np.nan)
    return Devices(table[:, 0], nan.copy(), table[:, 1], table[:, 2], nan.copy(), [None] * n)


class _PlainUnpickler(pickle.Unpickler):
    """Unpickles plain containers and numbers only: any class or function in the file is refused (a pickle can
    otherwise run code when loaded)."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused {module}.{name}: only plain dicts, lists and numbers are read")


class _Duplicate(ValueError):
    """A JSON mapping naming one key twice (json keeps the last silently)."""


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    for k in keys:
        if keys.count(k) > 1:
            raise _Duplicate(f"{k!r} appears twice in one mapping (JSON would keep only the last)")
    return dict(pairs)


def _read(path: Path) -> bytes:
    """A trace file's bytes: refused in one line when there is none, or when it is not a regular file (a FIFO is
    not waited on, a link to /dev/zero not read: :func:`~fedrun.storage.inputs.open_regular`)."""
    try:
        return read_regular(path)
    except FileNotFoundError:
        raise ConfigError("system.trace", f"{path}: no such file") from None
    except NotRegularFile as e:
        raise ConfigError("system.trace", f"{path}: not a regular file ({e.kind}); valid: a trace file") from None
    except OSError as e:
        raise ConfigError("system.trace", f"{path}: unreadable trace ({type(e).__name__}: {e.strerror})") from None


def _load(path: Path) -> dict[str, Any]:
    """A trace file's mapping: JSON (``.json``), or FedScale's pickles read as plain data (``.pkl``, ``.pickle``:
    the device capacity and, optionally, the behaviour pickle named ``<stem>.behave<suffix>`` beside it)."""
    data = _read(path)
    if path.suffix not in (".json", *PICKLES):
        raise ConfigError("system.trace", f"{path}: unknown trace format; valid: .json, .pkl, .pickle")
    behave_path = behaviour_file(path)
    behave_data = _read(behave_path) if behave_path is not None and os.path.lexists(behave_path) else None
    try:
        if behave_path is None:
            return _checked(path, json.loads(data.decode(), object_pairs_hook=_unique))
        capacity = _PlainUnpickler(io.BytesIO(data)).load()
        behave = _PlainUnpickler(io.BytesIO(behave_data)).load() if behave_data is not None else {}
        return _checked(path, {"clients": _merged(capacity, behave)})
    except _Duplicate as e:
        raise ConfigError("system.trace", f"{path}: {e}; valid: each client and field once") from None
    except (ValueError, pickle.UnpicklingError, TypeError, AttributeError, EOFError, RecursionError) as e:
        first = (str(e).splitlines() or [""])[0][:160]
        raise ConfigError("system.trace", f"{path}: unreadable trace ({type(e).__name__}: {first})") from None


def _merged(capacity: Any, behave: Any) -> dict[Any, Any]:
    """FedScale's capacity pickle with each client's behaviour trace merged into its entry."""
    return {k: {**v, **dict(behave).get(k, {})} for k, v in dict(capacity).items()}


def _checked(path: Path, data: Any) -> dict[str, Any]:
    if not isinstance(data, dict) or not isinstance(data.get("clients"), dict):
        raise ConfigError("system.trace", f"{path}: not a device trace (a mapping with 'clients'); see docs/systems.md")
    return data


def _number(entry: dict[str, Any], key: str, where: str, positive: bool = True) -> float:
    v = entry.get(key)
    if isinstance(v, int | float) and not isinstance(v, bool) and _finite(v) and (v > 0 if positive else v >= 0):
        return float(v)
    raise ConfigError("system.trace", f"{where}: {key} must be a finite number {'> 0' if positive else '>= 0'}")


def _finite(v: float) -> bool:
    try:
        return math.isfinite(v)
    except OverflowError:  # an int beyond float's range (JSON reads 10**400 as one)
        return False


def _speed(entry: dict[str, Any], key: str, where: str) -> float:
    """A device's speed or bandwidth (or FedScale's ms per sample), within :data:`SPEED_RANGE`."""
    v = _number(entry, key, where)
    lo, hi = SPEED_RANGE
    if not lo <= v <= hi:
        raise ConfigError(
            "system.trace",
            f"{where}: {key} {v:g} is outside [{lo:g}, {hi:g}], the range in which the simulated clock keeps a"
            " round's seconds finite; valid: a number in that range",
        )
    return v


def _windows(entry: dict[str, Any], where: str) -> tuple[np.ndarray, np.ndarray, float] | None:
    if "active" not in entry:
        return None
    active, inactive = entry.get("active"), entry.get("inactive")
    if not isinstance(active, list) or not isinstance(inactive, list) or len(active) != len(inactive) or not active:
        raise ConfigError("system.trace", f"{where}: active and inactive must be lists of equal, non-zero length")
    period = _number(entry, "finish_time", where)
    a = np.array([_number({"t": t}, "t", f"{where}: active", False) for t in active])
    b = np.array([_number({"t": t}, "t", f"{where}: inactive", False) for t in inactive])
    return a, b, period


def read_trace(path: str, n: int) -> Devices:
    """The devices of clients 0..n-1 from the trace at ``path``; every client must be named, and only they.

    Refused in one line: a missing or unreadable file or one that is not a regular file (a FIFO, a device), a
    client id that is not one of 0..n-1 (or not written in ASCII digits), a client named twice (``0`` and
    ``00``), a client left out, a rate outside [0, 1], a speed or bandwidth outside :data:`SPEED_RANGE`.
    """
    p = Path(path)
    clients = _load(p)["clients"]
    ids: dict[int, tuple[Any, dict[str, Any]]] = {}
    for key, entry in clients.items():
        cid = _client_id(key, p)
        if not 0 <= cid < n:
            raise ConfigError("system.trace", f"{path}: client {key!r} is not one of this run's clients 0..{n - 1}")
        if cid in ids:
            raise ConfigError(
                "system.trace",
                f"{path}: client {cid} is named twice ({ids[cid][0]!r} and {key!r}); valid: each client once",
            )
        if not isinstance(entry, dict):
            raise ConfigError("system.trace", f"{path}: client {key}: not a mapping of its device's numbers")
        ids[cid] = (key, entry)
    missing = sorted(set(range(n)) - set(ids))
    if missing:
        raise ConfigError("system.trace", f"{path}: no device for client(s) {missing[:5]} of 0..{n - 1}")
    return _devices({c: e for c, (_, e) in ids.items()}, n, str(p))


def _client_id(key: Any, path: Path) -> int:
    """A trace's client id: an int (FedScale's pickles) or a string of ASCII digits (-1: a string of something
    else that is no id, such as ``x``); an id of other numerals (``²``, Arabic-Indic digits, which int() or
    str.isdigit() would take) is refused naming it."""
    if isinstance(key, int) and not isinstance(key, bool):
        return key
    if isinstance(key, str) and CLIENT_ID.fullmatch(key):
        return int(key)
    if isinstance(key, str) and key.isnumeric():
        raise ConfigError(
            "system.trace", f"{path}: client id {key!r} is not plain decimal digits; valid: ids written with 0-9"
        )
    return -1


def _devices(ids: dict[int, dict[str, Any]], n: int, path: str) -> Devices:
    flops, ms, up, down, drop = (np.full(n, np.nan) for _ in range(5))
    windows: list[tuple[np.ndarray, np.ndarray, float] | None] = [None] * n
    for c, e in ids.items():
        where = f"{path}: client {c}"
        if "flops" in e:
            flops[c] = _speed(e, "flops", where)
        else:
            ms[c] = _speed(e, "computation", where)
        if "upload" in e or "download" in e:
            up[c], down[c] = _speed(e, "upload", where), _speed(e, "download", where)
        else:
            up[c] = down[c] = _speed(e, "communication", where) * KBIT
        if "dropout" in e:
            drop[c] = _number(e, "dropout", where, positive=False)
            if drop[c] > 1:
                raise ConfigError("system.trace", f"{where}: dropout must be in [0, 1], got {drop[c]}")
        windows[c] = _windows(e, where)
    return Devices(flops, ms, up, down, drop, windows)
