"""README's "Extending fedrun" walkthrough, run as written: a method in a package outside fedrun, its YAML in a
--config-dir, loaded with +imports=[...] from the command line."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pandas as pd

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
