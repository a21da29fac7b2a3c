"""Where fedrun's Hydra config groups are: the package ``fedrun.conf``, read by Hydra as ``pkg://fedrun.conf``.

conf/ stays at the repository's top level; pyproject.toml maps it to ``fedrun.conf`` (``[tool.setuptools]
package-dir``), so a wheel installs it inside the package and an editable install (``pip install -e .``) imports
it from the checkout: one way to find it in both. :data:`CONF_DIR` is that package's folder on disk, for code
that needs a filesystem path (Hydra's ``initialize_config_dir``, reading one YAML file).

A checkout run without installing fedrun (``PYTHONPATH=.``, as ``make gpu-check`` does on a GPU machine's own
torch) has no such mapping: then the checkout's ``conf/`` is registered as ``fedrun.conf`` here, before first use.
"""

from __future__ import annotations

import importlib.util
import sys
from importlib.resources import files
from pathlib import Path

HYDRA_CONFIG_PATH = "pkg://fedrun.conf"


def _register_checkout_conf() -> None:
    """Make ``fedrun.conf`` importable from the checkout's ``conf/`` when no install mapped it."""
    if importlib.util.find_spec("fedrun.conf") is not None:
        return
    conf = Path(__file__).resolve().parents[2] / "conf"
    spec = importlib.util.spec_from_file_location(
        "fedrun.conf", conf / "__init__.py", submodule_search_locations=[str(conf)]
    )
    if spec is None or spec.loader is None or not (conf / "__init__.py").is_file():
        return  # neither installed nor a checkout: files() below names what is missing
    module = importlib.util.module_from_spec(spec)
    sys.modules["fedrun.conf"] = module
    spec.loader.exec_module(module)


_register_checkout_conf()
# wheels and editable installs both unpack fedrun.conf to a folder on disk (never a zip), so this is a real path
CONF_DIR = Path(str(files("fedrun.conf")))
