"""The device-profile contract: where each client's device (speed, bandwidths, dropout rate, availability) comes
from (``system.devices``), and the registry of profiles.

A profile is one module of this package that registers a subclass of :class:`DeviceProfile` by name:
``system.devices=<name>`` chooses it, and validation, ``fedrun --help`` and the reference pages read the names from
:data:`DEVICE_PROFILES`. docs/extending.md adds one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from fedrun.core.errors import ConfigError
from fedrun.system.registries import DEVICE_PROFILES as DEVICE_PROFILES

if TYPE_CHECKING:
    from fedrun.system.devices import Devices

TRACE_ONLY = (
    "devices=trace reads system.trace, and only it does; valid: both set, or devices=uniform|tiers with trace=null"
)


class DeviceProfile:
    """Makes the devices of clients 0..n-1 of a run; ``reads_trace``: the profile reads ``system.trace``."""

    reads_trace: ClassVar[bool] = False

    @classmethod
    def check(cls, settings: Any) -> None:
        """Refuse (ConfigError naming the bare key of the ``system`` section) settings this profile cannot use."""
        if bool(settings.trace) != cls.reads_trace:
            raise ConfigError("trace" if cls.reads_trace else "devices", TRACE_ONLY)

    @classmethod
    def devices(cls, settings: Any, n: int, seed: int) -> Devices:
        """The devices of clients 0..``n``-1 (``settings``: the run's ``system`` section)."""
        raise NotImplementedError
