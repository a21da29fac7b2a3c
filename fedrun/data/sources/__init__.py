"""Dataset sources: each module registers loaders in ``fedrun.config.registry.DATASETS``."""
