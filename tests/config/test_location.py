"""fedrun.conf is found both installed (the package-dir mapping) and from a bare checkout on PYTHONPATH."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_a_checkout_without_an_install_finds_its_conf_folder() -> None:
    # -S: no site-packages, hence no editable-install finder mapping fedrun.conf: what `make gpu-check` meets
    # on a GPU machine's own Python (fedrun run from the checkout with PYTHONPATH, never installed there)
    code = (
        "import importlib.util, sys; sys.path.insert(0, sys.argv[1]); import fedrun;"
        "print(importlib.util.find_spec('fedrun.conf') is None);"
        "import fedrun.config.location as l; print(l.CONF_DIR);"
        "from importlib.resources import files; print((files('fedrun.conf') / 'config.yaml').is_file())"
    )
    out = subprocess.run(
        [sys.executable, "-S", "-c", code, str(REPO)], capture_output=True, text=True, check=True, cwd="/"
    ).stdout.split()
    assert out == ["True", str(REPO / "conf"), "True"]
