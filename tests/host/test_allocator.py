"""The glibc malloc settings are applied once, and can be switched off to compare."""

from __future__ import annotations

import os
import subprocess
import sys

from fedrun.host import allocator

PROBE = "from fedrun.host.allocator import tune_glibc_malloc as t; print(t(), t())"


def run_probe(**env: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), **env},
        check=True,
    )
    return out.stdout.strip()


def test_tuning_applies_on_linux_glibc_and_can_be_disabled() -> None:
    assert run_probe() == ("True True" if sys.platform.startswith("linux") else "False False")
    assert run_probe(FEDRUN_MALLOC="default") == "False False"


def test_trim_threshold_fits_a_c_int() -> None:
    assert 0 < allocator.TRIM_THRESHOLD < 2**31
