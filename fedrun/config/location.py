"""Where fedrun's Hydra config groups are: the package ``fedrun.conf``, read by Hydra as ``pkg://fedrun.conf``.

conf/ stays at the repository's top level; pyproject.toml maps it to ``fedrun.conf`` (``[tool.setuptools]
package-dir``), so a wheel installs it inside the package and an editable install (``pip install -e .``) imports
it from the checkout: one way to find it in both. :data:`CONF_DIR` is that package's folder on disk, for code
that needs a filesystem path (Hydra's ``initialize_config_dir``, reading one YAML file).
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

HYDRA_CONFIG_PATH = "pkg://fedrun.conf"
# wheels and editable installs both unpack fedrun.conf to a folder on disk (never a zip), so this is a real path
CONF_DIR = Path(str(files("fedrun.conf")))
