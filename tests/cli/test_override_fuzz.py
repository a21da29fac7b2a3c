"""The fuzz table: malformed overrides and presets, each refused with one line naming the field, exit code 2,
and nothing half-written (no run directory beyond error.txt and Hydra's .hydra/, no cache, nothing in the
current directory, no file a config tried to create).

Part of the table is generated from the config schema (every field of every section: an unresolvable
interpolation, a deletion, and values of the wrong type); the rest is written by hand from the red team's
findings (issue 14): code from a config, paths as group options, unparsable overrides, presets.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Callable
from pathlib import Path

import pytest

from fedrun.config.schema import fedrun_schema
from tests.conftest import main_exit_code

BASE = ["experiment=smoke", "output.quiet=true", "output.plots=false", "fl.rounds=1", "hardware.threads=1"]
SECTIONS = (
    "fl", "eval", "hardware", "checkpoint", "output", "ima", "proxy", "corrupt", "tracking", "system", "compression",
)  # fmt: skip


def _wrong_values(tp: typing.Any) -> list[str]:
    """Values of the wrong type for a field annotated ``tp`` (Optional[X] as X)."""
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    base = args[0] if args else tp
    if base is bool:
        return ["2", "maybe"]
    if base is int:
        return ["abc", "1.5"]
    if base is float:
        return ["abc", "nan"]
    if base is str:
        return ["[a,b]"]
    return ["abc"]  # lists


def _generated() -> list[tuple[str, str]]:
    cases = [("seed=${undefined.key}", "seed"), ("~seed", "seed"), ("seed=abc", "seed"), ("seed=1.5", "seed")]
    hints = typing.get_type_hints(fedrun_schema())  # the sections as composed: each engine's and tracker's keys too
    for section in SECTIONS:
        cls = hints[section]
        for f in dataclasses.fields(cls):
            key = f"{section}.{f.name}"
            cases.append((f"{key}=${{undefined.key}}", key))
            cases.append((f"~{key}", key))
            cases += [(f"{key}={v}", key) for v in _wrong_values(typing.get_type_hints(cls)[f.name])]
    return cases


LONG = "a" * 5000
HAND = [
    # code from a config (Hydra would instantiate these right after composing)
    (
        "+hydra.callbacks.x._target_=builtins.open +hydra.callbacks.x.file=pwned +hydra.callbacks.x.mode=w",
        "hydra.callbacks.x",
    ),  # fmt: skip
    ("++hydra.callbacks.y._target_=fedrun.cli.main.main", "hydra.callbacks.y"),
    ("+hydra.callbacks.z={}", "hydra.callbacks.z"),
    ("+hydra.job_logging.handlers.x.class=os.system +hydra.job_logging.handlers.x.command=touch", "hydra.job_logging"),
    ("+hydra.hydra_logging.handlers.x.class=subprocess.Popen", "hydra.hydra_logging"),
    ("hydra/sweeper=optuna_tpe hydra.sweeper.storage._target_=os.system", "hydra.sweeper.storage._target_"),
    ("hydra/sweeper=optuna_tpe hydra.sweeper.sampler._target_=builtins.exec", "hydra.sweeper.sampler._target_"),
    ("+algorithm._target_=os.remove", "algorithm._target_"),
    ("+model._target_=builtins.exec", "model._target_"),
    # group options are names in the search path
    ("data=../config", "data"),
    ("experiment=../../../../tmp/evil", "experiment"),
    ("model=sub/dir", "model"),
    ("algorithm=..", "algorithm"),
    ("partition=/etc/passwd", "partition"),
    ("hydra/launcher=../../x", "hydra/launcher"),
    ("experiment=a\\\\b", "experiment"),
    ("algorithm=''", "algorithm"),
    ("algorithm=[fedavg,../x]", "algorithm"),
    ("algorithm=null", "algorithm"),
    ("data=null", "data"),
    ("hardware=null", "hardware"),
    ("~model", "model"),
    ("~partition", "partition"),
    (f"algorithm={LONG}", "algorithm"),
    (f"model={LONG[:300]}", "model"),
    ("algorithm=nope", "algorithm"),
    ("experiment=nope", "experiment"),
    # a name is chosen with its group's option, never overridden
    ("model.name=cnn", "model.name"),
    ("algorithm.name=fedprox", "algorithm.name"),
    ("data.name=cifar10", "data.name"),
    ("partition.name=iid", "partition.name"),
    # run and sweep directories
    ("hydra.run.dir=", "hydra.run.dir"),
    ("hydra.run.dir=' '", "hydra.run.dir"),
    ("hydra.run.dir=${undefined.key}", "hydra.run.dir"),
    # interpolations of every kind of failure
    ("fl.lr='${oc.env:HOME}'", "fl.lr"),
    ("fl.lr=${fl.lr}", "fl.lr"),
    ("fl.lr=${foo:bar}", "fl.lr"),
    ("fl.rounds=${fl.lr}", "fl.rounds"),
    ("seed=${oc.env:FEDRUN_FUZZ_UNSET_VARIABLE}", "seed"),
    ("+tags.a=${tags.b} +tags.b=${tags.a}", "tags"),
    ("model.hidden=${undefined.key}", "model.hidden"),
    ("algorithm.mu=${oc.env:HOME} algorithm=fedprox", "algorithm.mu"),
    # unparsable overrides name the override's key
    ("fl.lr=[1,2", "fl.lr"),
    ("fl.lr='1", "fl.lr"),
    ("fl.lr=${", "fl.lr"),
    ("fl.lr={", "fl.lr"),
    ("fl.lr=1)", "fl.lr"),
    ("fl.lr", "fl.lr"),
    ("a=b=c", "a"),
    (f"fl.lr={'1' * 5000}", "fl.lr"),
    # booleans are true or false, deletions are refused
    ("output.plots=0", "output.plots"),
    ("eval.train_acc=yes", "eval.train_acc"),
    ("output.quiet=1.0", "output.quiet"),
    ("~fl", "fl"),
    ("~cache_dir", "cache_dir"),
    # imports are module names that import
    ("imports=[no_such_module_fuzz]", "imports[0]"),
    ("imports=[../evil]", "imports[0]"),
    ("imports=[os.path/x]", "imports[0]"),
    ("imports=[1]", "imports[0]"),
    ("imports=abc", "imports"),
    # values and keys
    ("fl.bogus=1", "fl.bogus"),
    ("+bogus=1", "bogus"),
    ("fl.clients=100000", "fl.clients"),
    ("model.hidden=[0]", "model.hidden"),
]

# (file under the temporary --config-dir, its text, the field the error must name)
PRESETS = [
    ("experiment/p_type.yaml", "# @package _global_\nfl:\n  rounds: abc\n", "fl.rounds"),
    ("experiment/p_unknown.yaml", "# @package _global_\nfl:\n  bogus: 1\n", "fl.bogus"),
    ("experiment/p_interp.yaml", "# @package _global_\nfl:\n  lr: ${undefined.key}\n", "fl.lr"),
    (
        "experiment/p_callback.yaml",
        "# @package _global_\nhydra:\n  callbacks:\n    evil:\n"
        "      _target_: builtins.open\n      file: pwned\n      mode: w\n",
        "hydra.callbacks.evil",
    ),  # fmt: skip
    (
        "experiment/p_logging.yaml",
        "# @package _global_\nhydra:\n  job_logging:\n    handlers:\n      x:\n        class: os.system\n",
        "hydra.job_logging",
    ),  # fmt: skip
    ("experiment/p_defaults.yaml", "# @package _global_\ndefaults:\n  - override /data: ../config\n", "data"),
    ("experiment/p_rundir.yaml", "# @package _global_\nhydra:\n  run:\n    dir: ''\n", "hydra.run.dir"),
    ("experiment/p_target.yaml", "# @package _global_\nmodel:\n  _target_: os.remove\n", "model._target_"),
    ("experiment/p_range.yaml", "# @package _global_\nfl:\n  participation: 7\n", "fl.participation"),
    ("experiment/p_seed.yaml", "# @package _global_\nseed: -3\n", "seed"),
]

# sweeps (fedrun -m): the sweep's directories
MULTIRUN = [
    ("hydra.sweep.dir= seed=0,1", "hydra.sweep.dir"),
    ("hydra.sweep.subdir= seed=0,1", "hydra.sweep.subdir"),
    ("seed=0,1 experiment=smoke,../../x", "experiment"),
]

CASES = [*_generated(), *HAND]
Result = tuple[object, str, Path, Path, Path]  # exit code, stderr, run dir, cache dir, working dir


@pytest.fixture
def fedrun_main(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, tmp_path: Path) -> Callable:
    """``fedrun`` in-process from an empty working directory: (exit code, stderr, run dir, cache dir, cwd)."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.delenv("FEDRUN_FUZZ_UNSET_VARIABLE", raising=False)

    def _call(*args: str, base: list[str] = BASE, flags: tuple[str, ...] = (), set_run_dir: bool = True) -> Result:
        run_dir, cache = tmp_path / "run", tmp_path / "cache"
        where = [f"hydra.run.dir={run_dir}"] if set_run_dir else []  # not when the preset under test sets it
        argv = ["fedrun", *flags, *base, *where, f"cache_dir={cache}", *args]
        code = main_exit_code(monkeypatch, argv)
        return code, capsys.readouterr().err, run_dir, cache, cwd

    return _call


