"""The ``report`` category of the hostile-input tables (issue 22, point 4): fedrun-report never puts a number in a
cell that a run did not produce, and always prints its table, wherever its files can or cannot go.

Each case: two good runs (50% and 60%, so the table's one cell is ``55.00 ± 7.07``) beside a hostile folder or
output location; the case asserts the printed table, the foreign (stderr) or damaged (under the table) line, the
exit code and the files written.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fedrun.cli.report import main as report_main
from tests.report.fake_runs import fake_run

CELL = "| algorithm=fedavg | 55.00 ± 7.07 |"
FILES = ("report_last_k.md", "report_last_k.csv", "report_last_k.tex")


def _flat(text: str) -> str:
    return " ".join(text.split())


def _good(root: Path) -> None:
    for seed, acc in ((0, 0.5), (1, 0.6)):
        fake_run(root / f"ok{seed}", {"algorithm.name": "fedavg", "seed": seed}, curve=[acc])


def _summary(d: Path, **fields: object) -> None:
    d.mkdir(parents=True, exist_ok=True)
    (d / "summary.json").write_text(json.dumps({"status": "completed", "test_acc_last_k": 0.99, **fields}))


def _only_summary(d: Path) -> None:
    _summary(d)


def _foo_bar(d: Path) -> None:
    _summary(d)
    (d / "config.yaml").write_text("foo: bar\n")


def _no_algorithm(d: Path) -> None:
    _summary(d)
    (d / "config.yaml").write_text("seed: 0\nfl:\n  rounds: 3\n")


def _algorithm_a_string(d: Path) -> None:
    _summary(d)
    (d / "config.yaml").write_text("algorithm: fedavg\nseed: 0\n")


def _only_error_txt(d: Path) -> None:
    d.mkdir(parents=True)
    (d / "error.txt").write_text("whatever\n")


def _config_a_list(d: Path) -> None:
    _summary(d)
    (d / "config.yaml").write_text("- algorithm\n- seed\n")


def _config_a_bomb(d: Path) -> None:
    _summary(d)
    lines = ["l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"l{k}: &l{k} [{', '.join([f'*l{k - 1}'] * 9)}]" for k in range(1, 9)]
    (d / "config.yaml").write_text("\n".join(lines) + "\n")


def _summary_a_list(d: Path) -> None:
    d.mkdir(parents=True)
    (d / "summary.json").write_text("[0.99]")
    (d / "config.yaml").write_text("algorithm:\n  name: fedavg\nseed: 0\n")


FOREIGN = [
    (_only_summary, "config.yaml: none"),
    (_foo_bar, "config.yaml: 'foo' is not a fedrun config key"),
    (_no_algorithm, "config.yaml: no algorithm.name"),
    (_algorithm_a_string, "config.yaml: no algorithm.name"),
    (_only_error_txt, "config.yaml: none"),
]
# the red team's next round: run files that cannot be read as fedrun's are listed under the table, left out
UNREADABLE = [
    (_config_a_list, "config.yaml: not a mapping of config keys"),
    (_config_a_bomb, "config.yaml: YAML aliases expand this document by more than 10,000 nodes"),
    (_summary_a_list, "summary.json: not a fedrun summary (a JSON object with a status)"),
]


@pytest.mark.parametrize(("make", "why"), UNREADABLE)
def test_an_unreadable_folder_is_listed_under_the_table_and_left_out(
    tmp_path: Path, capsys: pytest.CaptureFixture, make, why: str
) -> None:
    _good(tmp_path)
    make(tmp_path / "stranger")
    assert report_main([str(tmp_path)]) == 0
    out, _ = capsys.readouterr()
    assert CELL in _flat(out) and "99.00" not in out and "algorithm=-" not in out
    assert "1 unreadable run dirs (left out):" in out and f"{tmp_path / 'stranger'}: {why}" in out


@pytest.mark.parametrize(("make", "why"), FOREIGN)
def test_a_foreign_folder_is_named_on_stderr_and_left_out(
    tmp_path: Path, capsys: pytest.CaptureFixture, make, why: str
) -> None:
    _good(tmp_path)
    make(tmp_path / "stranger")
    assert report_main([str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert CELL in _flat(out) and "99.00" not in out and "algorithm=-" not in out
    line = f"fedrun-report: foreign (not a fedrun run, left out): {tmp_path / 'stranger'}: {why}"
    assert len(err.splitlines()) == 1 and err.startswith(line)
    assert "stranger" not in out and "stranger" not in (tmp_path / "reports" / FILES[0]).read_text()


def test_only_foreign_folders_is_one_error_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    _foo_bar(tmp_path / "a")
    _only_summary(tmp_path / "b")
    assert report_main([str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("foreign (not a fedrun run") == 2 and "fedrun-report: error: no readable runs under" in err
    assert not (tmp_path / "reports").exists()


def _edit_summary(**fields: object):
    def edit(d: Path) -> None:
        s = json.loads((d / "summary.json").read_text())
        (d / "summary.json").write_text(json.dumps({**s, **fields}))

    return edit


def _drop_status(d: Path) -> None:
    s = json.loads((d / "summary.json").read_text())
    del s["status"]
    (d / "summary.json").write_text(json.dumps(s))


def _drop_metrics_of_format_1(d: Path) -> None:
    _edit_summary(format=1)(d)
    (d / "metrics.csv").unlink()


def _metrics_without_test_acc(d: Path) -> None:
    (d / "metrics.csv").write_text("round,train_loss\n1,0.3\n")


def _metrics_not_numbers(d: Path) -> None:
    (d / "metrics.csv").write_text("round,test_acc\n1,abc\n")


DAMAGED = [
    (
        _edit_summary(test_acc_last_k=5.0),
        "summary.json: test_acc_last_k = 5.0 is not an accuracy (a number in [0, 1])",
    ),
    (_edit_summary(test_acc_final=-0.1), "summary.json: test_acc_final = -0.1 is not an accuracy"),
    (_edit_summary(test_acc_best=float("nan")), "summary.json: test_acc_best = nan is not an accuracy"),
    (_edit_summary(test_acc_last_k=True), "summary.json: test_acc_last_k = True is not an accuracy"),
    (_edit_summary(test_acc_last_k="0.9"), "summary.json: test_acc_last_k = '0.9' is not an accuracy"),
    (_edit_summary(train_acc_final=42), "summary.json: train_acc_final = 42 is not an accuracy"),
    (_edit_summary(test_acc_last_k=0.99), "summary.json: test_acc_last_k = 0.99, but metrics.csv gives 0.9"),
    (_edit_summary(test_acc_final=0.95), "summary.json: test_acc_final = 0.95, but metrics.csv gives 0.9"),
    (_edit_summary(test_acc_best=0.91), "summary.json: test_acc_best = 0.91, but metrics.csv gives 0.9"),
    (_edit_summary(status="done"), "summary.json: status 'done' is not one fedrun writes"),
    (_drop_status, "summary.json: status None is not one fedrun writes"),
    (_drop_metrics_of_format_1, "metrics.csv: missing (a completed run writes it"),
    (_metrics_without_test_acc, "metrics.csv: no test_acc column to check the summary against"),
    (_metrics_not_numbers, "metrics.csv: no test_acc column to check the summary against"),
    # the red team's next round
    (_edit_summary(test_acc_last_k=float("inf")), "summary.json: test_acc_last_k = inf is not an accuracy"),
    (_edit_summary(test_acc_final=1.5), "summary.json: test_acc_final = 1.5 is not an accuracy"),
    (_edit_summary(test_acc_last_k=[0.9]), "summary.json: test_acc_last_k = [0.9] is not an accuracy"),
]
CATEGORY = "report"
CASES = [*FOREIGN, *UNREADABLE, *DAMAGED]


@pytest.mark.parametrize(("edit", "why"), DAMAGED)
def test_a_damaged_summary_is_listed_under_the_table_and_left_out(
    tmp_path: Path, capsys: pytest.CaptureFixture, edit, why: str
) -> None:
    _good(tmp_path)
    bad = fake_run(tmp_path / "bad", {"algorithm.name": "fedavg", "seed": 2}, curve=[0.9])
    edit(bad)
    assert report_main([str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert CELL in _flat(out) and err == ""
    assert "500.00" not in out and "99.00" not in out
    assert "1 damaged run dirs (a summary that disagrees with its run; left out):" in out
    assert f"{bad}: {why}" in out
    assert f"{bad}: {why}" in (tmp_path / "reports" / FILES[0]).read_text()


def test_a_legacy_summary_without_metrics_is_read_and_a_consistent_one_is_tabled(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    fake_run(tmp_path / "old", {"algorithm.name": "fedavg", "seed": 0}, 0.5)  # format 0, no metrics.csv
    fake_run(tmp_path / "new", {"algorithm.name": "fedavg", "seed": 1}, curve=[0.2, 0.6])
    _edit_summary(format=1)(tmp_path / "new")
    assert report_main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "damaged" not in out and "| algorithm=fedavg | 45.00 ± 7.07 |" in _flat(out)


# -- where the files go


def test_default_is_reports_beside_the_runs_never_inside_a_run_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    fake_run(tmp_path / "sweep" / "0", {"algorithm.name": "fedavg"}, 0.5)
    assert report_main([str(tmp_path / "sweep" / "0")]) == 0  # one run dir given: its parent gets reports/
    assert sorted(p.name for p in (tmp_path / "sweep" / "reports").iterdir()) == sorted(FILES)
    assert sorted(p.name for p in (tmp_path / "sweep" / "0").iterdir()) == ["config.yaml", "summary.json"]
    assert f"written: {tmp_path / 'sweep' / 'reports' / 'report_last_k'}.md" in capsys.readouterr().out


def test_an_existing_report_is_never_overwritten(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    _good(tmp_path)
    assert report_main([str(tmp_path)]) == 0
    first = {f: (tmp_path / "reports" / f).read_text() for f in FILES}
    (tmp_path / "reports" / FILES[0]).write_text("my notes\n")
    capsys.readouterr()
    assert report_main([str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert CELL in _flat(out)
    assert (tmp_path / "reports" / FILES[0]).read_text() == "my notes\n"
    assert (tmp_path / "reports" / FILES[1]).read_text() == first[FILES[1]]
    second = [f.replace("report_last_k", "report_last_k_2") for f in FILES]
    assert all((tmp_path / "reports" / f).read_text() == first[g] for f, g in zip(second, FILES, strict=True))
    assert "report_last_k.md exists; wrote report_last_k_2.* (--force overwrites)" in err
    assert f"written: {tmp_path / 'reports' / 'report_last_k_2'}.md" in out
    assert report_main([str(tmp_path)]) == 0  # and a third time: _3
    assert (tmp_path / "reports" / "report_last_k_3.tex").is_file()


def test_force_overwrites(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    _good(tmp_path)
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / FILES[0]).write_text("old\n")
    assert report_main([str(tmp_path), "--force"]) == 0
    assert CELL in _flat((tmp_path / "reports" / FILES[0]).read_text())
    assert sorted(p.name for p in (tmp_path / "reports").iterdir()) == sorted(FILES)
    assert capsys.readouterr().err == ""


def test_out_into_a_missing_folder_makes_it(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    _good(tmp_path / "runs")
    out = tmp_path / "new" / "deeper" / "t"
    assert report_main([str(tmp_path / "runs"), "--out", str(out)]) == 0
    assert CELL in _flat(capsys.readouterr().out)
    assert sorted(p.name for p in out.parent.iterdir()) == ["t.csv", "t.md", "t.tex"]
    assert not (tmp_path / "runs" / "reports").exists()


def test_out_that_cannot_be_written_prints_the_table_and_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    _good(tmp_path / "runs")
    (tmp_path / "a_file").write_text("")
    assert report_main([str(tmp_path / "runs"), "--out", str(tmp_path / "a_file" / "t")]) == 1
    out, err = capsys.readouterr()
    assert CELL in _flat(out) and "written:" not in out and "Traceback" not in err
    assert len(err.splitlines()) == 1 and err.startswith(
        f"fedrun-report: cannot write the report: {tmp_path / 'a_file'}"
    )


def test_out_inside_a_run_dir_is_refused_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    _good(tmp_path)
    before = sorted(p.name for p in (tmp_path / "ok0").iterdir())
    assert report_main([str(tmp_path), "--out", str(tmp_path / "ok0" / "t")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("fedrun-report: error: --out: ") and "inside the run dir" in err
    assert sorted(p.name for p in (tmp_path / "ok0").iterdir()) == before


def _block(folder: Path) -> None:
    """Make ``folder/reports`` unwritable for any user (root included): a file stands where the folder would be."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "reports").write_text("")


