"""``make reproduce-<target>`` (fedrun-reproduce, fedrun/cli/reproduce.py) ends with the scorecard of the target's
runs; a -smoke sweep is never compared and says so in one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import fedrun.cli.report as report_cli
from fedrun.cli import reproduce
from fedrun.papers.targets import BY_NAME


@pytest.fixture
def report_calls(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """``fedrun-report`` invocations of reproduce.main, recorded instead of run (each returns 0)."""
    calls: list[list[str]] = []

    def fake_report(argv: list[str]) -> int:
        calls.append(list(argv))
        print("REPORT " + " ".join(argv))
        return 0

    monkeypatch.setattr(report_cli, "main", fake_report)
    return calls


def test_a_full_sweep_prints_the_table_then_the_scorecard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, report_calls: list[list[str]], capsys: Any
) -> None:
    ran: list[list[str]] = []
    monkeypatch.setattr(reproduce, "_run_sweep", lambda cmd: ran.append(cmd) or 0)
    out = tmp_path / "t3"
    assert reproduce.main(["run", "fedlaw-table3", "--methods", "FedAvg", "--out", str(out)]) == 0
    assert ran  # the sweep's fedrun -m commands
    target = BY_NAME["fedlaw-table3"]
    assert report_calls == [reproduce.report_args(target, out), ["scorecard", "fedlaw-table3", str(out)]]
    text = capsys.readouterr().out
    assert text.index("REPORT " + " ".join(reproduce.report_args(target, out))) < text.index("scorecard fedlaw-table3")
    assert "not compared" not in text


def test_a_smoke_sweep_is_not_compared_and_says_so_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, report_calls: list[list[str]], capsys: Any
) -> None:
    monkeypatch.setattr(reproduce, "_smoke", lambda cmds, parallel: 0)
    out = tmp_path / "smoke"
    assert reproduce.main(["run", "fedcos-table2", "--smoke", "--methods", "FedAvg", "--out", str(out)]) == 0
    assert report_calls == [reproduce.report_args(BY_NAME["fedcos-table2"], out)]  # the table, no scorecard
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "scorecard" in ln]
    assert lines == [reproduce.SMOKE_NOT_COMPARED.format(name="fedcos-table2")]
    assert lines[0].startswith("scorecard: not compared; -smoke runs")


def test_a_failed_table_stops_before_the_scorecard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    calls: list[list[str]] = []
    monkeypatch.setattr(report_cli, "main", lambda argv: calls.append(argv) or 2)
    monkeypatch.setattr(reproduce, "_run_sweep", lambda cmd: 0)
    assert reproduce.main(["fedlaw-table3", "--methods", "FedAvg", "--out", str(tmp_path)]) == 2
    assert len(calls) == 1


def test_dry_run_lists_the_scorecard_command_for_a_full_sweep_only(tmp_path: Path, capsys: Any) -> None:
    assert reproduce.main(["run", "fedlaw-table3", "--dry-run", "--out", str(tmp_path)]) == 0
    assert f"fedrun-report scorecard fedlaw-table3 {tmp_path}" in capsys.readouterr().out
    assert reproduce.main(["run", "fedlaw-table3", "--smoke", "--dry-run", "--out", str(tmp_path)]) == 0
    assert "scorecard" not in capsys.readouterr().out
