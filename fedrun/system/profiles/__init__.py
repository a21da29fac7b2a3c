"""Device profiles (``system.devices``): one module each, found by the registry
:data:`~fedrun.system.registries.DEVICE_PROFILES`."""
