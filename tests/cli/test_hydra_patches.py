"""fedrun's patches of Hydra's private API (fedrun/cli/hydra_patches.py) against the installed hydra-core: a
hydra-core upgrade that moves, renames or re-signs any patched name fails here, by name, before a user sees it."""

from __future__ import annotations

import ast
import importlib.metadata
import inspect
from pathlib import Path
from typing import Any

import hydra._internal.hydra as hydra_core_hydra
import hydra._internal.utils as hydra_utils
import pytest
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf
from packaging.specifiers import SpecifierSet

from fedrun.cli import compose_checks, hydra_patches, hydra_reuse
from tests.conftest import REPO

tomllib = pytest.importorskip("tomllib")


def test_the_installed_hydra_core_is_inside_the_range_the_patches_were_checked_on() -> None:
    installed = importlib.metadata.version("hydra-core")
    assert installed in SpecifierSet(hydra_patches.HYDRA_CORE), (
        f"hydra-core {installed} is outside {hydra_patches.HYDRA_CORE}: check fedrun/cli/hydra_patches.py against it"
    )


def test_pyproject_pins_hydra_core_to_that_range_for_the_base_install() -> None:
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert f"hydra-core{hydra_patches.HYDRA_CORE}" in deps


def _params(func: object) -> list[tuple[str, object]]:
    return [(p.name, p.default) for p in inspect.signature(func).parameters.values()]  # type: ignore[arg-type]


def test_the_composition_fedrun_wraps_has_the_signature_it_calls() -> None:
    empty = inspect.Parameter.empty
    assert _params(ConfigLoaderImpl.load_configuration) == [
        ("self", empty),
        ("config_name", empty),
        ("overrides", empty),
        ("run_mode", empty),
        ("from_shell", True),
        ("validate_sweep_overrides", True),
    ]
    # Hydra composes through it (so wrapping it reaches every run, sweep, --cfg and --help)
    assert "self.config_loader.load_configuration(" in inspect.getsource(hydra_core_hydra.Hydra.compose_config)


def test_the_reporter_fedrun_replaces_is_looked_up_where_hydra_main_calls_it() -> None:
    assert _params(hydra_utils.run_and_report) == [("func", inspect.Parameter.empty)]
    # a module-level name that _run_hydra calls: replacing the module's attribute replaces what it calls
    assert "run_and_report(" in inspect.getsource(hydra_utils._run_hydra)


def test_the_sweeper_split_fedrun_calls_has_its_signature_and_order() -> None:
    assert isinstance(inspect.getattr_static(BasicSweeper, "split_arguments"), staticmethod)
    assert [p[0] for p in _params(BasicSweeper.split_arguments)] == ["overrides", "max_batch_size"]
    parsed = OverridesParser.create().parse_overrides(["a=1,2", "b=x,y"])
    assert hydra_patches.sweep_jobs(parsed) == [["a=1", "b=x"], ["a=1", "b=y"], ["a=2", "b=x"], ["a=2", "b=y"]]


def test_the_sweep_compositions_fedrun_wraps_have_their_signatures_and_order() -> None:
    """The validation composes through ``load_sweep_config`` before the batch is launched, and the basic launcher
    composes each job through it again: what :func:`hydra_patches.compose_sweep_jobs_once` relies on."""
    from hydra.plugins.sweeper import Sweeper

    empty = inspect.Parameter.empty
    assert _params(ConfigLoaderImpl.load_sweep_config) == [
        ("self", empty), ("master_config", empty), ("sweep_overrides", empty)
    ]  # fmt: skip
    assert _params(Sweeper.validate_batch_is_legal) == [("self", empty), ("batch", empty)]
    assert "load_sweep_config(" in inspect.getsource(Sweeper.validate_batch_is_legal)
    sweep = inspect.getsource(BasicSweeper.sweep)
    assert sweep.index("self.validate_batch_is_legal(batch)") < sweep.index("self.launcher.launch(batch")
    assert "load_sweep_config(" in inspect.getsource(hydra_patches.basic_launcher().launch)


