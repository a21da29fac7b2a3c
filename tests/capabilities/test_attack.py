"""The attack capability (fedrun/capabilities/attack.py): every registered attack has its option and every option an
attack; the malicious set is the seeded draw and summary.json lists it; a data attack poisons only the attackers'
training samples (the test split stays clean); a model attack replaces only the malicious rows of a round, an
omniscient one from the honest rows; a scaled replacement lands the attacker's model under plain FedAvg through the
run's own pipeline and the method's step; a backdoor's ASR is measured on triggered test images."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from fedrun.capabilities.attack import Attack
from fedrun.config.location import CONF_DIR
from fedrun.config.schema import RunSpec
from fedrun.report.collect import load_runs
from fedrun.report.tables import LOWER_IS_BETTER, make_table
from fedrun.robust.attacks.sign_flip import SignFlip, SignFlipParams
from fedrun.robust.base import ATTACKS
from fedrun.robust.malicious import malicious_clients
from fedrun.robust.stages import AttackStage
from fedrun.run.experiment import build_experiment
from fedrun.run.rounds import aggregation_weights
from fedrun.run.state import fresh_state
from fedrun.upload.base import UploadContext
from tests.run.run_util import finished_run

SMALL = (
    "experiment=smoke", "data.max_train_samples=600", "data.max_test_samples=300", "fl.clients=10", "fl.rounds=2",
    "model.hidden=[16]", "hardware.threads=1",
)  # fmt: skip


def test_every_attack_has_its_option_and_every_option_an_attack() -> None:
    options = {p.stem for p in (CONF_DIR / "attack").glob("*.yaml")} - {"none"}
    assert options == set(ATTACKS.names())
    assert Attack.choices()["name"] == ["none", *ATTACKS.names()]


def _ctx(clients: list[int], rnd: int = 0) -> UploadContext:
    m = len(clients)
    w = torch.full((m,), 1 / m, dtype=torch.float64)
    return UploadContext(rnd, torch.tensor(clients), 0, w, torch.device("cpu"))


def test_the_stage_replaces_the_malicious_rows_only() -> None:
    rows = torch.randn(5, 7, generator=torch.Generator().manual_seed(0))
    bad = torch.tensor([1, 8])
    own = AttackStage(SignFlip(SignFlipParams()), bad)
    sent, state, cols = own.apply(rows, None, _ctx([3, 8, 0, 1, 5]))
    assert state is None and cols == {"attack_uploads": 2.0}
    assert torch.equal(sent[[0, 2, 4]], rows[[0, 2, 4]]) and torch.equal(sent[[1, 3]], -rows[[1, 3]])
    omni = AttackStage(SignFlip(SignFlipParams(knowledge="omniscient")), bad)
    sent, _, _ = omni.apply(rows, None, _ctx([3, 8, 0, 1, 5]))
    assert torch.equal(sent[1], -rows[[0, 2, 4]].mean(0)) and torch.equal(sent[0], rows[0])
    alone, _, _ = omni.apply(rows[[1, 3]], None, _ctx([8, 1]))  # no honest row: their own stand in
    assert torch.equal(alone[0], -rows[[1, 3]].mean(0))
    none, _, cols = own.apply(rows, None, _ctx([0, 2, 3, 4, 5]))
    assert none is rows and cols == {"attack_uploads": 0.0}
    other, _, cols = own.apply(rows, None, UploadContext(0, torch.tensor([1, 2, 3, 4, 5]), 0, _ctx([0] * 5).weights,
                                                        torch.device("cpu"), part="delta_c"))  # fmt: skip
    assert other is rows and cols == {}


@pytest.mark.parametrize("lr", [1.0, 0.5])
def test_a_scaled_replacement_lands_the_attackers_model_under_plain_fedavg(
    make_spec: Callable[..., RunSpec], lr: float
) -> None:
    # the run's pipeline and FedAvg's (FedOpt's, server lr 0.5) step: the honest clients upload w^t (their
    # updates cancel out, the paper's assumption), the attacker its model X: w^{t+1} is X
    algo = ["algorithm=fedavg"] if lr == 1.0 else ["algorithm=fedopt", f"algorithm.server_lr={lr}"]
    spec = make_spec(*SMALL, *algo, "attack=scaling", "attack.fraction=0.1", "fl.weighting=size")
    exp = build_experiment(spec)
    state = fresh_state(exp)
    (bad,) = malicious_clients(spec.seed, 10, 0.1)
    clients = torch.arange(10)
    x = {k: v + 0.01 * torch.randn_like(v) for k, v in state.params.items()}
    stacked = {k: torch.stack([x[k] if c == bad else v for c in range(10)]) for k, v in state.params.items()}
    uploads = {"params": stacked}
    weights = aggregation_weights(exp.fed.sizes[clients].to(torch.float64), "size")
    assert exp.view is not None
    sent, cols = exp.capabilities.uploads(state, 0, uploads, clients, weights, exp.view)
    assert cols["attack_uploads"] == 1.0
    new, _, _ = exp.algorithm.aggregate(state.params, state.server_state, sent, weights.float(), None)
    for k in x:
        torch.testing.assert_close(new[k], x[k], rtol=0, atol=1e-5)


def test_label_flipping_changes_only_the_attackers_labels(make_spec: Callable[..., RunSpec]) -> None:
    spec = make_spec(*SMALL, "attack=label_flip", "attack.fraction=0.3")
    exp = build_experiment(spec)
    bad = malicious_clients(spec.seed, 10, 0.3)
    mine = np.concatenate([exp.parts[c] for c in bad])
    flipped = exp.fed.train.y != exp.data.train.y
    assert set(np.flatnonzero(flipped.numpy())) == set(mine.tolist())
    assert torch.equal(exp.fed.train.y[mine], 9 - exp.data.train.y[mine])
    assert torch.equal(exp.fed.train.x, exp.data.train.x.to(exp.fed.train.x.device))


def test_the_backdoor_poisons_a_share_of_each_attackers_samples_and_measures_asr(
    tmp_path: Path, make_spec: Callable[..., RunSpec]
) -> None:
    spec = make_spec(*SMALL, "attack=backdoor", "attack.target=3", "attack.poison_fraction=0.5", "proxy.per_class=0")
    exp = build_experiment(spec)
    bad = malicious_clients(spec.seed, 10, 0.2)
    changed = (exp.fed.train.x != exp.data.train.x).flatten(1).any(1) | (exp.fed.train.y != exp.data.train.y)
    for c in range(10):
        hits = int(changed[torch.as_tensor(exp.parts[c])].sum())
        # the triggered samples of an attacker of target class 3 are changed in pixels only where the patch differs
        assert hits == 0 if c not in bad else 0 < hits <= round(0.5 * len(exp.parts[c]))
    poisoned = torch.as_tensor(np.concatenate([exp.parts[c] for c in bad]))
    relabelled = poisoned[exp.fed.train.y[poisoned] != exp.data.train.y[poisoned]]
    assert (exp.fed.train.y[relabelled] == 3).all() and (exp.fed.train.x[relabelled][..., -1, -1] == 255).all()
    cap = exp.capability("attack")
    assert isinstance(cap, Attack) and cap.triggered is not None
    assert len(cap.triggered) == int((exp.fed.test.y != 3).sum()) and (cap.triggered.y == 3).all()
    rows, summary = finished_run(tmp_path, "run", spec)
    assert rows["asr"].between(0, 1).all() and summary["asr_final"] == rows["asr"].iloc[-1]
    assert summary["attack"]["malicious_clients"] == bad.tolist() and summary["attack"]["name"] == "backdoor"
    # fedrun-report's tables show it beside the clean accuracy (in percent, lower is better)
    (tmp_path / "run" / "config.yaml").write_text(OmegaConf.to_yaml(spec.raw))  # (the CLI writes it)
    runs = load_runs([tmp_path / "run"])
    table, long = make_table(runs, ["attack.name"], [], "asr")
    assert long["mean"].iloc[0] == pytest.approx(100 * summary["asr_final"]) and "asr" in LOWER_IS_BETTER
    assert make_table(runs, ["attack.name"], [], "last_k")[1]["mean"].iloc[0] == pytest.approx(
        100 * summary["test_acc_last_k"]
    )


def test_no_attack_leaves_the_run_and_its_identity_as_before(make_spec: Callable[..., RunSpec]) -> None:
    from fedrun.config.identity import config_key

    spec = make_spec(*SMALL)
    raw = dict(spec.raw)
    assert "attack" in raw and "defence" in raw
    assert config_key(raw) == config_key({k: v for k, v in raw.items() if k not in ("attack", "defence")})
    assert config_key(make_spec(*SMALL, "attack=alie").raw) != config_key(raw)
    assert build_experiment(spec).upload is None


def test_a_backdoor_with_model_replacement_also_scales_the_attackers_uploads(
    make_spec: Callable[..., RunSpec],
) -> None:
    plain = build_experiment(make_spec(*SMALL, "attack=backdoor"))
    assert plain.upload is None  # a data attack alone: no upload stage
    spec = make_spec(*SMALL, "attack=backdoor", "attack.replace=true")
    assert Attack.transforms_uploads(spec.sections["attack"]) == "attack.name"
    exp = build_experiment(spec)
    assert exp.upload is not None
    (stage,) = exp.upload.stages
    assert isinstance(stage, AttackStage) and stage.attack.name == "scaling"
    rows = torch.ones(10, 3)
    sent, _, cols = stage.apply(rows, None, _ctx(list(range(10))))
    bad = malicious_clients(spec.seed, 10, 0.2)
    assert cols == {"attack_uploads": 2.0} and torch.equal(sent[bad], torch.full((2, 3), 10.0))  # n / eta, eta = 1
