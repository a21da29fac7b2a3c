"""The fault table of checkpoints: every damaged or foreign checkpoint is refused before training, in one line
naming the file, exit 2, with nothing in the run directory touched."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from fedrun.cli import main as cli
from fedrun.run.checkpoint import CHECKPOINT_FILE
from fedrun.storage.lock import LOCK_FILE
from tests.conftest import compose_cfg
from tests.run.test_resume import SMALL

# SCAFFOLD: a server state (c) and a client state (c_i, one row per client) to damage as well
OVERRIDES = [*SMALL, "algorithm=scaffold", "hardware.engine=sequential"]
AT = 3  # the checkpoint's round


def _first(tree: dict[str, Any]) -> str:
    return sorted(tree)[0]


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda s: s.__setitem__(key, value)


def _edit_tensor(section: str, fn: Callable[[torch.Tensor], Any], sub: str | None = None) -> Callable:
    def edit(s: dict[str, Any]) -> None:
        tree = s[section][sub] if sub else s[section]
        k = _first(tree)
        tree[k] = fn(tree[k])

    return edit


def _drop(section: str, sub: str | None = None) -> Callable:
    def edit(s: dict[str, Any]) -> None:
        tree = s[section][sub] if sub else s[section]
        del tree[_first(tree)]

    return edit


def _nan(t: torch.Tensor) -> torch.Tensor:
    t = t.clone()
    t.view(-1)[0] = float("nan")
    return t


# (case, what the one line says, how the state dict is damaged; a str/bytes replaces the whole file)
FAULTS: list[tuple[str, str, Any]] = [
    ("empty file", "unreadable checkpoint", b""),
    ("truncated", "unreadable checkpoint", "truncate"),
    ("garbage", "unreadable checkpoint", b"\x00garbage" * 100),
    ("not a dict", "not a fedrun checkpoint", [1, 2, 3]),
    ("other format version", "not a fedrun checkpoint", _set("version", 99)),
    ("key missing", "missing rows", lambda s: s.pop("rows")),
    ("unknown key", "unknown key extra", _set("extra", 1)),
    ("other config", "written for a different config", _set("fingerprint", "0" * 64)),
    ("round past fl.rounds", "round: holds 999 finished rounds, past fl.rounds=8", _set("round", 999)),
    ("round negative", "round: -1 is not", _set("round", -1)),
    ("round not a number", "round: '3' is not", _set("round", "3")),
    ("round ahead of rows", "rows: rounds [1, 2, 3] are not those evaluated in 5", _set("round", 5)),
    ("round behind rows", "rows: rounds [1, 2, 3] are not those evaluated in 2", _set("round", 2)),
    ("a row missing", "rows: rounds [1, 3]", lambda s: s["rows"].pop(1)),
    ("rows out of order", "rows: rounds [2, 1, 3]", lambda s: s["rows"].insert(0, s["rows"].pop(1))),
    ("a row without test_acc", "rows: a row lacks round, test_acc, test_loss", lambda s: s["rows"][0].pop("test_acc")),
    ("rows not a list", "rows: not a list of metrics rows", _set("rows", {"round": 1})),
    ("params: a tensor missing", "params['", _drop("params")),
    ("params: an extra tensor", "not part of this run's model", lambda s: s["params"].__setitem__("zz", torch.ones(1))),
    ("params: misshapen", "expected torch.float32", _edit_tensor("params", lambda t: t[:-1])),
    ("params: another dtype", "torch.float64", _edit_tensor("params", lambda t: t.double())),
    ("params: not a tensor", "not a tensor", _edit_tensor("params", lambda t: t.tolist())),
    ("params: NaN", "params: holds NaN or inf", _edit_tensor("params", _nan)),
    ("params: not a dict", "params: not a dict of tensors", _set("params", [1.0])),
    ("server state: a tensor missing", "server_state['c']", _drop("server_state", "c")),
    ("server state: misshapen", "server_state['c']", _edit_tensor("server_state", lambda t: t.unsqueeze(0), "c")),
    ("client states: rows of 3 clients", "client_states['c_i']", _edit_tensor("client_states", lambda t: t[:3], "c_i")),
    ("client states: missing", "client_states['c_i']: missing", lambda s: s["client_states"].clear()),
    ("buffers: one the model lacks", "buffers['bn']: not part", _set("buffers", {"bn": torch.zeros(3)})),
    (
        "torch RNG: wrong size",
        "torch_rng: not torch's RNG state",
        _set("torch_rng", torch.zeros(10, dtype=torch.uint8)),
    ),
    ("torch RNG: none", "torch_rng: not torch's RNG state", _set("torch_rng", None)),
    ("counters: one missing", "counters: must hold", lambda s: s["counters"].pop("samples")),
    ("counters: negative", "counters: must hold", lambda s: s["counters"].__setitem__("elapsed", -1.0)),
    ("counters: NaN", "counters: must hold", lambda s: s["counters"].__setitem__("train_time", float("nan"))),
]


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """A run dir holding what an 8-round run killed after round 3 leaves (its checkpoint of round 3)."""
    base = tmp_path_factory.mktemp("base")
    cfg = compose_cfg([*OVERRIDES, "fl.rounds=3", f"cache_dir={base / 'cache'}"])
    cli.execute(cfg, base / "run", multirun=False)  # a finished 3-round run...
    cfg8 = compose_cfg([*OVERRIDES, f"cache_dir={base / 'cache'}"])
    (base / "run" / "config.yaml").write_text(
        (base / "run" / "config.yaml").read_text().replace("rounds: 3", "rounds: 8")
    )
    (base / "run" / "summary.json").write_text('{"status": "running"}')  # ...as a run of 8 killed after round 3
    return base / "run", cfg8


def test_the_undamaged_checkpoint_resumes(interrupted: tuple[Path, Any], tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(interrupted[0], run_dir)
    cli.execute(interrupted[1], run_dir, multirun=False)
    assert (run_dir / "metrics.csv").read_text().count("\n") == 9  # header + 8 rounds


@pytest.mark.parametrize(("case", "says", "damage"), FAULTS, ids=[f[0] for f in FAULTS])
def test_a_damaged_checkpoint_is_refused_in_one_line_and_nothing_is_touched(
    interrupted: tuple[Path, Any], tmp_path: Path, capsys: pytest.CaptureFixture, case: str, says: str, damage: Any
) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(interrupted[0], run_dir)
    path = run_dir / CHECKPOINT_FILE
    if damage == "truncate":
        path.write_bytes(path.read_bytes()[:500])
    elif isinstance(damage, bytes):
        path.write_bytes(damage)
    elif isinstance(damage, list):
        torch.save(damage, path)
    else:
        state = torch.load(path, weights_only=True)
        damage(state)
        torch.save(state, path)
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file() and p.name != LOCK_FILE}
    with pytest.raises(SystemExit) as e:
        cli.execute(interrupted[1], run_dir, multirun=False)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err
    assert err.startswith(f"fedrun: error: {path}: ") and says in err, err
    after = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file() and p.name != LOCK_FILE}
    assert after == before