def test_unwritable_default_falls_back_to_the_current_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    _good(tmp_path / "archive")
    _block(tmp_path / "archive")
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    assert report_main([str(tmp_path / "archive")]) == 0
    out, err = capsys.readouterr()
    assert CELL in _flat(out) and f"written: {tmp_path / 'here' / 'reports' / 'report_last_k'}.md" in out
    assert err.startswith(f"fedrun-report: cannot write {tmp_path / 'archive' / 'reports'}")
    assert err.rstrip().endswith(f"wrote to {tmp_path / 'here' / 'reports'} instead")
    assert sorted(p.name for p in (tmp_path / "here" / "reports").iterdir()) == sorted(FILES)


def test_nowhere_to_write_prints_the_table_and_one_line_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    _good(tmp_path / "archive")
    _block(tmp_path / "archive")
    _block(tmp_path / "here")
    monkeypatch.chdir(tmp_path / "here")
    assert report_main([str(tmp_path / "archive")]) == 1
    out, err = capsys.readouterr()
    assert CELL in _flat(out) and "written:" not in out
    assert len(err.splitlines()) == 1 and "(give --out)" in err
    assert str(tmp_path / "archive" / "reports") in err and str(tmp_path / "here" / "reports") in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_archive_prints_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    _good(tmp_path / "archive")
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    os.chmod(tmp_path / "archive", 0o555)
    try:
        assert report_main([str(tmp_path / "archive")]) == 0
    finally:
        os.chmod(tmp_path / "archive", 0o755)
    out = capsys.readouterr().out
    assert CELL in _flat(out) and (tmp_path / "here" / "reports" / FILES[0]).is_file()


