"""Engines run a round's cohort of clients: ``sequential`` (the reference loop) and others."""
