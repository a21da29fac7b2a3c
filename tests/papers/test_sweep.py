"""Sweeps run in-process (fedrun/cli/reproduce_sweep.py) give the jobs, directories and results of ``fedrun -m``."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from fedrun.cli.reproduce_sweep import expand, run_commands, split_command
from fedrun.run.sweep_index import find_jobs, read_index
from fedrun.storage.atomic import TIMING_COLUMNS
from tests.conftest import main_exit_code

TINY = [
    "data.max_train_samples=400",
    "data.max_test_samples=100",
    "fl.clients=4",
    "fl.rounds=2",
    "fl.local_steps=1",
    "output.plots=false",
    "hardware.engine=sequential",
    "hardware.threads=1",
    "checkpoint.every=0",
]


def test_expand_is_the_cartesian_product_in_override_order() -> None:
    jobs = expand(["seed=1,2", "fl.rounds=3", "++tags.method='FedProx(0.1)+FedCos(0.02)'", "fl.lr=0.1,0.2"])
    assert len(jobs) == 4
    assert [j[0] for j in jobs] == ["seed=1", "seed=1", "seed=2", "seed=2"]
    assert [j[-1] for j in jobs] == ["fl.lr=0.1", "fl.lr=0.2", "fl.lr=0.1", "fl.lr=0.2"]
    assert all(j[2] == "++tags.method='FedProx(0.1)+FedCos(0.02)'" for j in jobs)


def test_split_command_keeps_task_overrides_and_the_sweep_dir(tmp_path: Path) -> None:
    sweep, overrides = split_command(["-m", "seed=1,2", "hydra.job.chdir=false", f"hydra.sweep.dir={tmp_path}"])
    assert sweep == tmp_path and overrides == ["seed=1,2"]
    with pytest.raises(ValueError, match="hydra.sweep.dir"):
        split_command(["seed=1"])


def test_in_process_jobs_equal_fedrun_multirun_jobs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sweep = ["partition.alpha=100,0.1", "++tags.method='FedProx(0.1)'", *TINY, f"cache_dir={tmp_path / 'cache'}"]
    monkeypatch.chdir(tmp_path)  # `fedrun -m` through its console script's code path, in this process
    assert main_exit_code(monkeypatch, ["fedrun", "-m", *sweep, f"hydra.sweep.dir={tmp_path / 'cli'}"]) == 0
    assert run_commands([["-m", *sweep, f"hydra.sweep.dir={tmp_path / 'inproc'}"]], log=False) == 0
    jobs = sorted(read_index(tmp_path / "cli"))  # each job's directory is named by its config: the same names
    assert len(jobs) == 2 and sorted(read_index(tmp_path / "inproc")) == jobs
    for job in jobs:
        cli, mine = tmp_path / "cli" / job, tmp_path / "inproc" / job
        read = lambda d: yaml.safe_load((d / ".hydra" / "overrides.yaml").read_text())  # noqa: E731
        assert [o for o in read(cli) if not o.startswith("cache_dir")] == [
            o for o in read(mine) if not o.startswith("cache_dir")
        ]
        a, b = (pd.read_csv(d / "metrics.csv").drop(columns=list(TIMING_COLUMNS), errors="ignore") for d in (cli, mine))
        pd.testing.assert_frame_equal(a, b)
        assert yaml.safe_load((cli / "config.yaml").read_text()) == yaml.safe_load((mine / "config.yaml").read_text())
    (second,) = find_jobs(tmp_path / "inproc", "partition.alpha=0.1")
    assert yaml.safe_load((second / "config.yaml").read_text())["partition"]["alpha"] == 0.1


def test_bad_command_is_one_line_and_the_other_commands_run(tmp_path: Path, capsys) -> None:
    bad = ["-m", "algorithm=nope", f"hydra.sweep.dir={tmp_path / 'bad'}"]
    missing = ["-m", "data=cifar10", f"data.root={tmp_path / 'none'}", "seed=1,2", f"hydra.sweep.dir={tmp_path / 'ok'}"]
    assert run_commands([bad, missing], log=False) == 1
    err = capsys.readouterr().err
    assert "fedrun: error: algorithm: unknown option 'nope'; valid:" in err and "fedavg" in err
    (seed1,), (seed2,) = find_jobs(tmp_path / "ok", "seed=1"), find_jobs(tmp_path / "ok", "seed=2")
    assert "cifar10: folder cifar-10-batches-py not found" in (seed2 / "error.txt").read_text()
    assert (seed1 / "error.txt").is_file() and not (tmp_path / "bad").exists()


def test_rejected_jobs_keep_their_labels_and_show_as_refused_cells(tmp_path: Path, capsys) -> None:
    """A job refused on bad input keeps Hydra's record of it (.hydra/), so the report can place its cell."""
    from fedrun.cli.report import main as report_main

    missing = ["data=cifar10", f"data.root={tmp_path / 'none'}", "partition.alpha=0.1,1", *TINY]
    cmd = ["-m", *missing, "++tags.method='FedAvg'", f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    assert run_commands([cmd], log=False) == 0
    (job,) = find_jobs(tmp_path / "sweep", "partition.alpha=1")
    assert sorted(p.name for p in job.iterdir()) == [".hydra", "error.txt"]
    assert sorted(p.name for p in (job / ".hydra").iterdir()) == ["config.yaml", "overrides.yaml"]
    capsys.readouterr()
    assert report_main([str(tmp_path / "sweep"), "--rows", "tags.method", "--cols", "partition.alpha"]) == 0
    out = capsys.readouterr().out
    row = next(ln for ln in out.splitlines() if ln.startswith("| tags.method=FedAvg"))
    assert row.count("refused") == 2 and "2 of 2 runs did not complete" in out


STACKABLE = [  # jobs that stack: an MLP without dropout, engine auto (tests/cli/test_stacked_sweeps.py's)
    "experiment=smoke",
    "data.max_train_samples=300",
    "data.max_test_samples=200",
    "fl.clients=3",
    "fl.rounds=2",
    "model.hidden=[16]",
    "hardware.threads=1",
    "output.plots=false",
]


def _commands(root: Path, *extra: str) -> list[list[str]]:
    """Two commands (FedProx's mu 0.1 and 0.01, seeds 0 and 1), each into its own sweep folder, as a reproduce
    target's: their four jobs differ only in what stacks."""
    cache = f"cache_dir={root.parent / 'cache'}"
    return [
        ["-m", "algorithm=fedprox", f"algorithm.mu={mu}", "seed=0,1", f"++tags.method='FedProx({mu})'", *STACKABLE,
         *extra, cache, f"hydra.sweep.dir={root / f'm0{i}'}"]
        for i, mu in enumerate((0.1, 0.01))
    ]  # fmt: skip


def _stack_lines(out: str) -> list[str]:
    """The console's lines of a sweep's stacks."""
    return [line for line in out.splitlines() if line.startswith(("stack ", "not stacked"))]


def _metrics(root: Path) -> dict[str, pd.DataFrame]:
    """Each job's metrics without the timing columns, by its sweep and its folder's name less the hash (which
    ``hardware.engine``, part of a run's identity, changes)."""
    return {
        str(p.parent.relative_to(root)).rsplit("-", 1)[0]: pd.read_csv(p).drop(columns=list(TIMING_COLUMNS))
        for p in sorted(root.rglob("metrics.csv"))
    }


def test_the_jobs_of_several_commands_train_stacked_say_so_and_equal_their_runs_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """fedrun-reproduce's runner stacks as ``fedrun -m`` does, across its commands: one console line, each job's own
    folder, records and end line, its summary.json's stack naming the others, its metrics bit for bit those of the
    same job alone on the vectorised engine; ``hardware.stack=off`` runs them one after another, without a word."""
    stacked, alone = tmp_path / "stacked", tmp_path / "alone"
    assert run_commands(_commands(stacked)) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1] == "stack 1: jobs 1-4 train together, as one vectorised cohort"
    ends = [line for line in out if ": completed, acc " in line]
    assert len(ends) == 4 and all(line.endswith(", stack 1)") for line in ends)
    folders = [stacked / m / name for m in ("m00", "m01") for name in read_index(stacked / m)]
    assert len(folders) == 4
    for folder in folders:
        assert sorted(p.name for p in (folder / ".hydra").iterdir()) == ["config.yaml", "overrides.yaml"]
        summary = json.loads((folder / "summary.json").read_text())
        assert summary["status"] == "completed" and summary["engine"] == "vectorised"
        others = [str(f.relative_to(stacked)) for f in folders if f != folder]
        assert summary["stack"]["jobs"] == 4 and summary["stack"]["with"] == others
    assert run_commands(_commands(alone, "hardware.stack=off", "hardware.engine=vectorised")) == 0
    assert not _stack_lines(capsys.readouterr().out)
    mine, theirs = _metrics(stacked), _metrics(alone)
    assert sorted(mine) == sorted(theirs) and len(mine) == 4
    for name, frame in mine.items():
        pd.testing.assert_frame_equal(frame, theirs[name], check_exact=True)


