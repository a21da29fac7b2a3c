"""Dataset sources: each module registers loaders in ``fedrun.registry.DATASETS``."""
