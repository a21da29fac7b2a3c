"""Checks on what Hydra composes, made before Hydra acts on it: a config never runs code, never reaches
outside the config search path, never writes a run into the current directory, and every override is
read the way it was meant (or refused with one line naming it).

Hydra instantiates ``hydra.callbacks`` (and the ``_target_`` of its plugins' nested settings, and the
``()`` / ``class`` factories of its logging configs) right after composing, and reads a group option as a
path (``experiment=../../x`` loads ``conf/experiment/../../x.yaml``). :func:`install` wraps Hydra's config
loader (through fedrun/cli/hydra_patches.py, the one module that patches Hydra) so that every composition (a
run, a sweep and each of its jobs, ``--cfg``, ``--help``) passes :func:`check_overrides` before any file is
read and :func:`check_composed` before anything is instantiated or written. Each raises
:class:`~fedrun.core.errors.ConfigError`, which ``fedrun`` prints as one line with exit code 2.
"""

from __future__ import annotations

import importlib
import logging
import logging.handlers
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import HydraException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from fedrun.cli import hydra_patches, hydra_reuse
from fedrun.cli.help import composing as help_groups_composing
from fedrun.cli.hydra_patches import ConfigLoaderImpl
from fedrun.core.errors import ConfigError
from fedrun.storage.rundir import FILES as RUN_FILES
from fedrun.storage.rundir import RunDir

# The only code a composed config may name: Hydra's own launchers and sweepers (Hydra itself allows no
# other plugin module), Optuna's samplers, and the SQLite helper of conf/hydra/sweeper/optuna_tpe.yaml.
ALLOWED_TARGETS = (
    *hydra_patches.HYDRA_OWN_TARGETS,
    "hydra_plugins.",
    "optuna.samplers.",
    "fedrun.cli.main.sqlite_storage",
)
# fedrun's own Hydra callbacks, by name and target (conf/config.yaml): a sweep's console (fedrun/cli/sweeps.py)
FEDRUN_CALLBACKS = {"fedrun_sweep": "fedrun.cli.sweeps.SweepCallback"}
REQUIRED_GROUPS = ("algorithm", "data", "partition", "model", "hardware")  # a run needs one option of each
NAMED_GROUPS = ("algorithm", "data", "partition", "model")  # the option's file sets <group>.name
GRAMMAR = "https://hydra.cc/docs/advanced/override_grammar/basic/"
LOGGING_MODULES = ("logging", "logging.handlers")  # where a logging config's classes come from
LOGGING_BASES = (logging.Handler, logging.Formatter, logging.Filter)
EXT_STREAMS = ("ext://sys.stdout", "ext://sys.stderr")  # the ext:// references a logging config may make


