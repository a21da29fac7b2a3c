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
import yaml

from fedrun.core.errors import ConfigError
from tests.conftest import REPO, main_exit_code

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


def test_the_engine_of_the_extending_page_runs_as_the_sequential_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
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
    # the reference: the package's own engine, so in this process (the page's engine is imported only above)
    monkeypatch.chdir(tmp_path)
    argv = ["fedrun", *extra, "hardware.engine=sequential", f"hydra.run.dir={tmp_path / 'seq'}"]
    assert main_exit_code(monkeypatch, argv) == 0
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


# two real runs (FedAvg, 2 rounds of 3 clients on 300 samples), as tests/cli/test_sweeps.py makes a sweep in-process
TINY_SWEEP = [
    "experiment=smoke",
    "data.max_train_samples=300",
    "data.max_test_samples=100",
    "fl.clients=3",
    "fl.rounds=2",
    "eval.last_k=2",
    "model.hidden=[16]",
    "hardware.engine=sequential",
    "hardware.threads=1",
    "output.plots=false",
    "checkpoint.every=0",
]


def _real_sweep(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[float, dict]:
    """Run FedAvg at fl.lr 0.01 and 0.3 under tmp_path/sweep; {lr: its summary.json}."""
    monkeypatch.chdir(tmp_path)
    where = [f"hydra.sweep.dir={tmp_path / 'sweep'}", f"cache_dir={tmp_path / 'cache'}"]
    assert main_exit_code(monkeypatch, ["fedrun", "-m", *TINY_SWEEP, "fl.lr=0.01,0.3", *where]) == 0
    out = {}
    for job in (tmp_path / "sweep").iterdir():
        if (job / "summary.json").is_file():
            lr = yaml.safe_load((job / "config.yaml").read_text())["fl"]["lr"]
            out[lr] = json.loads((job / "summary.json").read_text())
    assert sorted(out) == [0.01, 0.3] and all(s["status"] == "completed" and s["last_k"] == 2 for s in out.values())
    return out


def _md_rows(text: str) -> dict[str, str]:
    """The body rows of the first Markdown table in ``text``: {first cell: second cell}."""
    lines = [ln for ln in text.split("\n\n", 1)[0].splitlines() if ln.startswith("|")][2:]
    return {cells[1].strip(): cells[2].strip() for cells in (ln.split("|") for ln in lines)}


def test_the_table_layout_of_the_extending_page_runs_through_fedrun_report(  # noqa: ANN001
    monkeypatch, tmp_path: Path, capsys
) -> None:
    """The page's module, registered as written: ``fedrun-report table --layout peak`` on two real runs prints and
    writes its cells, its caption (the k the runs used, n) and, in the .tex, its best cell bold; ``--select`` picks
    by its metric. Before the Layout record, the caption and the metric were dicts keyed by the built-in names:
    such a layout stopped with a KeyError in papers/captions.py."""
    from fedrun.cli import report
    from fedrun.papers import layouts

    summaries = _real_sweep(monkeypatch, tmp_path)
    capsys.readouterr()
    monkeypatch.setattr(layouts, "LAYOUTS", dict(layouts.LAYOUTS))  # the example's registration ends with the test
    _load(monkeypatch, _titled("extending.md")["fedrun/papers/layout_peak.py"], "layout_peak_example", tmp_path)
    cell = {lr: f"{100 * s['test_acc_best']:.2f} ({100 * s['test_acc_last_k']:.2f})" for lr, s in summaries.items()}
    caption = (
        "best test accuracy (%) over the evaluated rounds (in brackets: mean of the last 2 evaluated rounds);"
        " mean over seeds; n = 1 runs (seed) per cell."
    )
    sweep = str(tmp_path / "sweep")

    assert report.main(["table", sweep, "--layout", "peak", "--rows", "fl.lr", "--out", str(tmp_path / "lr")]) == 0
    out = capsys.readouterr().out
    assert _md_rows(out) == {str(lr): text for lr, text in cell.items()}
    md = (tmp_path / "lr.md").read_text()
    assert _md_rows(md) == _md_rows(out) and f"\n\n{caption}\n" in md
    tex = (tmp_path / "lr.tex").read_text()
    assert "\\caption{" + caption.replace("%", "\\%") + " The best value of each column in bold.}" in tex
    top, low = sorted(summaries, key=lambda lr: summaries[lr]["test_acc_best"], reverse=True)
    assert summaries[top]["test_acc_best"] > summaries[low]["test_acc_best"]  # the two runs differ
    assert f"{top} & \\textbf{{{cell[top]}}} \\\\" in tex and f"{low} & {cell[low]} \\\\" in tex

    # --select keeps, per cell, the fl.lr with the best mean of the layout's metric, summary.test_acc_best
    select = ["--rows", "algorithm", "--select", "fl.lr", "--out", str(tmp_path / "s")]
    assert report.main(["table", sweep, "--layout", "peak", *select]) == 0
    out = capsys.readouterr().out
    assert _md_rows(out) == {"fedavg": cell[top]}
    assert "Chosen fl.lr (best mean over seeds of summary.test_acc_best):" in out

    # the registry is --layout's list, read when the table is made: another name is one line, exit 2
    assert report.main(["table", sweep, "--layout", "peek"]) == 2
    assert capsys.readouterr().err == "fedrun-report: error: layout: unknown 'peek'; valid: " + (
        "fedima, fedgam, fedcos, fedcos_bestlast, fedlaw, pfllib, fedlaw_gws, fedlaw_corr, fedsam, rounds, fedprox,"
        " peak\n"
    )
    with pytest.raises(SystemExit):
        report.main(["table", "--help"])
    assert "fedsam, peak, pfllib, rounds" in " ".join(capsys.readouterr().out.split())
    with pytest.raises(ValueError, match="layout peak: a layout of that name exists"):
        layouts.register_layout(layouts.Layout("peak", layouts.fedlaw, "again"))
