"""Sweep job directories keyed by content, the sweep's index file, and how a multirun ended.

A job of ``fedrun -m`` runs in ``<hydra.sweep.dir>/<key>``, where the key is a short hash of the part of its
config that decides the results (:func:`fedrun.config.identity.config_key`).
So re-running a sweep with one more seed, method or value runs only the new jobs (the finished ones are
found and skipped, unfinished ones resume), and one config never runs twice, however the command spells
it. ``index.yaml`` in the sweep dir maps each job directory to the overrides that last ran it.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf

from fedrun.core.errors import ConfigError
from fedrun.core.safe_yaml import load_yaml
from fedrun.storage.atomic import atomic_write
from fedrun.storage.lock import exclusive_lock
from fedrun.storage.rundir import RunDir

INDEX_FILE = "index.yaml"
INDEX_LOCK = ".index.lock"  # parallel jobs of a joblib or SLURM sweep update the index
KEY_CHARS = 12  # 48 bits of the config's SHA-256: a collision needs ~16M jobs in one sweep dir
RESOLVER = "fedrun.job_dir"  # conf/config.yaml: hydra.sweep.subdir: ${fedrun.job_dir:}


def job_key(raw: dict[str, Any]) -> str:
    """The directory name of a job whose resolved config is ``raw``: the hash of its result-deciding part."""
    from fedrun.config.identity import config_key  # torch: only where a job runs

    return config_key(raw)[:KEY_CHARS]


def unresolvable_key(overrides: Iterable[str]) -> str:
    """The directory of a job whose config does not even resolve: keyed by its overrides (it gets error.txt)."""
    blob = json.dumps(list(overrides)).encode()
    return "unresolved-" + hashlib.sha256(blob).hexdigest()[:KEY_CHARS]


def job_dir_name(task: DictConfig, overrides: Iterable[str]) -> str:
    """The directory name of the job composed as ``task`` (no ``hydra`` node) from ``overrides``."""
    try:
        return job_key(OmegaConf.to_container(task, resolve=True))  # type: ignore[arg-type]
    except Exception:  # noqa: BLE001 - validation names the bad field in this job's error.txt
        return unresolvable_key(overrides)


def _job_dir(*, _root_: DictConfig) -> str:
    """Resolver of ``hydra.sweep.subdir``: Hydra resolves it in the job's process with the job's whole config."""
    task = OmegaConf.masked_copy(_root_, [str(k) for k in _root_ if k != "hydra"])
    return job_dir_name(task, OmegaConf.to_container(_root_.hydra.overrides.task, resolve=False))  # type: ignore[arg-type]


def _join(*parts: Any) -> str:
    """``${fedrun.join:a,${x},b}``: the parts that are not null, joined with '-' (the Optuna study name)."""
    return "-".join(str(p) for p in parts if p is not None and str(p) != "")


def register_resolvers() -> None:
    OmegaConf.register_new_resolver(RESOLVER, _job_dir, replace=True)
    OmegaConf.register_new_resolver("fedrun.join", _join, replace=True)


def read_index(sweep_dir: Path) -> dict[str, str]:
    """``index.yaml``: job directory -> the overrides that last ran it (empty when missing or unreadable)."""
    try:
        data = load_yaml((sweep_dir / INDEX_FILE).read_text(), str(sweep_dir / INDEX_FILE), plain=True)
    except (OSError, ConfigError):  # ConfigError: malformed YAML or a YAML bomb (safe_yaml)
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def record_job(sweep_dir: Path, job_dir: str, overrides: list[str]) -> None:
    """Add or update ``job_dir``'s line in the sweep's ``index.yaml``."""
    sweep_dir.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(sweep_dir / INDEX_LOCK):
        index = read_index(sweep_dir)
        index[job_dir] = " ".join(overrides)
        head = "# fedrun sweep: job directory (a hash of the job's config) -> the overrides that ran it\n"
        atomic_write(sweep_dir / INDEX_FILE, head + yaml.safe_dump(index, sort_keys=False, width=1 << 20))


def job_status(run_dir: Path) -> str:
    """How a job ended, from its run dir: summary.json's status, or ``failed`` (error.txt, no summary)."""
    return RunDir(run_dir).status() or "failed"


def report_multirun(returns: Any) -> int:
    """After a sweep of Hydra's basic sweeper (its list of job returns): one line saying how many of its
    jobs did not complete, and the exit code (0 when all completed, else 1)."""
    from hydra.core.utils import JobReturn, JobStatus

    flat = [r for batch in returns for r in (batch if isinstance(batch, list | tuple) else [batch])]
    jobs = [r for r in flat if isinstance(r, JobReturn)]
    if not jobs:
        return 0
    bad: dict[str, int] = {}
    sweep_dir = None
    for r in jobs:
        run_dir = Path(r.hydra_cfg.hydra.runtime.output_dir)  # type: ignore[union-attr]  # set on every job
        sweep_dir = run_dir.parent
        status = "failed" if r.status == JobStatus.FAILED else job_status(run_dir)
        if status != "completed":
            bad[status] = bad.get(status, 0) + 1
    if not bad:
        return 0
    kinds = ", ".join(f"{k}: {n}" for k, n in sorted(bad.items()))
    print(
        f"fedrun: {sum(bad.values())} of {len(jobs)} jobs failed ({kinds}); `fedrun-report {sweep_dir}` lists them",
        file=sys.stderr,
    )
    return 1


def find_jobs(sweep_dir: Path, *overrides: str) -> list[Path]:
    """The job directories of ``sweep_dir`` whose overrides (index.yaml) include every one of ``overrides``."""
    return [sweep_dir / name for name, line in read_index(sweep_dir).items() if set(overrides) <= set(line.split(" "))]
