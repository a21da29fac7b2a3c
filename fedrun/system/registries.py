"""The system's registries: the asynchronous servers (``system.server``, fedrun/system/servers/) and the device
profiles (``system.devices``, fedrun/system/profiles/). The registry is the list of valid choices: validation,
``fedrun --help`` and the reference pages read their names here."""

from __future__ import annotations

from typing import Any

from fedrun.core.registry import Registry

SERVERS: Registry[Any] = Registry("server", "fedrun.system.servers")  # classes of servers/base.py's AsyncServer
DEVICE_PROFILES: Registry[Any] = Registry(
    "device profile", "fedrun.system.profiles"
)  # profiles/base.py's DeviceProfile
