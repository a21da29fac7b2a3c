"""The limits table: memory limits below what a run needs end ``fedrun`` in one line naming the limit and the
need (exit 2) before torch is imported. Before: ``ulimit -v 600M`` aborted in C++ (``std::bad_alloc``,
signal 6); 300M ended in an ImportError traceback."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from fedrun.host import limits
from fedrun.host.limits import MiB, memory_limit_error
from tests.conftest import REPO

V_NEED, D_NEED = "a fedrun run needs at least 1024 MiB", "a fedrun run needs at least 512 MiB"
# (case, resource, limit in bytes, the flag and need named; None: allowed)
LIMITS = [
    ("ulimit-v-300M", "RLIMIT_AS", 300 * MiB, f"`ulimit -v` (virtual memory) is 300 MiB; {V_NEED}"),
    ("ulimit-v-600M", "RLIMIT_AS", 600 * MiB, f"`ulimit -v` (virtual memory) is 600 MiB; {V_NEED}"),
    ("ulimit-v-1023M", "RLIMIT_AS", 1023 * MiB, "`ulimit -v` (virtual memory) is 1023 MiB"),
    ("ulimit-d-300M", "RLIMIT_DATA", 300 * MiB, f"`ulimit -d` (data segment size) is 300 MiB; {D_NEED}"),
    ("ulimit-v-2G", "RLIMIT_AS", 2048 * MiB, None),
    ("ulimit-d-1G", "RLIMIT_DATA", 1024 * MiB, None),
    ("unlimited", "RLIMIT_AS", resource.RLIM_INFINITY, None),
    # the red team's next round
    ("ulimit-v-exactly-the-need", "RLIMIT_AS", 1024 * MiB, None),
    ("ulimit-d-one-below-the-need", "RLIMIT_DATA", 511 * MiB, f"`ulimit -d` (data segment size) is 511 MiB; {D_NEED}"),
    ("ulimit-v-1M", "RLIMIT_AS", 1 * MiB, f"`ulimit -v` (virtual memory) is 1 MiB; {V_NEED}"),
]  # fmt: skip
CATEGORY = "limits"
CASES = LIMITS


@pytest.mark.parametrize(("case", "name", "limit", "named"), LIMITS, ids=[c[0] for c in LIMITS])
def test_limits_table(monkeypatch: pytest.MonkeyPatch, case: str, name: str, limit: int, named: str | None) -> None:
    real = resource.getrlimit
    res = getattr(resource, name)
    monkeypatch.setattr(resource, "getrlimit", lambda r: (limit, limit) if r == res else real(r))
    message = memory_limit_error()
    if named is None:
        assert message is None
    else:
        assert message is not None and named in message and "\n" not in message


def test_every_limit_names_its_ulimit_flag() -> None:
    assert [(flag, need // MiB) for _, flag, _, need in limits.LIMITS] == [("-v", 1024), ("-d", 512)]


@pytest.mark.parametrize(("flag", "limit_mib"), [("RLIMIT_AS", 300), ("RLIMIT_AS", 600), ("RLIMIT_DATA", 300)])
def test_fedrun_under_a_small_limit_is_one_line_exit_2(tmp_path: Path, flag: str, limit_mib: int) -> None:
    res_id = getattr(resource, flag)

    def limit() -> None:
        resource.setrlimit(res_id, (limit_mib * MiB, limit_mib * MiB))

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "fedrun.cli", "experiment=smoke", f"hydra.run.dir={tmp_path / 'run'}"]
    res = subprocess.run(cmd, cwd=tmp_path, env=env, preexec_fn=limit, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fedrun: error: memory limit: `ulimit -"), res.stderr
    assert f"is {limit_mib} MiB; a fedrun run needs at least" in lines[0]
    assert not (tmp_path / "run").exists()  # refused before anything was written
