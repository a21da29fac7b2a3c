"""The -smoke shrink: swept keys kept, per-method server work capped, every target estimated within minutes."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedrun.repro.registry import BY_NAME, TARGETS
from fedrun.repro.run import commands, cost_seconds, preset_cfg
from fedrun.repro.smoke import SMOKE, smoke_method_overrides, smoke_overrides, smoke_run_seconds

SMOKE_BUDGET_MIN = 4.0  # the issue: a -smoke target runs in a few minutes on this 2-core CPU


def keys(overrides: list[str]) -> set[str]:
    return {o.split("=", 1)[0] for o in overrides}


def test_swept_keys_keep_their_values() -> None:
    cfg = preset_cfg("fedlaw_table4_cifar10_resnet20")
    shrunk = smoke_overrides(cfg, {"fl.clients", "partition.alpha"})
    assert "fl.clients" not in keys(shrunk) and f"fl.rounds={SMOKE['rounds']}" in shrunk
    law = BY_NAME["fedlaw-table4"]
    cmd = commands(law, Path("out"), smoke=True, methods=["FedAvg"])[0]
    assert "fl.clients=50,100" in cmd and sum(c.startswith("fl.clients=") for c in cmd) == 1


def test_epochs_become_steps_and_the_proxy_shrinks() -> None:
    shrunk = smoke_overrides(preset_cfg("fedlaw_table5_cifar10"), set())
    assert f"fl.local_steps={SMOKE['local_steps']}" in shrunk and "fl.batch_size=4" in shrunk
    assert f"proxy.per_class={SMOKE['proxy_per_class']}" in shrunk and "hardware.threads=1" in shrunk
    assert "checkpoint.keep_final=false" in shrunk and f"eval.every={SMOKE['rounds']}" in shrunk


@pytest.mark.parametrize(
    ("method", "expected"),
    [
        (("algorithm=fedlaw",), [f"algorithm.server_epochs={SMOKE['server_epochs']}"]),
        (("algorithm=serverft",), ["algorithm.server_epochs=2"]),  # already 2
        (("algorithm=feddf", "algorithm.server_epochs=7"), []),  # the method's own value wins
        (("algorithm=fedprox", "algorithm.mu=0.1"), []),
    ],
)
def test_server_epochs_capped_per_method(method: tuple[str, ...], expected: list[str]) -> None:
    assert smoke_method_overrides(method) == expected


def test_smoke_commands_compose_and_validate(make_spec) -> None:
    law = BY_NAME["fedlaw-table3"]
    for cmd in commands(law, Path("out"), smoke=True, presets=["fedlaw_table3_cifar100_resnet20"]):
        args = [a.split(",")[0] if "," in a and not a.startswith("++") else a for a in cmd[4:]]
        spec = make_spec(*(a for a in args if not a.startswith("hydra.")))
        assert spec.fl.rounds == SMOKE["rounds"] and spec.fl.local_steps == SMOKE["local_steps"]
        assert getattr(spec.algorithm.params, "server_epochs", 0) <= SMOKE["server_epochs"]


def test_heavier_models_cost_more_and_every_target_fits_the_budget() -> None:
    cfg = preset_cfg("fedlaw_table5_cifar10")
    light, measured = smoke_run_seconds(cfg, {"model": "resnet20"})
    heavy, _ = smoke_run_seconds(cfg, {"model": "densenet121"})
    assert measured and heavy > 5 * light
    over = {t.name: round(cost_seconds(t, smoke=True)[0] / 60, 1) for t in TARGETS}
    assert {k: v for k, v in over.items() if v > SMOKE_BUDGET_MIN} == {}
