"""``system.devices=tiers``: each client draws a tier (high, mid, low) once, keyed by (seed, client)."""

from __future__ import annotations

from typing import Any

from fedrun.system.devices import Devices, profile_devices
from fedrun.system.profiles.base import DEVICE_PROFILES, DeviceProfile


@DEVICE_PROFILES.register("tiers")
class Tiers(DeviceProfile):
    """A fleet of three tiers in the shares of fedrun/system/devices.py's ``TIERS``."""

    @classmethod
    def devices(cls, settings: Any, n: int, seed: int) -> Devices:
        return profile_devices("tiers", n, seed)
