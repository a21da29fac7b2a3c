"""The `fedrun` command: a real run learns and writes its files; bad input is one line, exit 2; runs repeat."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fedrun.config.schema import FLConfig
from fedrun.engines.sampling import sample_clients
from fedrun.run.experiment import build_experiment
from fedrun.storage.atomic import TIMING_COLUMNS
from tests.conftest import main_exit_code

SMALL = ("data.max_train_samples=3000", "data.max_test_samples=1000", "fl.clients=5", "fl.rounds=3")
TIMING = list(TIMING_COLUMNS)


def test_real_fmnist_run_learns_and_writes_outputs(run_cli, tmp_path: Path) -> None:
    r = run_cli(*SMALL, "eval.train_acc=true", "fl.local_epochs=2", "fl.lr=0.1")
    assert r.returncode == 0, r.stderr
    run = tmp_path / "run"
    for f in ("metrics.csv", "summary.json", "partition.csv", "partition.png", "accuracy.png", "config.yaml"):
        assert (run / f).is_file(), f
    s = json.loads((run / "summary.json").read_text())
    assert s["status"] == "completed" and s["rounds_completed"] == 3
    assert s["test_acc_final"] > 0.5  # chance is 0.1
    m = pd.read_csv(run / "metrics.csv")
    assert list(m["round"]) == [1, 2, 3] and "train_acc" in m
    counts = pd.read_csv(run / "partition.csv")
    assert counts["total"].sum() == 3000
    assert "final test accuracy" in r.stdout and str(run) in r.stdout


BAD = [
    (["algorithm=nope"], "algorithm", "fedavg"),
    (["model=nope"], "model", "mlp"),
    (["data=nope"], "data", "fmnist"),
    (["partition=nope"], "partition", "dirichlet"),
    (["partition.alpha=0"], "partition.alpha", "> 0"),
    (["partition.alpha=-1"], "partition.alpha", "> 0"),
    (["fl.participation=0"], "fl.participation", "(0.0, 1.0]"),
    (["fl.participation=1.5"], "fl.participation", "(0.0, 1.0]"),
    (["fl.lr=-0.1"], "fl.lr", ">= 0"),
    (["fl.rounds=0"], "fl.rounds", "> 0"),
    (["data.max_train_samples=50", "fl.clients=100"], "fl.clients", "100 clients"),
    (["fl.rounds=abc"], "fl.rounds", ""),
    (["fl.nope=1"], "nope", ""),
    (["data=shakespeare", "model=mlp"], "model.name", "valid with data=shakespeare: lstm"),  # was a torch error, exit 1
    (["data=cifar10", "model=lstm"], "model.name", "simplecnn"),
]

HEADLINE = ("algorithm=fedlaw", "data=cifar10", "partition.alpha=0.1")  # the README's first command (issue 23)


def test_headline_command_offline_names_the_three_ways(run_cli, tmp_path: Path) -> None:
    """Without CIFAR-10's files: one line, exit 2, naming where the files go, data.download=true and
    data.standin=true; its model is the papers' SimpleCNN, not the MLP."""
    r = run_cli(*HEADLINE, f"data.root={tmp_path / 'data'}")
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("fedrun: error: cifar10: "), r.stderr
    line = lines[0]
    assert f"put it at {tmp_path / 'data' / 'cifar-10-batches-py'}/ (data_batch_1" in line
    assert "data.download=true" in line and "data.standin=true for a dry run" in line
    config = (tmp_path / "run" / ".hydra" / "config.yaml").read_text()
    assert "name: simplecnn" in config and "name: mlp" not in config


def test_a_dataset_without_model_runs_and_records_its_papers_model(run_cli, tmp_path: Path) -> None:
    """data=cifar10 on stand-in data trains FedLAW's SimpleCNN, and config.yaml says so."""
    r = run_cli("data=cifar10", "data.standin=true", "fl.clients=2", "fl.rounds=1", "output.plots=false")
    assert r.returncode == 0, r.stderr
    assert "cifar10 / simplecnn" in r.stdout
    config = (tmp_path / "run" / "config.yaml").read_text()
    assert "model:\n  name: simplecnn\n" in config


@pytest.mark.parametrize(("overrides", "field", "hint"), BAD, ids=[" ".join(b[0]) for b in BAD])
def test_bad_input_is_one_line_exit_2_nothing_written(run_cli, tmp_path: Path, overrides, field, hint) -> None:
    r = run_cli(*overrides)
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert "Traceback" not in r.stderr and field in lines[0] and hint in lines[0], lines[0]
    run = tmp_path / "run"
    if run.exists():
        assert sorted(p.name for p in run.iterdir() if p.name != ".hydra") == ["error.txt"]  # .hydra: Hydra's record


