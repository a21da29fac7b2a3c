"""Where fedrun's Hydra config groups are: ``conf/`` of a checkout (or an editable install), or the package
``fedrun.conf`` that a wheel installs from it (setup.py), read by Hydra as ``pkg://fedrun.conf``."""

from __future__ import annotations

from pathlib import Path

CHECKOUT_CONF = Path(__file__).resolve().parents[2] / "conf"
INSTALLED = not (CHECKOUT_CONF / "config.yaml").is_file()
CONF_DIR = Path(__file__).resolve().parents[1] / "conf" if INSTALLED else CHECKOUT_CONF
HYDRA_CONFIG_PATH = "pkg://fedrun.conf" if INSTALLED else str(CONF_DIR)
