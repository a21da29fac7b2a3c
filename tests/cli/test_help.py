"""``fedrun --help`` lists each config group's options with their one-line docs; ``fedrun --version`` is fedrun's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fedrun import __version__
from fedrun.cli import compose_checks
from fedrun.cli import help as cli_help
from fedrun.config import location
from tests.conftest import compose_cfg, main_exit_code

REPO = Path(__file__).resolve().parents[2]


def test_version_is_fedruns_not_hydras(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    assert main_exit_code(monkeypatch, ["fedrun", "--version"]) == 0
    assert capsys.readouterr().out == f"fedrun {__version__}\n"


def test_version_from_the_console_script_entry_point() -> None:
    """``python -m fedrun.cli --version`` (fedrun/cli/__main__.py) answers before the heavy imports."""
    proc = subprocess.run(
        [sys.executable, "-m", "fedrun.cli", "--version"], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert (proc.returncode, proc.stdout) == (0, f"fedrun {__version__}\n"), proc.stderr


def test_help_lists_every_option_of_every_group_with_its_doc(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    assert main_exit_code(monkeypatch, ["fedrun", "--help", "algorithm=fedprox"]) == 0
    out = capsys.readouterr().out
    flat = " ".join(out.split())  # a doc wraps under its column
    for group, _ in cli_help.GROUPS:
        assert f"\n{group}: " in out, group
        for path in (location.CONF_DIR / group).glob("*.yaml"):
            doc = cli_help.header_doc(path)
            assert doc, f"{path} has no header comment"
            assert f" {path.stem} " in out and " ".join(doc.split()) in flat, path
    assert "  * fedprox " in out and "  * fedavg " not in out  # the option this command line composes
    assert "== Config (override any key" in out and "mu: 0.01" in out  # Hydra's $CONFIG, of this command line
    assert "Show Hydra's version" not in out  # Hydra's flags (its --version line) are on --hydra-help


def test_a_new_option_appears_by_itself(tmp_path: Path) -> None:
    (tmp_path / "algorithm").mkdir()
    (tmp_path / "algorithm" / "fedtoy.yaml").write_text("# FedToy: a toy method, $5 a round.\nlr: 1\n")
    text = cli_help.groups_text({"algorithm": "fedtoy"}, conf_dir=tmp_path)
    assert text == "algorithm: the federated method\n  * fedtoy  FedToy: a toy method, $5 a round."


def test_a_yaml_without_header_falls_back_to_the_registry(tmp_path: Path) -> None:
    (tmp_path / "algorithm").mkdir()
    (tmp_path / "algorithm" / "fedavg.yaml").write_text("defaults:\n  - _self_\n")
    doc = cli_help.group_options("algorithm", conf_dir=tmp_path)[0][1]
    assert doc and doc == cli_help.registry_doc("algorithm", "fedavg")


def test_hydra_help_and_cfg_stay_hydras(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    assert main_exit_code(monkeypatch, ["fedrun", "--hydra-help"]) == 0
    assert "Hydra (1.3" in capsys.readouterr().out
    assert main_exit_code(monkeypatch, ["fedrun", "--cfg", "job", "algorithm=fedprox"]) == 0
    out = capsys.readouterr().out
    assert "name: fedprox" in out and "help_groups" not in out


def test_help_lists_every_config_group() -> None:
    """Issue 51: privacy and compression appeared only as keys of the config dump."""
    folders = {p.name for p in location.CONF_DIR.iterdir() if p.is_dir() and any(p.glob("*.yaml"))} - {"hydra"}
    listed = {group for group, _ in cli_help.GROUPS}
    assert folders <= listed and {"privacy", "compression", "system"} <= listed


@pytest.mark.parametrize("width", [60, 100, 160])
def test_a_long_doc_wraps_between_words_under_its_column(width: int) -> None:
    """Issue 51: a terminal cut ``apfl``'s doc at its edge, mid-word (``the paper's adaptive al``)."""
    text = cli_help.groups_text(width=width)
    lines = text.splitlines()
    if width >= 100:  # narrower, the presets' 39-character names leave a doc column under MIN_DOC_WIDTH
        assert max(len(line) for line in lines) <= width
    apfl = next(i for i, line in enumerate(lines) if line.startswith("    apfl "))
    column = lines[apfl].index("APFL")
    block = [lines[apfl][column:]]
    for line in lines[apfl + 1 :]:
        if not line.startswith(" " * column):
            break
        block.append(line[column:])
    assert " ".join(block) == cli_help.group_options("algorithm")[0][1]  # its words, whole and in order
    assert len(block) > 1 or width == 160


def test_the_configuration_page_names_every_group() -> None:
    table = (REPO / "docs" / "configuration.md").read_text()
    for group, _ in cli_help.GROUPS:
        if not group.startswith("hydra/"):
            assert f"| `{group}` |" in table, group


def test_composing_does_not_list_the_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    """OmegaConf's merges evaluate ``hydra.help.template``'s interpolations while Hydra composes (Hydra's own
    composition lists the groups, reading every option's header, several times); under fedrun's compose checks
    they give '' there, and ``--help``, which reads the template after composing, still lists them (above)."""
    calls: list[object] = []

    def groups_text(*args: object, **kwargs: object) -> str:
        calls.append(args)
        return ""

    monkeypatch.setattr(cli_help, "groups_text", groups_text)
    compose_cfg(["algorithm=fedprox"])  # Hydra's own composition (tests/conftest.py puts fedrun's checks back)
    assert calls, "Hydra's merges no longer evaluate the help template: the guard saves nothing"
    calls.clear()
    compose_checks.install()
    compose_cfg(["algorithm=fedprox"])
    assert calls == []
