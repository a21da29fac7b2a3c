"""``system.devices=bimodal``: a fleet of two kinds, each client fast (the ``high`` tier of fedrun/system/devices.py)
or slow (the ``low`` tier) with even odds, drawn once by (seed, client): the two-speed population of straggler
studies, with a 16x compute and 10x bandwidth gap and nothing in between."""

from __future__ import annotations

from typing import Any

import numpy as np

from fedrun.core.rng import np_rng
from fedrun.system.devices import TIERS, Devices
from fedrun.system.profiles.base import DEVICE_PROFILES, DeviceProfile


@DEVICE_PROFILES.register("bimodal")
class Bimodal(DeviceProfile):
    """Each client on the high tier's device or the low tier's, with even odds."""

    @classmethod
    def devices(cls, settings: Any, n: int, seed: int) -> Devices:
        fast = np.array([np_rng(seed, "bimodal", c).random() < 0.5 for c in range(n)], dtype=bool)
        speed, up, down = (np.where(fast, TIERS["high"][i], TIERS["low"][i]) for i in range(3))
        nan = np.full(n, np.nan)
        return Devices(speed, nan.copy(), up, down, nan.copy(), [None] * n)