def test_a_stacked_job_that_fails_is_recorded_the_others_go_on_and_a_rerun_skips_the_finished(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A job of a stack that diverges ends diverged and its stack's others complete; the same commands again skip
    every finished job (none stacks: a finished job trains with nobody) and run only a new one."""
    cmds = _commands(tmp_path / "sweep", "fl.lr=0.05,1e18")
    assert run_commands(cmds) == 0
    out = capsys.readouterr().out
    assert "stack 1: jobs 1-8 train together, as one vectorised cohort" in out
    assert out.count(": diverged") == 4 and out.count(": completed, acc ") == 4
    assert run_commands(cmds) == 0
    again = capsys.readouterr().out
    assert not _stack_lines(again) and again.count(": skipped (already done") == 8
    grown = [[*c[:-1], "seed=0,1,2", c[-1]] for c in cmds]
    assert run_commands(grown) == 0
    more = capsys.readouterr().out
    assert _stack_lines(more) == ["stack 1: jobs 5, 6, 11, 12 train together, as one vectorised cohort"]
    assert more.count(": completed, acc ") == more.count(": diverged") == 2 and more.count(": skipped") == 8


def test_jobs_that_would_have_stacked_say_why_not_in_a_line_and_in_their_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    cmds = _commands(tmp_path / "sweep", "model.dropout=0.5")[:1]
    assert run_commands(cmds) == 0
    (line,) = _stack_lines(capsys.readouterr().out)
    assert line.startswith("not stacked: jobs 1, 2 train alone (model=mlp draws dropout masks")
    for folder in (tmp_path / "sweep" / "m00").iterdir():
        if folder.is_dir():
            summary = json.loads((folder / "summary.json").read_text())
            assert summary["stack"] == {"jobs": 1, "not_stacked": line.partition("(")[2].removesuffix(")")}
