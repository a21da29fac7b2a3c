"""Reproduce the five papers' result tables: a registry of sweeps and the script that runs them."""