def shorten(text: str, limit: int = 60) -> str:
    """``text``, cut to ``limit`` characters with its length said when longer (a 5,000-character option)."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def override_key(line: str) -> str:
    """The key an override line names, also when it does not parse (``fl.lr=[1,2`` -> ``fl.lr``)."""
    return shorten(line.split("=", 1)[0].lstrip("~+").strip() or line)


def parse(overrides: list[str]) -> list[Override]:
    """Hydra's parse of each override; an unparsable one is a ConfigError naming its key and the override."""
    parser = OverridesParser.create()
    parsed = []
    for line in overrides:
        try:
            parsed.append(parser.parse_override(line))
        except (HydraException, ValueError) as e:  # ValueError: an integer of over 4,300 digits
            why = str(e).strip() or type(e.__cause__).__name__
            char = re.fullmatch(r"token recognition error at: '(.)'", why, re.S)
            if char and char.group(1) not in "'\"[]{}()":
                raise ConfigError(override_key(line), _needs_quotes(line, char.group(1))) from None
            why = why.replace("token recognition error at: ", "unmatched quote or bracket at ")
            raise ConfigError(
                override_key(line), f"cannot parse the override {shorten(line)!r} ({shorten(why)}); see {GRAMMAR}"
            ) from None
    return parsed


def _needs_quotes(line: str, char: str) -> str:
    """Why ``line`` does not parse when Hydra's grammar stops at ``char``: outside quotes an override value holds
    only ASCII letters, digits and ``_-+./\\:$%*@?|``, so a non-ASCII letter, ``;``, ``#``, ``&``... must be quoted."""
    key, sep, value = line.partition("=")
    bad = next((c for c in key.lstrip("+~") if not (c.isascii() and (c.isalnum() or c in "_-./@"))), None)
    if sep and bad is not None:  # Hydra reports where it stopped (often a later '.'); quoting the value cannot help
        return (
            f"the key {shorten(key.lstrip('+~'))!r} holds {bad!r}; a key holds only ASCII letters, digits and _-./@"
            f" (tags.<name> too); see {GRAMMAR}"
        )
    example = f"{key}={value!r}" if '"' in value else f'{key}="{value}"'
    shell = f"'{example}'" if "'" not in example else example
    return (
        f"the character {char!r} in {shorten(line)!r} must be inside quotes (an unquoted override value holds only"
        f" ASCII letters, digits and _-+./\\:$%*@?|); quote the value, e.g. {shorten(shell, 120)} in the shell;"
        f" see {GRAMMAR}"
        if sep
        else f"the character {char!r} in {shorten(line)!r} is not allowed in an override key; see {GRAMMAR}"
    )


def command_imports(args: list[str] | None = None) -> list[str]:
    """The modules a command line names in its ``imports=[...]`` (also ``+imports=``, ``++imports=``, and each
    value of a sweep over it): the only modules a run imports (fedrun/config/imports.py). A config file's or a
    run dir's ``imports`` names none. ``args``: the command line; by default the job's overrides as Hydra
    recorded them (also in a launcher's worker process, whose own ``sys.argv`` is not fedrun's), else
    ``sys.argv``."""
    if args is None:
        args = _job_overrides()
    named: list[str] = []
    for line in args:
        if line.lstrip("+").startswith("imports="):
            for value in _values(parse([line.lstrip("+")])[0]):
                named += [str(v) for v in value] if isinstance(value, list) else [str(value)]
    return named


def _job_overrides() -> list[str]:
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():  # as written: an override's ${...} is the job's to resolve (and name if it fails)
        return [str(o) for o in OmegaConf.to_container(HydraConfig.get().overrides.task, resolve=False)]  # type: ignore[union-attr]
    return sys.argv[1:]


def _values(o: Override) -> Iterator[Any]:
    """The values an override sets: one, or each of a choice/range sweep (none for an Optuna interval)."""
    if o.is_sweep_override():
        if o.is_discrete_sweep():
            yield from o.sweep_iterator()
        return
    yield o.value()


def _options(loader: ConfigLoaderImpl, group: str) -> str:
    return ", ".join(hydra_patches.group_options(loader, group))


def _check_option(loader: ConfigLoaderImpl, group: str, option: Any) -> None:
    if option is None:
        if group in REQUIRED_GROUPS:
            raise ConfigError(group, f"cannot be null (every run needs one); valid: {_options(loader, group)}")
        return
    if isinstance(option, list):
        for item in option:
            _check_option(loader, group, item)
            # Hydra names a missing option of a list (tracking=[foo]) without the valid ones
            if not hydra_patches.config_exists(loader, f"{group}/{item}.yaml"):
                raise ConfigError(group, f"unknown option {shorten(str(item))!r}; valid: {_options(loader, group)}")
        return
    text = str(option)
    if len(text) > 200:  # longer than any file name may be
        raise ConfigError(group, f"unknown option {shorten(text)!r}; valid: {_options(loader, group)}")
    if not text.strip() or "/" in text or "\\" in text or ".." in text:
        raise ConfigError(
            group,
            f"option {shorten(text)!r} is not a name of {group}/ in the config search path (no '/' or '..');"
            f" valid: {_options(loader, group)}",
        )


def check_overrides(loader: ConfigLoaderImpl, parsed: list[Override]) -> None:
    """Refuse, before Hydra reads a file: a group option that is a path or null, the deletion of a setting."""
    for o in parsed:
        key = o.key_or_group
        if hydra_patches.group_exists(loader, key):
            if o.is_delete():
                if key in REQUIRED_GROUPS:
                    raise ConfigError(key, f"cannot be removed (every run needs one); valid: {_options(loader, key)}")
                continue
            for option in _values(o):
                _check_option(loader, key, option)
        elif o.is_delete() and not o.is_hydra_override() and key.split(".")[0] != "tags":
            raise ConfigError(key, f"cannot be deleted (~{key}): set a value instead (tags.* are the free keys)")


def _walk(node: Any, path: str) -> Iterator[tuple[str, Any]]:
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _walk(v, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk(v, f"{path}[{i}]")
    else:
        yield path, node


def check_no_code(cfg: DictConfig) -> None:
    """The ``hydra`` node names no code but Hydra's plugins: no foreign callbacks, targets or logging factories."""
    callbacks = OmegaConf.select(cfg, "hydra.callbacks") or {}
    for name in callbacks:
        node = OmegaConf.to_container(callbacks[name], resolve=False) if OmegaConf.is_dict(callbacks[name]) else None
        if name not in FEDRUN_CALLBACKS or node != {"_target_": FEDRUN_CALLBACKS[name]}:
            why = f"refused: a config never runs code (fedrun's callbacks: {', '.join(FEDRUN_CALLBACKS)}, as shipped)"
            raise ConfigError(f"hydra.callbacks.{name}", why)
    hydra_node = OmegaConf.to_container(cfg.hydra, resolve=False)
    for path, value in _walk(hydra_node, "hydra"):
        leaf = path.rsplit(".", 1)[-1]
        if path.startswith("hydra.callbacks."):
            continue  # checked above
        if leaf == "_target_" and not (isinstance(value, str) and value.startswith(ALLOWED_TARGETS)):
            why = "is not a Hydra plugin (a config never runs code)"
            raise ConfigError(path, f"refused: {shorten(str(value))!r} {why}")
        if path.startswith(("hydra.job_logging", "hydra.hydra_logging")):
            check_logging_value(path, leaf, value)


def logging_class(text: str) -> type | None:
    """The class a logging config's ``class: <text>`` names when it is one of the logging package's handlers,
    formatters or filters (``logging.StreamHandler``, ``logging.handlers.RotatingFileHandler``); else None. The
    name is resolved, not matched by prefix: ``logging.os.system`` is ``os.system``."""
    module, _, name = text.rpartition(".")
    if module not in LOGGING_MODULES or not name.isidentifier():
        return None
    obj = getattr(importlib.import_module(module), name, None)
    ok = isinstance(obj, type) and issubclass(obj, LOGGING_BASES) and obj.__module__ in LOGGING_MODULES
    return obj if ok else None


def check_logging_value(path: str, leaf: str, value: Any) -> None:
    """Refuse what makes Python's logging config run code: a factory (``()``), a ``class`` that is not one of
    the logging package's own, an ``ext://`` reference (dictConfig imports its module) other than the streams."""
    if leaf == "()" or (leaf == "class" and logging_class(str(value)) is None):
        why = "a logging config names only the logging package's handler, formatter and filter classes"
        raise ConfigError(path, f"refused: {shorten(str(value))!r} ({why}, e.g. logging.StreamHandler)")
    if isinstance(value, str) and value.strip().startswith("ext://") and value.strip() not in EXT_STREAMS:
        why = f"dictConfig would import its module; valid: {', '.join(EXT_STREAMS)}"
        raise ConfigError(path, f"refused: {shorten(value)!r} ({why})")


def check_composed(cfg: DictConfig, parsed: list[Override], run_mode: RunMode) -> None:
    """Refuse a composed config that would run code, reach outside conf/, write into the current directory,
    or set a value other than the one meant (``output.plots=2``, ``model.name=cnn`` beside ``model=mlp``)."""
    check_no_code(cfg)
    choices = OmegaConf.select(cfg, "hydra.runtime.choices") or {}
    for group, option in choices.items():  # every option chosen, also by a preset's defaults list
        if option is not None and ("/" in option or "\\" in option or ".." in option):
            raise ConfigError(group, f"option {shorten(option)!r} is not a name in the config search path")
    where = ("hydra.run.dir",) if run_mode == RunMode.RUN else ("hydra.sweep.dir", "hydra.sweep.subdir")
    texts: dict[str, str] = {}  # each resolved once: hydra.run.dir's name resolver composes tags (~0.04 CPU-s)
    for key in where:
        try:
            # the subdir as written: resolved only when Hydra numbers the job (${hydra.job.num})
            value = OmegaConf.select(cfg, key) if key != "hydra.sweep.subdir" else hydra_patches.raw_value(cfg, key)
            text = "" if value is None else str(value)
        except OmegaConfBaseException as e:
            raise ConfigError(key, str(e).splitlines()[0]) from None
        if not text.strip():
            raise ConfigError(key, "is empty: the run would write into the current directory; give a directory")
        texts[key] = text
        if key == "hydra.sweep.subdir":
            check_subdir(key, text)
        else:
            check_not_cwd(key, text)
    output_subdir = OmegaConf.select(cfg, "hydra.output_subdir")
    if output_subdir is not None:
        check_subdir("hydra.output_subdir", str(output_subdir))
        first = Path(os.path.normpath(str(output_subdir))).parts[0]
        if first in RUN_FILES:
            raise ConfigError(
                "hydra.output_subdir",
                f"{shorten(str(output_subdir))!r} is a file fedrun writes in the run dir, where Hydra would put its"
                " record; valid: another folder name (e.g. .hydra)",
            )
    if run_mode == RunMode.RUN:
        check_run_dir(Path(os.path.abspath(texts["hydra.run.dir"])), output_subdir)
    else:
        job_dir = _sweep_job_dir(cfg)
        if job_dir is not None:
            check_run_dir(job_dir, output_subdir, key="hydra.sweep.dir")
    for o in parsed:
        if o.is_hydra_override() or o.is_delete():
            continue
        key = o.key_or_group
        group, _, leaf = key.partition(".")
        if group in NAMED_GROUPS and leaf == "name":
            for value in _values(o):
                if value != choices.get(group):
                    raise ConfigError(
                        key,
                        f"is set by the {group} option, not overridden: use {group}={shorten(str(value))}"
                        f" (now {group}={choices.get(group)})",
                    )
        if hydra_patches.is_boolean_field(cfg, key):
            for value in _values(o):
                if value is not None and not isinstance(value, bool):
                    raise ConfigError(key, f"expected true or false, got {shorten(repr(value))}")


def check_not_cwd(key: str, text: str) -> None:
    """Refuse a run or sweep directory that is the current directory or one above it: fedrun would write its
    files (and Hydra its record) among the user's."""
    check_dir_path(key, text)
    where, cwd = Path(text).resolve(), Path.cwd().resolve()
    if where == cwd or where in cwd.parents:
        raise ConfigError(
            key,
            f"{shorten(text)!r} is the current directory or one above it, where the run's files would mix with"
            " yours; valid: a directory of its own (e.g. outputs/<name>)",
        )


def check_dir_path(key: str, text: str) -> None:
    """Refuse a run or sweep directory that no directory can be made at: a symlink leading nowhere (dangling, or
    a loop), or a folder name longer than the file system allows (ENAMETOOLONG when Hydra makes it)."""
    path = Path(os.path.abspath(text))
    limit = os.pathconf("/", "PC_NAME_MAX") if hasattr(os, "pathconf") else 255
    for part in path.parts:
        if len(os.fsencode(part)) > limit:
            raise ConfigError(
                key,
                f"a folder name of {len(os.fsencode(part))} bytes ({shorten(part)!r}) is longer than the file"
                f" system allows; valid: names of at most {limit} bytes",
            )
    for p in (path, *path.parents):
        if p.is_symlink() and not p.exists():
            raise ConfigError(
                key,
                f"{p} is a symlink to {os.readlink(p)}, which leads nowhere (it is missing or a loop); valid: a"
                " directory, or a symlink to one",
            )


def check_subdir(key: str, text: str) -> None:
    """Refuse a sub-folder (``hydra.sweep.subdir``, ``hydra.output_subdir``) that is not a folder below its
    parent: an absolute path, or one that ``..`` takes out of it (or to the parent itself)."""
    norm = os.path.normpath(text)
    if Path(text).is_absolute() or norm == "." or norm == ".." or norm.startswith(("../", "..\\")):
        raise ConfigError(
            key,
            f"{shorten(text)!r} is not a folder below its directory, so Hydra or fedrun would write outside it;"
            " valid: a relative name without '..' (e.g. .hydra)",
        )


def _sweep_job_dir(cfg: DictConfig) -> Path | None:
    """The directory a job composed as ``cfg`` runs in (``hydra.sweep.dir``/``hydra.sweep.subdir``), when it can be
    told before Hydra numbers the job (fedrun's subdir, a hash of the job's config, can); else None."""
    try:
        sweep_dir, subdir = OmegaConf.select(cfg, "hydra.sweep.dir"), OmegaConf.select(cfg, "hydra.sweep.subdir")
    except Exception:  # noqa: BLE001 - e.g. ${hydra.job.num}, set only when the job runs
        return None
    if sweep_dir is None or subdir is None:
        return None
    check_subdir("hydra.sweep.subdir", str(subdir))  # as resolved (``${oc.env:X}``): still a folder below
    return Path(os.path.abspath(os.path.join(str(sweep_dir), str(subdir))))


def check_run_dir(run_dir: Path, output_subdir: Any, key: str = "hydra.run.dir") -> None:
    """Before Hydra writes its record into ``run_dir``: refuse symlinks there that leave it (Hydra's record, the
    log, the lock: :meth:`~fedrun.storage.rundir.RunDir.check_links`) and a record folder that is one; keep the
    record of the run it holds, put back if the job is refused there (fedrun/storage/kept_records.py)."""
    rd = RunDir(run_dir)
    rd.check_links(key)
    rd.keep_record(None if output_subdir is None else str(output_subdir))
    if output_subdir is not None:
        record = run_dir / str(output_subdir)
        if record.is_symlink() and not record.resolve().is_relative_to(run_dir.resolve()):
            raise ConfigError(
                "hydra.output_subdir",
                f"{record} is a symlink to {os.readlink(record)}, outside the run dir, and Hydra would write its"
                " record through it; valid: a run dir without it",
            )


def _checked(
    loader: ConfigLoaderImpl, overrides: list[str], run_mode: RunMode, compose: Callable[[], DictConfig]
) -> DictConfig:
    parsed = parse(overrides)
    check_overrides(loader, parsed)
    with help_groups_composing():
        cfg = compose()
    check_composed(cfg, parsed, run_mode)
    return cfg


def install() -> None:
    """Route every composition of this process through the checks above, on a repository copy that shares the
    config store (:func:`fedrun.cli.hydra_patches.share_config_store`), reusing an earlier composition's defaults
    list and merged files where its group choices are the same (fedrun/cli/hydra_reuse.py); idempotent."""
    hydra_patches.around_composition(_checked)
    hydra_patches.share_config_store()
    hydra_reuse.install()
