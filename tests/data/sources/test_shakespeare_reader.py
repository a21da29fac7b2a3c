"""Shakespeare: tiny LEAF json files (users / num_samples / user_data with 80-char windows)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedrun.data.sources.shakespeare import ALL_LETTERS, ShakespeareParams, load_shakespeare
from fedrun.errors import DataError

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


def test_shakespeare_missing(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="preprocess.sh"):
        load_shakespeare(ShakespeareParams(root=str(tmp_path)))
