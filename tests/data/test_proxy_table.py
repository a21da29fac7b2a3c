"""The ``proxy`` table: the server's proxy set (FedLAW, FedDF: ``proxy.*``) of size 0, larger than the test split,
negative or malformed is refused in one line naming the key; edge sizes that leave a proxy and an evaluation
split run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.hostile import Case, ids, run_case

CATEGORY = "proxy"
TAKES_ALL = "takes all 100 test samples for the server's proxy set, leaving none to evaluate on"


def _r(*args: str) -> tuple[str, ...]:
    return (*args, "hydra.run.dir={t}/r")


CASES = [
    Case(
        "fedlaw-size-0",
        _r("algorithm=fedlaw", "proxy.per_class=0"),
        2,
        ("proxy.per_class: FedLAW trains on a server proxy set; set it > 0",),
    ),  # fmt: skip
    Case("feddf-size-0", _r("algorithm=feddf", "proxy.per_class=0"), 2, ("proxy.per_class: FedDF trains on",)),
    Case(
        "larger-than-the-data",
        _r("algorithm=fedlaw", "proxy.per_class=100000"),
        2,
        ("proxy.per_class: 100000 per class " + TAKES_ALL,),
    ),  # fmt: skip
    Case("negative", _r("algorithm=fedlaw", "proxy.per_class=-1"), 2, ("proxy.per_class: must be >= 0",)),
    Case("rho-below-1", _r("algorithm=fedlaw", "proxy.rho=0.5"), 2, ("proxy.rho: must be >= 1",)),
    Case("batch-0", _r("algorithm=fedlaw", "proxy.batch_size=0"), 2, ("proxy.batch_size: must be > 0",)),
    Case("missing-for-fedavg-is-fine", _r("proxy.per_class=0"), 0),
    # the red team's next round
    Case("nearly-the-test-split", _r("algorithm=fedlaw", "proxy.per_class=10", "algorithm.server_epochs=1"), 0),
    # 100 test samples of 10 classes: classes with fewer than 10 give all theirs, the rest is evaluated on
    Case("unknown-key", _r("algorithm=fedlaw", "proxy.size=5"), 2, ("proxy.size",)),
    Case("deleted", _r("algorithm=fedlaw", "~proxy"), 2, ("proxy",)),
    Case("rho-nan", _r("algorithm=fedlaw", "proxy.rho=nan"), 2, ("proxy.rho",)),
    Case("one-per-class", _r("algorithm=fedlaw", "proxy.per_class=1", "algorithm.server_epochs=1"), 0),
    Case(
        "long-tail-to-one", _r("algorithm=fedlaw", "proxy.per_class=2", "proxy.rho=1e9", "algorithm.server_epochs=1"), 0
    ),  # fmt: skip  classes past the first keep int(2 / rho^(k/9)) = 0 samples
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_proxy(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    run_case(case, tmp_path, monkeypatch, capsys)
    if case.code == 2 and (tmp_path / "r").exists():
        assert sorted(p.name for p in (tmp_path / "r").iterdir() if p.name != ".hydra") == ["error.txt"]
