"""``fedrun``: the Hydra entry point.

Hydra composes the config groups and runs one job (or a sweep with ``-m``); each job validates its
config, runs, and writes its files into its own run directory. Bad input of any kind ends with one line
on stderr naming the field and the valid choices, exit code 2, and nothing but ``error.txt`` in the run
directory. In a multirun a failing job is recorded and the sweep goes on.
"""

from __future__ import annotations

import re
import shutil
import sys
import traceback
from pathlib import Path
from typing import Any

import hydra
import hydra._internal.utils as hydra_utils
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from hydra.utils import to_absolute_path
from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from rich.table import Table

from fedrun.config import validate
from fedrun.engines.allocator import tune_glibc_malloc
from fedrun.errors import ConfigError, DataError
from fedrun.outputs import atomic_write, write_json

EXIT_BAD_INPUT = 2


def one_line(message: str) -> str:
    """Hydra's multi-line composition errors, condensed to one line."""
    m = re.search(r"Could not find '([^/']+)/([^']+)'.*?Available options in '[^']+':\s*(.*)", message, re.S)
    if m:
        options = ", ".join(o.strip() for o in m.group(3).split("\n") if o.strip())
        return f"{m.group(1)}: unknown option '{m.group(2)}'; valid: {options}"
    lines = [ln.strip() for ln in message.splitlines() if ln.strip() and not ln.startswith("full_key")]
    return " ".join(lines)


def _run_and_report(func: Any) -> Any:
    """Replaces Hydra's error reporter for errors raised while composing (bad overrides, unknown options)."""
    try:
        return func()
    except Exception as ex:  # noqa: BLE001 - every composition error is bad input
        print(f"fedrun: error: {one_line(str(ex))}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)


def _reject(run_dir: Path, message: str, multirun: bool) -> None:
    """Bad input: leave only error.txt in the run directory, print one line, exit 2 (a sweep goes on)."""
    for child in run_dir.iterdir() if run_dir.is_dir() else []:
        shutil.rmtree(child) if child.is_dir() else child.unlink()
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(run_dir / "error.txt", message + "\n")
    print(f"fedrun: error: {message}", file=sys.stderr)
    if not multirun:
        sys.exit(EXIT_BAD_INPUT)


def print_summary(s: dict[str, Any], console: Console) -> None:
    t = Table(title=f"fedrun: {s['algorithm']} / {s['data']} / {s['model']} / {s['partition']}  ({s['status']})")
    t.add_column("metric")
    t.add_column("value", justify="right")
    pct = lambda v: "-" if v is None else f"{100 * v:.2f}%"  # noqa: E731
    t.add_row("final test accuracy", pct(s.get("test_acc_final")))
    t.add_row(f"mean of last {s.get('last_k', 0)} rounds", pct(s.get("test_acc_last_k")))
    t.add_row("best test accuracy (round)", f"{pct(s.get('test_acc_best'))} ({s.get('best_round', '-')})")
    if "round_to_target" in s:
        t.add_row("round reaching target", str(s["round_to_target"] or "never"))
    t.add_row("rounds", str(s["rounds_completed"]))
    t.add_row("wall time", f"{s['wall_time_s']:.1f} s")
    t.add_row("client samples/s", f"{s['samples_per_s']:,.0f}")
    t.add_row("engine / device", f"{s['engine']} / {s['device']}")
    console.print(t)
    console.print(f"run directory: {s['run_dir']}")


CONF_DIR = str(Path(__file__).resolve().parent.parent / "conf")


@hydra.main(version_base=None, config_path=CONF_DIR, config_name="config")
def _job(cfg: DictConfig) -> None:
    hc = HydraConfig.get()
    run_dir = Path(hc.runtime.output_dir)
    multirun = hc.mode == RunMode.MULTIRUN
    try:
        spec = validate(cfg)
        spec.data.params.root = to_absolute_path(spec.data.params.root)
        spec.cache_dir = to_absolute_path(spec.cache_dir) if spec.cache_dir else None
        if multirun:
            spec.output.quiet = True
        from fedrun.runner import run  # heavy imports after validation

        atomic_write(run_dir / "config.yaml", OmegaConf.to_yaml(spec.raw))
        summary = run(spec, run_dir)
    except (ConfigError, DataError) as e:
        return _reject(run_dir, str(e), multirun)
    except Exception as e:  # noqa: BLE001 - record the failure, keep a sweep going
        atomic_write(run_dir / "error.log", traceback.format_exc())
        write_json(run_dir / "summary.json", {"status": "failed", "error": f"{type(e).__name__}: {e}"})
        print(f"fedrun: job failed: {type(e).__name__}: {e} (traceback in {run_dir / 'error.log'})", file=sys.stderr)
        if not multirun:
            sys.exit(1)
        return None
    out = Console()
    if multirun:
        acc = summary.get("test_acc_last_k")
        shown = "-" if acc is None else f"{100 * acc:.2f}%"
        out.print(f"job {hc.job.num} [{','.join(hc.overrides.task)}]: {summary['status']}, last-k acc {shown}")
    elif not spec.output.quiet:
        print_summary(summary, out)
    if summary["status"] != "completed" and not multirun:
        sys.exit(1)
    return None


def main() -> None:
    tune_glibc_malloc()  # before any large allocation: see fedrun/engines/allocator.py
    hydra_utils.run_and_report = _run_and_report
    _job()


if __name__ == "__main__":
    main()
