"""``fedrun``: the Hydra entry point.

Hydra composes the config groups and runs one job (or a sweep with ``-m``); each job is one attempt at a run
(fedrun/run/attempt.py: validate, skip, extend, resume, lock, run, record the outcome), whose outcome this module
tells in one line and maps to the exit code through one table (:data:`EXIT_CODES`); the run's files go into its own
run directory (fedrun/storage/rundir.py owns its layout).
Bad input of any kind ends with one line on stderr naming the field and the valid choices, exit code 2, and
nothing but ``error.txt`` (beside Hydra's ``.hydra/`` record of the job) in a new run directory the command named;
a dated one (the default ``outputs/<date>/<time>-...``) that it created is removed (fedrun/cli/sweeps.py's
:func:`~fedrun.cli.sweeps.remove_refused_run_dir`); a directory that held anything before keeps it as it was, one
another process holds is not touched at all, and one that is not empty and holds no fedrun run is refused.
In a multirun a failing job is recorded and the sweep goes on.

``fedrun resume=<dir>`` (the command an interrupted run prints), or the same command on the same run directory,
continues from the run's last checkpoint and skips a run that already finished; a directory holding a run of a
different config is refused and left untouched. Re-running a sweep with the same ``hydra.sweep.dir`` does the same
for each of its jobs.

Each job returns its ``output.objective`` (summary.json's ``test_acc_last_k`` by default) to Hydra, so a
sweeper such as Optuna's (``-m hydra/sweeper=optuna_tpe``, conf/hydra/sweeper/) can maximise it. A job that
does not complete (bad input, failure, divergence) returns None: Optuna records that trial as FAIL and the
study goes on; a study with no completed trial at all ends with one line and exit code 1.

Before Hydra acts on a composed config, fedrun/cli/compose_checks.py refuses what would run code or reach
outside conf/. A sweep's jobs run in directories keyed by their config (fedrun/run/job_dirs.py), so a sweep can
grow; a sweep of the basic sweeper ends with "k of N jobs failed" and exit code 1 when k > 0, and Ctrl-C
stops it (finished jobs are kept; the same command resumes).
"""

from __future__ import annotations

import contextlib
import re
import signal
import sys
import traceback
from pathlib import Path
from typing import Any, NoReturn, cast

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from hydra.utils import to_absolute_path
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from fedrun.cli import compose_checks, hydra_patches, stack_launch, sweeps
from fedrun.cli import help as cli_help
from fedrun.cli.outcome_lines import tell, waiting
from fedrun.config import location as conf_location
from fedrun.config.schema import RunSpec, store_schemas
from fedrun.core import safe_yaml
from fedrun.core.errors import ConfigError
from fedrun.core.extras import MissingExtra, has_module
from fedrun.host.allocator import tune_glibc_malloc
from fedrun.host.interrupts import Interrupted, exit_code, interrupts, signal_name
from fedrun.host.limits import refuse_small_memory_limits
from fedrun.run.attempt import (
    BAD_DIR_ERRNOS,
    RUN_AFTER,
    SWEEP_AFTER,
    AttemptResult,
    Outcome,
    attempt,
    objective,  # noqa: F401 - a sweeper's value (tests, fedrun-reproduce)
    sweep_resume_command,
    write_failed,
)
from fedrun.run.sweep_index import REFUSED_HERE, record_job
from fedrun.storage.atomic import WriteError
from fedrun.storage.rundir import NotAConfig, RunDir, UnreadableRunFile

EXIT_BAD_INPUT = 2
EXIT_RUN_FAILED = 1

sweeps.register_resolvers()  # before Hydra resolves hydra.sweep.subdir, in every process that runs a job
cli_help.register_resolvers()  # fedrun --help: hydra.help.template (conf/hydra/help/fedrun.yaml)
store_schemas()  # each group option composes on its component's schema (conf/<group>/*.yaml defaults)
safe_yaml.install()  # before Hydra or OmegaConf reads any YAML: aliases bounded (YAML bombs), in every process


