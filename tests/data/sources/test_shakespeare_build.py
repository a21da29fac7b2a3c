"""The Shakespeare cache under data.root: built once, key-checked, rebuilt when the texts change; and the real
package's plays when it is installed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fedrun.data.sources import shakespeare_build, shakespeare_plays
from fedrun.data.sources.shakespeare import ShakespeareParams, load_shakespeare
from fedrun.data.sources.shakespeare_build import CACHE_DIR, leaf_user, load_roles
from tests.data.sources.test_shakespeare_reader import KENT, text_of, write_texts


@pytest.fixture
def texts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = write_texts(tmp_path / "texts")
    monkeypatch.setattr(shakespeare_plays, "texts_dir", lambda: folder)
    return folder


def test_cache_is_built_once_and_rebuilt_when_the_texts_change(
    texts: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "data"
    first = load_roles(root)
    cache = root / CACHE_DIR
    assert (cache / "roles.npz").is_file() and (cache / "roles.json").is_file()
    assert json.loads((cache / "roles.json").read_text())["key"] == first.meta["key"]
    kent = first.names.index("THE_TRAGEDY_OF_KING_LEAR_KENT")
    assert first.text(kent).tolist() == shakespeare_plays.encode(text_of(KENT))[0].tolist()

    built = []
    real_build = shakespeare_build.build_roles
    monkeypatch.setattr(shakespeare_build, "build_roles", lambda *a: built.append(1) or real_build(*a))
    again = load_roles(root)  # read from the cache, not parsed again
    assert built == [] and again.names == first.names and np.array_equal(again.codes, first.codes)

    lear = texts / "lear_gut.txt"
    lear.write_text(lear.read_text().replace("Cornwall.", "Cornwall, sir."))
    changed = load_roles(root)  # the key (a hash of every text read) no longer matches: rebuilt
    assert built == [1] and changed.meta["key"] != first.meta["key"]
    assert len(changed.text(changed.names.index("THE_TRAGEDY_OF_KING_LEAR_KENT"))) == len(first.text(kent)) + 5

    (cache / "roles.npz").write_bytes(b"not a zip")  # damaged: rebuilt too
    load_roles(root)
    assert built == [1, 1]


def test_unwritable_root_builds_in_memory(texts: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    roles = load_roles(blocker)  # data.root is a file: no cache can be written under it
    assert roles.meta["cache"] is None and len(roles.names) == 3
    assert "cannot write the Shakespeare cache" in capsys.readouterr().err


def test_leaf_user_names() -> None:
    # LEAF's play_and_character: spaces become '_', then each run of non-word characters one '_' ('.' and the
    # space after it: two)
    assert leaf_user("THE TRAGEDY OF KING LEAR", "ALB. AND CORN") == "THE_TRAGEDY_OF_KING_LEAR_ALB__AND_CORN"
    assert leaf_user("ALL'S WELL THAT ENDS WELL", "FIRST LORD") == "ALL_S_WELL_THAT_ENDS_WELL_FIRST_LORD"


def test_make_data_entry_point(texts: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert shakespeare_build.main(["--root", str(tmp_path / "data")]) == 0
    out = capsys.readouterr().out
    assert "2 plays" in out and "3 roles" in out and (tmp_path / "data" / CACHE_DIR / "roles.npz").is_file()


REAL = shakespeare_plays.texts_dir()


@pytest.mark.skipif(REAL is None, reason="the shakespeare package is not installed (make install installs it)")
def test_the_installed_package(tmp_path: Path) -> None:
    d = load_shakespeare(ShakespeareParams(root=str(tmp_path), roles=143, split="random"))
    st = d.stats
    # 37 plays of the modern-spelling edition; LEAF's 1994 Complete Works: 1,129 roles, 4,226,158 windows
    assert st["plays"] == 37 and st["package"] == "shakespeare 0.6"
    assert 1100 <= st["all_roles"] <= 1200 and 4.0e6 <= st["all_samples"] <= 4.4e6
    assert st["roles"] == 143 == len(d.natural_clients) and st["samples"] == len(d.train) + len(d.test)
    roles = load_roles(tmp_path)
    kent = roles.text(roles.names.index("THE_TRAGEDY_OF_KING_LEAR_KENT"))
    start = "I thought the King had more affected the Duke of Albany than Cornwall. Is not this your son, my lord?"
    assert "".join(shakespeare_plays.ALL_LETTERS[i] for i in kent[: len(start)]) == start
    hamlet = [n for n in roles.names if n.startswith("HAMLET__PRINCE_OF_DENMARK_")]  # "HAMLET, PRINCE OF ..."
    assert {"HAMLET__PRINCE_OF_DENMARK_HAM", "HAMLET__PRINCE_OF_DENMARK_HOR"} <= set(hamlet)


@pytest.mark.parametrize("damage", ["truncated-half", "truncated-header", "member-bytes-flipped", "empty"])
def test_a_damaged_roles_npz_is_rebuilt(
    texts: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    """A cut or garbled roles.npz (a full disk, a copy stopped half way) is rebuilt, not a BadZipFile (issue 32)."""
    root = tmp_path / "data"
    first = load_roles(root)
    npz = root / CACHE_DIR / "roles.npz"
    data = npz.read_bytes()
    if damage == "truncated-half":
        npz.write_bytes(data[: len(data) // 2])
    elif damage == "truncated-header":
        npz.write_bytes(data[:40])
    elif damage == "member-bytes-flipped":
        middle = len(data) // 3
        npz.write_bytes(data[:middle] + bytes(b ^ 0xFF for b in data[middle : middle + 64]) + data[middle + 64 :])
    else:
        npz.write_bytes(b"")
    built = []
    real_build = shakespeare_build.build_roles
    monkeypatch.setattr(shakespeare_build, "build_roles", lambda *a: built.append(1) or real_build(*a))
    again = load_roles(root)
    assert built == [1] and again.names == first.names and np.array_equal(again.codes, first.codes)
    assert load_roles(root).names == first.names and built == [1]  # the rebuilt cache reads again
