"""Every run says what it was (issue 51, points 1 and 2): a personalised method shows its own result without any key,
and the run's folder, summary table, plot and sweep lines name the capabilities in play, in their words."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from fedrun.config.validate import validate
from fedrun.metrics.local_settings import LocalEvalSettings
from fedrun.run.loop import run
from fedrun.run.summary import capability_words, run_title
from tests.conftest import compose_cfg, main_exit_code

TINY = ["experiment=smoke", "data.max_train_samples=600", "data.max_test_samples=200", "fl.clients=4", "fl.rounds=2",
        "model.hidden=[16]", "hardware.threads=1", "hardware.engine=sequential"]  # fmt: skip


def _run(tmp_path: Path, *overrides: str) -> tuple[dict, pd.DataFrame]:
    (tmp_path / "r").mkdir(parents=True)
    summary = run(validate(compose_cfg([*TINY, *overrides])), tmp_path / "r")
    return summary, pd.read_csv(tmp_path / "r" / "metrics.csv")


@pytest.mark.parametrize("method", ["ditto", "fedper", "apfl"])
def test_a_personalised_method_evaluates_its_clients_models_by_default(tmp_path: Path, method: str) -> None:
    summary, rows = _run(tmp_path, f"algorithm={method}")
    assert LocalEvalSettings.of(validate(compose_cfg([*TINY, f"algorithm={method}"]))).local_test == "split"
    assert {"local_acc_mean", "local_acc_wmean", "local_acc_worst10"} <= set(rows.columns)
    assert (tmp_path / "r" / "clients.csv").is_file()
    assert summary["local_acc_mean_final"] == rows["local_acc_mean"].iloc[-1]
    assert summary["capability_brief"].startswith("personalised ")
    lines = dict(summary["capability_lines"])
    assert lines["personalised: mean / weighted / worst 10%"].count("%") == 3


def test_a_global_method_holds_out_nothing_and_none_turns_it_off(tmp_path: Path) -> None:
    assert LocalEvalSettings.of(validate(compose_cfg(TINY))).local_test == "none"
    off = validate(compose_cfg([*TINY, "algorithm=ditto", "eval.local_test=none"]))
    assert LocalEvalSettings.of(off).local_test == "none"
    summary, rows = _run(tmp_path, "algorithm=ditto", "eval.local_test=none")
    assert "local_acc_mean" not in rows and "local_acc_mean_final" not in summary


def test_auto_is_the_run_identity_of_what_it_resolves_to() -> None:
    from fedrun.config.identity import config_key

    plain = validate(compose_cfg(TINY)).raw
    none = validate(compose_cfg([*TINY, "eval.local_test=none"])).raw
    assert config_key(plain) == config_key(none)  # FedAvg's auto is none: the runs of before keep their identity
    ditto = validate(compose_cfg([*TINY, "algorithm=ditto"])).raw
    split = validate(compose_cfg([*TINY, "algorithm=ditto", "eval.local_test=split"])).raw
    assert (
        config_key(ditto)
        == config_key(split)
        != config_key(validate(compose_cfg([*TINY, "algorithm=ditto", "eval.local_test=none"])).raw)
    )


def test_the_run_names_its_capabilities_in_its_title_and_summary(tmp_path: Path) -> None:
    over = ["privacy=client", "privacy.target_epsilon=8", "fl.participation=0.5", "compression=topk",
            "compression.error_feedback=true"]  # fmt: skip
    spec = validate(compose_cfg([*TINY, *over]))
    assert capability_words(spec) == "DP-FedAvg (eps 8), topk 0.01 +EF"
    assert run_title(spec) == "fedavg on fmnist, DP-FedAvg (eps 8), topk 0.01 +EF"
    assert run_title(validate(compose_cfg(TINY))) == "fedavg on fmnist"
    summary, _ = _run(tmp_path, *over)
    assert summary["capabilities"] == "DP-FedAvg (eps 8), topk 0.01 +EF"
    lines = dict(summary["capability_lines"])
    assert lines["privacy spent"].startswith(f"epsilon {summary['epsilon_final']:.4g} at delta 1e-05 (DP-FedAvg")
    assert lines["uploads"].startswith("topk 0.01 +EF: ")


def test_the_folder_of_a_single_run_names_its_capabilities(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.chdir(tmp_path)
    argv = ["fedrun", *TINY, "system=fedbuff", "system.buffer=2", "output.plots=false"]
    assert main_exit_code(monkeypatch, argv) == 0
    (folder,) = (tmp_path / "outputs").glob("2*/*")
    assert re.fullmatch(r"\d\d-\d\d-\d\d-fedavg-fmnist-fedbuff-[0-9a-f]{8}", folder.name), folder.name
    out = capsys.readouterr().out
    title = "fedrun: fedavg / fmnist / mlp / dirichlet, fedbuff (C=cohort, K=2, uniform devices)"
    assert title in " ".join(out.split())
    assert "simulated clock" in out
    # the summary table counts server updates, not rounds (what the loop's step is, recorded in summary.json)
    (summary,) = (json.loads(p.read_text()) for p in folder.glob("summary.json"))
    assert summary["step"] == "server update"
    assert "best test accuracy (server update)" in out and "server updates" in out and "│ rounds" not in out


def test_an_async_runs_plot_counts_server_updates_and_a_personal_runs_draws_its_clients(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fedrun.storage.figures as figures

    kept: list = []
    real = figures.save_figure

    def keep(fig, path, **kw):  # noqa: ANN001, ANN003, ANN202 - save_figure's own signature
        kept.append(fig.axes[0])
        return real(fig, path, **kw)

    monkeypatch.setattr(figures, "save_figure", keep)
    _run(tmp_path / "a", "system=fedasync", "output.plots=true")
    _run(tmp_path / "p", "algorithm=ditto", "output.plots=true")
    (async_ax, personal_ax) = [ax for ax in kept if ax.get_ylabel() == "accuracy (%)"]
    assert async_ax.get_xlabel() == "server update" and personal_ax.get_xlabel() == "round"
    assert "fedasync" in async_ax.get_title()
    labels = [t.get_text() for t in personal_ax.get_legend().get_texts()]
    assert labels == ["global model, test", "personalised, mean over clients", "personalised, worst 10% of clients"]


def test_a_sweeps_lines_say_the_personalised_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.chdir(tmp_path)
    argv = ["fedrun", "-m", *TINY, "algorithm=fedavg,ditto", "output.plots=false", "hydra.sweep.dir=sw"]
    assert main_exit_code(monkeypatch, argv) == 0
    out = capsys.readouterr().out
    ditto = [ln for ln in out.splitlines() if "algorithm=ditto" in ln and "completed" in ln]
    fedavg = [ln for ln in out.splitlines() if "algorithm=fedavg" in ln and "completed" in ln]
    assert ditto and ", personalised " in ditto[0] and fedavg and "personalised" not in fedavg[0]
    for job in (tmp_path / "sw").iterdir():
        if job.joinpath("summary.json").is_file():
            summary = json.loads(job.joinpath("summary.json").read_text())
            assert ("local_acc_mean_final" in summary) == (summary["algorithm"] == "ditto")


def test_fedrun_report_tables_the_personalised_mean_of_personalised_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fedrun.report.collect import collect_runs
    from fedrun.report.tables import default_metric

    monkeypatch.chdir(tmp_path)
    for method in ("ditto", "fedavg"):
        argv = ["fedrun", *TINY, f"algorithm={method}", "output.plots=false", f"hydra.run.dir={method}"]
        assert main_exit_code(monkeypatch, argv) == 0
    ditto, _ = collect_runs([tmp_path / "ditto"])
    both, _ = collect_runs([tmp_path / "ditto", tmp_path / "fedavg"])
    assert len(ditto) == 1 and len(both) == 2
    assert default_metric(ditto) == "local_mean" and default_metric(both) == "last_k"
