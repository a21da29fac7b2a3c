"""``fedrun-report``'s subcommands (each with its own ``--help``; the flag form of earlier versions maps to them)
and where every report file goes: ``--out``, default ``reports/`` beside the runs, never inside a run dir, never
silently overwritten (``--force``); a file that cannot be written is one line naming its path."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fedrun.cli.report import SUBCOMMANDS, main
from tests.conftest import REPO
from tests.report.fake_runs import fake_run


def _sweep(root: Path) -> Path:
    for seed in (0, 1):
        fake_run(root / "sweep" / f"j{seed}", {"algorithm.name": "fedavg", "seed": seed}, curve=[0.2, 0.4, 0.5])
    return root / "sweep"


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def test_top_level_help_lists_every_subcommand(capsys: pytest.CaptureFixture) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name, line in SUBCOMMANDS.items():
        assert name in out and line.split()[0] in out, name


def test_no_arguments_is_the_usage_and_exit_2(capsys: pytest.CaptureFixture) -> None:
    assert main([]) == 2
    assert "SUBCOMMAND" in capsys.readouterr().err


@pytest.mark.parametrize("command", [*SUBCOMMANDS, "diagnostics"])
def test_each_subcommand_has_its_own_help(command: str, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as info:
        main([command, "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    name = "coherence" if command == "diagnostics" else command  # an alias
    assert out.startswith(f"usage: fedrun-report {name}") and "--out" in out and "--force" in out, out


def test_table_subcommand_and_flag_form_are_the_same_table(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    sweep = _sweep(tmp_path)
    assert main(["table", str(sweep), "--out", str(tmp_path / "new")]) == 0
    new = capsys.readouterr().out
    assert main([str(sweep), "--out", str(tmp_path / "old")]) == 0
    old = capsys.readouterr().out
    assert new.replace("new", "old") == old and "algorithm=fedavg" in new


def test_curves_default_to_reports_beside_the_runs_and_never_overwrite(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    sweep = _sweep(tmp_path)
    runs_before = _files(sweep)
    assert main(["curves", str(sweep)]) == 0
    assert main(["curves", str(sweep)]) == 0
    assert "curves_test_acc.png exists; writing curves_test_acc_2.*" in capsys.readouterr().err
    reports = sweep / "reports"
    assert {p.name for p in reports.iterdir()} == {
        "curves_test_acc.png",
        "curves_test_acc.csv",
        "curves_test_acc_2.png",
        "curves_test_acc_2.csv",
    }
    assert _files(sweep) - {f"reports/{p.name}" for p in reports.iterdir()} == runs_before  # nothing in a run dir
    assert main(["curves", str(sweep), "--force"]) == 0
    assert len(list(reports.iterdir())) == 4
    assert (reports / "curves_test_acc.png").stat().st_size > 0


def test_curves_of_one_run_go_beside_it_not_into_it(tmp_path: Path) -> None:
    sweep = _sweep(tmp_path)
    assert main(["curves", str(sweep / "j0")]) == 0
    assert (sweep / "reports" / "curves_test_acc.png").stat().st_size > 0
    assert not list((sweep / "j0").glob("curves*"))


def test_out_inside_a_run_dir_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    sweep = _sweep(tmp_path)
    assert main(["curves", str(sweep), "--out", str(sweep / "j0" / "c.png")]) == 2
    assert "is inside the run dir" in capsys.readouterr().err
    assert not list((sweep / "j0").glob("c.*"))


def test_out_as_a_folder_takes_the_default_name(tmp_path: Path) -> None:
    sweep = _sweep(tmp_path)
    (tmp_path / "figs").mkdir()
    assert main(["curves", str(sweep), "--out", str(tmp_path / "figs")]) == 0
    assert (tmp_path / "figs" / "curves_test_acc.png").stat().st_size > 0


def test_a_failed_curves_run_leaves_no_claimed_file(tmp_path: Path) -> None:
    sweep = _sweep(tmp_path)
    assert main(["curves", str(sweep), "--rows", "no.such.key"]) == 2
    assert not (sweep / "reports").exists() or not list((sweep / "reports").iterdir())


def test_an_unwritable_out_is_one_line_naming_the_path(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    sweep = _sweep(tmp_path)
    (tmp_path / "afile").write_text("in the way of a folder")
    assert main(["curves", str(sweep), "--out", str(tmp_path / "afile" / "c.png")]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and str(tmp_path / "afile") in err and err.startswith("fedrun-report: cannot write"), err


def test_partition_flag_form_writes_beside_the_run(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    run = fake_run(tmp_path / "sweep" / "j0", {"algorithm.name": "fedavg"})
    (run / "partition.csv").write_text("client,class_0,class_1,total\n0,5,0,5\n1,1,4,5\n")
    assert main(["--partition", str(run)]) == 0
    assert (tmp_path / "sweep" / "reports" / "partition_j0.png").stat().st_size > 0
    assert not (run / "partition.png").exists()
    assert main(["partition", str(run)]) == 0
    assert (tmp_path / "sweep" / "reports" / "partition_j0_2.png").stat().st_size > 0
    assert "| clients | 2 |" in capsys.readouterr().out


def test_partition_of_a_folder_without_partition_csv(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["partition", str(tmp_path)]) == 2
    assert "partition.csv" in capsys.readouterr().err
    assert not (tmp_path.parent / "reports").exists() or not list((tmp_path.parent / "reports").glob("partition_*"))


def test_version_is_fedruns(capsys: pytest.CaptureFixture) -> None:
    """Issue 33, point 8: ``fedrun-report --version`` was an error (exit 2); it prints what ``fedrun --version``
    prints, and ``--help`` lists it."""
    from fedrun.cli.help import fedrun_version

    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"fedrun {fedrun_version()}\n"
    assert main(["--help"]) == 0
    assert "--version" in capsys.readouterr().out


def _two_key_sweep(root: Path, task: list[str]) -> Path:
    sweep = root / "two"
    for method in ("fedavg", "fedprox"):
        for alpha in (0.1, 1.0):
            for seed in (0, 1):
                config = {"algorithm.name": method, "partition.alpha": alpha, "seed": seed}
                fake_run(sweep / f"{method}-{alpha}-{seed}", config, curve=[0.2, 0.3 + alpha / 10])
    saved = "hydra:\n  overrides:\n    task:\n" + "".join(f"    - {o}\n" for o in task)
    (sweep / "multirun.yaml").write_text(saved + "algorithm:\n  name: fedavg\n")
    return sweep


@pytest.mark.parametrize(
    "task",
    [
        ["algorithm=fedavg,fedprox", "partition.alpha=0.1,1.0", "seed=0,1", "fl.rounds=2"],
        ["seed=0,1", "algorithm=fedavg,fedprox", "partition.alpha=0.1,1.0"],
    ],
    ids=["method-first", "seed-first"],
)
def test_a_two_key_sweeps_table_takes_its_keys_without_rows_or_cols(
    tmp_path: Path, capsys: pytest.CaptureFixture, task: list[str]
) -> None:
    """Issue 51: without --rows/--cols the table refused the sweep (partition.alpha varies inside a cell), though
    the sweep's closing line named the keys; now it takes them: the first as rows, the others as columns."""
    sweep = _two_key_sweep(tmp_path, task)
    assert main(["table", str(sweep), "--out", str(tmp_path / "auto")]) == 0
    auto = capsys.readouterr().out
    given = ["--rows", "algorithm", "--cols", "partition.alpha", "--out", str(tmp_path / "given")]
    assert main(["table", str(sweep), *given]) == 0
    assert auto.replace("auto", "given") == capsys.readouterr().out
    assert "| algorithm=fedprox |" in auto and "partition.alpha=1.0" in auto.splitlines()[0]


def test_without_a_multirun_yaml_the_rows_stay_algorithm(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    sweep = _two_key_sweep(tmp_path, [])
    (sweep / "multirun.yaml").unlink()
    assert main(["table", str(sweep), "--out", str(tmp_path / "t")]) == 2
    assert "partition.alpha varies inside a cell" in capsys.readouterr().err
    assert main(["table", str(sweep), "--cols", "partition.alpha", "--out", str(tmp_path / "t")]) == 0
    assert "| algorithm=fedavg " in capsys.readouterr().out  # --cols alone: the rows are algorithm, as before


def test_the_report_command_and_its_scorecard_start_without_torch() -> None:
    """``fedrun-report`` imports torch only for a subcommand that reads a run's config against the schema (whose
    capabilities are torch modules) or a partition: a scorecard, a listing or the help start in a second, not four."""
    code = (
        "import sys\nfrom fedrun.cli.report import main\n"
        "try:\n    main(['scorecard', 'fedlaw-table3'])\nfinally:\n    print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "False"
