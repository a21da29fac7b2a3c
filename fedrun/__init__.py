"""fedrun: a config-driven federated-learning experiment runner."""

__version__ = "0.1.0"