def _refused(result: Result, field: str) -> None:
    code, err, run_dir, cache, cwd = result
    assert code == 2, err[-2000:]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fedrun: error: "), err[-2000:]
    assert "a" * 100 not in lines[0] and "1" * 100 not in lines[0]  # a 5,000-character value is not echoed whole
    assert re.search(rf"(?<![\w.]){re.escape(field)}", lines[0]), f"{field!r} not named in: {lines[0][:300]}"
    if run_dir.exists():  # nothing half-written: Hydra's record of the job and the error, nothing else
        assert sorted(p.name for p in run_dir.iterdir() if p.name != ".hydra") == ["error.txt"]
    assert not cache.exists()
    assert list(cwd.iterdir()) == []  # nothing in the working directory (no run, no file a config opened)


@pytest.mark.parametrize(("overrides", "field"), CASES, ids=[c[0][:60] for c in CASES])
def test_malformed_override_is_refused(fedrun_main: Callable, overrides: str, field: str) -> None:
    _refused(fedrun_main(*overrides.split(" ")), field)


@pytest.mark.parametrize(("path", "text", "field"), PRESETS, ids=[p[0] for p in PRESETS])
def test_malformed_preset_is_refused(fedrun_main: Callable, tmp_path: Path, path: str, text: str, field: str) -> None:
    conf = tmp_path / "userconf"
    (conf / path).parent.mkdir(parents=True)
    (conf / path).write_text(text)
    flags, own_dir = ("--config-dir", str(conf)), field == "hydra.run.dir"
    result = fedrun_main(f"experiment={Path(path).stem}", base=BASE[1:], flags=flags, set_run_dir=not own_dir)
    _refused(result, field)


@pytest.mark.parametrize(("overrides", "field"), MULTIRUN, ids=[m[0] for m in MULTIRUN])
def test_malformed_sweep_is_refused(fedrun_main: Callable, overrides: str, field: str) -> None:
    _refused(fedrun_main(*overrides.split(" "), base=BASE[1:], flags=("-m",)), field)


def test_the_table_is_large_and_covers_every_schema_field() -> None:
    fields = {f"{s}.{f.name}" for s in SECTIONS for f in dataclasses.fields(typing.get_type_hints(fedrun_schema())[s])}
    named = {field for _, field in CASES}
    assert fields <= named
    assert len(CASES) + len(PRESETS) + len(MULTIRUN) == 407  # the count docs/reliability.md quotes
