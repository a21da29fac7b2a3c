"""fedrun.run.checkpoint: round trip, atomic writes, safe loading, config fingerprints and run-dir checks."""

from __future__ import annotations

import hashlib
import json
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from fedrun.config.identity import config_diff, config_key, fingerprint, fingerprints, round_schedule, schedule_moved
from fedrun.core.errors import ResumeError
from fedrun.run.checkpoint import CHECKPOINT_FILE, Checkpoint, check_run_dir, load_checkpoint, save_checkpoint

RAW = {
    "algorithm": {"name": "fedavg"},
    "data": {"name": "fmnist", "root": "data", "download": False, "max_train_samples": 600},
    "fl": {"clients": 4, "lr": 0.05},
    "output": {"quiet": False, "plots": True},
    "checkpoint": {"every": 1, "keep_final": True},
    "cache_dir": "outputs/.cache",
    "seed": 0,
}


def _ckpt(fp: str = "abc") -> Checkpoint:
    g = torch.Generator().manual_seed(0)
    return Checkpoint(
        round=3,
        fingerprint=fp,
        params={"w": torch.randn(4, 3, generator=g), "b": torch.zeros(3)},
        server_state={"m": {"w": torch.ones(4, 3)}},
        client_states={"c": torch.randn(5, 4, 3, generator=g)},
        rows=[{"round": 1, "test_acc": np.float64(0.5), "gamma": torch.tensor(1.25), "note": "x"}],
        counters={"samples": 100, "train_time": 1.5, "agg_time": 0.1, "elapsed": 2.0},
        torch_rng=torch.get_rng_state(),
    )


def test_round_trip_restores_every_tensor_and_row(tmp_path: Path) -> None:
    ck = _ckpt()
    path = tmp_path / CHECKPOINT_FILE
    save_checkpoint(path, ck)
    back = load_checkpoint(path, "abc")
    assert back.round == 3
    assert torch.equal(back.params["w"], ck.params["w"])
    assert torch.equal(back.server_state["m"]["w"], ck.server_state["m"]["w"])
    assert torch.equal(back.client_states["c"], ck.client_states["c"])
    assert torch.equal(back.torch_rng, ck.torch_rng)
    # numpy and 0-d tensor values become plain numbers, which weights_only loading accepts
    assert back.rows == [{"round": 1, "test_acc": 0.5, "gamma": 1.25, "note": "x"}]
    assert back.counters["samples"] == 100
    assert [p.name for p in tmp_path.iterdir()] == [CHECKPOINT_FILE]  # no temp file left behind


def test_refuses_a_checkpoint_of_another_config(tmp_path: Path) -> None:
    save_checkpoint(tmp_path / "c.pt", _ckpt("abc"))
    with pytest.raises(ResumeError, match="different config"):
        load_checkpoint(tmp_path / "c.pt", "other")


class _Boom:
    def __reduce__(self):  # noqa: ANN204 - would run code when unpickled by a plain pickle.load
        return (print, ("code ran while loading",))


def test_loading_never_executes_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "evil.pt"
    torch.save({"version": 1, "payload": _Boom()}, path)
    with pytest.raises(ResumeError, match="unreadable checkpoint"):
        load_checkpoint(path)
    assert "code ran" not in capsys.readouterr().out
    path.write_bytes(pickle.dumps(_Boom(), protocol=2))
    with pytest.raises(ResumeError):
        load_checkpoint(path)
    assert "code ran" not in capsys.readouterr().out


def test_truncated_checkpoint_is_a_one_line_error(tmp_path: Path) -> None:
    path = tmp_path / CHECKPOINT_FILE
    save_checkpoint(path, _ckpt())
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(ResumeError, match="unreadable checkpoint") as e:
        load_checkpoint(path)
    assert "\n" not in str(e.value)


