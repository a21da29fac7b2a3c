"""The kill table's worker (tests/run/test_kill_table.py): SIGKILL a run at one write point, then re-run it.

Run as ``python -m tests.kill_worker CASES.json OUT.json``. It imports fedrun (and what a run imports lazily: the
run loop, matplotlib) once and forks a child per run, so each case costs a run, not a Python start-up. Per case: a
child runs the job and SIGKILLs itself at the write point; the files it left are checked to be whole; a second
child re-runs the same job (what re-running the command does). The results go to OUT.json for the test to assert
on.

A write point is (file, occurrence, phase): the occurrence-th atomic write of the file whose name matches,
killed ``partial`` (half its bytes in the temp file), ``tmp`` (the temp file whole, not yet renamed) or
``renamed`` (right after the rename).
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import torch
import yaml

from fedrun.cli import main as cli
from fedrun.storage.atomic import TEMP_SUFFIX, TIMING_COLUMNS
from tests.conftest import compose_cfg


def install_kill(pattern: str, occurrence: int, phase: str) -> None:
    """SIGKILL this process at the write point (see the module docstring)."""
    target = re.compile(pattern)
    done = [0]  # renames of the target so far
    real_write, real_replace = os.write, os.replace

    def die() -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    def write(fd: int, data: Any) -> int:
        name = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))  # .<file>.<pid>.tmp while an atomic write
        final = TEMP_SUFFIX.sub("", name).removeprefix(".")
        if phase == "partial" and done[0] == occurrence - 1 and TEMP_SUFFIX.search(name) and target.search(final):
            view = memoryview(data)
            real_write(fd, view[: max(1, len(view) // 2)])
            os.fsync(fd)
            die()
        return real_write(fd, data)

    def replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        hit = target.search(os.path.basename(os.fspath(dst))) is not None
        if hit and phase == "tmp" and done[0] == occurrence - 1:
            die()
        real_replace(src, dst, *args, **kwargs)
        if hit:
            done[0] += 1
            if phase == "renamed" and done[0] == occurrence:
                die()

    os.write = write  # type: ignore[assignment]
    os.replace = replace  # type: ignore[assignment]


def in_child(fn: Any) -> int:
    """Run ``fn`` in a forked child; its wait status as (signal number, or exit code + 1000 when it exited)."""
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            fn()
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except BaseException:  # noqa: BLE001 - report as a failure
            code = 99
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.WTERMSIG(status) if os.WIFSIGNALED(status) else 1000 + os.WEXITSTATUS(status)


def half_written(folder: Path) -> list[str]:
    """Files (temp files aside) in ``folder`` that are not whole: each must parse in its format."""
    bad = []
    for f in folder.iterdir() if folder.is_dir() else []:
        if not f.is_file() or TEMP_SUFFIX.search(f.name) or f.name in (".fedrun.lock", "fedrun.log"):
            continue
        try:
            if f.suffix == ".json":
                json.loads(f.read_text())
            elif f.suffix == ".yaml":
                assert isinstance(yaml.safe_load(f.read_text()), dict)
            elif f.suffix == ".csv":
                assert len(pd.read_csv(f).columns) > 1
            elif f.suffix == ".pt":
                assert isinstance(torch.load(f, weights_only=True), dict)
            elif f.suffix == ".png":
                data = f.read_bytes()
                assert data.startswith(b"\x89PNG") and data.rstrip().endswith(b"IEND\xaeB`\x82")
            elif f.suffix == ".npz":
                import numpy as np

                with np.load(f) as z:
                    assert "indices" in z
        except Exception:  # noqa: BLE001 - any failure to parse is a half-written file
            bad.append(f.name)
    return bad


def temps(*folders: Path) -> list[str]:
    return sorted(f.name for d in folders if d.is_dir() for f in d.iterdir() if TEMP_SUFFIX.search(f.name))


def same_rows(a: Path, b: Path) -> bool:
    """Whether two CSV files of rows are equal, timing columns aside (NaN equal to NaN)."""
    if not a.is_file() or not b.is_file():
        return a.is_file() == b.is_file()
    drop = lambda f: pd.read_csv(f).drop(columns=list(TIMING_COLUMNS), errors="ignore")  # noqa: E731
    return drop(a).equals(drop(b))


def preload(cfg: Any) -> None:
    """Import here, once, what a run imports only when it starts (the run loop and what it reaches) or first
    plots (matplotlib, headless): each forked child would otherwise import it again, about half a second a run.
    And read the run's source data once (fedrun/data/memo.py keeps it for the process, as for the jobs of a sweep):
    each child would otherwise read and checksum Fashion-MNIST again, about half a second more. Reading is no write
    point; each child still writes its own partition cache."""
    import fedrun.run.loop  # noqa: F401 - imported for the children
    from fedrun.config.validate import validate
    from fedrun.run.experiment import load_data
    from fedrun.storage.figures import _plt

    _plt()
    spec = validate(cfg)
    spec.data.params.root = os.path.abspath(spec.data.params.root)  # as the run makes it (its memo key)
    load_data(spec)


def main(cases_file: str, out_file: str) -> None:
    spec = json.loads(Path(cases_file).read_text())
    root = Path(spec["root"])
    cfg = compose_cfg(spec["overrides"])
    preload(cfg)

    def job(run_dir: Path, cache: Path) -> Any:
        run_cfg = cfg.copy()
        run_cfg.cache_dir = str(cache)
        return lambda: cli.execute(run_cfg, run_dir, multirun=False)

    reference = root / "reference"
    assert in_child(job(reference, root / "cache-reference")) == 1000, "the uninterrupted run failed"
    results = []
    for i, (pattern, occurrence, phase) in enumerate(spec["cases"]):
        run_dir, cache = root / f"case{i}", root / f"cache{i}"
        run = job(run_dir, cache)

        def killed(run: Any = run, pattern: str = pattern, occurrence: int = occurrence, phase: str = phase) -> None:
            install_kill(pattern, occurrence, phase)
            run()

        status = in_child(killed)
        left = half_written(run_dir) + half_written(cache)
        resumed = in_child(run)
        summary = json.loads((run_dir / "summary.json").read_text()) if (run_dir / "summary.json").is_file() else {}
        results.append(
            {
                "case": f"{pattern}#{occurrence}:{phase}",
                "killed": status == signal.SIGKILL,
                "half_written": left,
                "resume_exit": resumed - 1000,
                "status": summary.get("status"),
                "same_metrics": same_rows(run_dir / "metrics.csv", reference / "metrics.csv"),
                "same_client_weights": same_rows(run_dir / "client_weights.csv", reference / "client_weights.csv"),
                "temps_left": temps(run_dir, cache),
            }
        )
    Path(out_file).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main(*sys.argv[1:3])
