"""RunDir names every run file once: outside ``fedrun/storage/rundir.py`` no code of fedrun spells a run file's
name as a string (docstrings aside); every module reaches the file through RunDir's path properties or constants."""

from __future__ import annotations

import ast
from pathlib import Path

import fedrun
from fedrun.storage import rundir
from fedrun.storage.rundir import RunDir

# the names of the files (and folders) of a run directory; the lock's name lives in fedrun/storage/lock.py, which
# rundir.py imports it from (lock.py is below rundir.py)
NAMES = (
    "config.yaml",
    "summary.json",
    "metrics.csv",
    "checkpoint.pt",
    "fedrun.log",
    "error.txt",
    "error.log",
    ".hydra",
    "overrides.yaml",
    "accuracy.png",
    "partition.csv",
    "partition.png",
    "partition_domains.csv",
    "client_weights.csv",
    "clients.csv",
    "tracking.json",
    "tb",
    "input_digests.json",
)
ROOT = Path(fedrun.__file__).parent
HOME = ROOT / "storage" / "rundir.py"
# modules another change rewrites (fedrun.cli.main, the in-process sweep runner): their literals move to RunDir there
PENDING: set[tuple[str, str]] = set()


def _docstrings(tree: ast.AST) -> set[int]:
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, kinds) and node.body and isinstance(node.body[0], ast.Expr)
    }


def _literals(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = _docstrings(tree)
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in NAMES and id(node) not in docs
    ]


def test_a_run_file_is_named_only_in_rundir() -> None:
    hits = [
        f"{path.relative_to(ROOT)}:{line}: {name!r}"
        for path in sorted(ROOT.rglob("*.py"))
        if path != HOME
        for line, name in _literals(path)
        if (str(path.relative_to(ROOT)), name) not in PENDING
    ]
    assert not hits, "run files named outside fedrun/storage/rundir.py (use RunDir):\n" + "\n".join(hits)


def test_rundir_names_each_file_once_and_gives_its_path(tmp_path: Path) -> None:
    names = [value for _, value in _literals(HOME)]
    assert sorted(set(names)) == sorted(NAMES)
    assert len(names) == len(set(names)) + 1  # config.yaml twice: the run's and Hydra's record's (in .hydra/)
    rd = RunDir(tmp_path)
    paths = [
        rd.config_file, rd.summary_file, rd.metrics_file, rd.checkpoint_file, rd.log_file, rd.error_file,
        rd.error_log, rd.hydra_dir, rd.hydra_overrides_file, rd.accuracy_plot, rd.partition_file, rd.partition_plot,
        rd.partition_domains_file, rd.client_weights_file, rd.clients_file, rd.tracking_file, rd.tb_dir,
        rd.inputs_file,
    ]  # fmt: skip
    assert [p.name for p in paths] == list(NAMES)
    assert rd.hydra_config_file == tmp_path / rundir.HYDRA_DIR / rundir.CONFIG_FILE
