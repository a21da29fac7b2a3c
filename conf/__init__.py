"""fedrun's Hydra config groups, installed as the package ``fedrun.conf`` (pyproject.toml's package-dir maps this
folder to it, for a wheel and an editable install alike), which ``fedrun`` reads as ``pkg://fedrun.conf``."""