@pytest.mark.parametrize(
    ("stack", "jobs"), [("off", 2), ("auto", 2)], ids=["handed back to the basic launcher", "stacked"]
)
def test_each_job_of_a_sweep_is_composed_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stack: str, jobs: int
) -> None:
    """A sweep of ``jobs`` jobs composes ``jobs`` + 1 times (its own config, then each job once: Hydra's validation
    composed each, fedrun's stack planner and the launcher did so again); the jobs run as before."""
    from tests.conftest import main_exit_code

    composed: list[list[str]] = []
    checked = compose_checks._checked

    def counted(loader: Any, overrides: list[str], run_mode: Any, compose: Any) -> Any:
        composed.append(overrides)
        return checked(loader, overrides, run_mode, compose)

    monkeypatch.setattr(compose_checks, "_checked", counted)  # what fedrun's main installs around composition
    sweep = tmp_path / "sweep"
    argv = [
        "fedrun", "-m", "experiment=smoke", "fl.rounds=1", "data.max_train_samples=500", "hardware.threads=1",
        "hardware.engine=vectorised", f"hardware.stack={stack}", "output.plots=false", f"hydra.sweep.dir={sweep}",
        f"cache_dir={tmp_path / 'cache'}", f"seed={','.join(str(i) for i in range(jobs))}",
    ]  # fmt: skip
    assert main_exit_code(monkeypatch, argv) == 0
    assert len(composed) == jobs + 1, composed
    assert len(list(sweep.glob("seed=*/metrics.csv"))) == jobs


def test_the_help_fedrun_wraps_has_its_signature_and_lists_groups_through_the_instance() -> None:
    empty = inspect.Parameter.empty
    assert _params(hydra_core_hydra.Hydra.get_help) == [
        ("self", empty),
        ("help_cfg", empty),
        ("cfg", empty),
        ("args_parser", empty),
        ("resolve", empty),
    ]
    source = inspect.getsource(hydra_core_hydra.Hydra.get_help)
    assert "string.Template(help_cfg.template)" in source and "self.format_config_groups(" in source
    for name in hydra_patches.HELP_GROUP_PLACEHOLDERS:
        assert f"{name}=self.format_config_groups(" in source


@pytest.mark.parametrize(
    "template", ["$FLAGS_HELP\n$CONFIG", "\\${APP_CONFIG_GROUPS}\n$CONFIG", "$HYDRA_CONFIG_GROUPS $$APP_CONFIG_GROUPS"]
)
def test_the_lazy_help_gives_hydras_text_and_lists_groups_only_for_a_template_naming_them(
    monkeypatch: pytest.MonkeyPatch, template: str
) -> None:
    from hydra._internal.utils import get_args_parser

    listed: list[object] = []

    def format_config_groups(self: object, predicate: Any, compact: bool = True) -> str:
        listed.append(predicate)
        return f"groups {len(listed)}"

    monkeypatch.setattr(hydra_core_hydra.Hydra, "format_config_groups", format_config_groups)
    hydra = object.__new__(hydra_core_hydra.Hydra)
    args = (OmegaConf.create({"template": template}), OmegaConf.create({"a": 1}), get_args_parser(), False)
    restore = hydra_patches.saved()
    try:
        hydra_text = hydra_core_hydra.Hydra.get_help(hydra, *args)
        listed.clear()
        hydra_patches.lazy_help_groups()
        hydra_patches.lazy_help_groups()  # idempotent
        assert hydra_core_hydra.Hydra.get_help(hydra, *args) == hydra_text
    finally:
        restore()
    named = "{APP" in template or template.startswith("$HYDRA")  # OmegaConf reads \${...} as ${...}
    assert len(listed) == (2 if named else 0)
    assert "format_config_groups" not in vars(hydra)  # the instance's stand-in is gone


def test_the_mode_fedrun_reads_is_what_hydra_composes_for_and_passes_on() -> None:
    empty = inspect.Parameter.empty
    assert _params(hydra_core_hydra.Hydra.get_mode) == [("self", empty), ("config_name", empty), ("overrides", empty)]
    # Hydra's answer is the composed hydra.mode, None where composing fails; _run_hydra hands it to _run_app
    source = inspect.getsource(hydra_core_hydra.Hydra.get_mode)
    assert "return cfg.hydra.mode" in source and "return None" in source
    assert "hydra.get_mode(config_name=config_name, overrides=overrides)" in inspect.getsource(hydra_utils._run_hydra)


