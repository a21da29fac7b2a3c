"""README's "Extending fedrun" walkthrough, run as written: a method in a package outside fedrun, its YAML in a
--config-dir, loaded with +imports=[...] from the command line."""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from fedrun.core.errors import ConfigError
from tests.conftest import REPO

SMALL = ["experiment=smoke", "fl.rounds=2", "hardware.threads=1", "output.plots=false"]


def _walkthrough() -> tuple[str, str, str]:
    text = (REPO / "README.md").read_text()
    section = text.split("## Extending fedrun", 1)[1].split("\n## ", 1)[0]
    blocks = dict(re.findall(r"```(python|yaml|bash)[^\n]*\n(.*?)```", section, re.S))  # info: title="file"
    return blocks["python"], blocks["yaml"], blocks["bash"].strip()


def _fedrun(cwd: Path, args: list[str]) -> subprocess.CompletedProcess:
    # -P: the working directory is not on sys.path, as for the installed `fedrun` script; imports= adds it
    code = "import sys; from fedrun.cli.main import main; sys.argv[0] = 'fedrun'; main()"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "HOME": str(cwd)}
    return subprocess.run(
        [sys.executable, "-P", "-c", code, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def test_a_users_method_outside_the_package_runs_from_the_readme(tmp_path: Path) -> None:
    module, yaml_text, command = _walkthrough()
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "algo.py").write_text(module)
    (tmp_path / "myconf" / "algorithm").mkdir(parents=True)
    (tmp_path / "myconf" / "algorithm" / "fedslow.yaml").write_text(yaml_text)
    args = shlex.split(command)
    assert args[0] == "fedrun" and "+imports=[mypkg.algo]" in args
    extra = [*SMALL, f"cache_dir={tmp_path / 'cache'}"]

    res = _fedrun(tmp_path, [*args[1:], *extra, f"hydra.run.dir={tmp_path / 'run'}"])
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["algorithm"] == "fedslow"
    moving = pd.read_csv(tmp_path / "run" / "metrics.csv")["test_acc"]
    assert moving.iloc[0] != moving.iloc[1]

    # its aggregate really runs: server_lr=0 keeps the initial model, so every round tests the same model
    res = _fedrun(tmp_path, [*args[1:], *extra, "algorithm.server_lr=0", f"hydra.run.dir={tmp_path / 'frozen'}"])
    assert res.returncode == 0, res.stderr[-3000:]
    frozen = pd.read_csv(tmp_path / "frozen" / "metrics.csv")["test_acc"]
    assert frozen.nunique() == 1 and frozen.iloc[0] != moving.iloc[1]

    # and its hyperparameters are validated like the package's
    res = _fedrun(tmp_path, [*args[1:], *extra, "algorithm.server_lr=2", f"hydra.run.dir={tmp_path / 'bad'}"])
    assert res.returncode == 2
    assert res.stderr.strip() == "fedrun: error: algorithm.server_lr: must be in [0.0, 1.0], got 2.0"


# ---- docs/extending.md: an engine and a tracker, run as written -------------------------------------------------


def _load(monkeypatch: pytest.MonkeyPatch, code: str, name: str, folder: Path) -> None:
    """Import ``code`` as the module ``name`` (a file in ``folder``), as the registry's own import would."""
    path = folder / f"{name}.py"
    path.write_text(code)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)
    spec.loader.exec_module(module)


def _titled(page: str) -> dict[str, str]:
    """The page's code blocks titled with a file name: {file name: code}."""
    text = (REPO / "docs" / page).read_text()
    return dict(re.findall(r'```python title="([^"]+)"\n(.*?)```', text, re.S))


def test_the_engine_of_the_extending_page_runs_as_the_sequential_engine(tmp_path: Path) -> None:
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "engine.py").write_text(_titled("extending.md")["mypkg/engine.py"])
    text = (REPO / "docs" / "extending.md").read_text().split("## An engine", 1)[1].split("\n## ", 1)[0]
    args = shlex.split(re.findall(r"```bash\n(.*?)```", text, re.S)[0].strip())
    assert args[0] == "fedrun" and "hardware.engine=counting" in args
    extra = [*SMALL, f"cache_dir={tmp_path / 'cache'}"]
    res = _fedrun(tmp_path, [*args[1:], *extra, f"hydra.run.dir={tmp_path / 'mine'}"])
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads((tmp_path / "mine" / "summary.json").read_text())["engine"] == "counting"
    res = _fedrun(tmp_path, [*extra, "hardware.engine=sequential", f"hydra.run.dir={tmp_path / 'seq'}"])
    assert res.returncode == 0, res.stderr[-3000:]
    mine, seq = (pd.read_csv(tmp_path / d / "metrics.csv") for d in ("mine", "seq"))
    assert mine["test_acc"].tolist() == seq["test_acc"].tolist()
    assert mine["test_loss"].tolist() == seq["test_loss"].tolist()


