"""fedrun/core/omegaconf_private.py: OmegaConf's YAML loader, read where it is, or a loud error when it is gone."""

from __future__ import annotations

import pytest
import yaml

from fedrun.core import omegaconf_private


def test_omegaconfs_yaml_loader_is_found() -> None:
    assert issubclass(omegaconf_private.yaml_loader(), yaml.SafeLoader)
    assert callable(omegaconf_private.original_yaml_loader_factory())


def test_a_missing_loader_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    from omegaconf import _utils

    monkeypatch.delattr(_utils, "get_yaml_loader")
    with pytest.raises(omegaconf_private.OmegaConfInternalsChanged, match="omegaconf_private.py needs updating"):
        omegaconf_private.yaml_loader()
