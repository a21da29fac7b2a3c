"""Every use fedrun makes of Hydra's private API (``hydra._internal``), here and in hydra_reuse.py (its own docstring).

Hydra offers no public hook for what fedrun needs, so it replaces, calls or recognises eight private names, wraps
one public method and changes how one public class copies:

- ``hydra._internal.utils.run_and_report``: the reporter ``@hydra.main`` runs a command under; fedrun's prints
  a composition error as one line with exit code 2 and ends a failed sweep with exit code 1 (fedrun/cli/main.py);
- ``ConfigLoaderImpl.load_configuration``: every composition (a run, a sweep and each of its jobs, ``--cfg``,
  ``--help``) passes fedrun's compose checks (fedrun/cli/compose_checks.py) around it;
- ``BasicSweeper.split_arguments``: a sweep's jobs, in the order ``fedrun -m`` numbers them (reproduce_sweep.py);
- ``hydra.core.utils._save_config(cfg, filename, output_dir)``: the frame that writes the job's ``.hydra/*.yaml``
  record, so a failed write of it names its file (:func:`hydra_record_in`);
- ``Hydra.get_help``: ``--help`` and ``--hydra-help`` list the config groups only where the help template names
  them (:func:`lazy_help_groups`; fedrun's own template lists its groups itself);
- ``BasicLauncher.launch``: the basic launcher's sweep, through fedrun's (fedrun/cli/stack_launch.py), which trains
  the jobs that stack together and otherwise hands the sweep back to it (:func:`launch_with`);
- ``Hydra.get_mode``: the run mode a config sets (``hydra.mode``), read from the command line where only it can set
  one, instead of composing the whole config a first time (:func:`mode_from_command_line`);
- ``ConfigLoaderImpl.load_sweep_config``, ``Sweeper.validate_batch_is_legal`` (public): a sweep's job is composed
  once, by the validation, not again by the stack planner and the launcher (:func:`compose_sweep_jobs_once`);
- ``ConfigStore`` (public): a deep copy of it is itself, so a composition's copy of the config repository does not
  copy every registered schema (:func:`share_config_store`).

It also reads, for fedrun's checks, what Hydra and OmegaConf keep private: the config repository of Hydra's
loader (:func:`group_options`, :func:`group_exists`, :func:`config_exists`: compose_checks.py), a config node's
unresolved value and type (OmegaConf's ``_get_node``/``_value``: :func:`raw_value`, :func:`is_boolean_field`), and
the private class paths of Hydra's own sweeper and launcher (:func:`is_basic_sweeper`, :func:`is_basic_launcher`:
the sweep console and the failed-job count of fedrun/cli/sweeps.py, and the targets a config may name).

These may change in any hydra-core or omegaconf release, so pyproject.toml pins hydra-core to :data:`HYDRA_CORE`
and tests/cli/test_hydra_patches.py fails on an installed version outside it, on a changed signature of any of the
eight, on a composition whose repository copy no longer reaches the store, or on an accessor that stopped working;
no other module of fedrun but hydra_reuse.py names a private name of either (the test scans imports, attributes and
strings; tests/cli/test_hydra_reuse.py checks what that one patches). An
accessor whose private name is gone raises :class:`HydraInternalsChanged` instead of answering "no": a sweep's
console and its failed-job count never switch off silently after an upgrade. Only the patching lives here.
"""

from __future__ import annotations

import importlib
import string
import traceback
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from pathlib import Path
from types import TracebackType
from typing import Any

import hydra._internal.utils as hydra_utils
from hydra._internal.config_loader_impl import ConfigLoaderImpl as ConfigLoaderImpl  # re-exported: the checks use it
from hydra._internal.core_plugins.basic_launcher import BasicLauncher
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra._internal.hydra import Hydra
from hydra.core.config_store import ConfigStore
from hydra.core.object_type import ObjectType
from hydra.core.override_parser.types import Override
from hydra.plugins.sweeper import Sweeper
from hydra.types import RunMode
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.nodes import BooleanNode

from fedrun.cli import hydra_reuse

