"""``fedrun --privacy-noise``: the noise multiplier for a target epsilon, answered without training or a run
directory; its z is the one the run solves for the same config (client and sample level), the library's epsilon at
that z is within the target, and what cannot be answered is refused in one line (exit 2)."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from fedrun.cli.privacy_query import main as privacy_noise
from fedrun.cli.privacy_query import noise_line, solve
from fedrun.config.schema import RunSpec
from fedrun.core.errors import ConfigError
from fedrun.privacy.accounting import epsilon
from tests.run.run_util import finished_run

SMALL = (
    "data.max_train_samples=600", "data.max_test_samples=200", "fl.clients=10", "fl.rounds=3",
    "fl.participation=0.5", "fl.batch_size=20", "model.hidden=[16]", "hardware.threads=1",
)  # fmt: skip
LINE = re.compile(
    r"noise multiplier z=(\S+) reaches epsilon=(\S+) at delta=(\S+) over (\d+) rounds \((.+), q=(\S+),"
    r" accountant=(rdp|pld)\)"
)


@pytest.mark.parametrize(
    "privacy",
    [
        ("privacy=client", "privacy.target_epsilon=3"),
        ("privacy=client", "privacy.target_epsilon=3", "privacy.sampling=fixed", "privacy.accountant=pld"),
        ("privacy=sample", "privacy.target_epsilon=5"),
    ],
)
def test_z_is_the_runs_and_reaches_the_target(
    tmp_path: Path, make_spec: Callable[..., RunSpec], privacy: tuple[str, ...]
) -> None:
    spec = make_spec(*SMALL, *privacy)
    z, q, steps, _ = solve(spec)
    _, summary = finished_run(tmp_path, "run", spec)
    assert z == summary["privacy"]["noise_multiplier"]  # the run's own solved z, bit for bit
    pv = spec.privacy
    assert pv.target_epsilon is not None
    eps = epsilon(q, z, steps, pv.delta, pv.accountant)
    assert eps <= pv.target_epsilon and eps == pytest.approx(pv.target_epsilon, rel=1e-2)  # reached, not undershot
    assert summary["epsilon_final"] <= pv.target_epsilon + 1e-9
    m = LINE.fullmatch(noise_line(spec))
    assert m is not None
    assert float(m[1]) == pytest.approx(z, rel=1e-5) and int(m[4]) == 3 and m[7] == pv.accountant


def test_sample_level_is_the_smallest_clients_budget(make_spec: Callable[..., RunSpec]) -> None:
    from fedrun.data.federated import num_local_steps
    from fedrun.run.experiment import build_experiment

    spec = make_spec(*SMALL, "privacy=sample", "privacy.target_epsilon=5", "partition=dirichlet")
    sizes = build_experiment(spec).fed.sizes
    z, q, steps, what = solve(spec)
    n = int(sizes.min())
    assert (q, steps) == (20 / n, 3 * num_local_steps(n, spec.fl)) and f"n={n}" in what
    assert int(sizes.max()) > n  # the partition is uneven: the smallest client is the one that spends the most


def test_the_command_answers_in_one_line_without_a_run_dir(
    tmp_path: Path, run_cli: Callable[..., subprocess.CompletedProcess], capsys: pytest.CaptureFixture
) -> None:
    proc = run_cli("--privacy-noise", "privacy=client", "privacy.target_epsilon=4", "fl.rounds=100",
                   "fl.participation=0.1", "fl.clients=100")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1
    m = LINE.fullmatch(lines[0])
    assert m is not None and m[4] == "100" and float(m[6]) == 0.1 and m[7] == "rdp"
    z = float(m[1])
    assert epsilon(0.1, z, 100, 1e-5) == pytest.approx(4, rel=1e-4)
    assert not (tmp_path / "run").exists()
    # the refusal in-process: the command's route to this answer is the one above
    args = ["--privacy-noise", "privacy=client", "privacy.target_epsilon=0.001", "fl.rounds=100"]
    with pytest.raises(SystemExit) as exit_:
        privacy_noise([*args, f"hydra.run.dir={tmp_path / 'run'}", f"cache_dir={tmp_path / 'cache'}"])
    out, err = capsys.readouterr()
    assert exit_.value.code == 2 and len(err.strip().splitlines()) == 1 and not out
    assert "privacy.target_epsilon: 0.001 is unreachable over 100 steps" in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (("privacy.target_epsilon=4",), "privacy.mode"),  # privacy=none: no noise
        (("privacy=client",), "privacy.target_epsilon"),  # nothing to solve for
        (("privacy=sample", "privacy.target_epsilon=0.01", "fl.rounds=50"), "privacy.target_epsilon"),  # unreachable
    ],
)
def test_refused_naming_the_field(make_spec: Callable[..., RunSpec], overrides: tuple[str, ...], field: str) -> None:
    with pytest.raises(ConfigError, match=f"^{re.escape(field)}: "):
        solve(make_spec(*SMALL, *overrides))