def test_same_config_and_seed_give_identical_metrics(run_cli, tmp_path: Path) -> None:
    # engine and threads pinned, as the README says for bit-identical reruns: measured, they follow the load
    args = (*SMALL, "fl.participation=0.6", "fl.momentum=0.5", "hardware.engine=sequential", "hardware.threads=1")
    a, b = tmp_path / "a", tmp_path / "b"
    # two fresh interpreters (each its own hash seed, nothing imported before): forked ones could share a state
    assert run_cli(*args, run_dir=a, fresh=True).returncode == 0
    assert run_cli(*args, run_dir=b, fresh=True).returncode == 0
    ma, mb = pd.read_csv(a / "metrics.csv"), pd.read_csv(b / "metrics.csv")
    pd.testing.assert_frame_equal(ma.drop(columns=TIMING), mb.drop(columns=TIMING), check_exact=True)
    c = tmp_path / "c"
    assert run_cli(*args, "seed=1", run_dir=c).returncode == 0
    assert not pd.read_csv(c / "metrics.csv")["test_acc"].equals(ma["test_acc"])


def test_initial_model_and_client_samples_are_the_same_for_every_algorithm(make_spec) -> None:
    a = build_experiment(make_spec("algorithm=fedavg", "experiment=smoke"))
    b = build_experiment(make_spec("algorithm=fedprox", "experiment=smoke"))
    wa, wb = a.model.init_params(), b.model.init_params()
    assert all(np.array_equal(wa[k], wb[k]) for k in wa)
    fl = FLConfig(clients=100, participation=0.1)
    seq = [sample_clients(fl, 0, t) for t in range(20)]
    assert all(len(s) == 10 for s in seq)
    assert len({tuple(s) for s in seq}) > 15  # a different cohort most rounds
    assert all(np.array_equal(s, sample_clients(fl, 0, t)) for t, s in enumerate(seq))
    assert not all(np.array_equal(s, sample_clients(fl, 1, t)) for t, s in enumerate(seq))


def test_bernoulli_participation_has_the_right_rate() -> None:
    fl = FLConfig(clients=100, participation=0.2, sampling="bernoulli")
    sizes = [len(sample_clients(fl, 3, t)) for t in range(200)]
    assert 18 < np.mean(sizes) < 22 and np.std(sizes) > 1


def test_help_and_cfg_job_work(run_cli) -> None:
    r = run_cli("--help")
    text = " ".join(r.stdout.split())
    assert r.returncode == 0 and "fedrun: a config-driven federated-learning experiment runner" in text
    assert "* dirichlet Per-class Dirichlet label skew" in text  # each option with its doc (tests/cli/test_help.py)
    options = r.stdout.split("algorithm: the federated method", 1)[1].split("\n\n", 1)[0]
    assert "  * fedavg " in options and "    fedprox " in options
    r = run_cli("--cfg", "job", "algorithm=fedprox")
    assert r.returncode == 0 and "mu: 0.01" in r.stdout


def test_every_outcome_of_an_attempt_has_one_exit_code() -> None:
    from fedrun.cli.main import EXIT_CODES, exit_code_of
    from fedrun.run.attempt import AttemptResult, Outcome
    from fedrun.storage.status import Status

    assert set(EXIT_CODES) == set(Outcome)
    assert exit_code_of(AttemptResult(Outcome.REFUSED)) == 2
    assert exit_code_of(AttemptResult(Outcome.SKIPPED_DIVERGED, Status.DIVERGED)) == 1
    assert exit_code_of(AttemptResult(Outcome.INTERRUPTED, signal="SIGTERM")) == 143


def test_a_failure_whose_traceback_cannot_be_saved_names_no_error_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Issue 32 point 8: a full disk at start-up said "(traceback in .../error.log)", a file never written."""
    import errno

    from fedrun.cli import main as cli
    from fedrun.run import loop
    from fedrun.storage.rundir import RunDir
    from tests.conftest import compose_cfg
    from tests.hostile import TINY

    def full(rd: RunDir, text: str) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    def run(spec: object, rd: RunDir, **kwargs: object) -> dict:
        rd.start("seed: 0\n")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(RunDir, "write_error_log", full)
    monkeypatch.setattr(loop, "run", run)
    with pytest.raises(SystemExit) as e:
        cli.execute(compose_cfg([*TINY, f"cache_dir={tmp_path / 'cache'}"]), tmp_path / "run", multirun=False)
    err = capsys.readouterr().err
    assert e.value.code == 1 and err.startswith("fedrun: job failed: OSError: [Errno 28] No space left on device")
    assert "error.log" not in err and err.count("\n") == 1
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "failed"


@pytest.mark.parametrize("outputs_before", [False, True], ids=["no-outputs-folder", "outputs-folder-of-the-user"])
def test_a_refused_command_leaves_no_dated_run_dir(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture, outputs_before: bool
) -> None:
    """Bad input with Hydra's default run dir (outputs/<date>/<time>-<method>-<data>): one line, exit 2, and no
    folder the command created is left, so nothing looks like a run that did not happen; folders that were there
    stay. Before: outputs/<date>/<time>-fedavg-fmnist/ holding only .hydra/ and error.txt."""
    if outputs_before:
        (tmp_path / "outputs" / "2020-01-01").mkdir(parents=True)
        (tmp_path / "outputs" / "mine.txt").write_text("the user's\n")
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    monkeypatch.chdir(tmp_path)
    assert main_exit_code(monkeypatch, ["fedrun", "experiment=smoke", "fl.clients=0", "cache_dir=cache"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fedrun: error: fl.clients") and err.count("\n") == 1, err
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before
