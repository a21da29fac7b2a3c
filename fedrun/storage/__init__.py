"""Files: atomic writes, the run directory (RunDir), figures, caches, locks, tracking sinks."""