@pytest.mark.parametrize(
    ("providers", "overrides", "unset"),
    [
        (["hydra", "main", "schema"], ["fl.rounds=1", "algorithm=fedprox", "hydra.run.dir=x"], True),
        (["hydra", "main", "schema"], ["hydra.mode=MULTIRUN"], False),
        (["hydra", "main", "schema"], ["+hydra.mode=RUN"], False),
        (["hydra", "main", "schema"], ["++hydra.mode=RUN"], False),
        (["hydra", "main", "schema"], ["~hydra.mode"], False),
        (["hydra", "main", "schema"], ["hydra={mode:MULTIRUN}"], False),
        (["hydra", "main", "schema"], [" hydra.mode =RUN,MULTIRUN"], False),
        (["hydra", "main", "command-line", "schema"], ["fl.rounds=1"], False),  # --config-dir: its presets might
        (["hydra", "main", "schema", "my-searchpath-plugin"], [], False),
    ],
)
def test_the_mode_is_told_without_composing_only_where_nothing_else_can_set_it(
    providers: list[str], overrides: list[str], unset: bool
) -> None:
    assert hydra_patches.mode_is_unset(providers, overrides) is unset


def test_no_config_of_fedrun_sets_hydra_mode() -> None:
    """What lets mode_from_command_line skip Hydra's first composition: no preset of conf/ sets ``hydra.mode``
    (a file's keys land at its package: ``# @package``, else its group's path; conf/config.yaml is global)."""
    conf = REPO / "conf"
    for path in conf.rglob("*.yaml"):
        text = path.read_text()
        header = next((line.split("@package", 1)[1].strip() for line in text.splitlines() if "@package" in line), None)
        group = path.parent.relative_to(conf).as_posix().replace("/", ".")
        package = header if header is not None else ("_global_" if group == "." else group)
        at = [] if package == "_global_" else package.removeprefix("_global_.").split(".")
        if at != ["hydra", "mode"][: len(at)]:
            continue  # its keys land outside hydra (conf/privacy/*.yaml's `mode` is privacy.mode)
        node: Any = OmegaConf.to_container(OmegaConf.create(text)) or {}
        for key in ["hydra", "mode"][len(at) :]:
            node = node.get(key) if isinstance(node, dict) else None
        assert node is None, f"{path.relative_to(REPO)} sets hydra.mode"


