"""Asynchronous servers (``system.server``): one module each, found by :data:`~fedrun.system.servers.base.SERVERS`."""
