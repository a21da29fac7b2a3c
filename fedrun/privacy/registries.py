"""The privacy mechanisms' registry (``privacy.mode``, fedrun/privacy/mechanisms/): the list of valid modes that
validation, ``fedrun --help`` and the reference pages read."""

from __future__ import annotations

from typing import Any

from fedrun.core.registry import Registry

MECHANISMS: Registry[Any] = Registry("privacy mechanism", "fedrun.privacy.mechanisms")  # mechanisms/base.py's Mechanism
