"""``system.devices=uniform``: every client has the ``mid`` tier's device (fedrun/system/devices.py)."""

from __future__ import annotations

from typing import Any

from fedrun.system.devices import Devices, profile_devices
from fedrun.system.profiles.base import DEVICE_PROFILES, DeviceProfile


@DEVICE_PROFILES.register("uniform")
class Uniform(DeviceProfile):
    """One mid device for every client: the clock then differs between clients only by their work and bytes."""

    @classmethod
    def devices(cls, settings: Any, n: int, seed: int) -> Devices:
        return profile_devices("uniform", n, seed)
