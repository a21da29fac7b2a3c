"""The ``cuda`` tests: fedrun's GPU path checked against its CPU results.

Tests marked ``cuda`` need a CUDA GPU; without one each is skipped with a one-line reason. The device
they put in the GPU's place is ``FEDRUN_TEST_DEVICE`` (default ``cuda``): ``FEDRUN_TEST_DEVICE=cpu``
runs their logic on the CPU, a dry run that checks the tests themselves on a machine without a GPU
(every comparison then holds trivially or to CPU float tolerance; it proves nothing about CUDA).
"""

from __future__ import annotations

import pytest

from tests.cuda.gpu_util import skip_reason


@pytest.fixture(autouse=True)
def _gpu_or_skip(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("cuda") is None:
        return
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
