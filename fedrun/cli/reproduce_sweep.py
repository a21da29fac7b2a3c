"""Run ``fedrun -m`` commands in this process: the same jobs, order and run directories, one start-up.

A reproduce target is one ``fedrun -m`` per (preset, method). Started as subprocesses, each pays Python,
torch and Hydra start-up and loads its dataset again; for a ``-smoke`` target that dominates (80 processes
for FedIMA Table I). Here each command's overrides are expanded with Hydra's own BasicSweeper (cartesian
product in override order, so job ``n`` is the job ``fedrun -m`` numbers ``n``), each job's config is
composed with Hydra's compose API and run by :func:`fedrun.cli.main.execute`, into ``<hydra.sweep.dir>/<key>``
(the hash of its config that ``fedrun -m`` names it by, fedrun/cli/sweeps.py, recorded in the sweep's
``index.yaml``) with ``.hydra/overrides.yaml`` and ``.hydra/config.yaml`` as Hydra writes them (a rejected
job keeps them, so fedrun-report can still label its cell). A failing job is recorded and the sweep goes on;
a finished run is skipped, an unfinished one resumes, as with ``fedrun -m``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from fedrun.cli import compose_checks, hydra_patches
from fedrun.cli.main import CONF_DIR, error_line, execute, one_line
from fedrun.cli.sweeps import job_dir_name, record_job
from fedrun.storage.atomic import atomic_write


def split_command(args: list[str]) -> tuple[Path, list[str]]:
    """(hydra.sweep.dir, task overrides) of ``fedrun -m`` arguments (other ``hydra.*`` keys are dropped)."""
    sweep_dir = next((a.split("=", 1)[1] for a in args if a.startswith("hydra.sweep.dir=")), None)
    if sweep_dir is None:
        raise ValueError("hydra.sweep.dir is required to run a sweep in-process")
    return Path(sweep_dir), [a for a in args if a != "-m" and not a.lstrip("+~").startswith("hydra.")]


def expand(overrides: list[str]) -> list[list[str]]:
    """Each job's overrides, in the order Hydra's BasicSweeper launches them (its job numbers)."""
    parsed = OverridesParser.create().parse_overrides(overrides)
    return hydra_patches.sweep_jobs(parsed)


def run_commands(commands: list[list[str]], log: bool = True) -> int:
    """Run the jobs of every ``fedrun -m`` argument list in ``commands``; the number of commands that failed
    to expand or compose (bad overrides: one line on stderr, like ``fedrun``'s exit code 2)."""
    failed = 0
    compose_checks.install()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
            for args in commands:
                failed += not _run_command(args, log)
    finally:
        GlobalHydra.instance().clear()
    return failed


def _run_command(args: list[str], log: bool) -> bool:
    sweep_dir, overrides = split_command(args)
    try:
        jobs = expand(overrides)
    except Exception as e:  # noqa: BLE001 - a malformed override is bad input
        print(f"fedrun: error: {one_line(str(e))}", file=sys.stderr)
        return False
    for num, job in enumerate(jobs):
        try:
            cfg = compose(config_name="config", overrides=job)
        except Exception as e:  # noqa: BLE001 - every composition error is bad input, as in fedrun.cli.main
            print(f"fedrun: error: {error_line(e)}", file=sys.stderr)
            return False
        run_dir = sweep_dir / job_dir_name(cfg, job)
        record_job(sweep_dir, run_dir.name, job)
        (run_dir / ".hydra").mkdir(parents=True, exist_ok=True)
        atomic_write(run_dir / ".hydra" / "overrides.yaml", yaml.safe_dump(job, default_flow_style=False))
        atomic_write(run_dir / ".hydra" / "config.yaml", OmegaConf.to_yaml(cfg))
        label = f"job {num} [{','.join(job)}]"
        if log:
            print(f"[sweep] #{num} : {' '.join(job)}", flush=True)
        execute(cfg, run_dir, multirun=True, label=label)
    return True
