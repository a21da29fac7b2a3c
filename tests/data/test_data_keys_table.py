"""The ``data-keys`` table: data config keys with the wrong name, value or shape (``data.*`` unknowns, deletions,
sizes) are one line naming the key (exit 2); LEAF json files with the wrong keys or shapes are one DataError line
naming the file. More damaged data files are in tests/data/test_fault_table.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedrun.core.errors import DataError
from tests.data.test_fault_table import Fault, leaf, leaf_blob, load_leaf, load_shakespeare_, shakespeare
from tests.hostile import Case, ids, run_case

CATEGORY = "data-keys"


def _r(*args: str) -> tuple[str, ...]:
    return (*args, "hydra.run.dir={t}/r")


OVERRIDES = [
    Case("added-unknown-key", _r("+data.bogus=1"), 2, ("data.bogus: unknown key; valid keys: augment",)),
    Case("unknown-key", _r("data.bogus=1"), 2, ("data.bogus",)),
    Case("deleted-root", _r("~data.root"), 2, ("data.root: cannot be deleted",)),
    Case("name-overridden", _r("data.name=cifar10"), 2, ("data.name: is set by the data option",)),
    Case("negative-size", _r("data.max_train_samples=-5"), 2, ("data.max_train_samples: must be > 0",)),
    # the red team's next round
    Case("image-size-below-the-images", _r("data.image_size=3"), 2, ("data.image_size: 3 is smaller than fmnist's",)),
    Case("test-size-0", _r("data.max_test_samples=0"), 2, ("data.max_test_samples: must be > 0",)),
    Case("size-a-list", _r("data.max_train_samples=[1,2]"), 2, ("data.max_train_samples",)),
    Case("standin-not-a-bool", _r("data.standin=maybe"), 2, ("data.standin",)),
]

LEAF_KEYS = [
    Fault(
        "leaf no users key", lambda r: leaf(r, json.dumps({"user_data": {"u": {"x": ["a"], "y": ["b"]}}})), load_leaf
    ),
    Fault("leaf no user_data key", lambda r: leaf(r, json.dumps({"users": ["u"]})), load_leaf),
    Fault("leaf user_data a list", lambda r: leaf(r, json.dumps({"users": ["u"], "user_data": [1]})), load_leaf),
    # the red team's next round
    Fault(
        "leaf user without x",
        lambda r: leaf(r, json.dumps({"users": ["u"], "user_data": {"u": {"y": ["b"]}}})),
        load_leaf,
    ),  # fmt: skip
    Fault(
        "leaf x and y swapped names",
        lambda r: leaf(r, json.dumps({"users": ["u"], "user_data": {"u": {"X": ["a"], "Y": ["b"]}}})),
        load_leaf,
    ),  # fmt: skip
    Fault("leaf y a string", lambda r: leaf(r, leaf_blob(y="d")), load_leaf),
    Fault(
        "shakespeare y of two characters",
        lambda r: shakespeare(r, json.dumps({"users": ["a"], "user_data": {"a": {"x": ["a" * 80], "y": ["bc"]}}})),
        load_shakespeare_,
    ),  # fmt: skip
]

CASES = [*OVERRIDES, *LEAF_KEYS]


@pytest.mark.parametrize("case", OVERRIDES, ids=ids(OVERRIDES))
def test_data_keys(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    run_case(case, tmp_path, monkeypatch, capsys)


@pytest.mark.parametrize("fault", LEAF_KEYS, ids=[f.name for f in LEAF_KEYS])
def test_leaf_keys(tmp_path: Path, fault: Fault) -> None:
    bad = fault.write(tmp_path)
    with pytest.raises(DataError) as e:
        fault.load(tmp_path)
    # Shakespeare checks windows after merging a split's files: it names the split's folder and the user
    assert str(bad) in str(e.value) or f"{bad.parent}: user " in str(e.value), str(e.value)
    assert "\n" not in str(e.value)
