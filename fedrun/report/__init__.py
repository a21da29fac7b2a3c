"""Turning run directories into the papers' tables and figures."""
