"""Packages for setuptools (the metadata is in pyproject.toml): fedrun, and conf/ shipped as ``fedrun.conf``.

conf/ stays at the repository's top level (the project's layout); the mapping below installs it inside the
package, where Hydra finds it as ``pkg://fedrun.conf`` (pyproject.toml's package-data takes its YAML files).
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["fedrun", "fedrun.*"]), "fedrun.conf"],
    package_dir={"fedrun.conf": "conf"},
)