def test_auto_considers_the_pages_engine_on_the_cpu_only(make_spec, monkeypatch, tmp_path: Path) -> None:  # noqa: ANN001
    import torch

    from fedrun.config.registry import ENGINES
    from fedrun.engines import auto
    from fedrun.run.experiment import build_experiment

    ENGINES.names()  # the built-in engines first
    monkeypatch.setattr(ENGINES, "_entries", dict(ENGINES._entries))  # the example's registration ends here
    _load(monkeypatch, _titled("extending.md")["mypkg/engine.py"], "counting_example", tmp_path)
    spec = make_spec("data.standin=true", "hardware.threads=1", "model.hidden=[8]", "fl.clients=4")
    exp = build_experiment(spec)
    on_cpu, _ = auto.candidates(spec.hardware, exp.algorithm, torch.device("cpu"))
    on_gpu, _ = auto.candidates(spec.hardware, exp.algorithm, torch.device("cuda"))
    assert "counting" in on_cpu and "sequential" in on_cpu
    assert "counting" not in on_gpu and "sequential" in on_gpu
    engine = auto.build_engine("counting", spec.hardware, exp.algorithm, exp.fed, spec.fl, spec.seed)
    assert type(engine).__name__ == "CountingEngine" and engine.every == 1  # its option's default


def test_the_tracker_of_the_extending_page_receives_every_row(monkeypatch, tmp_path: Path) -> None:  # noqa: ANN001
    from fedrun.config import schema
    from fedrun.config.registry import build_params
    from fedrun.storage.tracking import TRACKERS, Trackers

    TRACKERS.names()
    monkeypatch.setattr(TRACKERS, "_entries", dict(TRACKERS._entries))
    _load(monkeypatch, _titled("extending.md")["fedrun/storage/trackers/jsonl.py"], "jsonl_example", tmp_path)
    section = schema._tracking_class()  # what fedrun/config/schema.py builds when the module is in the package
    choice = build_params(section, {"jsonl": {"enabled": True, "file": "out.jsonl"}}, "tracking", ignore=())
    assert list(choice.chosen()) == ["jsonl"] and not choice.tensorboard and not choice.mlflow.enabled
    trackers = Trackers.open(choice, tmp_path, {"fl": {"rounds": 2}})
    for r in (1, 2):
        trackers.log({"round": r, "test_acc": 0.25 * r})
    trackers.finish(tmp_path, {"status": "completed"})
    trackers.close()
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert rows == [{"round": 1, "test_acc": 0.25}, {"round": 2, "test_acc": 0.5}]
    with pytest.raises(ConfigError, match=r"^tracking\.jsonl\.fil: Key 'fil' not in 'JsonlTracking'"):
        build_params(section, {"jsonl": {"enabled": True, "fil": "x"}}, "tracking", ignore=())


# ---- docs/extending.md: a report subcommand and a table layout, run as written ------------------------------------


def _sweep(folder: Path) -> Path:
    from tests.report.fake_runs import fake_run

    for i, (name, status, acc) in enumerate([("fedavg", "completed", 0.5), ("fedprox", "completed", 0.7)]):
        fake_run(folder / f"r{i}", {"algorithm.name": name}, curve=[acc - 0.1, acc], status=status)
    fake_run(folder / "r2", {"algorithm.name": "fedprox"}, curve=[0.2, 0.9], status="completed")
    return folder


def test_the_report_subcommand_of_the_extending_page_runs(monkeypatch, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    from fedrun.cli import report

    monkeypatch.setattr(report, "SUBCOMMANDS", dict(report.SUBCOMMANDS))
    monkeypatch.setattr(report, "HANDLERS", dict(report.HANDLERS))
    _load(monkeypatch, _titled("extending.md")["fedrun/cli/report_count.py"], "report_count_example", tmp_path)
    assert report.report(["count", str(_sweep(tmp_path / "sweep"))]) == 0
    assert capsys.readouterr().out == "completed: 3\n"
    assert report.report(["--help"]) == 0 and "how many runs the directories hold" in capsys.readouterr().out
    assert report.report(["count"]) == 2
    with pytest.raises(ValueError, match="fedrun-report count: a subcommand of that name exists"):
        report.register_subcommand("count", "again")(lambda argv: 0)


def test_the_table_layout_of_the_extending_page_tables_runs(monkeypatch, tmp_path: Path) -> None:  # noqa: ANN001
    from fedrun.papers import layouts
    from fedrun.report.collect import load_runs

    monkeypatch.setattr(layouts, "LAYOUTS", dict(layouts.LAYOUTS))
    _load(monkeypatch, _titled("extending.md")["fedrun/papers/layout_best.py"], "layout_best_example", tmp_path)
    table = layouts.render("best", load_runs([_sweep(tmp_path / "sweep")]), ["algorithm"], [])
    assert table["summary.test_acc_best"].round(6).to_dict() == {"fedavg": 50.0, "fedprox": 90.0}
    with pytest.raises(ValueError, match="layout best: a layout of that name exists"):
        layouts.register_layout("best")(lambda runs, rows, cols: runs)
