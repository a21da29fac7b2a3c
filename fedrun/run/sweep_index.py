"""A sweep's index file: ``index.yaml`` in the sweep dir maps each job directory to the overrides that last ran it;
and how a job ended, read from its folder.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from fedrun.core.errors import ConfigError
from fedrun.core.safe_yaml import load_yaml
from fedrun.storage.atomic import atomic_write
from fedrun.storage.lock import exclusive_lock
from fedrun.storage.rundir import ERROR_FILE, RunDir
from fedrun.storage.status import Status

INDEX_FILE = "index.yaml"
INDEX_LOCK = ".index.lock"  # parallel jobs of a joblib or SLURM sweep update the index
# jobs this process refused in a folder that holds an earlier run (a completed job whose input file changed,
# fedrun/storage/inputs.py): the folder still says ``completed``, which the job's end line must not repeat
REFUSED_HERE: set[Path] = set()


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
        head = "# fedrun sweep: job directory (what varies, then a hash of its config) -> the overrides that ran it\n"
        atomic_write(sweep_dir / INDEX_FILE, head + yaml.safe_dump(index, sort_keys=False, width=1 << 20))


def job_status(run_dir: Path) -> str:
    """How a job ended, from its run dir: summary.json's status, ``refused`` (bad input: error.txt, no summary),
    or ``failed``."""
    if Path(run_dir).absolute() in REFUSED_HERE:
        return "refused"
    status = RunDir(run_dir).status()
    if status is None and (run_dir / ERROR_FILE).is_file():
        return "refused"
    return status or Status.FAILED.value


def find_jobs(sweep_dir: Path, *overrides: str) -> list[Path]:
    """The job directories of ``sweep_dir`` whose overrides (index.yaml) include every one of ``overrides``."""
    return [sweep_dir / name for name, line in read_index(sweep_dir).items() if set(overrides) <= set(line.split(" "))]


def folder_counts(sweep_dir: Path) -> dict[str, int]:
    """How the jobs recorded in a sweep's index.yaml ended, from their folders."""
    out: dict[str, int] = {}
    for name in read_index(sweep_dir):
        if (sweep_dir / name).is_dir():
            status = job_status(sweep_dir / name)
            out[status] = out.get(status, 0) + 1
    return out
