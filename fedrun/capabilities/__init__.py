"""Capabilities: what acts inside a round beyond the method (the system model, privacy, compression, personalised
evaluation, attacks and defences), each on the contract of :mod:`fedrun.capabilities.base` (docs/design.md)."""