HYDRA_CORE = ">=1.3.2,<1.4"  # the versions these patches were checked on; pyproject.toml's dependency says the same
HYDRA_OWN_TARGETS = ("hydra._internal.core_plugins.",)  # where Hydra's own launchers and sweepers live

# the placeholders of a help template (string.Template) that Hydra fills with its config groups
HELP_GROUP_PLACEHOLDERS = ("APP_CONFIG_GROUPS", "HYDRA_CONFIG_GROUPS")

# The config sources (Hydra's providers) whose configs never set hydra.mode: Hydra's own, fedrun's conf/ (checked by
# tests/cli/test_hydra_patches.py) and the structured configs Hydra and its plugins register. A --config-dir
# ("command-line") or a search-path plugin adds a source whose presets might.
MODELESS_PROVIDERS = frozenset({"hydra", "main", "schema"})

# around(loader, overrides, run_mode, compose) -> the composed config; compose() runs Hydra's own composition
Around = Callable[[ConfigLoaderImpl, list[str], RunMode, Callable[[], DictConfig]], DictConfig]


def report_with(reporter: Callable[[Callable[[], Any]], Any]) -> None:
    """Run every ``@hydra.main`` command of this process under ``reporter(func)`` instead of Hydra's reporter."""
    hydra_utils.run_and_report = reporter  # type: ignore[assignment]


def around_composition(around: Around) -> None:
    """Route every composition of this process through ``around`` (idempotent: a second call keeps the first)."""
    current = ConfigLoaderImpl.load_configuration
    if getattr(current, "fedrun_checked", False):
        return

    def load_configuration(
        self: ConfigLoaderImpl,
        config_name: str | None,
        overrides: list[str],
        run_mode: RunMode,
        from_shell: bool = True,
        validate_sweep_overrides: bool = True,
    ) -> DictConfig:
        def compose() -> DictConfig:
            return current(self, config_name, overrides, run_mode, from_shell, validate_sweep_overrides)

        return around(self, list(overrides), run_mode, compose)

    load_configuration.fedrun_checked = True  # type: ignore[attr-defined]
    ConfigLoaderImpl.load_configuration = load_configuration  # type: ignore[method-assign]


def share_config_store() -> None:
    """Have a deep copy of Hydra's ``ConfigStore`` be the store itself (idempotent): each composition deep-copies
    the loader's repository (``CachingConfigRepository``), whose structured-config source holds the store, so it
    copied every schema fedrun registers (a third of a composition). The store is the process's one registry,
    which ``ConfigStore.load`` already copies each node out of: sharing it composes the same config."""
    if "__deepcopy__" not in vars(ConfigStore):
        ConfigStore.__deepcopy__ = lambda self, memo: self  # type: ignore[attr-defined]


_VALIDATING: ContextVar[bool] = ContextVar("fedrun_validating_sweep", default=False)


class _Kept:
    """The jobs a sweep's validation composed (its master config's), by their overrides, until composed again."""

    master: DictConfig | None = None
    configs: dict[tuple[str, ...], list[DictConfig]] = {}


def keep_sweep_config(master: DictConfig, overrides: Sequence[str], cfg: DictConfig) -> None:
    """Keep the job ``overrides`` of the sweep whose config is ``master``, composed as ``cfg``: the next composition
    of that job (by the launcher) gets it instead, once. The jobs of an earlier sweep are let go."""
    if _Kept.master is not master:
        _Kept.master, _Kept.configs = master, {}
    _Kept.configs.setdefault(tuple(overrides), []).append(cfg)


def _take_kept(master: DictConfig, overrides: Sequence[str]) -> DictConfig | None:
    kept = _Kept.configs.get(tuple(overrides)) if _Kept.master is master else None
    return kept.pop(0) if kept else None


