"""The wheel carries conf/ as the package fedrun.conf, so an installed fedrun composes without the checkout
(`make package-check` installs it into a fresh venv and runs it; this checks the wheel's contents)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from fedrun.config.location import CONF_DIR, HYDRA_CONFIG_PATH
from tests.conftest import REPO

pytest.importorskip("setuptools", reason="builds the wheel with this environment's setuptools")


def test_the_wheel_ships_every_config_file_inside_the_package(tmp_path: Path) -> None:
    src = tmp_path / "src"  # a copy: building in the checkout would leave build/ and *.egg-info there
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(REPO / "fedrun", src / "fedrun", ignore=ignore)
    shutil.copytree(REPO / "conf", src / "conf", ignore=ignore)
    cmd = [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation", "-q", "-w"]
    subprocess.run([*cmd, str(tmp_path)], check=True, capture_output=True, cwd=tmp_path, timeout=600)
    (wheel,) = tmp_path.glob("fedrun-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    configs = {f"fedrun/conf/{p.relative_to(REPO / 'conf')}" for p in (REPO / "conf").rglob("*.yaml")}
    assert len(configs) > 100 and configs <= names
    assert "fedrun/conf/__init__.py" in names and "fedrun/cli/main.py" in names
    assert not any(n.startswith(("conf/", "tests/")) for n in names)  # no top-level package named conf


def test_pyproject_lists_every_package_and_maps_conf_to_fedrun_conf() -> None:
    tomllib = pytest.importorskip("tomllib")
    setuptools_cfg = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    on_disk = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "fedrun").rglob("*.py")}
    assert set(setuptools_cfg["packages"]) == on_disk | {"fedrun.conf"}  # a new subpackage must be listed
    # every folder of modules a regular package: fedrun/capabilities had no __init__.py, so a check keyed on
    # __init__.py files missed it, and the wheel left it out
    assert all((REPO / Path(*name.split("."))).joinpath("__init__.py").is_file() for name in on_disk)
    assert setuptools_cfg["package-dir"] == {"fedrun.conf": "conf"}
    assert not (REPO / "setup.py").exists()


def test_the_config_is_found_one_way_as_the_package_fedrun_conf() -> None:
    import fedrun.conf

    assert HYDRA_CONFIG_PATH == "pkg://fedrun.conf"
    assert CONF_DIR == Path(fedrun.conf.__file__).parent and (CONF_DIR / "config.yaml").is_file()
