"""The ``resources`` table (issue 32): a run the machine cannot hold is refused at validation in one line naming
the field, before anything is allocated: a model of tens of GB, a cohort whose uploads, or a method whose
per-client state, need more memory than there is (fedrun/config/resources.py), and more threads than make sense
(fedrun/host/threads.py). The machine is pinned to 16 GB (``memory_ceiling``), so each case is decided the same
way everywhere."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from fedrun.config.schema import RunSpec
from fedrun.host.threads import max_threads
from tests.hostile import Case, ids, run_case

CATEGORY = "resources"
MEMORY = "the run needs at least"


def _r(*args: str) -> tuple[str, ...]:
    return (*args, "hydra.run.dir={t}/r")


CASES = [
    Case("hidden-40-gb", _r("model.hidden=[100000,100000]"), 2, ("model.hidden: " + MEMORY, "(16.0 GB)")),
    Case("hidden-one-wide-layer", _r("model.hidden=[20000000]"), 2, ("model.hidden: " + MEMORY,)),
    Case("hidden-many-layers", _r("model.hidden=[30000,30000,30000,30000]"), 2, ("model.hidden: " + MEMORY,)),
    Case(
        "cohort-uploads", _r("model.hidden=[20000,20000]", "fl.clients=100"), 2,
        ("fl.participation: " + MEMORY, "for the cohort's uploads"),
    ),
    Case(
        "train-all-cohort", _r("model.hidden=[20000,20000]", "fl.clients=100", "fl.participation=0.1",
                               "fl.train_all=true"), 2, ("fl.participation: " + MEMORY,),
    ),
    Case(
        "scaffold-client-state",
        _r("algorithm=scaffold", "model.hidden=[6000,6000]", "fl.clients=300", "fl.participation=0.05",
           "fl.rounds=100"),
        2, ("fl.clients: " + MEMORY, "of per-client state"),
    ),
    Case(
        "fp64-doubles-it", _r("model.hidden=[15000,15000]", "fl.clients=8", "hardware.precision=fp64"), 2,
        ("fl.participation: " + MEMORY,),
    ),
    # round four (issue 49 point 5): every client's state counts, a capability's too, held for all fl.clients
    Case(
        "ditto-personal-models", _r("algorithm=ditto", "model.hidden=[3000,3000]", "fl.clients=1000",
                                    "fl.participation=0.01"), 2, ("fl.clients: " + MEMORY, "of per-client state"),
    ),
    Case(
        "error-feedback-residuals",
        _r("compression=topk", "compression.error_feedback=true", "model.hidden=[3000,3000]", "fl.clients=1000",
           "fl.participation=0.01"),
        2, ("fl.clients: " + MEMORY, "of per-client state"),
    ),
    Case(
        "kept-momentum", _r("fl.momentum=0.9", "fl.keep_momentum=true", "model.hidden=[3000,3000]", "fl.clients=1000",
                            "fl.participation=0.01"), 2, ("fl.clients: " + MEMORY, "of per-client state"),
    ),
    Case("threads-100000", _r("hardware.threads=100000"), 2, ("hardware.threads: 100000 threads",)),
    Case("threads-one-over", _r(f"hardware.threads={max_threads() + 1}"), 2, (f"to {max_threads()}",)),
    Case("threads-2-to-40", _r("hardware.threads=1099511627776"), 2, ("hardware.threads: ",)),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_resources(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    from fedrun.config import resources

    monkeypatch.setattr(resources, "memory_ceiling", lambda: (16 * 10**9, "this machine's RAM + swap"))
    run_case(case, tmp_path, monkeypatch, capsys)
    assert not (tmp_path / "r" / "config.yaml").exists()


def test_the_same_runs_fit_a_larger_machine(make_spec: Callable[..., RunSpec], monkeypatch: pytest.MonkeyPatch) -> None:
    """The estimate is a lower bound: the fp64 case fits in fp32, the cohort case with fewer clients per round."""
    from fedrun.config import resources

    monkeypatch.setattr(resources, "memory_ceiling", lambda: (16 * 10**9, "test"))
    for overrides in (
        ["model.hidden=[15000,15000]", "fl.clients=8"],
        ["model.hidden=[20000,20000]", "fl.clients=100", "fl.participation=0.02"],
    ):
        need = resources.estimate(make_spec("experiment=smoke", "data.max_train_samples=300", *overrides))
        assert need is not None and need.total <= 16 * 10**9