def test_a_mode_set_in_a_config_dir_still_decides(tmp_path: Path, run_cli: Any) -> None:
    conf = tmp_path / "myconf" / "experiment"
    conf.mkdir(parents=True)
    (conf / "multi.yaml").write_text("# @package _global_\nhydra:\n  mode: MULTIRUN\n")
    sweep = tmp_path / "sweep"
    r = run_cli(
        "--config-dir", str(tmp_path / "myconf"), "experiment=multi", "fl.rounds=1", "data.max_train_samples=1000",
        "hardware.threads=1", "output.plots=false", run_dir=sweep,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert (sweep / "multirun.yaml").is_file()  # a sweep of one job, as Hydra's own composition says


def test_patches_install_once_and_are_put_back() -> None:
    original_loader, original_reporter = ConfigLoaderImpl.load_configuration, hydra_utils.run_and_report
    original_help, original_mode = hydra_core_hydra.Hydra.get_help, hydra_core_hydra.Hydra.get_mode
    from hydra.plugins.sweeper import Sweeper

    original_validate, original_sweep_load = Sweeper.validate_batch_is_legal, ConfigLoaderImpl.load_sweep_config
    from hydra._internal import config_loader_impl
    from hydra.core.config_store import ConfigStore

    original_defaults, original_store = config_loader_impl.create_defaults_list, ConfigStore.store
    original_merge = ConfigLoaderImpl._compose_config_from_defaults_list
    restore = hydra_patches.saved()
    try:
        hydra_reuse.install()
        patched_defaults = config_loader_impl.create_defaults_list
        assert patched_defaults is not original_defaults and ConfigStore.store is not original_store
        assert ConfigLoaderImpl._compose_config_from_defaults_list is not original_merge
        hydra_reuse.install()  # idempotent
        assert config_loader_impl.create_defaults_list is patched_defaults
        hydra_patches.compose_sweep_jobs_once()
        patched_load = ConfigLoaderImpl.load_sweep_config
        assert patched_load is not original_sweep_load and Sweeper.validate_batch_is_legal is not original_validate
        hydra_patches.compose_sweep_jobs_once()  # idempotent
        assert ConfigLoaderImpl.load_sweep_config is patched_load
        hydra_patches.lazy_help_groups()
        assert hydra_core_hydra.Hydra.get_help is not original_help
        hydra_patches.mode_from_command_line()
        patched_mode = hydra_core_hydra.Hydra.get_mode
        assert patched_mode is not original_mode
        hydra_patches.mode_from_command_line()  # idempotent
        assert hydra_core_hydra.Hydra.get_mode is patched_mode
        compose_checks.install()
        wrapped = ConfigLoaderImpl.load_configuration
        assert wrapped is not original_loader
        compose_checks.install()  # idempotent: the checks never run twice per composition
        assert ConfigLoaderImpl.load_configuration is wrapped

        def reporter(func: object) -> None:
            return None

        hydra_patches.report_with(reporter)
        assert hydra_utils.run_and_report is reporter
    finally:
        restore()
    assert ConfigLoaderImpl.load_configuration is original_loader
    assert hydra_utils.run_and_report is original_reporter
    assert hydra_core_hydra.Hydra.get_help is original_help
    assert hydra_core_hydra.Hydra.get_mode is original_mode
    assert Sweeper.validate_batch_is_legal is original_validate
    assert ConfigLoaderImpl.load_sweep_config is original_sweep_load
    assert config_loader_impl.create_defaults_list is original_defaults
    assert ConfigLoaderImpl._compose_config_from_defaults_list is original_merge
    assert ConfigStore.store is original_store


# OmegaConf's and Hydra's private names fedrun has used or might reach for, read as attributes
PRIVATE_ATTRIBUTES = {
    "_get_node", "_value", "_set_value", "_metadata", "_get_full_key", "_get_parent", "_set_parent", "_content",
    "_is_missing", "_is_none", "_is_interpolation", "_dereference_node", "_maybe_dereference_node", "_get_flag",
    "_set_flag", "_save_config", "_run_hydra", "repository",
}  # fmt: skip
# strings that name a private module or class of Hydra (a _target_ compared as text, an import by name)
PRIVATE_STRINGS = ("hydra._internal", "hydra.core.utils._", "_get_node", "_value()")
# the fence: Hydra's and OmegaConf's private names in cli/, OmegaConf's YAML loader for the run-dir readers in core/
FENCE = ("fedrun/cli/hydra_patches.py", "fedrun/cli/hydra_reuse.py", "fedrun/core/omegaconf_private.py")


def private_uses(path: Path) -> list[str]:
    """Every private Hydra/OmegaConf name ``path`` uses: imports of ``hydra._internal`` or of an underscored name
    of ``hydra``/``omegaconf``, attributes in :data:`PRIVATE_ATTRIBUTES` or underscored attributes of a name
    bound to those packages, and strings (docstrings aside) naming ``hydra._internal`` and the like."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and n.body
        and isinstance(n.body[0], ast.Expr)
        and isinstance(n.body[0].value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom | ast.Import):
            module = node.module or "" if isinstance(node, ast.ImportFrom) else ""
            names = [f"{module}.{a.name}" if module else a.name for a in node.names]
            for name in names:
                root, parts = name.split(".")[0], name.split(".")
                if root in ("hydra", "omegaconf") and any(p.startswith("_") and not p.startswith("__") for p in parts):
                    found.append(f"import {name}")
        elif isinstance(node, ast.Attribute):
            if node.attr in PRIVATE_ATTRIBUTES:
                found.append(f".{node.attr}")
            chain = node
            while isinstance(chain, ast.Attribute):
                chain = chain.value
            if (
                isinstance(chain, ast.Name)
                and chain.id in ("hydra", "omegaconf")
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                found.append(f"{chain.id}...{node.attr}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            found += [f"{s!r} in a string" for s in PRIVATE_STRINGS if s in node.value]
    return found


def test_no_other_module_of_fedrun_uses_a_private_name_of_hydra_or_omegaconf() -> None:
    """The fence: imports, attributes and strings; fedrun/cli/hydra_patches.py is the one module that may."""
    users = {}
    for path in sorted((REPO / "fedrun").rglob("*.py")):
        rel = str(path.relative_to(REPO))
        if rel not in FENCE and private_uses(path):
            users[rel] = sorted(set(private_uses(path)))
    assert users == {}
    assert all(private_uses(REPO / f) for f in FENCE)  # the scan sees what the fence does


def test_the_scan_sees_each_way_in(tmp_path: Path) -> None:
    cases = {
        "import hydra._internal.utils as u\n": "import hydra._internal.utils",
        "from hydra.core.utils import _save_config\n": "import hydra.core.utils._save_config",
        "x = cfg._get_node('a')._value()\n": "._get_node",
        "ok = loader.repository.group_exists('a')\n": ".repository",
        "import hydra\nhydra.core.utils._save_config\n": "hydra..._save_config",
        "T = 'hydra._internal.core_plugins.basic_launcher.BasicLauncher'\n": "'hydra._internal' in a string",
    }
    for code, expected in cases.items():
        f = tmp_path / "m.py"
        f.write_text(code)
        assert any(expected in u for u in private_uses(f)), (code, private_uses(f))
    (tmp_path / "m.py").write_text(
        '"""Mentions hydra._internal in a docstring."""\nimport hydra\nfrom omegaconf import OmegaConf\n'
    )
    assert private_uses(tmp_path / "m.py") == []


def _loader() -> ConfigLoaderImpl:
    from hydra.core.global_hydra import GlobalHydra
    from hydra.initialize import initialize_config_dir

    from fedrun.cli.main import CONF_DIR

    GlobalHydra.instance().clear()
    initialize_config_dir(config_dir=str(CONF_DIR), version_base=None)
    return GlobalHydra.instance().config_loader()  # type: ignore[return-value]


SUBDIR = "${fedrun.job_dir:}"  # conf/config.yaml, as written


def test_the_accessors_answer_on_the_installed_hydra() -> None:
    """Tripwire: each accessor gives the answer fedrun relies on; after an upgrade that moved what it reads this
    fails here, and at run time the accessor raises (never a quiet False: the sweep console would switch off)."""
    from hydra.core.global_hydra import GlobalHydra

    from tests.conftest import compose_cfg

    try:
        loader = _loader()
        assert "fedavg" in hydra_patches.group_options(loader, "algorithm")
        assert hydra_patches.group_exists(loader, "algorithm") and not hydra_patches.group_exists(loader, "nope")
        assert hydra_patches.config_exists(loader, "algorithm/fedavg.yaml")
        assert not hydra_patches.config_exists(loader, "algorithm/nope.yaml")
    finally:
        GlobalHydra.instance().clear()
    cfg = compose_cfg([])
    root = compose_cfg_with_hydra()  # the default sweeper and launcher: Hydra's basic ones, by their private paths
    assert hydra_patches.is_basic_sweeper(OmegaConf.select(root, "hydra.sweeper._target_"))
    assert hydra_patches.is_basic_launcher(OmegaConf.select(root, "hydra.launcher._target_"))
    assert not hydra_patches.is_basic_sweeper("hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper")
    assert hydra_patches.raw_value(root, "hydra.sweep.subdir") == SUBDIR  # unresolved
    assert hydra_patches.is_boolean_field(cfg, "output.plots") and not hydra_patches.is_boolean_field(cfg, "fl.lr")
    assert hydra_patches.raw_value(cfg, "no.such.key") is None


def compose_cfg_with_hydra() -> Any:
    from hydra import compose
    from hydra.core.global_hydra import GlobalHydra
    from hydra.initialize import initialize_config_dir

    from fedrun.cli.main import CONF_DIR

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
            return compose(config_name="config", return_hydra_config=True)
    finally:
        GlobalHydra.instance().clear()


def _stores(repository: Any) -> list[Any]:
    """The config stores the structured-config sources of a config repository hold."""
    return [source.store for source in repository.get_sources() if hasattr(source, "store")]


def test_the_repository_copy_of_each_composition_shares_the_store_and_composes_the_same() -> None:
    """Hydra's per-composition copy of the config repository reaches the ConfigStore (else the patch saves nothing);
    with the patch it holds the store itself, without it a copy; the composed config is the same, and a schema
    registered after a composition's repository was made is found by it (it holds the live store)."""
    import copy
    from dataclasses import dataclass

    from hydra._internal.config_repository import CachingConfigRepository
    from hydra.core.config_store import ConfigStore
    from hydra.core.global_hydra import GlobalHydra

    @dataclass
    class Late:
        late_key: int = 3

    store = ConfigStore.instance()
    restore = hydra_patches.saved()
    try:
        repository = _loader().repository  # type: ignore[attr-defined]
        copied = _stores(CachingConfigRepository(repository).delegate)
        assert copied and all(s is not store for s in copied)  # Hydra copies the store with the repository
        before = compose_cfg_with_hydra()
        hydra_patches.share_config_store()
        hydra_patches.share_config_store()  # idempotent
        assert copy.deepcopy(store) is store
        shared = _stores(CachingConfigRepository(_loader().repository).delegate)  # type: ignore[attr-defined]
        assert shared and all(s is store for s in shared)
        after = compose_cfg_with_hydra()
        for cfg in (before, after):  # the run-time fields Hydra fills in may differ; the job's config may not
            OmegaConf.set_struct(cfg, False)
            cfg.pop("hydra")
        assert OmegaConf.to_yaml(before) == OmegaConf.to_yaml(after)
        loaded = CachingConfigRepository(_loader().repository)  # type: ignore[attr-defined]
        store.store(group="late_test", name="late", node=Late)
        found = loaded.load_config("late_test/late")
        assert found is not None and OmegaConf.select(found.config, "late_key") == 3
    finally:
        GlobalHydra.instance().clear()
        store.repo.pop("late_test", None)
        restore()
    assert "__deepcopy__" not in vars(ConfigStore)  # put back


def test_an_accessor_whose_private_name_is_gone_fails_loudly() -> None:
    from tests.conftest import compose_cfg

    cfg = compose_cfg([])

    class Loader:  # a loader of a Hydra without ``repository``
        pass

    with pytest.raises(hydra_patches.HydraInternalsChanged, match=r"Loader.repository: .*hydra_patches.py"):
        hydra_patches.group_exists(Loader(), "algorithm")  # type: ignore[arg-type]
    with pytest.raises(hydra_patches.HydraInternalsChanged, match="hydra_patches.py"):
        hydra_patches.is_basic_launcher("hydra._internal.core_plugins.basic_launcher_v2.BasicLauncher")

    # what raw_value and is_boolean_field read of a node (OmegaConf's _get_node, _value), gone
    with pytest.raises(hydra_patches.HydraInternalsChanged, match=r"object._get_node: .*hydra_patches.py"):
        hydra_patches._private(object(), "_get_node")  # noqa: SLF001
    assert hydra_patches._private(cfg, "_get_node")("output") is not None  # noqa: SLF001


def test_the_record_writer_fedrun_recognises_has_the_name_and_parameters_it_reads(tmp_path: Path) -> None:
    """A failed write of ``.hydra/*.yaml`` is named from ``hydra.core.utils._save_config``'s frame
    (fedrun/cli/main.py), so the function must keep its name, module and the locals fedrun reads."""
    import hydra.core.utils

    params = list(inspect.signature(hydra.core.utils._save_config).parameters)
    assert params == ["cfg", "filename", "output_dir"]

    def fail(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr("builtins.open", fail)
            hydra.core.utils._save_config(OmegaConf.create({}), "overrides.yaml", tmp_path / ".hydra")
    except OSError as e:
        assert hydra_patches.hydra_record_in(e.__traceback__) == tmp_path / ".hydra" / "overrides.yaml"
    else:
        pytest.fail("the write did not fail")
