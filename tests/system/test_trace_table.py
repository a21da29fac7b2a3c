"""The ``trace`` table (issue 49): a device trace (``system.trace``, docs/systems.md) that names a client twice,
spells an id in digits other than ASCII's, gives a speed the simulated clock cannot hold, or is not a regular file
(a FIFO, a link to /dev/zero, a directory) is refused in one line naming ``system.trace``, the file and what is
wrong (exit 2, only error.txt written); speeds at the ends of the range run, their clock finite and no warning."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.hostile import Case, FifoGuard, ids, run_case

CATEGORY = "trace"
GOOD = {"flops": 1e9, "upload": 1e6, "download": 1e6}
FEDSCALE = {"computation": 100.0, "communication": 800.0}  # ms per sample, kbit/s
TRACE = "{t}/trace.json"
RANGE = "is outside [1e-100, 1e+100], the range in which the simulated clock keeps a round's seconds finite"


def _json(clients: dict[str, Any] | None = None, text: str | None = None) -> Any:
    """A setup writing {t}/trace.json: four clients, as given (``text``: the file's exact text)."""

    def setup(t: Path) -> None:
        (t / "trace.json").write_text(text if text is not None else json.dumps({"clients": clients}))

    return setup


def _clients_text(*ids: str, first: str = "{") -> str:
    """A trace's exact text: ``first`` (the opening of the clients' mapping, maybe with a client of its own), then
    a GOOD client for each of ``ids``, written as given (a key twice stays twice)."""
    entries = ", ".join(f"{json.dumps(i)}: {json.dumps(GOOD)}" for i in ids)
    return '{"clients": ' + first + (", " if first != "{" else "") + entries + "}}"


def _four(**client_2: Any) -> dict[str, Any]:
    """Clients 0..3 on GOOD, client 2 with ``client_2`` instead."""
    return {str(c): (client_2 if c == 2 else GOOD) for c in range(4)}


def _pickle(capacity: dict[Any, Any], behave: Any = None) -> Any:
    """A setup writing FedScale's pickles: {t}/trace.pkl and, when given, {t}/trace.behave.pkl (``"fifo"``: a
    FIFO there)."""

    def setup(t: Path) -> None:
        (t / "trace.pkl").write_bytes(pickle.dumps(capacity))
        if behave == "fifo":
            os.mkfifo(t / "trace.behave.pkl")
        elif behave is not None:
            (t / "trace.behave.pkl").write_bytes(pickle.dumps(behave))

    return setup


def _fifo(t: Path) -> FifoGuard:
    os.mkfifo(t / "trace.json")
    return FifoGuard(t / "trace.json")


def _link(target: str) -> Any:
    def setup(t: Path) -> None:
        (t / "trace.json").symlink_to(target)

    return setup


def _directory(t: Path) -> None:
    (t / "trace.json").mkdir()


def _finite_clock(t: Path) -> None:
    seconds = pd.read_csv(t / "r" / "metrics.csv")["sim_seconds"]
    assert seconds.notna().all() and (seconds < float("inf")).all() and (seconds > 0).all(), seconds.tolist()


def _trace(*args: str, path: str = TRACE) -> tuple[str, ...]:
    return ("system.devices=trace", f"system.trace={path}", *args, "hydra.run.dir={t}/r")


def _refused(case_id: str, setup: Any, *words: str, path: str = TRACE) -> Case:
    return Case(case_id, _trace(path=path), 2, (f"system.trace: {path}: ", *words), setup)


PKL = "{t}/trace.pkl"
CASES = [
    _refused("client-named-twice", _json({**_four(**GOOD), "00": GOOD}), "client 0 is named twice ('0' and '00')"),
    _refused("id-superscript-two", _json({"0": GOOD, "1": GOOD, "²": GOOD, "3": GOOD}), "client id '²' is not plain"),
    _refused("id-arabic-indic", _json({"0": GOOD, "1": GOOD, "٢": GOOD, "3": GOOD}), "client id '٢' is not plain"),
    _refused("flops-1e-300", _json(_four(**{**GOOD, "flops": 1e-300})), f"client 2: flops 1e-300 {RANGE}"),
    _refused("upload-1e-300", _json(_four(**{**GOOD, "upload": 1e-300})), f"client 2: upload 1e-300 {RANGE}"),
    _refused("download-1e-300", _json(_four(**{**GOOD, "download": 1e-300})), f"client 2: download 1e-300 {RANGE}"),
    _refused(
        "communication-1e-300", _json(_four(**{**FEDSCALE, "communication": 1e-300})), f"communication 1e-300 {RANGE}"
    ),
    _refused("computation-1e300", _json(_four(**{**FEDSCALE, "computation": 1e300})), f"computation 1e+300 {RANGE}"),
    _refused(
        "pickle-communication-1e-300",
        _pickle({c: {**FEDSCALE, "communication": 1e-300} if c == 1 else FEDSCALE for c in range(4)}),
        f"client 1: communication 1e-300 {RANGE}",
        path=PKL,
    ),
    _refused("fifo", _fifo, "not a regular file (a FIFO)"),
    _refused("link-to-dev-zero", _link("/dev/zero"), "not a regular file (a character device)"),
    # the red team's next round
    _refused("json-key-twice", _json(text=_clients_text("0", "0", "1", "2", "3")), "'0' appears twice in one mapping"),
    _refused(
        "flops-int-beyond-float",
        _json(
            text=_clients_text("1", "2", "3", first='{"0": {"flops": 1' + "0" * 400 + ', "upload": 1, "download": 1}')
        ),
        "client 0: flops must be a finite number > 0",
    ),
    _refused(
        "pickle-client-named-twice",
        _pickle({0: FEDSCALE, "0": FEDSCALE, 1: FEDSCALE, 2: FEDSCALE, 3: FEDSCALE}),
        "client 0 is named twice (0 and '0')",
        path=PKL,
    ),
    _refused("a-directory", _directory, "not a regular file (a directory)"),
    _refused("dangling-link", _link("/nonexistent/trace.json"), "no such file"),
    Case(
        "behaviour-pickle-a-fifo",
        _trace(path=PKL),
        2,
        ("system.trace: {t}/trace.behave.pkl: not a regular file (a FIFO)",),
        _pickle({c: FEDSCALE for c in range(4)}, behave="fifo"),
    ),
    # the ends of the speed range run: each round's simulated seconds finite, no numpy warning
    Case(
        "flops-1e-100-runs",
        _trace("fl.rounds=2"),
        0,
        (),
        _json(_four(**{**GOOD, "flops": 1e-100})),
        after=_finite_clock,
    ),
    Case(
        "pickle-computation-1e100-runs",
        _trace("fl.rounds=2", path=PKL),
        0,
        (),
        _pickle({c: {**FEDSCALE, "computation": 1e100} if c == 3 else FEDSCALE for c in range(4)}),
        after=_finite_clock,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_trace(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    err = run_case(case, tmp_path, monkeypatch, capsys)
    assert "Warning" not in err and "warn(" not in err, err
    if case.code == 2:
        assert sorted(p.name for p in (tmp_path / "r").iterdir() if p.name != ".hydra") == ["error.txt"]
