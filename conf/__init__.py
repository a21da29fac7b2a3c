"""fedrun's Hydra config groups. A wheel installs this folder as the package ``fedrun.conf`` (setup.py), which
``fedrun`` reads as ``pkg://fedrun.conf``; from a checkout it reads this folder directly (fedrun/cli/main.py)."""
