"""The doc test's one shrink rule (tests/docs/shrink.py)."""

from __future__ import annotations

from pathlib import Path

from tests.docs.shrink import shrunk_argv, split_top


def test_a_sweep_value_splits_only_at_top_level_commas() -> None:
    assert split_top("a,[b,c],'d,e',f(g,h)") == ["a", "[b,c]", "'d,e'", "f(g,h)"]


def test_a_command_gets_the_smoke_shrink_after_its_own_overrides_and_keeps_its_sweep(tmp_path: Path) -> None:
    args = ["-m", "experiment=fedlaw_table3_fmnist_mlp", "fl.rounds=200", "fl.participation=0.1,0.5"]
    out = shrunk_argv(args, tmp_path)
    assert out[: len(args)] == args
    extra = dict(a.split("=", 1) for a in out[len(args) :])
    assert extra["fl.rounds"] == "2" and extra["fl.clients"] == "10"  # a 10% cohort needs 10 clients
    assert "fl.participation" not in extra and extra["cache_dir"] == str(tmp_path)


def test_commands_that_run_nothing_and_resumes_are_left_as_written(tmp_path: Path) -> None:
    for args in (["--help"], ["--cfg", "job", "algorithm=fedprox"], ["resume=outputs/run", "fl.rounds=400"]):
        assert shrunk_argv(args, tmp_path) == args