def one_line(message: str) -> str:
    """Hydra's multi-line composition errors, condensed to one line."""
    m = re.search(
        r"Could not find '([^/']+)/([^']+)'.*?Available options in '[^']+':\s*(.*?)(?:\nConfig search path:|$)",
        message,
        re.S,
    )
    if m:
        options = ", ".join(o.strip() for o in m.group(3).split("\n") if o.strip())
        return f"{m.group(1)}: unknown option {compose_checks.shorten(m.group(2))!r}; valid: {options}"
    lines = [ln.strip() for ln in message.splitlines()]
    return " ".join(ln for ln in lines if ln and not ln.startswith(("full_key", "reference_type", "object_type")))


def _run_and_report(func: Any) -> Any:
    """Replaces Hydra's error reporter for errors raised while composing (bad overrides, unknown options);
    ends a sweep of the basic sweeper (Hydra returns its jobs' results here) with how many jobs failed."""
    try:
        result = func()
    except Exception as ex:  # noqa: BLE001 - every composition error is bad input
        sweeps.close_console()  # a sweep's live table, before the one line
        if _no_completed_trial(ex):
            why = "each job's summary.json or error.txt says why"
            print(f"fedrun: error: no trial of the study completed ({why})", file=sys.stderr)
            sys.exit(EXIT_RUN_FAILED)
        if isinstance(ex, OSError) and not isinstance(ex, WriteError):  # Hydra's own write (its record of the job)
            ex = _hydra_write_error(ex)
        if isinstance(ex, WriteError):
            print(f"fedrun: error: {ex}; {ex.advice}", file=sys.stderr)
            sys.exit(EXIT_BAD_INPUT if ex.errno in BAD_DIR_ERRNOS else EXIT_RUN_FAILED)
        print(f"fedrun: error: {error_line(ex)}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    finally:
        sweeps.close_console()  # also an interrupted sweep's, before main's one line
    if isinstance(result, list) and sweeps.report_multirun(result):  # Optuna's sweeper returns None
        sys.exit(EXIT_RUN_FAILED)
    return result


def _hydra_write_error(ex: OSError) -> OSError:
    """An OSError of Hydra writing its record of the job (``.hydra/*.yaml``: a full disk, the file size limit), as
    a :class:`WriteError` naming the file, which is removed (Hydra leaves it truncated, often 0 bytes); an OSError
    raised elsewhere as it is."""
    path = hydra_patches.hydra_record_in(ex.__traceback__)
    if path is None:
        return ex
    with contextlib.suppress(OSError):
        if path.is_file() and not path.is_symlink():
            path.unlink()
    return WriteError(path, ex)


def error_line(ex: BaseException) -> str:
    """One line for an error raised while composing: the field and the why, and the file it came from."""
    cause = ex.__cause__
    if cause is None and isinstance(ex.__context__, OmegaConfBaseException):  # Hydra's "In 'experiment/x': ..."
        cause = ex.__context__
    key = getattr(cause, "full_key", None)
    if isinstance(cause, OmegaConfBaseException) and key:  # a value or key refused by the schema
        source = re.match(r"In '([^']+)'", str(ex))
        where = f" (in {source.group(1)}.yaml)" if source else ""
        return f"{key}: {str(cause).splitlines()[0]}{where}"
    # Hydra often says only "Error merging override x=y"; the why is in the cause
    return one_line(str(ex) + (f": {cause}" if cause is not None else ""))


def _no_completed_trial(ex: BaseException) -> bool:
    """Optuna's error for a study with no completed trial: the sweeper asks for the best one after the last.

    Optuna words it after its storage ("No trials are completed yet.", "Record does not exist."), so it is
    told by where it was raised: in ``Study.best_trial``.
    """
    frames = [frame for frame, _ in traceback.walk_tb(ex.__traceback__)]
    return isinstance(ex, ValueError) and any(
        f.f_code.co_name == "best_trial" and f.f_globals.get("__name__", "").startswith("optuna") for f in frames
    )


def sqlite_storage(path: str) -> str:
    """``sqlite:///<absolute path>`` for an Optuna study in ``path``, its directory made first.

    The Optuna sweeper preset (conf/hydra/sweeper/optuna_tpe.yaml) instantiates its ``storage`` with this:
    SQLite does not create a missing directory.
    """
    file = Path(to_absolute_path(path))
    file.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{file}"


CONF_DIR = str(conf_location.CONF_DIR)  # the folder of the package fedrun.conf (fedrun/config/location.py)


@hydra.main(version_base=None, config_path=conf_location.HYDRA_CONFIG_PATH, config_name="config")
def _job(cfg: DictConfig) -> float | None:
    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    run_dir = Path(hc.runtime.output_dir)
    record = None if hc.output_subdir is None else str(hc.output_subdir)  # Hydra wrote it for this attempt
    if not multirun:
        return execute(cfg, run_dir, multirun, record=record)
    label = f"job {hc.job.num} [{run_dir.name}]"
    sweep_dir = Path(hc.sweep.dir).resolve()
    if sweep_dir not in run_dir.resolve().parents:  # hydra.sweep.subdir resolved to a path outside the sweep dir
        why = f"{label} would run in {run_dir}, outside {sweep_dir}; valid: a folder below hydra.sweep.dir"
        print(f"fedrun: error: hydra.sweep.subdir: {why}", file=sys.stderr)
        return None
    record_job(run_dir.parent, run_dir.name, list(hc.overrides.task))
    return execute(cfg, run_dir, multirun, label, record)  # an interrupted job re-raises: the sweep stops


# the exit code of each outcome of an attempt at a run (for INTERRUPTED, 128 + the signal's number)
EXIT_CODES = {
    Outcome.COMPLETED: 0,
    Outcome.SKIPPED: 0,
    Outcome.SKIPPED_DIVERGED: EXIT_RUN_FAILED,
    Outcome.DIVERGED: EXIT_RUN_FAILED,
    Outcome.FAILED: EXIT_RUN_FAILED,
    Outcome.WRITE_FAILED: EXIT_RUN_FAILED,
    Outcome.REFUSED: EXIT_BAD_INPUT,
    Outcome.BUSY: EXIT_BAD_INPUT,
    Outcome.UNWRITABLE: EXIT_BAD_INPUT,
    Outcome.INTERRUPTED: 128,
}


def exit_code_of(result: AttemptResult) -> int:
    """The process's exit code after ``result`` (:data:`EXIT_CODES`)."""
    code = EXIT_CODES[result.outcome]
    return code + int(signal.Signals[result.signal or "SIGINT"]) if result.outcome is Outcome.INTERRUPTED else code


def execute(
    cfg: DictConfig | dict[str, Any],
    run_dir: Path,
    multirun: bool,
    label: str = "",
    record: str | None = None,
    spec: RunSpec | None = None,
) -> float | None:
    """One attempt at the run in ``run_dir`` (:func:`fedrun.run.attempt.attempt`), told in one line (or the summary
    table) and ended with its exit code (:data:`EXIT_CODES`). In a multirun nothing exits: the job returns its
    objective (None unless it completed), and an interrupted job raises, so the sweep stops.

    ``record``: the folder of Hydra's record of the job (``hydra.output_subdir``); ``spec``: ``cfg`` validated already.
    """
    name = label or str(run_dir)
    REFUSED_HERE.discard(run_dir.absolute())
    result = attempt(
        cfg,
        run_dir,
        multirun=multirun,
        label=label,
        record=record,
        absolute=to_absolute_path,
        echo=sweeps.round_echo(name) if multirun else None,
        wait=waiting(name) if multirun else None,
        imports=compose_checks.command_imports(),
        spec=spec,
    )
    tell(result, run_dir, multirun, name)
    if not multirun and result.outcome is Outcome.REFUSED:
        sweeps.remove_refused_run_dir(run_dir)  # a dated one this command made: nothing named like a run is left
    elif result.outcome is Outcome.REFUSED:  # its folder may still say how an earlier run ended: not this job's end
        REFUSED_HERE.add(run_dir.absolute())
    if multirun and result.outcome is Outcome.INTERRUPTED:
        sweep_dir = Path(HydraConfig.get().sweep.dir) if HydraConfig.initialized() else run_dir.parent
        raise _in_job(Interrupted(signal.Signals[result.signal or "SIGINT"]), name, sweep_dir)  # the sweep stops
    code = exit_code_of(result)
    if code and not multirun:
        sys.exit(code)
    return result.objective


def _write_failed(rd: RunDir, e: WriteError, multirun: bool) -> None:
    """A run file of ``rd`` could not be written (:func:`~fedrun.run.attempt.write_failed`): its one line, and its
    exit code outside a multirun."""
    result = write_failed(rd, e)
    tell(result, rd.path, multirun, str(rd.path))
    if not multirun:
        sys.exit(exit_code_of(result))


def _in_job(e: KeyboardInterrupt, job: str, sweep_dir: Path) -> Interrupted:
    """The interrupt that stops a sweep, naming the job it stopped in and the sweep's folder (for :func:`main`'s
    one line)."""
    interrupt = e if isinstance(e, Interrupted) else Interrupted()
    interrupt.job = job  # type: ignore[attr-defined]
    interrupt.sweep_dir = sweep_dir  # type: ignore[attr-defined]
    return interrupt


def resume(run_dir: Path, overrides: list[str]) -> None:
    """``fedrun resume=<dir> [key=value...]``: continue the run in ``dir`` with the config saved there.

    Only settings that leave the rounds already run unchanged may be given: output, checkpoint and evaluation
    settings, and a larger ``fl.rounds``, which extends a finished run from its final checkpoint.
    """
    if any(o.startswith("-") for o in overrides):
        _fail("resume: resumes one run; to resume a sweep re-run its command with the same hydra.sweep.dir")
    overrides = [_plain_override(o) for o in overrides]
    rd = RunDir(run_dir)
    try:
        raw = rd.read_config(plain=False)
    except NotAConfig:
        raw = {}
    except UnreadableRunFile as e:  # its message starts with the file's name
        _fail(f"resume: {rd.path / str(e)}")
    if raw is None:
        _fail(f"resume: {run_dir} holds no fedrun run (no {rd.config_file.name})")
    if not isinstance(raw.get("algorithm"), dict):
        _fail(f"resume: {rd.config_file} is not a fedrun config (a mapping of config keys)")
    try:
        saved = OmegaConf.create(raw)
        cfg = cast(DictConfig, OmegaConf.merge(saved, OmegaConf.from_dotlist(overrides)))
    except Exception as e:  # noqa: BLE001 - a malformed override or config file is bad input
        _fail(f"resume: {one_line(str(e))}")
    for o in overrides:  # `algorithm=fedprox`: a group option would replace the saved run's whole section
        key, _, value = o.partition("=")
        if OmegaConf.is_dict(saved.get(key)) and not OmegaConf.is_dict(cfg.get(key)):
            _fail(
                f"resume: {key}: the run's {key} cannot be switched to {compose_checks.shorten(value)!r} (a resumed"
                f" run keeps its config); valid: settings of it ({key}.<field>=value), or a new run dir"
            )
    execute(cfg, run_dir, multirun=False)


def _plain_override(line: str) -> str:
    """A resume override without Hydra's ``+``/``++`` (add a key: the saved config decides which keys exist, so it
    is the plain ``key=value``); ``~key`` (delete) is refused naming the key: a resumed run keeps its config."""
    if line.startswith("~"):
        key = compose_checks.override_key(line)
        _fail(f"resume: {key}: cannot be deleted in a resumed run (it keeps its config); valid: {key}=<value>")
    if line.lstrip("+").startswith("hydra."):  # Hydra's settings (the run dir) are fixed when the run started
        key = compose_checks.override_key(line)
        _fail(f"resume: {key}: a resumed run keeps its directory and Hydra settings; valid: settings of the run")
    return line.lstrip("+") if line.startswith("+") else line


def _fail(message: str) -> NoReturn:
    print(f"fedrun: error: {message}", file=sys.stderr)
    sys.exit(EXIT_BAD_INPUT)


# The Hydra plugin each of its configs comes from (the first default of a conf/hydra/<group>/ preset names one), and
# the extra of pyproject.toml that installs it: without the plugin Hydra's error says only that the config is missing
PLUGINS = {
    "hydra/sweeper/optuna": ("hydra_plugins.hydra_optuna_sweeper", "tune"),
    "hydra/launcher/joblib": ("hydra_plugins.hydra_joblib_launcher", "dist"),
    "hydra/launcher/ray": ("hydra_plugins.hydra_ray_launcher", "ray-launcher"),
    "hydra/launcher/submitit_slurm": ("hydra_plugins.hydra_submitit_launcher", "dist"),
    "hydra/launcher/submitit_local": ("hydra_plugins.hydra_submitit_launcher", "dist"),
}


def plugin_config(group: str, option: str) -> str:
    """The Hydra plugin config that ``group=option`` composes: fedrun's preset's first default (e.g.
    ``hydra/sweeper=optuna_tpe`` -> ``hydra/sweeper/optuna``), else the option itself (the plugin's own name)."""
    preset = Path(CONF_DIR) / group / f"{option}.yaml"
    try:
        first = (safe_yaml.load_yaml(preset.read_text(), str(preset), plain=True) or {}).get("defaults", [None])[0]
    except (OSError, ConfigError, AttributeError, IndexError, TypeError):
        first = None
    return f"{group}/{first if isinstance(first, str) else option}"


def check_plugins(args: list[str]) -> None:
    """A sweeper or launcher chosen on the command line whose Hydra plugin is not installed: one line naming the
    ``pip install`` (:class:`~fedrun.core.extras.MissingExtra`), exit 2, before Hydra composes."""
    for arg in args:
        key, eq, value = arg.lstrip("+").partition("=")
        group = key.removeprefix("override ").strip()
        if not eq or group not in ("hydra/sweeper", "hydra/launcher") or not re.fullmatch(r"[\w-]+", value.strip()):
            continue
        module, extra = PLUGINS.get(plugin_config(group, value.strip()), (None, None))
        if module is not None and extra is not None and not has_module(module):
            _fail(str(MissingExtra(f"{group}={value.strip()}", module.split(".")[1], extra)))


def is_sweep(args: list[str]) -> bool:
    """Whether the command line asks Hydra for a multirun (a sweep)."""
    return any(a in ("-m", "--multirun") or a.replace(" ", "") == "hydra.mode=MULTIRUN" for a in args)


def main() -> None:
    """The ``fedrun`` command. A signal at any moment ends it with 128 + the signal's number and one line
    (fedrun/host/interrupts.py), from the first instruction when started as ``fedrun`` or ``python -m fedrun.cli``
    (fedrun/cli/__main__.py), whose imports are routed too."""
    cli_help.print_version_if_asked(sys.argv[1:])  # fedrun's version, not Hydra's
    refuse_small_memory_limits()
    tune_glibc_malloc()  # before any large allocation: see fedrun/host/allocator.py
    check_plugins(sys.argv[1:])
    hydra_patches.report_with(_run_and_report)
    hydra_patches.launch_with(stack_launch.launch)  # a sweep's stackable jobs train together (docs/sweeps.md)
    hydra_patches.skip_needless_work()  # --help's config-group listing; the first of Hydra's two compositions
    compose_checks.install()
    # `imports` is a key of the schema, so Hydra's "+" (add a key) would refuse it: accept the README's spelling
    sys.argv[1:] = [a[1:] if a.startswith("+imports=") else a for a in sys.argv[1:]]
    args = sys.argv[1:]
    dirs = [a.split("=", 1)[1] for a in args if a.startswith("resume=")]
    after = SWEEP_AFTER if is_sweep(args) else RUN_AFTER
    try:
        with interrupts("", after):  # composing, and a sweep between its jobs; each job routes its own
            if dirs:
                if not dirs[-1].strip():
                    _fail("resume: is empty; valid: resume=<the run dir to continue>")
                resume(Path(dirs[-1]), [a for a in args if not a.startswith("resume=")])
                return
            _job()
    except KeyboardInterrupt as e:  # a signal while composing, or a sweep stopped by an interrupted job
        job, sweep_dir = getattr(e, "job", None), getattr(e, "sweep_dir", None)
        if job and sweep_dir:  # the command last, whole, so that it can be pasted
            after = f"resume the sweep with: {sweep_resume_command(sweep_dir, args)}"
        where = f" in {job}" if job else ""
        print(f"fedrun: stopped by {signal_name(e)}{where}; {after}", file=sys.stderr)
        sys.exit(exit_code(e))


if __name__ == "__main__":
    main()
