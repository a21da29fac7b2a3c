"""Without an optional extra (``pip install -e .[dev]``: no docs, trackers, Ray or Optuna), every test module still
collects: one that needs an extra skips itself (``pytest.importorskip``) instead of stopping the whole run with an
ImportError at collection. Checked by collecting, in a process where the extras' modules cannot be imported, every
test module that names one of them (also through a file it loads, as tests/docs/test_hooks.py loads docs/hooks.py)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.conftest import REPO

tomllib = pytest.importorskip("tomllib")

# the top-level modules each optional extra of pyproject.toml installs
EXTRA_MODULES = {
    "tracking": ("tensorboard",),
    "mlflow": ("mlflow",),
    "wandb": ("wandb",),
    "dist": ("ray", "hydra_plugins.hydra_joblib_launcher", "hydra_plugins.hydra_submitit_launcher", "submitit"),
    "ray-launcher": ("hydra_plugins.hydra_ray_launcher",),
    "tune": ("hydra_plugins.hydra_optuna_sweeper", "optuna", "sqlalchemy"),
    "docs": ("mkdocs", "material"),
    "privacy": ("dp_accounting", "opacus"),
    "robust-test": ("byzfl",),
}
BLOCK = """
import sys
BLOCKED = {blocked!r}

class NotInstalled:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in BLOCKED):
            raise ModuleNotFoundError(f"No module named {{name!r}} (an optional extra, blocked)", name=name)
        return None

sys.meta_path.insert(0, NotInstalled)
import pytest
sys.exit(pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", *sys.argv[1:]]))
"""


def test_every_optional_extra_is_listed() -> None:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(extras) - {"dev"} == set(EXTRA_MODULES)


def _naming_an_extra() -> list[str]:
    """The test modules whose text names a module of an extra, or a repository file that imports one."""
    blocked = {m.split(".")[-1] for ms in EXTRA_MODULES.values() for m in ms}
    loaders = [p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.py")]  # docs/hooks.py imports mkdocs
    words = re.compile(r"\b(" + "|".join(sorted(blocked | {"hydra_plugins"})) + r")\b")
    files = []
    for path in sorted((REPO / "tests").rglob("test_*.py")):
        text = path.read_text()
        if words.search(text) or any(name in text for name in loaders):
            files.append(str(path.relative_to(REPO)))
    return files


def test_without_the_optional_extras_every_test_module_still_collects() -> None:
    files = _naming_an_extra()
    assert "tests/docs/test_hooks.py" in files
    blocked = [m for ms in EXTRA_MODULES.values() for m in ms]
    res = subprocess.run(
        [sys.executable, "-c", BLOCK.format(blocked=blocked), *files],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = res.stdout + res.stderr
    assert res.returncode in (0, 5) and "error" not in out.lower().split("warnings summary")[0], out[-3000:]
