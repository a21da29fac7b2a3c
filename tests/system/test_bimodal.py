"""system.devices=bimodal: every client on one of two devices, both present, drawn from the seed alone."""

from __future__ import annotations

import numpy as np

from fedrun.config.validate import validate
from fedrun.system.devices import TIERS
from fedrun.system.registries import DEVICE_PROFILES
from fedrun.system.settings import SystemSettings
from tests.conftest import compose_cfg


def test_every_client_is_on_the_high_or_the_low_tier_and_the_draw_is_the_seeds() -> None:
    bimodal = DEVICE_PROFILES.get("bimodal").obj
    devices = bimodal.devices(SystemSettings(devices="bimodal"), 200, seed=3)
    high, low = TIERS["high"][0], TIERS["low"][0]
    assert set(devices.flops.tolist()) == {high, low}
    assert 70 < int((devices.flops == high).sum()) < 130  # even odds
    assert np.array_equal(devices.flops, bimodal.devices(SystemSettings(devices="bimodal"), 200, seed=3).flops)
    assert not np.array_equal(devices.flops, bimodal.devices(SystemSettings(devices="bimodal"), 200, seed=4).flops)


def test_the_option_composes_and_validates() -> None:
    spec = validate(compose_cfg(["experiment=smoke", "system=bimodal", "system.deadline=2"]))
    assert SystemSettings.of(spec).devices == "bimodal" and not SystemSettings.of(spec).ideal
