"""The Ray tests' local cluster: one Ray instance of 2 CPUs on this machine, started at its first use and shared
by every test that only needs a running cluster (an engine must kill its actors in it and leave it up), in
tests/engines/test_ray_engine.py and tests/engines/test_partial_work.py. Each such test is in the xdist group
"ray" (one worker, one cluster at a time); starting the cluster once saves a start (about 10 s on a loaded
2-core machine) per module. A test that needs Ray down (an engine that starts and ends its own cluster, the
multi-node cluster of tests/engines/test_ray_cluster.py) calls :func:`leave_local_cluster` first."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.engines.ray_local import STARTED, leave_local_cluster, ours


@pytest.fixture(scope="session")
def _local_cluster_at_exit() -> Iterator[None]:
    yield
    ray = pytest.importorskip("ray")
    if ours(ray):
        leave_local_cluster()


@pytest.fixture
def local_cluster(_local_cluster_at_exit: None) -> None:
    """A local Ray cluster of 2 CPUs that the test does not own: started once, reused while it is up."""
    start_local_cluster()


@pytest.fixture(scope="module")
def module_local_cluster(_local_cluster_at_exit: None) -> None:
    """:func:`local_cluster` for a module-scoped fixture (a run several tests of the module read)."""
    start_local_cluster()


def start_local_cluster() -> None:
    ray = pytest.importorskip("ray")
    if ours(ray):
        return
    leave_local_cluster()
    with pytest.MonkeyPatch.context() as mp:
        # Ray's workers run at niceness 15 by default: on a shared, loaded machine they would get almost no CPU
        mp.setenv("RAY_worker_niceness", "0")
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    STARTED["gcs"] = ray.get_runtime_context().gcs_address
