"""The entry points (fedrun, fedrun-report, reproduce), the checks on what Hydra composes, sweeps, Hydra's
patched internals.
"""