def compose_sweep_jobs_once() -> None:
    """Have each job of a sweep on Hydra's basic launcher composed once, not three times (idempotent): Hydra's
    validation of a batch (``Sweeper.validate_batch_is_legal``), fedrun's stack planner and the launcher each
    composed it. A job the validation composed is kept (:func:`keep_sweep_config`) where the launcher is the basic
    one (in this process), and the next ``load_sweep_config`` of that job gets it; all of a batch is composed before
    its first job runs, so it is the config the launcher would compose (a run checks its folder as it starts)."""
    validate, load = Sweeper.validate_batch_is_legal, ConfigLoaderImpl.load_sweep_config
    if getattr(load, "fedrun_once", False):
        return

    def validate_batch_is_legal(self: Sweeper, batch: Sequence[Sequence[str]]) -> None:
        token = _VALIDATING.set(True)
        try:
            validate(self, batch)
        finally:
            _VALIDATING.reset(token)

    def load_sweep_config(self: ConfigLoaderImpl, master_config: DictConfig, sweep_overrides: list[str]) -> Any:
        kept = _take_kept(master_config, sweep_overrides)
        if kept is not None:
            return kept
        cfg = load(self, master_config, sweep_overrides)
        if _VALIDATING.get() and is_basic_launcher(OmegaConf.select(master_config, "hydra.launcher._target_")):
            keep_sweep_config(master_config, sweep_overrides, cfg)  # the validation discards what it composed
        return cfg

    load_sweep_config.fedrun_once = True  # type: ignore[attr-defined]
    Sweeper.validate_batch_is_legal = validate_batch_is_legal  # type: ignore[method-assign]
    ConfigLoaderImpl.load_sweep_config = load_sweep_config  # type: ignore[method-assign]


def skip_needless_work() -> None:
    """Leave out what Hydra computes for fedrun only to discard: the config-group listing of ``--help``
    (:func:`lazy_help_groups`), the first of a command's two compositions (:func:`mode_from_command_line`) and a
    sweep job's compositions after the first (:func:`compose_sweep_jobs_once`)."""
    lazy_help_groups()
    mode_from_command_line()
    compose_sweep_jobs_once()


def lazy_help_groups() -> None:
    """Have Hydra's help list its config groups only when the help template names them (idempotent).

    ``Hydra.get_help`` formats ``$APP_CONFIG_GROUPS`` and ``$HYDRA_CONFIG_GROUPS`` before it fills the template, and
    each group's options cost it a deep copy of the whole config repository: seconds of every ``fedrun --help``,
    whose template (conf/hydra/help/fedrun.yaml) names neither. A template that names one gets Hydra's own help;
    one that names none gets the same text without them being formatted."""
    current = Hydra.get_help
    if getattr(current, "fedrun_lazy", False):
        return

    def get_help(self: Hydra, help_cfg: DictConfig, cfg: DictConfig, args_parser: Any, resolve: bool) -> str:
        if any(name in _placeholders(str(help_cfg.template)) for name in HELP_GROUP_PLACEHOLDERS):
            return current(self, help_cfg, cfg, args_parser, resolve)
        self.format_config_groups = lambda predicate, compact=True: ""  # type: ignore[method-assign]  # unread
        try:
            return current(self, help_cfg, cfg, args_parser, resolve)
        finally:
            del self.format_config_groups

    get_help.fedrun_lazy = True  # type: ignore[attr-defined]
    Hydra.get_help = get_help  # type: ignore[method-assign]


def mode_from_command_line() -> None:
    """Have Hydra read a command's run mode without composing its config first, where it can (idempotent).

    ``Hydra.get_mode`` composes the whole config (every preset, fedrun's compose checks) only to read ``hydra.mode``,
    then the run or sweep composes it again: 0.1-0.3 CPU-s of every ``fedrun`` command. Where every config source
    is one of :data:`MODELESS_PROVIDERS` and no override names ``hydra.mode``, nothing sets it, and the answer is
    Hydra's for an unset mode (None: the command line's ``-m`` decides); otherwise Hydra composes as before."""
    current = Hydra.get_mode
    if getattr(current, "fedrun_mode", False):
        return

    def get_mode(self: Hydra, config_name: str | None, overrides: list[str]) -> Any:
        providers = [source.provider for source in self.config_loader.get_sources()]
        if mode_is_unset(providers, overrides):
            return None
        return current(self, config_name, overrides)

    get_mode.fedrun_mode = True  # type: ignore[attr-defined]
    Hydra.get_mode = get_mode  # type: ignore[method-assign]


