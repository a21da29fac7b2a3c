"""The Ray tests' local cluster: the record of the one tests/engines/conftest.py started, and a way to leave it (a
module of its own, so that the fixtures and the tests that import it share one record)."""

from __future__ import annotations

from typing import Any

import pytest

STARTED: dict[str, Any] = {"gcs": None}  # the GCS address of the local cluster these fixtures started


def ours(ray: Any) -> bool:
    """This process is connected to the local cluster :func:`local_cluster` started (not another one)."""
    return ray.is_initialized() and ray.get_runtime_context().gcs_address == STARTED["gcs"]


def leave_local_cluster() -> None:
    """Shut Ray down in this process, whichever cluster it joined: the next test starts from no Ray."""
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        ray.shutdown()
    STARTED["gcs"] = None