def test_fingerprint_ignores_only_result_neutral_keys() -> None:
    neutral = {**RAW, "output": {"quiet": True, "plots": False}, "checkpoint": {"every": 7}, "cache_dir": None}
    neutral["data"] = {**RAW["data"], "root": "/elsewhere", "download": True}
    assert fingerprint(neutral) == fingerprint(RAW)
    changed = {**RAW, "fl": {**RAW["fl"], "lr": 0.1}}
    assert fingerprint(changed) != fingerprint(RAW)
    assert config_diff(RAW, changed) == ["fl.lr: 0.05 -> 0.1"]
    assert fingerprint({**RAW, "data": {**RAW["data"], "max_train_samples": 700}}) != fingerprint(RAW)


def test_check_run_dir(tmp_path: Path) -> None:
    assert check_run_dir(tmp_path, RAW) is None  # nothing there: a fresh run
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(RAW))
    assert check_run_dir(tmp_path, RAW) == "unfinished"
    (tmp_path / "summary.json").write_text('{"status": "completed"}')
    assert check_run_dir(tmp_path, {**RAW, "output": {"quiet": True}}) == "completed"
    with pytest.raises(ResumeError, match=r"different config \(seed: 0 -> 1\)"):
        check_run_dir(tmp_path, {**RAW, "seed": 1})


def test_later_sections_left_at_off_keep_older_fingerprints() -> None:
    old = {**RAW, "eval": {"every": 1}}
    off = {**old, "eval": {"every": 1, "client_weights": False}, "corrupt": {"fraction": 0.0, "labels": [0, 1]}}
    assert fingerprint(off) == fingerprint(old)
    assert fingerprint({**off, "corrupt": {"fraction": 0.25, "labels": [0, 1]}}) != fingerprint(old)
    assert fingerprint({**off, "eval": {"every": 1, "client_weights": True}}) != fingerprint(old)


def test_device_may_change_on_resume_and_older_checkpoints_still_load(tmp_path: Path) -> None:
    gpu = {**RAW, "hardware": {"device": "cuda", "engine": "vectorised", "precision": "fp32"}}
    cpu = {**gpu, "hardware": {**gpu["hardware"], "device": "cpu"}}
    assert fingerprint(gpu) == fingerprint(cpu)  # a GPU run continues on the CPU and back
    assert fingerprint({**cpu, "hardware": {**cpu["hardware"], "precision": "bf16"}}) != fingerprint(cpu)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(gpu))
    assert check_run_dir(tmp_path, cpu) == "unfinished"

    # a checkpoint written before the device left the fingerprint: sha256 of the sorted JSON of the config
    # without output, checkpoint, cache_dir, tracking, data.root and data.download (device included)
    kept = {k: v for k, v in cpu.items() if k not in ("output", "checkpoint", "cache_dir", "tracking")}
    kept["data"] = {k: v for k, v in cpu["data"].items() if k not in ("root", "download")}
    old = hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()
    save_checkpoint(tmp_path / CHECKPOINT_FILE, _ckpt(old))
    assert load_checkpoint(tmp_path / CHECKPOINT_FILE, fingerprints(cpu, 3)).round == 3  # on its own device
    with pytest.raises(ResumeError, match="different config"):
        load_checkpoint(tmp_path / CHECKPOINT_FILE, fingerprints(gpu, 3))  # its fingerprint names the device


def _old_fingerprint(raw: dict) -> str:
    """fingerprint() as fedrun computed it before runs could be extended (written out again, for the test)."""
    import copy
    import hashlib
    import json

    out = copy.deepcopy({k: v for k, v in raw.items() if k not in ("output", "checkpoint", "cache_dir", "tracking")})
    for k in ("root", "download"):
        out["data"].pop(k, None)
    if not (out.get("corrupt") or {}).get("fraction"):
        out.pop("corrupt", None)
    if "eval" in out and not out["eval"].get("client_weights"):
        out["eval"].pop("client_weights", None)
    return hashlib.sha256(json.dumps(out, sort_keys=True, default=str).encode()).hexdigest()


EXTENSIBLE = {**RAW, "fl": {**RAW["fl"], "rounds": 200}, "eval": {"every": 1, "target": None, "last_k": 10}}


