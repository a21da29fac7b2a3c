"""The yaml-bomb table: YAML whose aliases explode is refused in bounded time and memory, in one line naming
the file, wherever fedrun reads YAML (its own reads, OmegaConf's, Hydra's config dirs, ``resume=``)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from fedrun.core import safe_yaml
from fedrun.core.errors import ConfigError
from fedrun.core.safe_yaml import MAX_ALIAS_NODES, YamlBomb, load_yaml
from tests.conftest import REPO

BOUND_S = 5.0  # every refusal takes milliseconds; the old code took minutes, so this bound cannot flake


def _laughs(levels: int, width: int, flow: bool = True) -> str:
    """The classic: level k is ``width`` aliases of level k-1, so the last one expands to width**levels."""
    lines = [f"l0: &l0 [{', '.join(['lol'] * width)}]"]
    for k in range(1, levels):
        items = ", ".join([f"*l{k - 1}"] * width)
        lines.append(f"l{k}: &l{k} [{items}]" if flow else f"l{k}: &l{k}\n" + f"  - *l{k - 1}\n" * width)
    return "\n".join(lines) + "\n"


def _mapping_laughs(levels: int) -> str:
    """The same with mappings: each level a mapping of ten keys naming the level below."""
    lines = ["m0: &m0 {a: lol, b: lol, c: lol, d: lol, e: lol, f: lol, g: lol, h: lol, i: lol, j: lol}"]
    for k in range(1, levels):
        items = ", ".join(f"k{j}: *m{k - 1}" for j in range(10))
        lines.append(f"m{k}: &m{k} {{{items}}}")
    return "\n".join(lines) + "\n"


def _wide(items: int, copies: int) -> str:
    """No nesting: one long list named ``copies`` times (quadratic, not exponential)."""
    return f"a: &a [{', '.join(['x'] * items)}]\nb: [{', '.join(['*a'] * copies)}]\n"


BILLION_LAUGHS = _laughs(9, 9)
# (case, document): each is refused
YAML_BOMB = [
    ("billion-laughs", BILLION_LAUGHS),  # 9^9 = 387 million strings from 342 bytes
    ("billion-laughs-block-style", _laughs(9, 9, flow=False)),
    ("mapping-laughs", _mapping_laughs(9)),
    (
        "merge-key-laughs",
        "a: &a {x: 1, y: 2}\n"
        + "".join(
            f"b{i}: &b{i} {{<<: *{'a' if i == 0 else f'b{i - 1}'}, "
            f"p: *{'a' if i == 0 else f'b{i - 1}'}, q: *{'a' if i == 0 else f'b{i - 1}'}}}\n"
            for i in range(30)
        ),
    ),  # fmt: skip
    ("recursive-alias", "a: &a [1, *a]\n"),
    ("recursive-mapping-alias", "a: &a {self: *a}\n"),
    ("quadratic", _wide(200, 200)),  # 40,000 nodes from 1.4 KB
    (
        "laughs-under-a-config",
        "# @package _global_\nfl:\n  rounds: 3\nextra:\n" + "".join(f"  {ln}\n" for ln in _laughs(8, 10).splitlines()),
    ),
    # the red team's next round
    ("binary-laughs", _laughs(30, 2)),  # 2^30 strings from 30 short lines
    ("wide-laughs", _laughs(3, 1000)),  # 10^9 strings from a few KB
    (
        "laughs-under-tags",
        "tags:\n  a: &a ["
        + ", ".join(["x"] * 100)
        + "]\n  b: &b {"
        + ", ".join(f"k{i}: *a" for i in range(100))
        + "}\n  c: {"
        + ", ".join(f"k{i}: *b" for i in range(100))
        + "}\n",
    ),  # fmt: skip  a million nodes under the free keys
]
CATEGORY = "yaml-bomb"
CASES = YAML_BOMB
# (case, document, loaded): aliases that stay small are YAML, and are allowed
YAML_OK = [
    ("small-alias", "x: &x {a: 1}\ny: *x\n", {"x": {"a": 1}, "y": {"a": 1}}),
    (
        "merge-key",
        "base: &b {lr: 0.1}\nrun: {<<: *b, rounds: 2}\n",
        {"base": {"lr": 0.1}, "run": {"lr": 0.1, "rounds": 2}},
    ),
    ("no-alias-large", "\n".join(f"k{i}: {i}" for i in range(20_000)), {f"k{i}": i for i in range(20_000)}),
    ("empty", "", None),
]


def test_the_billion_laughs_document_is_under_1_kb_and_explodes() -> None:
    assert len(BILLION_LAUGHS.encode()) < 1024
    root = yaml.compose(BILLION_LAUGHS, Loader=yaml.SafeLoader)
    assert safe_yaml.expanded_size(root) > 10**8 > 100 > safe_yaml.distinct_size(root)


@pytest.mark.parametrize(("case", "text"), YAML_BOMB, ids=[c[0] for c in YAML_BOMB])
def test_a_yaml_bomb_is_refused_in_one_line_naming_the_file(case: str, text: str) -> None:
    start = time.monotonic()
    with pytest.raises(YamlBomb) as e:
        load_yaml(text, f"run/{case}.yaml")
    assert time.monotonic() - start < BOUND_S
    line = str(e.value)
    assert "\n" not in line and line.startswith(f"run/{case}.yaml: YAML aliases expand")
    assert isinstance(e.value, ConfigError)  # bad input: exit 2 wherever it surfaces


@pytest.mark.parametrize(("case", "text"), YAML_BOMB, ids=[c[0] for c in YAML_BOMB])
def test_a_yaml_bomb_is_refused_by_omegaconf_once_installed(tmp_path: Path, case: str, text: str) -> None:
    """Hydra reads config files with ``OmegaConf.load``: after :func:`safe_yaml.install` it refuses them too."""
    safe_yaml.install()
    f = tmp_path / "config.yaml"
    f.write_text(text)
    start = time.monotonic()
    with pytest.raises(YamlBomb, match=f"^{f}: YAML aliases expand"):
        OmegaConf.load(f)
    with pytest.raises(YamlBomb):
        OmegaConf.create(text)
    assert time.monotonic() - start < BOUND_S


@pytest.mark.parametrize(("case", "text", "loaded"), YAML_OK, ids=[c[0] for c in YAML_OK])
def test_yaml_with_small_aliases_still_loads(case: str, text: str, loaded: object) -> None:
    assert load_yaml(text, "x.yaml") == loaded
    assert load_yaml(text, "x.yaml", plain=True) == loaded
    safe_yaml.install()
    assert OmegaConf.to_container(OmegaConf.create(text)) == (loaded if loaded is not None else {})


def test_the_bound_is_on_nodes_added_by_aliases() -> None:
    assert load_yaml(_wide(100, MAX_ALIAS_NODES // 101), "x.yaml")["b"][0] == ["x"] * 100  # just under
    with pytest.raises(YamlBomb):
        load_yaml(_wide(100, MAX_ALIAS_NODES // 101 + 2), "x.yaml")


def test_malformed_yaml_is_one_line_naming_the_file() -> None:
    with pytest.raises(ConfigError) as e:
        load_yaml("a: [1, 2\nb: *nowhere\n", "sweep/index.yaml")
    assert str(e.value).startswith("sweep/index.yaml: not valid YAML: ") and "\n" not in str(e.value)


def test_omegaconf_floats_unless_plain() -> None:
    """``load_yaml`` parses as OmegaConf does (``1e-3`` a float), ``plain=True`` as ``yaml.safe_load``."""
    assert load_yaml("lr: 1e-3", "x.yaml") == {"lr": 0.001}
    assert load_yaml("lr: 1e-3", "x.yaml", plain=True) == yaml.safe_load("lr: 1e-3") == {"lr": "1e-3"}


def test_a_text_is_parsed_once_and_each_read_gets_its_own_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hydra reads a config file again on every composition: its text is parsed (and checked) once, each read
    getting data of its own; the same text read by another loader, or another text, is parsed on its own."""
    parses: list[str] = []
    check = safe_yaml.check_node

    def counted(node: yaml.Node, source: str) -> None:
        parses.append(source)
        check(node, source)

    monkeypatch.setattr(safe_yaml, "PARSED", {})
    monkeypatch.setattr(safe_yaml, "check_node", counted)
    safe_yaml.install()
    f = tmp_path / "config.yaml"
    f.write_text("lr: 1e-3\nsizes: [1, 2]\n")
    first, second = OmegaConf.load(f), OmegaConf.load(f)
    assert parses == [str(f)] and first == second == {"lr": 0.001, "sizes": [1, 2]}
    data = load_yaml(f.read_text(), "x.yaml")
    data["sizes"].append(3)  # a read's data is its own: the memo's copy, and the next read's, are untouched
    assert load_yaml(f.read_text(), "x.yaml") == {"lr": 0.001, "sizes": [1, 2]} and len(parses) == 1
    assert load_yaml(f.read_text(), "x.yaml", plain=True) == {"lr": "1e-3", "sizes": [1, 2]}  # yaml's SafeLoader
    f.write_text("lr: 0.5\n")
    assert OmegaConf.load(f) == {"lr": 0.5} and len(parses) == 3


