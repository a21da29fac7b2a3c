"""``system.devices=trace``: each client's device from the file ``system.trace`` (JSON, or FedScale's pickles)."""

from __future__ import annotations

from typing import Any, ClassVar

from fedrun.system.devices import Devices, read_trace
from fedrun.system.profiles.base import DEVICE_PROFILES, DeviceProfile


@DEVICE_PROFILES.register("trace")
class Trace(DeviceProfile):
    """The devices a trace file names, client by client (:func:`~fedrun.system.devices.read_trace`)."""

    reads_trace: ClassVar[bool] = True

    @classmethod
    def devices(cls, settings: Any, n: int, seed: int) -> Devices:
        return read_trace(settings.trace, n)
