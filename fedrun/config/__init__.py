"""The config: its schema (params dataclasses as Hydra structured configs), the registries, a run's identity,
where conf/ is.
"""
