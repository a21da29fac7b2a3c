"""Evaluation and per-round diagnostics."""
