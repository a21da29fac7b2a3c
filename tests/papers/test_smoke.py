"""The -smoke shrink: swept keys kept, per-method server work capped, every target estimated within minutes."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra.core.override_parser.overrides_parser import OverridesParser

from fedrun.cli.reproduce import commands, cost_seconds, preset_cfg
from fedrun.config.validate import validate
from fedrun.data.base import Dataset, Split
from fedrun.data.partition import make_partition
from fedrun.data.proxy import carve_proxy
from fedrun.papers.smoke import CLASSES, SMOKE, smoke_method_overrides, smoke_overrides, smoke_run_seconds
from fedrun.papers.targets import BY_NAME, TARGETS

SMOKE_BUDGET_MIN = 4.0  # the issue: a -smoke target runs in a few minutes on this 2-core CPU


def keys(overrides: list[str]) -> set[str]:
    return {o.split("=", 1)[0] for o in overrides}


def test_swept_keys_keep_their_values() -> None:
    cfg = preset_cfg("fedlaw_table4_cifar10_resnet20")
    shrunk = smoke_overrides(cfg, {"fl.clients": "50,100", "partition.alpha": "100,1"})
    assert "fl.clients" not in keys(shrunk) and f"fl.rounds={SMOKE['rounds']}" in shrunk
    law = BY_NAME["fedlaw-table4"]
    cmd = commands(law, Path("out"), smoke=True, methods=["FedAvg"])[0]
    assert "fl.clients=50,100" in cmd and sum(c.startswith("fl.clients=") for c in cmd) == 1


def test_epochs_become_steps_and_the_proxy_shrinks() -> None:
    shrunk = smoke_overrides(preset_cfg("fedlaw_table5_cifar10"), {})
    assert f"fl.local_steps={SMOKE['local_steps']}" in shrunk and f"fl.batch_size={SMOKE['batch_size']}" in shrunk
    assert f"proxy.per_class={SMOKE['proxy_per_class']}" in shrunk and "hardware.threads=1" in shrunk
    assert "checkpoint.keep_final=false" in shrunk and f"eval.every={SMOKE['rounds']}" in shrunk


@pytest.mark.parametrize(
    ("method", "expected"),
    [
        (("algorithm=fedlaw",), [f"algorithm.server_epochs={SMOKE['server_epochs']}"]),
        (("algorithm=fedlaw_swa",), [f"algorithm.server_epochs={2 * SMOKE['server_epochs']}"]),  # two halves
        (("algorithm=serverft",), [f"algorithm.server_epochs={SMOKE['server_epochs']}"]),
        (("algorithm=feddf", "algorithm.server_epochs=7"), []),  # the method's own value wins
        (("algorithm=fedprox", "algorithm.mu=0.1"), []),
    ],
)
def test_server_epochs_capped_per_method(method: tuple[str, ...], expected: list[str]) -> None:
    assert smoke_method_overrides(method) == expected


def test_ima_epoch_schedule_keeps_epochs(make_spec) -> None:
    """FedIMA Table III's ``ed`` schedule lowers local epochs and refuses fl.local_steps: 1 epoch instead."""
    table3 = BY_NAME["fedima-table3"]
    cmd = commands(table3, Path("out"), smoke=True)[0]
    assert "fl.local_steps=null" in cmd and "fl.local_epochs=1" in cmd
    spec = make_spec(*first_job([a.replace("exd,clr,cd,ed,nad", "ed") for a in cmd]))
    assert spec.ima.schedule == "ed" and spec.fl.local_steps is None and spec.fl.local_epochs == 1
    assert f"fl.local_steps={SMOKE['local_steps']}" in smoke_overrides(preset_cfg("fedima_table3_cifar10_cnn"), {})


def test_fedrep_keeps_a_head_epoch(make_spec) -> None:
    """One local step would leave FedRep's head no step, which it refuses: one head epoch and its body epochs."""
    cfg = preset_cfg("smoke", "algorithm=fedrep", "algorithm.rep_epochs=2")
    shrunk = smoke_overrides(cfg, {})
    assert "fl.local_steps=null" in shrunk and "fl.local_epochs=3" in shrunk
    spec = make_spec("experiment=smoke", "algorithm=fedrep", "algorithm.rep_epochs=2", *shrunk)
    assert spec.fl.local_steps is None and spec.fl.local_epochs == 3


def first_job(cmd: list[str], last: bool = False) -> list[str]:
    """A ``fedrun -m`` command's first (or last) job: one value of each swept key, no hydra.* keys."""
    pick = (lambda v: v.split(",")[-1]) if last else (lambda v: v.split(",")[0])
    args = [a for a in cmd[4:] if not a.startswith("hydra.")]
    return [a if a.startswith("++") else f"{a.partition('=')[0]}={pick(a.partition('=')[2])}" for a in args]


def test_smoke_commands_compose_and_validate(make_spec) -> None:
    law = BY_NAME["fedlaw-table3"]
    for cmd in commands(law, Path("out"), smoke=True, presets=["fedlaw_table3_cifar100_resnet20"]):
        spec = make_spec(*first_job(cmd))
        assert spec.fl.rounds == SMOKE["rounds"] and spec.fl.local_steps == SMOKE["local_steps"]
        assert getattr(spec.algorithm.params, "server_epochs", 0) <= 2 * SMOKE["server_epochs"]


