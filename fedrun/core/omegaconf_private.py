"""The one private name of OmegaConf that fedrun's lower layers use: ``omegaconf._utils.get_yaml_loader``, the
function OmegaConf (and Hydra, through ``OmegaConf.load``) gets its YAML loader from. fedrun/core/safe_yaml.py
parses YAML the way OmegaConf does and bounds OmegaConf's own parsing through it.

Every other private Hydra/OmegaConf name is read in fedrun/cli/hydra_patches.py; this one sits in ``core`` because
the run-dir readers below ``cli`` parse YAML with it. tests/cli/test_hydra_patches.py allows these two modules
only, and fails when the name is gone; here a missing name raises instead of parsing YAML another way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class OmegaConfInternalsChanged(RuntimeError):
    """``omegaconf._utils.get_yaml_loader`` is gone (an omegaconf upgrade)."""


def _utils() -> Any:
    from omegaconf import _utils

    if not callable(getattr(_utils, "get_yaml_loader", None)):
        raise OmegaConfInternalsChanged(
            "omegaconf._utils.get_yaml_loader: the installed omegaconf no longer has it; fedrun/core/"
            "omegaconf_private.py needs updating"
        )
    return _utils


def yaml_loader() -> Any:
    """The YAML loader class OmegaConf parses with (without fedrun's bound, when that is installed)."""
    get = _utils().get_yaml_loader
    return getattr(get, "__wrapped__", get)()


def original_yaml_loader_factory() -> Callable[[], Any]:
    """OmegaConf's own ``get_yaml_loader`` (not the one :func:`replace_yaml_loader_factory` put in its place)."""
    get = _utils().get_yaml_loader
    return getattr(get, "__wrapped__", get)  # type: ignore[no-any-return]


def replace_yaml_loader_factory(factory: Callable[[], Any]) -> None:
    """Make OmegaConf get its YAML loader from ``factory`` (which keeps the original as ``__wrapped__``)."""
    import omegaconf.basecontainer

    _utils().get_yaml_loader = factory
    omegaconf.basecontainer.get_yaml_loader = factory  # imported by name there
