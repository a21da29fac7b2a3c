"""Hydra's record of a run, kept before Hydra overwrites it and put back when the job there is refused."""

from __future__ import annotations

from pathlib import Path

from fedrun.storage import kept_records

NAMES = ("config.yaml", "hydra.yaml", "overrides.yaml")


def test_restore_puts_back_the_bytes_and_removes_what_was_absent(tmp_path: Path) -> None:
    folder = tmp_path / ".hydra"
    folder.mkdir()
    (folder / "config.yaml").write_bytes(b"seed: 0\n")
    (folder / "overrides.yaml").write_bytes(b"- seed=0\n")
    kept_records.keep(folder, NAMES)
    (folder / "config.yaml").write_bytes(b"seed: 3\n")  # Hydra's record of the refused job
    (folder / "hydra.yaml").write_bytes(b"hydra: {}\n")
    assert kept_records.restore(folder)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == {
        "config.yaml": b"seed: 0\n",
        "overrides.yaml": b"- seed=0\n",
    }
    assert not kept_records.restore(folder)  # once


def test_a_folder_that_was_absent_is_removed_again(tmp_path: Path) -> None:
    folder = tmp_path / ".hydra"
    kept_records.keep(folder, NAMES)
    folder.mkdir()
    for n in NAMES:
        (folder / n).write_text("x")
    assert kept_records.restore(folder)
    assert not folder.exists()


def test_nothing_kept_or_forgotten_restores_nothing(tmp_path: Path) -> None:
    folder = tmp_path / ".hydra"
    folder.mkdir()
    assert not kept_records.restore(folder)
    (folder / "config.yaml").write_text("a")
    kept_records.keep(folder, NAMES)
    kept_records.forget(folder)
    (folder / "config.yaml").write_text("b")
    assert not kept_records.restore(folder)
    assert (folder / "config.yaml").read_text() == "b"