def mode_is_unset(providers: Sequence[str], overrides: Sequence[str]) -> bool:
    """Whether a composition from the config sources ``providers`` with ``overrides`` leaves ``hydra.mode`` unset,
    told without composing (False where it cannot be told: a source of other presets, an override of the mode)."""
    if not set(providers) <= MODELESS_PROVIDERS:
        return False
    keys = (o.split("=", 1)[0].strip().lstrip("~+").strip() for o in overrides)
    return not any(key in ("hydra", "hydra.mode") for key in keys)


def _placeholders(template: str) -> set[str]:
    """The names ``string.Template(template).substitute`` reads (``Template.get_identifiers``, Python >= 3.11)."""
    found = (m.group("named") or m.group("braced") for m in string.Template.pattern.finditer(template))
    return {name for name in found if name}


# launch(launcher, job_overrides, initial_job_idx, basic) -> the jobs' returns; basic(...) is Hydra's own launch
Launch = Callable[[BasicLauncher, Sequence[Sequence[str]], int, Callable[..., Any]], Any]


def launch_with(launch: Launch) -> None:
    """Have Hydra's basic launcher run every sweep of this process through ``launch`` (idempotent: a second call
    keeps the first), which is handed the launcher (its ``config``, ``hydra_context``, ``task_function``) and Hydra's
    own ``launch`` to hand a sweep back to."""
    launcher = basic_launcher()
    current = launcher.launch
    if getattr(current, "fedrun_launch", False):
        return

    def patched(self: BasicLauncher, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Any:
        return launch(self, job_overrides, initial_job_idx, current)

    patched.fedrun_launch = True  # type: ignore[attr-defined]
    launcher.launch = patched  # type: ignore[method-assign]


def basic_launcher() -> type[BasicLauncher]:
    """The basic launcher's class as Hydra instantiates it: Hydra's plugin scan (once per process, on the first
    ``Plugins.instance()``) executes its plugin modules again, so the class is the scanned module's, not the one
    imported before."""
    from hydra.core.plugins import Plugins

    Plugins.instance()
    cls: type[BasicLauncher] = importlib.import_module(BasicLauncher.__module__).BasicLauncher
    return cls


def sweep_jobs(parsed: list[Override]) -> list[list[str]]:
    """Each job's overrides, in the order Hydra's BasicSweeper launches them (its job numbers): one batch."""
    return BasicSweeper.split_arguments(parsed, None)[0]


def saved() -> Callable[[], None]:
    """A function that puts back every name this module replaces as it is now (tests isolate themselves)."""
    reporter, loader, get_help = hydra_utils.run_and_report, ConfigLoaderImpl.load_configuration, Hydra.get_help
    get_mode, launcher = Hydra.get_mode, basic_launcher()
    launch = launcher.launch
    store_copy = vars(ConfigStore).get("__deepcopy__")
    validate, load_sweep = Sweeper.validate_batch_is_legal, ConfigLoaderImpl.load_sweep_config
    restore_reuse = hydra_reuse.saved()

    def restore() -> None:
        restore_reuse()
        hydra_utils.run_and_report = reporter
        ConfigLoaderImpl.load_configuration = loader  # type: ignore[method-assign]
        Hydra.get_help = get_help  # type: ignore[method-assign]
        Hydra.get_mode = get_mode  # type: ignore[method-assign]
        launcher.launch = launch  # type: ignore[method-assign]
        Sweeper.validate_batch_is_legal = validate  # type: ignore[method-assign]
        ConfigLoaderImpl.load_sweep_config = load_sweep  # type: ignore[method-assign]
        _Kept.master, _Kept.configs = None, {}
        if store_copy is None and "__deepcopy__" in vars(ConfigStore):
            del ConfigStore.__deepcopy__  # type: ignore[attr-defined]
        elif store_copy is not None:
            ConfigStore.__deepcopy__ = store_copy  # type: ignore[attr-defined]

    return restore


def hydra_record_in(tb: TracebackType | None) -> Path | None:
    """The ``.hydra/*.yaml`` file Hydra was writing (``hydra.core.utils._save_config``) when the error of the
    traceback ``tb`` was raised; None when it was raised elsewhere."""
    saving = [
        frame
        for frame, _ in traceback.walk_tb(tb)
        if frame.f_code.co_name == "_save_config" and frame.f_globals.get("__name__") == "hydra.core.utils"
    ]
    if not saving:
        return None
    return Path(saving[-1].f_locals["output_dir"]) / str(saving[-1].f_locals["filename"])


class HydraInternalsChanged(RuntimeError):
    """A private name of Hydra or OmegaConf that fedrun reads is gone (an upgrade outside :data:`HYDRA_CORE`)."""

    def __init__(self, what: str) -> None:
        super().__init__(
            f"{what}: the installed hydra-core/omegaconf changed a private name fedrun reads;"
            f" fedrun/cli/hydra_patches.py needs updating (checked on hydra-core{HYDRA_CORE})"
        )


def _private(obj: Any, name: str) -> Any:
    try:
        return getattr(obj, name)
    except AttributeError:
        raise HydraInternalsChanged(f"{type(obj).__name__}.{name}") from None


def group_options(loader: ConfigLoaderImpl, group: str) -> list[str]:
    """The options of config group ``group`` in the loader's search path (``algorithm`` -> ``[fedavg, ...]``)."""
    return list(_private(loader, "repository").get_group_options(group, results_filter=ObjectType.CONFIG))


def group_exists(loader: ConfigLoaderImpl, group: str) -> bool:
    """Whether ``group`` is a config group of the loader's search path."""
    return bool(_private(loader, "repository").group_exists(group))


def config_exists(loader: ConfigLoaderImpl, path: str) -> bool:
    """Whether the config file ``path`` (``tracking/mlflow.yaml``) is in the loader's search path."""
    return bool(_private(loader, "repository").config_exists(path))


def _node(cfg: DictConfig, key: str) -> Any:
    """OmegaConf's node at the dotted ``key`` (its interpolations unresolved); None when a part is missing."""
    node: Any = cfg
    for part in key.split("."):
        if not isinstance(node, DictConfig) or part not in node:
            return None
        node = _private(node, "_get_node")(part)
    return node


def raw_value(cfg: DictConfig, key: str) -> Any:
    """The value at the dotted ``key`` as written, an interpolation unresolved (``${hydra.job.num}``); None when a
    part is missing."""
    node = _node(cfg, key)
    if node is None or isinstance(node, DictConfig | ListConfig):
        return node
    return _private(node, "_value")()


def is_boolean_field(cfg: DictConfig, key: str) -> bool:
    """Whether the dotted ``key`` is a boolean field of the composed schema (``output.plots``)."""
    return isinstance(_node(cfg, key), BooleanNode)


def _class_path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _names_class(target: Any, cls: type) -> bool:
    """Whether the ``_target_`` string ``target`` names ``cls``: by its path, or by another path of Hydra's that
    resolves to it; a path under Hydra's plugins that no longer resolves raises (an upgrade moved it)."""
    if not isinstance(target, str):
        return False
    if target == _class_path(cls):
        return True
    if not target.startswith(HYDRA_OWN_TARGETS):
        return False
    module, _, name = target.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name) is cls
    except (ImportError, AttributeError):
        raise HydraInternalsChanged(f"{target} (named by the composed config)") from None


def is_basic_sweeper(target: Any) -> bool:
    """Whether ``hydra.sweeper._target_`` is Hydra's basic sweeper (fedrun numbers and counts its jobs)."""
    return _names_class(target, BasicSweeper)


def is_basic_launcher(target: Any) -> bool:
    """Whether ``hydra.launcher._target_`` is Hydra's basic launcher (its jobs run in this process: the live
    console of fedrun/cli/sweeps.py)."""
    return _names_class(target, BasicLauncher)
