"""Privacy mechanisms (``privacy.mode``): one module each, found by :data:`~fedrun.privacy.registries.MECHANISMS`."""
