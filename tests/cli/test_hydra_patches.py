"""fedrun's patches of Hydra's private API (fedrun/cli/hydra_patches.py) against the installed hydra-core: a
hydra-core upgrade that moves, renames or re-signs any patched name fails here, by name, before a user sees it."""

from __future__ import annotations

import ast
import importlib.metadata
import inspect
from pathlib import Path

import hydra._internal.hydra as hydra_core_hydra
import hydra._internal.utils as hydra_utils
import pytest
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf
from packaging.specifiers import SpecifierSet

from fedrun.cli import compose_checks, hydra_patches
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


def test_patches_install_once_and_are_put_back() -> None:
    original_loader, original_reporter = ConfigLoaderImpl.load_configuration, hydra_utils.run_and_report
    restore = hydra_patches.saved()
    try:
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


def test_no_other_module_of_fedrun_touches_hydra_internals() -> None:
    root = REPO / "fedrun"
    users = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if any(n.startswith("hydra._internal") for n in names):
                users.add(str(Path(path).relative_to(REPO)))
    assert users == {"fedrun/cli/hydra_patches.py"}


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
