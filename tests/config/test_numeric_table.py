"""The ``numeric`` table (issue 22, point 5): numbers fedrun accepts, it can train with.

A float hyperparameter that a training step multiplies with parameters, gradients or another hyperparameter
must stay representable in the run's dtype (``hardware.precision``), and the end of a (0, 1) coefficient that
leaves a method inert (identical loss every round) or divides by zero is refused. Each case is validated
in-process (``make_spec``); one runs the console script for the exit code and the single line.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from fedrun.config.validate import FLOAT_MAX
from fedrun.core.errors import ConfigError
from tests.conftest import main_exit_code

# (overrides, the field the one-line error names, a piece of the valid range it states)
REFUSED = [
    # values whose products overflow the run's dtype: the first step would fail converting the scalar
    ("fl.lr=1e308", "fl.lr", "<= 1.84e+19"),
    ("fl.weight_decay=1e308", "fl.weight_decay", "<= 1.84e+19"),
    ("fl.lr=1e20", "fl.lr", "<= 1.84e+19"),  # representable in fp32, but lr * wd or lr * g is not
    ("fl.lr=1e20 hardware.precision=bf16", "fl.lr", "<= 1.84e+19"),
    ("fl.weight_decay=1e200 hardware.precision=fp64", "fl.weight_decay", "<= 1.34e+154"),
    ("fl.lr=1e300 hardware.precision=fp64", "fl.lr", "<= 1.34e+154"),
    ("fl.grad_clip=1e300", "fl.grad_clip", "<= 1.84e+19"),
    ("algorithm=fedopt algorithm.server_lr=1e300", "algorithm.server_lr", "<= 1.84e+19"),
    ("algorithm=scaffold algorithm.server_lr=1e30", "algorithm.server_lr", "<= 1.84e+19"),
    ("algorithm=fedadam algorithm.server_lr=1e300", "algorithm.server_lr", "<= 1.84e+19"),
    ("algorithm=feddyn algorithm.alpha=1e25", "algorithm.alpha", "<= 1.84e+19"),
    ("algorithm=fedsmoo algorithm.lam=1e300", "algorithm.lam", "<= 1.84e+19"),
    ("algorithm=fedprox algorithm.mu=1e100", "algorithm.mu", "<= 1.84e+19"),
    ("algorithm=fedlaw algorithm.server_lr=1e300", "algorithm.server_lr", "<= 1.84e+19"),
    ("ima.enabled=true ima.min_lr=1e300", "ima.min_lr", "<= 1.84e+19"),
    # closed ends of (0, 1) coefficients that make a method inert or divide by zero
    ("algorithm=fedadam algorithm.beta1=1.0", "algorithm.beta1", "[0.0, 1.0)"),  # m stays 0
    ("algorithm=fedyogi algorithm.beta1=1.0", "algorithm.beta1", "[0.0, 1.0)"),
    ("algorithm=fedadagrad algorithm.beta1=1.0", "algorithm.beta1", "[0.0, 1.0)"),
    ("algorithm=mimelite algorithm.beta=1.0", "algorithm.beta", "[0.0, 1.0)"),  # client direction = m = 0
    ("algorithm=fedcm algorithm.alpha=0", "algorithm.alpha", "(0.0, 1.0]"),  # direction = Delta^0 = 0
    ("algorithm=mofedsam algorithm.alpha=0.0", "algorithm.alpha", "(0.0, 1.0]"),
    ("algorithm=fedavgm algorithm.form=cos algorithm.beta=1.0", "algorithm.beta", "[0.0, 1.0)"),
    ("algorithm=fedcos algorithm.server=avgm algorithm.server_momentum=1.0", "algorithm.server_momentum", "[0.0, 1.0)"),
    ("algorithm=feddf algorithm.beta1=1.0", "algorithm.beta1", "[0.0, 1.0)"),  # Adam: 1 / (1 - beta^t)
    ("algorithm=fedbe algorithm.beta2=1.0", "algorithm.beta2", "[0.0, 1.0)"),
    ("algorithm=serverft algorithm.beta1=1", "algorithm.beta1", "[0.0, 1.0)"),
    ("algorithm=fedlaw algorithm.beta1=1.0", "algorithm.beta1", "[0.0, 1.0)"),
    ("algorithm=fedlaw_swa algorithm.beta2=1.0", "algorithm.beta2", "[0.0, 1.0)"),
    # the red team's next round
    ("fl.lr=inf", "fl.lr", "must be a finite number"),
    ("fl.momentum=1e30", "fl.momentum", "[0.0, 1.0]"),
    ("fl.lr_decay=1e30", "fl.lr_decay", "(0.0, 1.0]"),  # lr * decay^t overflows within a few rounds
    ("algorithm=fedsam algorithm.rho=1e300", "algorithm.rho", "<= 1.84e+19"),  # the SAM ascent step
    ("fl.grad_clip=0", "fl.grad_clip", "> 0"),  # a zero clip norm: every step would be zero
]

# ends and sizes that stay accepted: each is a legitimate reduction or a trainable value
ACCEPTED = [
    "fl.lr=1e19",  # below sqrt(fp32 max)
    "fl.lr=1e150 hardware.precision=fp64",
    "fl.momentum=1.0",  # undamped heavy ball: trains (FedNova refuses it itself: its a_i divides by 1 - mu)
    "algorithm=fedsam algorithm.rho=0",  # FedAvg
    "algorithm=fedasam algorithm.eta=0",
    "algorithm=fedprox algorithm.mu=0",  # FedAvg
    "algorithm=fedsmoo algorithm.rho=0",
    "algorithm=moon algorithm.mu=0",
    "algorithm=fedgam algorithm.alpha=0",
    "algorithm=fedcm algorithm.alpha=1.0",  # FedAvg
    "algorithm=mofedsam algorithm.alpha=1.0",  # FedSAM
    "algorithm=fedadam algorithm.beta1=0",  # no first moment
    "algorithm=fedadam algorithm.beta2=1.0",  # v stays 0: server momentum with step server_lr / tau
    "algorithm=fedyogi algorithm.beta2=1.0",
    "algorithm=fedadagrad",  # beta1 = 0 by default
    "algorithm=fedavgm algorithm.beta=1.0",  # standard form: undamped momentum, as fl.momentum = 1
    "algorithm=fedavgm algorithm.form=cos algorithm.beta=0",  # FedAvg
    "algorithm=mimelite algorithm.beta=0",  # FedAvg plus the uploaded gradient
    "algorithm=fedcos algorithm.server=avgm algorithm.server_momentum=0",
    "algorithm=fedgma algorithm.tau=0",  # mask 1: FedAvg with a server lr
    "algorithm=fedgma algorithm.tau=1.0",
    "algorithm=fedfa algorithm.anchor_momentum=1.0",  # fixed anchors
    "algorithm=fedfa algorithm.anchor_momentum=0",
    "algorithm=fedfa algorithm.calib_start=1.0",  # no calibration
    "algorithm=fedavg_gws algorithm.gamma=1.0",  # FedAvg
    "algorithm=feddf algorithm.beta1=0 algorithm.beta2=0",
    "algorithm=fedlaw algorithm.step_gamma=1.0",
    "ima.enabled=true ima.start=1.0",  # averaging never starts: the base method
]

CATEGORY = "numeric"
CASES = [*REFUSED, *ACCEPTED]


@pytest.mark.parametrize(("overrides", "field", "valid"), REFUSED, ids=[r[0] for r in REFUSED])
def test_numeric_refused(make_spec: Callable, overrides: str, field: str, valid: str) -> None:
    with pytest.raises(ConfigError) as e:
        make_spec(*overrides.split())
    assert e.value.field == field, str(e.value)
    assert valid in e.value.message, str(e.value)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("overrides", ACCEPTED)
def test_numeric_accepted(make_spec: Callable, overrides: str) -> None:
    make_spec(*overrides.split())


def test_float_max_is_torch_finfo() -> None:
    """The config layer's copy of finfo.max (no torch import while validating) matches torch's."""
    dtypes = {"fp32": torch.float32, "fp64": torch.float64, "bf16": torch.bfloat16}
    assert FLOAT_MAX == {name: torch.finfo(dt).max for name, dt in dtypes.items()}


def test_huge_lr_is_one_line_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The red team's case end to end: ``fl.lr=1e308`` crashed the first step with a traceback file (exit 1)."""
    monkeypatch.chdir(tmp_path)  # `fedrun` through its console script's code path, in this process
    argv = ["fedrun", "experiment=smoke", "output.quiet=true", "output.plots=false", "fl.rounds=1", "fl.lr=1e308"]
    code = main_exit_code(monkeypatch, [*argv, f"hydra.run.dir={tmp_path / 'run'}", f"cache_dir={tmp_path / 'cache'}"])
    stderr = capsys.readouterr().err
    assert code == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fedrun: error: "), stderr
    assert re.search(r"(?<![\w.])fl\.lr\b", lines[0]) and "<= 1.84e+19" in lines[0], lines[0]
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [".hydra", "error.txt"]
