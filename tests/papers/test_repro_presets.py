"""Every paper preset composes and validates with each of its target's methods (no data is loaded)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedrun.cli.reproduce import commands, list_targets, preset_cfg
from fedrun.papers.smoke import SMOKE, smoke_overrides
from fedrun.papers.targets import BY_NAME, FEDPROX_STRAGGLERS, TARGETS

PRESETS = sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "conf" / "experiment").glob("*.yaml"))


def first_values(overrides: tuple[str, ...]) -> list[str]:
    """A multirun override list reduced to one run: the first of each comma-separated value list."""
    return [f"{k}={v.split(',')[0]}" for k, _, v in (o.partition("=") for o in overrides)]


def test_every_target_preset_exists_and_every_paper_preset_is_used() -> None:
    used = {p for t in TARGETS for p in t.presets}
    assert used <= set(PRESETS)
    # dp, robust: fedrun's own tables (docs/privacy.md, docs/robustness.md)
    papers = {"fedima", "fedgam", "fedcos", "fedlaw", "fedsam", "fedprox", "pfedme", "pfllib", "dp", "robust"}
    # FedProx's presets are its target's also where the target is not offered (no system section)
    assert {p for p in PRESETS if p.split("_")[0] in papers} == used | set(FEDPROX_STRAGGLERS.presets)


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.name)
def test_presets_validate_with_methods_and_sweeps(target, make_spec) -> None:
    sweep = first_values(tuple(f"{k}={v}" for k, v in target.sweep))
    for i, preset in enumerate(target.presets):
        methods = target.methods if i == 0 else target.methods[:1]  # all methods once, every preset once
        for meth in methods:
            spec = make_spec(f"experiment={preset}", *first_values(meth.overrides), *sweep, f"++tags.method={i}")
            assert spec.fl.rounds >= 20 and spec.eval.last_k == 10  # exact budgets: test_preset_budgets.py
    last = [f"{k}={v.split(',')[-1]}" for k, v in target.sweep]
    method = first_values(target.methods[-1].overrides)
    assert make_spec(f"experiment={target.presets[0]}", *method, *last).fl.rounds >= 20


def test_preset_values_follow_the_papers(make_spec) -> None:
    law = make_spec("experiment=fedlaw_table3_fmnist_mlp")
    assert (law.fl.clients, law.fl.rounds, law.fl.local_epochs, law.fl.batch_size, law.seed) == (20, 200, 3, 128, 8)
    assert (law.fl.lr, law.fl.momentum, law.fl.lr_decay, law.fl.keep_momentum) == (0.08, 0.9, 0.99, True)
    assert law.partition.params.variant == "no_resample" and law.model.name == "mlp"
    ima = make_spec("experiment=fedima_table1_fmnist_cnn_shards")
    assert (ima.fl.clients, ima.fl.participation, ima.fl.local_epochs, ima.fl.weight_decay) == (100, 0.1, 5, 1e-3)
    assert ima.partition.name == "shards" and ima.fl.rounds == 300
    cos = make_spec("experiment=fedcos_table2_fmnist_mlp")
    assert (cos.fl.local_steps, cos.fl.batch_size, cos.fl.weighting, cos.fl.momentum) == (400, 128, "uniform", 0.0)
    sam = make_spec("experiment=fedsam_table2_cifar10")
    assert (sam.fl.sampling, sam.fl.participation, sam.partition.name) == ("bernoulli", 0.2, "dirichlet_equal")
    gam = make_spec("experiment=fedgam_table3_fmnist_dir0.3")
    assert (gam.fl.clients, gam.fl.local_epochs, gam.partition.params.alpha, gam.eval.train_acc) == (100, 15, 0.3, True)


def test_run_counts_commands_and_smoke_shrink(tmp_path: Path) -> None:
    law = BY_NAME["fedlaw-table3"]
    assert law.runs() == 6 * 8 * 2 * 3 and law.runs(smoke=True) == 6 * 8 * 2
    assert BY_NAME["fedima-table1"].runs() == 10 * (7 + 3) * 2  # FedProx sweeps mu over 3 values
    cmds = commands(law, tmp_path, smoke=True, methods=["FedAvg"], presets=["fedlaw_table3_fmnist_mlp"])
    assert len(cmds) == 1
    cmd = cmds[0]
    assert "seed=8" in cmd and "partition.alpha=100,0.1" in cmd and f"fl.rounds={SMOKE['rounds']}" in cmd
    assert f"hydra.sweep.dir={tmp_path / 'fedlaw_table3_fmnist_mlp' / 'm00'}" in cmd
    full = commands(law, tmp_path, methods=["FedLAW"], presets=["fedlaw_table3_fmnist_mlp"])[0]
    assert "seed=8,9,10" in full and not any(c.startswith("fl.rounds") for c in full)
    shrink = smoke_overrides(preset_cfg("fedcos_table2_fmnist_mlp"), {})
    assert f"fl.local_steps={SMOKE['local_steps']}" in shrink and f"fl.clients={min(7, SMOKE['clients'])}" in shrink
    listing = list_targets()
    assert all(f"reproduce-{t.name} |" in listing for t in TARGETS)


def test_fedlaw_tables_1_8_9_11_follow_the_paper(make_spec) -> None:
    t1, t9 = make_spec("experiment=fedlaw_table1_cifar10"), make_spec("experiment=fedlaw_table9_cifar10")
    for spec in (t1, t9):
        assert (spec.data.name, spec.fl.clients, spec.fl.local_epochs, spec.fl.rounds) == ("cifar10", 20, 2, 200)
        assert spec.partition.params.variant == "no_resample" and spec.fl.keep_momentum
    for name, alphas in (("fedlaw-table1", "100,1"), ("fedlaw-table9", "10,0.5,0.2,0.1")):
        sweep = dict(BY_NAME[name].sweep)
        assert sweep["partition.alpha"] == alphas and sweep["model"] == "simplecnn,alexnet_cifar,resnet8"
        assert [float(g) for g in sweep["algorithm.gamma"].split(",")] == [1, 0.99, 0.97, 0.95, 0.93, 0.9]
        assert BY_NAME[name].layout == "fedlaw_gws" and BY_NAME[name].report_cols[-1] == "algorithm.gamma"
    t8 = make_spec("experiment=fedlaw_table8_cifar10_simplecnn")
    assert (t8.fl.local_epochs, t8.partition.params.alpha, t8.proxy.per_class) == (3, 100.0, 10)
    assert dict(BY_NAME["fedlaw-table8"].sweep) == {"corrupt.fraction": "0.25,0.5,0.75"}
    labels = [x.label for x in BY_NAME["fedlaw-table8"].methods]
    assert labels == ["FedAvg", "FedDF", "Server-FT", "FedLAW", "FedLAW (SWA)"]
    t11 = make_spec("experiment=fedlaw_table11_cifar10_simplecnn", "algorithm=fedlaw_lambda")
    assert t11.partition.name == "hybrid" and (t11.partition.params.alpha1, t11.partition.params.alpha2) == (10, 0.1)
    assert t11.eval.client_weights and t11.algorithm.params.learn == "lambda"
    assert dict(BY_NAME["fedlaw-table11"].sweep) == {"fl.local_epochs": "1,5"}


def test_fedgam_rows_and_uniform_mean(make_spec) -> None:
    """FedGAM Tables 3-5 list nine methods (Table 3's order); Alg. 1 line 12 / Alg. 2 line 15 average 1/K."""
    rows = ["FedAvg", "FedProx", "MOON", "SCAFFOLD", "FedNova", "FedSAM", "FedSMOO", "FedGAM", "FedGAM-CV"]
    for name in ("fedgam-table3", "fedgam-table4", "fedgam-table5"):
        assert [x.label for x in BY_NAME[name].methods] == rows
    for preset in (p for p in PRESETS if p.startswith("fedgam_")):
        assert make_spec(f"experiment={preset}").fl.weighting == "uniform"
    smoo = make_spec("experiment=fedgam_table3_fmnist_dir0.3", "algorithm=fedsmoo").algorithm.params
    assert (smoo.rho, smoo.lam) == (0.1, 0.1)  # "the settings of [40]": FL-Simulator's defaults


def test_fedsam_presets_measure_the_client_spread(make_spec) -> None:
    for preset in (p for p in PRESETS if p.startswith("fedsam_")):
        assert make_spec(f"experiment={preset}").eval.client_acc


def test_fedcos_fedprox_rows_use_the_codes_full_penalty(make_spec) -> None:
    """COS Update.penalty0: imp0 * ||w - w^t||^2, no 1/2 (the "+FedCos" rows' prox_mu has the same form)."""
    for target in (t for t in TARGETS if t.paper == "FedCos"):
        prox = [x for x in target.methods if x.label.startswith("FedProx(") and "FedCos" not in x.label]
        assert len(prox) == 1
        spec = make_spec(f"experiment={target.presets[0]}", *prox[0].overrides)
        assert spec.algorithm.params.half is False
        assert spec.algorithm.params.mu == float(prox[0].label[len("FedProx(") : -1])


def test_fedima_fedasam_radius_by_model(tmp_path: Path, make_spec) -> None:
    """FedIMA's code: FedASAM (rho, eta) = (0.7, 0.2) for split names containing "CNN", else (0.2, 0.05)."""
    target = BY_NAME["fedima-table1"]
    asam = next(x for x in target.methods if x.label == "FedASAM")
    for preset in target.presets:
        (cmd,) = commands(target, tmp_path, methods=["FedASAM"], presets=[preset])
        overrides = [a for a in cmd if a.startswith("algorithm")]
        spec = make_spec(f"experiment={preset}", *overrides)
        cnn = preset_cfg(preset)["model"]["name"] in ("ima_cnn", "digit5_cnn")
        assert (spec.algorithm.params.rho, spec.algorithm.params.eta) == ((0.7, 0.2) if cnn else (0.2, 0.05))
        assert asam.for_preset(preset)[: len(asam.overrides)] == asam.overrides
        if spec.model.name == "resnet18":  # FedIMA model.py: fc = Linear(512, 128) before the classifier
            assert spec.model.params.projector
