"""``fedrun-report line|plane|landscape|coherence`` over the checkpoints of a real (tiny) run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

from fedrun.cli.report import main
from fedrun.config.schema import RunSpec
from fedrun.report.saved_runs import eval_set, load_params, load_spec
from fedrun.run.checkpoint import CHECKPOINT_FILE, load_checkpoint, save_checkpoint
from fedrun.run.loop import run

TINY = [
    "experiment=smoke",
    "data.max_train_samples=600",
    "data.max_test_samples=200",
    "fl.clients=4",
    "fl.rounds=2",
    "model.hidden=[16]",
    "hardware.threads=1",
    "eval.diagnostics=true",
]


@pytest.fixture
def tiny_run(make_spec: Callable[..., RunSpec], tmp_path: Path) -> Path:
    """A finished run with its checkpoint and config, plus two perturbed copies of its model as files."""
    spec = make_spec(*TINY)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(spec.raw))
    run(spec, run_dir)
    ck = load_checkpoint(run_dir / CHECKPOINT_FILE)
    g = torch.Generator().manual_seed(0)
    for name in ("b.pt", "c.pt"):
        ck.params = {k: v + 0.05 * torch.randn(v.shape, generator=g) for k, v in ck.params.items()}
        save_checkpoint(run_dir / name, ck)
    return run_dir


def test_line_plane_landscape_and_coherence(tiny_run: Path, tmp_path: Path) -> None:
    r, out = tiny_run, tmp_path / "plots"
    common = ["--max-samples", "100", "--points", "3"]
    assert main(["line", str(r), str(r), *common, "--out", str(out / "line.png")]) == 0
    line = pd.read_csv(out / "line.csv")
    assert np.allclose(line["loss"], line["loss"].iloc[0])  # from a model to itself: flat
    spec = load_spec(r)
    es = eval_set(spec, max_samples=100)
    own_loss, own_err = es.evaluator()(es.check(load_params(r), "r"))
    assert line["loss"].iloc[0] == pytest.approx(own_loss, rel=1e-5)

    assert main(["plane", str(r), str(r / "b.pt"), str(r / "c.pt"), *common, "--out", str(out / "plane.png")]) == 0
    z = np.load(out / "plane.npz")
    assert z["loss"].shape == (3, 3) and z["anchors"].shape == (3, 2)
    assert z["anchor_loss"][0] == pytest.approx(own_loss, rel=1e-5)
    assert z["anchor_error"][0] == pytest.approx(own_err)

    assert main(["landscape", str(r), *common, "--out", str(out / "rand.png")]) == 0
    z = np.load(out / "rand.npz")
    assert z["loss"][1, 1] == pytest.approx(own_loss, rel=1e-4)  # the grid centre is the model itself
    assert main(["coherence", str(r), "--out", str(out / "diag.png")]) == 0
    for png in ("line.png", "plane.png", "rand.png", "diag.png"):
        assert (out / png).stat().st_size > 1000


def test_bad_inputs_are_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["line", str(tmp_path), str(tmp_path)]) == 2
    assert "no checkpoint" in capsys.readouterr().err
    (tmp_path / "metrics.csv").write_text("round,test_acc\n1,0.5\n")
    assert main(["coherence", str(tmp_path)]) == 2
    assert "eval.diagnostics=true" in capsys.readouterr().err


def _damage(how: str, ck: Path) -> None:
    if how == "truncated":
        ck.write_bytes(ck.read_bytes()[:100])
    elif how == "empty":
        ck.write_bytes(b"")
    elif how == "foreign-pickle":
        torch.save([1, 2, 3], ck)
    elif how == "params-a-list":
        state = torch.load(ck, weights_only=True)
        state["params"] = [torch.zeros(2)]
        torch.save(state, ck)
    elif how == "params-not-tensors":
        state = torch.load(ck, weights_only=True)
        state["params"] = {k: 1.0 for k in state["params"]}
        torch.save(state, ck)


@pytest.mark.parametrize("how", ["truncated", "empty", "foreign-pickle", "params-a-list", "params-not-tensors"])
def test_a_refused_checkpoint_is_one_line(
    how: str, tiny_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A checkpoint fedrun refuses (truncated, foreign, damaged) ends a scan in one line naming it (issue 32)."""
    _damage(how, tiny_run / CHECKPOINT_FILE)
    capsys.readouterr()
    for command in ("landscape", "line"):
        models = [str(tiny_run)] * (2 if command == "line" else 1)
        out = tmp_path / f"{command}.png"
        assert main([command, *models, "--max-samples", "20", "--points", "2", "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert f"{command}: error: " in err and "checkpoint" in err, err