def stand_in(name: str, n: int, domains: int | None, seed: int = 0) -> Dataset:
    """Labels (and domains, superclasses, natural clients) of a dataset's shape: for partitions, not training."""
    rng = np.random.default_rng(seed)
    classes = CLASSES.get(name, 10)
    y = lambda m: torch.as_tensor(rng.integers(0, classes, m))  # noqa: E731
    train = Split(torch.zeros(n, 1), y(n), coarse=None)
    train.coarse = train.y // 5 if name == "cifar100" else None
    train.domain = torch.as_tensor(rng.integers(0, domains, n)) if domains else None
    devices = {"shakespeare": 40, "synthetic": 30}.get(name)  # synthetic: FedProx's 30 devices
    natural = [np.arange(i, n, devices) for i in range(devices)] if devices else None
    names = [str(d) for d in range(domains)] if domains else None
    return Dataset(
        name, train, Split(torch.zeros(SMOKE["test"], 1), y(SMOKE["test"])), classes, (1,), None, None, names, natural
    )


def with_overrides(cfg: dict, overrides: list[str]) -> dict:
    """``cfg`` with ``key=value`` overrides set (values parsed by Hydra's grammar), without composing."""
    for item in OverridesParser.create().parse_overrides(overrides):
        *path, leaf = item.key_or_group.split(".")
        node = cfg
        for k in path:
            node = node.setdefault(k, {})
        node[leaf] = item.value()
    return cfg


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.name)
def test_every_smoke_partition_and_proxy_fit_the_shrunk_data(target) -> None:
    """Each preset's shrunk partition and proxy set work on labels of its dataset's shape (every swept partition
    or client setting), whatever the data: real files or the stand-in smoke runs use when they are missing."""
    swept = dict(target.sweep)
    settings = [
        [f"{k}={v}" for v in values.split(",")]
        if k.startswith(("partition.", "fl.clients"))
        else [f"{k}={values.split(',')[0]}"]
        for k, values in target.sweep
        if k != "model"
    ]
    for preset in target.presets:
        shrunk = smoke_overrides(preset_cfg(preset), swept)
        for setting in itertools.product(*settings):
            spec = validate(with_overrides(preset_cfg(preset), [*shrunk, *setting, f"seed={target.seeds[0]}"]))
            domains = len(spec.data.params.domains) if hasattr(spec.data.params, "domains") else None
            data = stand_in(spec.data.name, spec.data.params.max_train_samples, domains)
            parts = make_partition(data, spec.partition.name, spec.partition.params, spec.fl.clients, spec.seed, None)
            assert len(parts) == spec.fl.clients and sum(len(p) for p in parts) <= len(data.train)
            if spec.proxy.per_class:
                proxy, test = carve_proxy(data.test, data.num_classes, spec.proxy, spec.seed)
                assert len(proxy) > 0 and len(test) > 0


def test_heavier_models_cost_more_and_every_target_fits_the_budget() -> None:
    cfg = preset_cfg("fedlaw_table5_cifar10")
    light, measured = smoke_run_seconds(cfg, {"model": "resnet20"})
    heavy, _ = smoke_run_seconds(cfg, {"model": "densenet121"})
    assert measured and heavy > 5 * light
    over = {t.name: round(cost_seconds(t, smoke=True)[0] / 60, 1) for t in TARGETS}
    assert {k: v for k, v in over.items() if v > SMOKE_BUDGET_MIN} == {}


def test_a_robust_rule_the_smokes_few_clients_cannot_hold_runs_with_f_zero() -> None:
    from fedrun.papers.smoke import smoke_method_overrides

    assert smoke_method_overrides(("defence=bulyan",)) == ["defence.f=0"]  # 4f + 3 = 7 > 5 clients at f = 1
    assert smoke_method_overrides(("defence=krum",)) == []  # 2f + 3 = 5: it holds
    assert smoke_method_overrides(("defence=bulyan", "defence.f=1")) == []  # a row's own f is kept
    assert smoke_method_overrides(("defence=none",)) == smoke_method_overrides(("algorithm=fedavg",)) == []


def test_an_attack_window_past_the_smoke_rounds_moves_into_the_last() -> None:
    cfg = preset_cfg("fedlaw_table5_cifar10")
    last = SMOKE["rounds"]
    late = {**cfg, "attack": {"name": "backdoor", "start_round": 5, "end_round": 5}}
    assert {f"attack.start_round={last}", f"attack.end_round={last}"} <= set(smoke_overrides(late, {}))
    on = {**cfg, "attack": {"name": "sign_flip", "start_round": 10, "end_round": None}}
    assert f"attack.start_round={last}" in smoke_overrides(on, {}) and "attack.end_round" not in keys(
        smoke_overrides(on, {})
    )
    early = {**cfg, "attack": {"name": "sign_flip", "start_round": 1, "end_round": 9}}
    assert not keys(smoke_overrides(early, {})) & {"attack.start_round", "attack.end_round"}


def test_an_attack_fraction_with_no_attacker_among_the_smoke_clients_becomes_one_of_them() -> None:
    cfg = preset_cfg("fedlaw_table5_cifar10")
    n = int(dict(o.split("=", 1) for o in smoke_overrides(cfg, {}))["fl.clients"])
    one = {**cfg, "attack": {"name": "backdoor", "fraction": 0.02}}  # 1 of 50 clients, none of the smoke's
    assert f"attack.fraction={1 / n}" in smoke_overrides(one, {})
    kept = {**cfg, "attack": {"name": "sign_flip", "fraction": 0.2}}  # 0.2 x 5 = 1 attacker already
    assert "attack.fraction" not in keys(smoke_overrides(kept, {}))
    assert "attack.fraction" not in keys(smoke_overrides({**cfg, "attack": {"name": "none", "fraction": 0.02}}, {}))
    assert "attack.fraction" not in keys(smoke_overrides(one, {"attack.fraction": "0.02,0.04"}))
