"""The ``world-inputs`` table (issue 32): what fedrun reads from the world, beyond its config, ends a run in one line
or is repaired: a Shakespeare federation a subset cap leaves without training samples (refused naming the
field), a damaged Shakespeare cache (rebuilt, as promised), and a logging config that would run code (a class
resolved outside the logging package, an ``ext://`` import): refused naming the key."""

from __future__ import annotations

import shutil
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from fedrun.data.sources.shakespeare_build import CACHE_DIR
from tests.conftest import REPO
from tests.hostile import Case, ids, run_case

CATEGORY = "world-inputs"
SHAKESPEARE = (
    "data=shakespeare", "model=lstm", "model.hidden=8", "model.layers=1", "partition=natural", "proxy.per_class=0",
    "data.max_test_samples=20", "fl.clients=5", "fl.rounds=1", "output.quiet=true", "output.plots=false",
    "hardware.threads=1", "hardware.engine=sequential", "checkpoint.keep_final=false", "cache_dir={t}/cache",
    "hydra.run.dir={t}/r",
)  # fmt: skip
NPZ = f"data/{CACHE_DIR}/roles.npz"


def _shakespeare(*args: str, root: str = str(REPO / "data")) -> tuple[str, ...]:
    return (*SHAKESPEARE, f"data.root={root}", *args)


def _cache_copy(damage: str) -> object:
    """A copy of the Shakespeare cache under {t}/data with its roles.npz damaged."""

    def setup(t: Path) -> None:
        shutil.copytree(REPO / "data" / CACHE_DIR, t / "data" / CACHE_DIR)
        npz = t / NPZ
        data = npz.read_bytes()
        if damage == "truncated":
            npz.write_bytes(data[: len(data) // 2])
        elif damage == "garbled":
            middle = len(data) // 3
            npz.write_bytes(
                data[:middle] + bytes(b ^ 0xFF for b in data[middle : middle + 4096]) + data[middle + 4096 :]
            )
        else:
            npz.write_bytes(b"")

    return setup


def _rebuilt(t: Path) -> None:
    with np.load(t / NPZ, allow_pickle=False) as z:  # a whole zip again
        assert set(z.files) >= {"lines", "codes", "offsets"}
    assert zipfile.is_zipfile(t / NPZ)


def _not_imported(module: str) -> object:
    def after(t: Path) -> None:
        assert module not in sys.modules, f"{module} was imported"

    return after


def _r(*args: str) -> tuple[str, ...]:
    return (*args, "hydra.run.dir={t}/r")


LOGGING = "hydra.hydra_logging"
CASES = [
    Case(
        "shakespeare-natural-capped-400", _shakespeare("data.max_train_samples=400"), 2,
        ("data.max_train_samples: the 5 clients of partition=natural hold",), tiny=False,
    ),
    Case(
        "shakespeare-natural-capped-5", _shakespeare("data.max_train_samples=5"), 2,
        ("data.max_train_samples: ", "fewer than one per client"), tiny=False,
    ),
    Case(
        "shakespeare-cache-truncated", _shakespeare("data.roles=20", "data.max_train_samples=200", root="{t}/data"),
        0, (), _cache_copy("truncated"), after=_rebuilt, tiny=False,
    ),
    Case(
        "shakespeare-cache-garbled", _shakespeare("data.roles=20", "data.max_train_samples=200", root="{t}/data"),
        0, (), _cache_copy("garbled"), after=_rebuilt, tiny=False,
    ),
    Case(
        "shakespeare-cache-empty", _shakespeare("data.roles=20", "data.max_train_samples=200", root="{t}/data"),
        0, (), _cache_copy("empty"), after=_rebuilt, tiny=False,
    ),
    Case(
        "logging-class-through-logging-os", _r(f"+{LOGGING}.handlers.x.class=logging.os.getcwd"), 2,
        (f"{LOGGING}.handlers.x.class: refused: 'logging.os.getcwd'",),
    ),
    Case(
        "logging-class-through-handlers-module", _r(f"+{LOGGING}.handlers.x.class=logging.handlers.socket.socket"), 2,
        (f"{LOGGING}.handlers.x.class: refused",),
    ),
    Case(
        "logging-class-a-method", _r(f"+{LOGGING}.handlers.x.class=logging.Handler.__init__"), 2,
        (f"{LOGGING}.handlers.x.class: refused",),
    ),
    Case(
        "logging-formatter-not-a-formatter", _r(f"+{LOGGING}.formatters.f.class=logging.handlers.pickle.Unpickler"),
        2, (f"{LOGGING}.formatters.f.class: refused",),
    ),
    Case(
        "logging-ext-import", _r(f"{LOGGING}.handlers.console.stream=ext://__phello__.spam"), 2,
        (f"{LOGGING}.handlers.console.stream: refused", "ext://sys.stdout"), after=_not_imported("__phello__"),
    ),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_world_inputs(
    case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    if "data=shakespeare" in case.args and not (REPO / "data" / CACHE_DIR / "roles.npz").is_file():
        pytest.skip("the Shakespeare cache (make data) is not built here")
    run_case(case, tmp_path, monkeypatch, capsys)
