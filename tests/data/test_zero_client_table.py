"""The ``zero-client`` table: partitions that would leave clients with no samples, participation that samples no
client, and ``fl.clients`` of 0 or 1 are refused in one line naming the key, or run (a round may aggregate no
client under Bernoulli sampling; one client is FedAvg's centralised limit). Unseen clients (``eval.unseen_clients``)
the partition cannot form are refused naming that key; local test splits of one sample or none warn in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.hostile import Case, ids, run_case

CATEGORY = "zero-client"
UNSEEN = ("eval.local_test=split", "eval.unseen_clients=1000")
TOO_MANY = (
    "eval.unseen_clients: 1000 unseen clients with fl.clients=4 make 1004 clients, more than the partition can form ("
)


def _r(*args: str) -> tuple[str, ...]:
    return (*args, "hydra.run.dir={t}/r")


CASES = [
    Case("clients-0", _r("fl.clients=0"), 2, ("fl.clients: must be > 0, got 0",)),
    Case("clients-1", _r("fl.clients=1"), 0),
    Case(
        "participation-samples-none",
        _r("fl.participation=0.01"),
        2,
        ("fl.participation: 0.01 x 4 clients samples no client per round",),
    ),  # fmt: skip
    Case("participation-0", _r("fl.participation=0"), 2, ("fl.participation: must be in (0.0, 1.0]",)),
    Case("more-clients-than-samples", _r("fl.clients=1000"), 2, ("fl.clients: 1000 clients but only 300 training",)),
    Case(
        "shards-exceed-samples",
        _r("partition=shards", "partition.shards_per_client=100"),
        2,
        ("partition.shards_per_client: 400 shards exceed the 300 samples",),
    ),  # fmt: skip
    # the red team's next round
    Case("clients-negative", _r("fl.clients=-3"), 2, ("fl.clients: must be > 0",)),
    Case("bernoulli-may-sample-none", _r("fl.participation=0.01", "fl.sampling=bernoulli", "fl.rounds=2"), 0),
    Case("dirichlet-alpha-tiny", _r("partition.alpha=1e-6"), 0),  # every client still gets samples
    Case("fewer-samples-than-clients", _r("data.max_train_samples=3"), 2, ("fl.clients: 4 clients but only 3",)),
    Case("label-k-0", _r("partition=label_k", "partition.k=0"), 2, ("partition.k: must be > 0",)),
    Case("batch-0", _r("fl.batch_size=0"), 2, ("fl.batch_size: must be > 0",)),
    Case(
        "clients-1-participation-tiny",
        _r("fl.clients=1", "fl.participation=0.5"),
        2,
        ("fl.participation: 0.5 x 1 clients samples no client",),
    ),  # fmt: skip
    # round four (issue 49): unseen clients the partition cannot form are eval.unseen_clients' fault
    Case(
        "unseen-clients-exceed-dirichlet",
        _r(*UNSEEN),
        2,
        (f"{TOO_MANY}partition.min_size: 1004 clients x min_size 10 exceeds the 300 training samples)",),
    ),  # fmt: skip
    Case(
        "unseen-clients-exceed-iid",
        _r(*UNSEEN, "partition=iid"),
        2,
        (f"{TOO_MANY}data.max_train_samples: the 1004 clients of partition=iid hold 300",),
    ),  # fmt: skip
    Case(
        "unseen-clients-exceed-shards",
        _r(*UNSEEN, "partition=shards"),
        2,
        (f"{TOO_MANY}partition.shards_per_client: 2008 shards exceed the 300 samples)",),
    ),  # fmt: skip
    Case(
        "unseen-clients-and-clients-too-many",
        _r("eval.local_test=split", "eval.unseen_clients=2", "fl.clients=1000"),
        2,
        ("fl.clients: 1000 clients but only 300 training",),
    ),  # fmt: skip
    Case(
        "local-test-one-sample-each-warns",
        _r("eval.local_test=split", "partition=iid", "fl.clients=100"),
        0,
        ("fedrun: warning: eval.local_test: 100 of 100 clients' local test splits hold one sample or none",),
    ),  # fmt: skip
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_zero_client(
    case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    err = run_case(case, tmp_path, monkeypatch, capsys)
    if case.code == 0:  # a warning is one line, and only where the case says so
        assert err.count("fedrun: warning: ") == err.count("\n") == ("warns" in case.id), err
    if case.code == 2 and (tmp_path / "r").exists():
        assert sorted(p.name for p in (tmp_path / "r").iterdir() if p.name != ".hydra") == ["error.txt"]