def test_fl_rounds_and_evaluation_settings_leave_the_fingerprint_but_schedule_rounds_do_not() -> None:
    longer = {**EXTENSIBLE, "fl": {**EXTENSIBLE["fl"], "rounds": 400}}
    assert fingerprint(longer) == fingerprint(EXTENSIBLE)
    assert fingerprint({**EXTENSIBLE, "eval": {"every": 1, "target": 0.8, "last_k": 5}}) == fingerprint(EXTENSIBLE)
    assert fingerprint({**EXTENSIBLE, "eval": {"every": 2, "target": None, "last_k": 10}}) != fingerprint(EXTENSIBLE)
    ima = {**EXTENSIBLE, "ima": {"enabled": True, "start": 0.75}}
    assert round_schedule(ima) == {"ima.start": 150}
    assert fingerprint({**ima, "fl": longer["fl"]}) != fingerprint(ima)  # t_s 150 -> 300
    assert fingerprint({**ima, "fl": longer["fl"], "ima": {"enabled": True, "start": 0.375}}) == fingerprint(ima)
    fedfa = {**EXTENSIBLE, "algorithm": {"name": "fedfa", "calib_start": 0.25}}
    assert round_schedule(fedfa) == {"algorithm.calib_start": 51}  # the first round t (0-based) with t > 0.25 x 200
    assert "ima.start: its round moves from 150 to 300" in schedule_moved(ima, {**ima, "fl": longer["fl"]})
    assert "(ima.start=0.375)" in schedule_moved(ima, {**ima, "fl": longer["fl"]})


def test_checkpoints_from_before_extension_still_resume_and_extend() -> None:
    old = _old_fingerprint(EXTENSIBLE)
    assert old in fingerprints(EXTENSIBLE, 150)  # an interrupted run, resumed
    longer = {**EXTENSIBLE, "fl": {**EXTENSIBLE["fl"], "rounds": 400}}
    assert old in fingerprints(longer, 200)  # a finished 200-round run, extended to 400
    assert old not in fingerprints(longer, 150)
    ima = {**EXTENSIBLE, "ima": {"enabled": True, "start": 0.75}}
    assert _old_fingerprint(ima) not in fingerprints({**ima, "fl": longer["fl"]}, 200)  # would move t_s


def test_only_known_methods_read_fl_rounds() -> None:
    """A method whose computation depends on fl.rounds must declare the rounds it derives in round_schedule,
    or extending its runs would silently change them."""
    import fedrun.algorithms

    root = Path(fedrun.algorithms.__file__).parent
    readers = sorted(f.name for f in root.glob("*.py") if "fl.rounds" in f.read_text())
    assert readers == ["fedfa.py", "ima.py"]


def test_a_runs_identity_keeps_fl_rounds_and_evaluation_settings_that_its_fingerprint_leaves_out() -> None:
    """Sweep job dirs and the report's duplicates use config_key: runs of 200 and 400 rounds are two runs,
    though one can extend the other (same fingerprint)."""
    longer = {**EXTENSIBLE, "fl": {**EXTENSIBLE["fl"], "rounds": 400}}
    assert fingerprint(longer) == fingerprint(EXTENSIBLE) and config_key(longer) != config_key(EXTENSIBLE)
    later_k = {**EXTENSIBLE, "eval": {"every": 1, "target": None, "last_k": 5}}
    assert config_key(later_k) != config_key(EXTENSIBLE)
    moved = {**EXTENSIBLE, "hardware": {"device": "cuda"}}
    assert config_key(moved) == config_key({**EXTENSIBLE, "hardware": {"device": "cpu"}})


def test_hold_out_scaling_augmentation_and_train_all_left_off_keep_older_fingerprints() -> None:
    off = {
        **RAW,
        "data": {**RAW["data"], "client_valid_ratio": 0.0, "normalize": "dataset", "augment": "none"},
        "fl": {**RAW["fl"], "train_all": False},
    }
    assert fingerprint(off) == fingerprint(RAW)
    for section, key, on in [
        ("data", "client_valid_ratio", 0.3),
        ("data", "normalize", "none"),
        ("data", "augment", "crop_flip"),
        ("fl", "train_all", True),
    ]:
        assert fingerprint({**off, section: {**off[section], key: on}}) != fingerprint(RAW), key
