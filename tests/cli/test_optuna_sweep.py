"""Tuning with Hydra's Optuna sweeper (conf/hydra/sweeper/optuna_tpe.yaml): each trial's value is its run's metric."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from fedrun.cli.main import _run_and_report, execute, objective
from fedrun.config.schema import RunSpec
from fedrun.core.errors import ConfigError
from tests.conftest import compose_cfg

optuna = pytest.importorskip("optuna", reason="the Optuna sweeper needs the extra: pip install 'fedrun[tune]'")
pytest.importorskip("hydra_plugins.hydra_optuna_sweeper", reason="needs pip install 'fedrun[tune]'")

TINY = (  # fl.rounds comes from each test
    "experiment=smoke",
    "data.max_train_samples=600",
    "data.max_test_samples=200",
    "fl.clients=4",
    "model.hidden=[32]",
    "hardware.engine=sequential",
    "hardware.threads=1",
    "output.plots=false",
    "checkpoint.every=0",
)


def _sweep(run_cli: Callable, tmp_path: Path, *args: str):  # noqa: ANN202 - (process, study)
    db = tmp_path / "studies" / "optuna.db"  # its directory does not exist yet: the preset makes it
    res = run_cli("-m", "hydra/sweeper=optuna_tpe", "hydra.sweeper.study_name=t", f"hydra.sweeper.storage.path={db}",
                  *TINY, *args)  # fmt: skip
    study = optuna.load_study(study_name="t", storage=f"sqlite:///{db}") if db.is_file() else None
    return res, study


def test_optuna_study_maximises_the_runs_last_k_accuracy_and_records_failed_trials(
    run_cli: Callable, tmp_path: Path
) -> None:
    # fl.rounds=0 is bad input: such a trial fails, the study goes on (the sampler's seed decides which fail)
    res, study = _sweep(run_cli, tmp_path, "hydra.sweeper.n_trials=3", "fl.rounds=choice(2,0)")
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    sweep = tmp_path / "run"
    trials = study.trials
    assert len(trials) == 3 and {t.params["fl.rounds"] for t in trials} == {0, 2}  # both kinds (seed 0)
    metric = {}
    for t in trials:  # each trial's run dir is named by its config; its overrides hold the trial's params
        job = _trial_dir(sweep, t.params)
        if t.params["fl.rounds"] == 0:
            assert t.state == optuna.trial.TrialState.FAIL and t.value is None
            assert sorted(p.name for p in job.iterdir()) == [".hydra", "error.txt"]
            continue
        summary = json.loads((job / "summary.json").read_text())
        assert summary["status"] == "completed" and summary["rounds_completed"] == 2
        assert yaml.safe_load((job / "config.yaml").read_text())["fl"]["lr"] == t.params["fl.lr"]
        assert 0.005 <= t.params["fl.lr"] <= 0.5  # the preset's log interval
        metric[t.number] = summary["test_acc_last_k"]
        assert t.state == optuna.trial.TrialState.COMPLETE
        assert t.value == pytest.approx(metric[t.number], abs=1e-12)
    assert len({t.params["fl.lr"] for t in trials}) == 3  # TPE proposed three different learning rates
    best = max(metric, key=metric.get)
    assert study.best_value == pytest.approx(metric[best], abs=1e-12) and study.best_trial.number == best
    results = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    assert results["best_value"] == pytest.approx(metric[best], abs=1e-12)
    assert study.direction == optuna.study.StudyDirection.MAXIMIZE


def _trial_dir(sweep: Path, params: dict) -> Path:
    def overrides(d: Path) -> dict:
        return dict(o.split("=", 1) for o in yaml.safe_load((d / ".hydra" / "overrides.yaml").read_text()))

    (job,) = [
        d for d in sweep.iterdir()
        if (d / ".hydra").is_dir() and all(yaml.safe_load(overrides(d)[k]) == v for k, v in params.items())
    ]  # fmt: skip
    return job


def test_a_study_without_a_completed_trial_ends_with_one_line_and_exit_1(
    capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 's.db'}", direction="maximize")
    study.tell(study.ask(), state=optuna.trial.TrialState.FAIL)
    with pytest.raises(SystemExit) as exit_:
        _run_and_report(lambda: study.best_trial)  # what the sweeper asks after its last trial
    assert exit_.value.code == 1
    err = capsys.readouterr().err.splitlines()
    assert err == ["fedrun: error: no trial of the study completed (each job's summary.json or error.txt says why)"]
    with pytest.raises(SystemExit) as exit_:  # any other ValueError is still bad input
        _run_and_report(lambda: int("x"))
    assert exit_.value.code == 2


def test_objective_is_the_chosen_summary_metric_of_a_completed_run(
    make_spec: Callable[..., RunSpec], tmp_path: Path
) -> None:
    summary = {"status": "completed", "test_acc_last_k": 0.5, "test_acc_final": 0.6, "test_acc_best": 0.7}
    assert objective(summary, make_spec()) == 0.5
    assert objective(summary, make_spec("output.objective=final")) == 0.6
    assert objective(summary, make_spec("output.objective=best")) == 0.7
    assert objective({**summary, "status": "diverged"}, make_spec()) is None
    with pytest.raises(ConfigError, match=r"output\.objective.*valid: last_k, final, best"):
        make_spec("output.objective=mean")
    bad = compose_cfg(["fl.lr=-1"])  # in a sweep, a job with bad input returns no value (and does not exit)
    assert execute(bad, tmp_path / "job", multirun=True) is None


def test_the_study_name_names_the_experiment_preset() -> None:
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from fedrun.cli.main import CONF_DIR

    def name(*overrides: str) -> str:
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
            cfg = compose("config", overrides=["hydra/sweeper=optuna_tpe", *overrides], return_hydra_config=True)
        return cfg.hydra.sweeper.study_name

    assert name() == "fedrun-fedavg-fmnist-mlp-dirichlet"  # as before: studies without a preset continue
    assert name("experiment=smoke", "algorithm=fedprox") == "fedrun-smoke-fedprox-fmnist-mlp-dirichlet"
    assert name("experiment=fedlaw_table3_fmnist_mlp") != name("experiment=fedlaw_table3_fmnist_lenet")