def test_curves_leave_out_damaged_and_foreign_runs(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    _good(tmp_path)
    bad = fake_run(tmp_path / "bad", {"algorithm.name": "fedavg", "seed": 2}, curve=[0.9])
    _edit_summary(test_acc_last_k=5.0)(bad)
    _foo_bar(tmp_path / "stranger")
    out_png = tmp_path / "figs" / "c.png"
    assert report_main(["curves", str(tmp_path), "--out", str(out_png)]) == 0
    out = capsys.readouterr().out
    assert f"damaged: {bad}: summary.json: test_acc_last_k = 5.0 is not an accuracy" in out
    assert f"foreign: {tmp_path / 'stranger'}: config.yaml: 'foo' is not a fedrun config key" in out
    assert (out_png.with_suffix(".csv")).read_text().splitlines()[1].endswith(",2")  # n = the two good runs


def test_a_project_config_yaml_above_the_runs_does_not_move_the_reports(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    (tmp_path / "config.yaml").write_text("project: mine\n")  # a project folder, not a run dir
    _good(tmp_path / "outputs" / "sweep")
    assert report_main([str(tmp_path / "outputs" / "sweep")]) == 0
    assert (tmp_path / "outputs" / "sweep" / "reports" / FILES[0]).is_file()


def test_reports_are_moved_out_of_a_run_dir_holding_the_runs(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    _foo_bar(tmp_path / "outer")  # a summary.json here: a run's folder, though not fedrun's, is never written into
    _good(tmp_path / "outer" / "inner")
    assert report_main([str(tmp_path / "outer" / "inner")]) == 0
    assert (tmp_path / "reports" / FILES[0]).is_file() and not (tmp_path / "outer" / "inner" / "reports").exists()