def test_a_malformed_file_read_twice_names_the_file_each_time(tmp_path: Path) -> None:
    safe_yaml.install()
    f = tmp_path / "bad.yaml"
    f.write_text("a: [1, 2\nb: 3\n")
    for _ in range(2):  # a refusal is never memoised
        with pytest.raises(yaml.YAMLError, match=str(f)):
            OmegaConf.load(f)


def test_install_is_idempotent() -> None:
    from omegaconf import _utils

    safe_yaml.install()
    first = _utils.get_yaml_loader.__wrapped__
    safe_yaml.install()
    assert _utils.get_yaml_loader.__wrapped__ is first


def _fedrun(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "fedrun.cli", *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("where", ["config-dir experiment", "resume= config.yaml"])
def test_fedrun_refuses_a_bomb_in_one_line_exit_2(tmp_path: Path, where: str) -> None:
    """Before: a config dir's experiment hung; ``fedrun resume=`` hung for over 120 s."""
    if where == "resume= config.yaml":
        run_dir = tmp_path / "run"
        run_dir.mkdir()
        bomb = run_dir / "config.yaml"
        bomb.write_text(BILLION_LAUGHS)
        args = [f"resume={run_dir}"]
    else:
        (tmp_path / "conf" / "experiment").mkdir(parents=True)
        bomb = tmp_path / "conf" / "experiment" / "bomb.yaml"
        bomb.write_text("# @package _global_\n" + BILLION_LAUGHS)
        args = ["--config-dir", str(tmp_path / "conf"), "experiment=bomb", f"hydra.run.dir={tmp_path / 'run'}"]
    start = time.monotonic()
    res = _fedrun(args, tmp_path)
    assert time.monotonic() - start < 60  # the process's start-up; the refusal itself takes milliseconds
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{bomb}: YAML aliases expand" in lines[0], res.stderr
    assert "torch" not in res.stderr


def test_omegaconf_looks_its_loader_up_where_install_replaces_it() -> None:
    """:func:`safe_yaml.install` replaces a private name of omegaconf: an omegaconf release that moves it fails
    here, by name (the bomb tests above would fail too, less clearly)."""
    import inspect

    import omegaconf.basecontainer
    from omegaconf import _utils

    assert "from ._utils import get_yaml_loader" in inspect.getsource(OmegaConf.load)
    assert "from ._utils import get_yaml_loader" in inspect.getsource(OmegaConf._create_impl)  # OmegaConf.create
    assert hasattr(_utils, "get_yaml_loader") and hasattr(omegaconf.basecontainer, "get_yaml_loader")


def _read_run_config(run: Path) -> object:
    from fedrun.storage.rundir import RunDir, UnreadableRunFile

    (run / "config.yaml").write_text(BILLION_LAUGHS)
    with pytest.raises(UnreadableRunFile, match="config.yaml: .*alias"):
        RunDir(run).read_config()
    return True


def _read_sweep_index(sweep: Path) -> object:
    from fedrun.run.sweep_index import INDEX_FILE, read_index

    (sweep / INDEX_FILE).write_text(BILLION_LAUGHS)
    return read_index(sweep) == {}  # unreadable: the sweep rewrites its index


def _read_report_labels(run: Path) -> object:
    from fedrun.report.collect import _hydra_overrides

    (run / ".hydra").mkdir()
    (run / ".hydra" / "overrides.yaml").write_text(BILLION_LAUGHS)
    return _hydra_overrides(run) == {}  # labels only: the run is still read from its config


# yaml-bomb: the run files fedrun reads without OmegaConf, each bounded too
@pytest.mark.parametrize("reader", [_read_run_config, _read_sweep_index, _read_report_labels])
def test_run_files_with_a_bomb_are_refused_in_bounded_time(reader, tmp_path: Path) -> None:  # noqa: ANN001
    t0 = time.perf_counter()
    assert reader(tmp_path)
    assert time.perf_counter() - t0 < BOUND_S
