"""Partitions: pure, seeded functions ``(PartitionInput, n_clients, params, rng) -> list of index arrays``.

Each module registers its functions in ``fedrun.config.registry.PARTITIONS`` with a hyperparameter dataclass.
"""
