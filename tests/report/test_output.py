"""report/output.py: where fedrun-report's files go: --out (a folder or a prefix), else reports/ beside the runs and
never inside a run directory, the next free NAME_2... instead of overwriting, nothing half-written."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedrun.report import output
from fedrun.storage.rundir import RunDir


def _run(path: Path) -> Path:
    path.mkdir(parents=True)
    RunDir(path).write_summary({"status": "completed"})
    return path


def test_a_folder_holding_a_run_file_is_a_run_and_out_inside_it_is_refused(tmp_path: Path) -> None:
    run = _run(tmp_path / "sweep" / "0")
    assert output.inside_run(run / "sub" / "x.png") == run and output.inside_run(tmp_path / "sweep") is None
    assert (
        output.bad_out(run / "report")
        == f"--out: {run / 'report'} is inside the run dir {run}; valid: a path outside every run dir"
    )
    assert output.bad_out(tmp_path / "elsewhere") is None and output.bad_out(None) is None


def test_reports_go_beside_the_runs_never_inside_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    runs = [str(_run(tmp_path / "sweep" / "0")), str(_run(tmp_path / "sweep" / "1"))]
    assert output.runs_folders(runs) == [tmp_path / "sweep" / "reports", tmp_path / "reports"]
    assert output.sources_folders([Path(runs[0])]) == [tmp_path / "sweep" / "reports", tmp_path / "reports"]


def test_out_names_a_folder_or_a_prefix(tmp_path: Path) -> None:
    assert output.out_prefix(tmp_path, "report_last_k", (".md",)) == tmp_path / "report_last_k"
    assert output.out_prefix(tmp_path / "fig.png", "x", (".png", ".csv")) == tmp_path / "fig"


def test_an_existing_report_is_never_overwritten_unless_forced(tmp_path: Path) -> None:
    first, notes = output.write_report(tmp_path, False, [], "report", {".md": "one\n"})
    second, notes2 = output.write_report(tmp_path, False, [], "report", {".md": "two\n"})
    assert (first.name, second.name, notes) == ("report", "report_2", [])
    assert notes2 == ["fedrun-report: report.md exists; wrote report_2.* (--force overwrites)"]
    forced, _ = output.write_report(tmp_path, True, [], "report", {".md": "three\n"})
    assert forced == first and (tmp_path / "report.md").read_text() == "three\n"
    assert (tmp_path / "report_2.md").read_text() == "two\n"


def test_a_figure_that_fails_leaves_no_claimed_file(tmp_path: Path) -> None:
    def fails(prefix: Path) -> int:
        return 1

    assert output.draw(tmp_path / "fig", [tmp_path], "fig", (".png",), False, fails) == 1
    assert list(tmp_path.iterdir()) == []
