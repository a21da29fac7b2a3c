"""The personalised methods: each one's defining property and its reduction (docs/personalised.md), bad input,
and a kill and resume that restores every client's personal state bit for bit."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
import torch
from client_methods_util import (
    SMALL,
    assert_trees_equal,
    ctx_for,
    make_algo,
    plain_grad,
    tiny_batch,
    tiny_model,
    train,
)

from fedrun.algorithms.base import RoundInfo
from fedrun.config.registry import MODELS, build_params
from fedrun.config.schema import FLConfig, RunSpec
from fedrun.core.errors import ConfigError
from fedrun.core.tree import unstack
from fedrun.models.base import FunctionalModel
from fedrun.run import loop
from fedrun.run.loop import run
from fedrun.storage.atomic import TIMING_COLUMNS
from tests.conftest import refused_in_one_line

SPLIT = (*SMALL, "eval.local_test=split")


def test_a_split_model_keeping_nothing_local_steps_as_fedavg_bit_for_bit() -> None:
    # the machinery's reduction (a split with an empty side is refused at the config: test_bad_input_... below)
    fedavg, fedper = make_algo("fedavg"), make_algo("fedper")
    fedper.keep([])
    w = fedavg.model.init_params()
    a = fedavg.client_step(w, None, tiny_batch(), ctx_for(fedavg, w))
    b = fedper.client_step(w, None, tiny_batch(), ctx_for(fedper, w))
    assert_trees_equal(b[0], a[0])
    assert set(fedper.client_finish(w, b[0], ctx_for(fedper, w), torch.tensor(1))[0]["params"]) == set(w)


def test_fedper_keeps_the_head_on_the_clients_and_averages_the_body(make_spec: Callable[..., RunSpec]) -> None:
    spec = make_spec(*SMALL, "algorithm=fedper")
    params, _, log = train(spec)
    head = ["3.weight", "3.bias"]  # model.hidden=[16]: Flatten, Linear, ReLU, Linear: the last layer is "3"
    assert set(head) < set(params)
    init = log[0]["start"]
    for k in head:  # the global model's head is never averaged
        assert torch.equal(params[k], init[k])
    last = log[-1]
    assert set(last["uploads"]["params"]) == set(params) - set(head)  # only the body is uploaded
    personal = last["states"].rows["personal"]
    assert set(personal) == set(head)
    assert not torch.equal(personal[head[0]][0], personal[head[0]][1])  # each client has its own head
    w = last["weights"].to(params["3.bias"].dtype)
    body = {k: (last["uploads"]["params"][k] * w.view(-1, *[1] * params[k].dim())).sum(0)
            for k in last["uploads"]["params"]}  # fmt: skip
    assert_trees_equal({k: params[k] for k in body}, body, atol=1e-6)


def test_lg_fedavg_keeps_the_body_and_averages_the_head(make_spec: Callable[..., RunSpec]) -> None:
    params, _, log = train(make_spec(*SMALL, "algorithm=lg_fedavg"))
    uploaded = set(log[-1]["uploads"]["params"])
    assert uploaded and uploaded == set(log[-1]["states"].rows["personal"]).symmetric_difference(params)
    for k in log[-1]["states"].rows["personal"]:  # the global body stays at its initialisation
        assert torch.equal(params[k], log[0]["start"][k])


def test_local_only_never_communicates(tmp_path: Path, make_spec: Callable[..., RunSpec]) -> None:
    spec = make_spec(*SPLIT, "algorithm=local", "fl.rounds=3")
    summary = run(spec, tmp_path)
    rows = pd.read_csv(tmp_path / "metrics.csv")
    assert summary["status"] == "completed"
    assert (rows["bytes_down"] == 0).all() and (rows["bytes_up"] == 0).all()
    assert rows["test_acc"].nunique() == 1  # the global model is the initial one throughout
    assert (rows["local_acc_mean"] > rows["local_global_acc_mean"]).all()  # the clients' own models learned


def test_ditto_with_a_huge_lambda_keeps_the_personal_model_at_fedavgs_global_model(
    make_spec: Callable[..., RunSpec],
) -> None:
    fedavg, _, ref_log = train(make_spec(*SMALL, "algorithm=fedavg"))
    ditto, _, log = train(make_spec(*SMALL, "algorithm=ditto", "algorithm.lam=1e12", "algorithm.prox=implicit"))
    assert_trees_equal(ditto, fedavg)  # the global model is FedAvg's, whatever lambda
    v = log[-1]["states"].rows["v"]
    for k, w in log[-1]["start"].items():  # v = w^t (to fp32 rounding), the model the clients last received
        for i in range(v[k].shape[0]):
            torch.testing.assert_close(v[k][i], w, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("prox", ["explicit", "implicit"])
def test_ditto_with_lambda_zero_trains_v_locally(prox: str) -> None:
    algo = make_algo("ditto", lam=0.0, prox=prox)
    params = algo.model.init_params()
    ctx = ctx_for(algo, params, lr=0.1)
    _, _, state, _ = algo.client_step(params, None, tiny_batch(), ctx)
    local = make_algo("local")
    lctx = ctx_for(local, params, lr=0.1)
    _, _, lstate, _ = local.client_step(params, None, tiny_batch(), lctx)
    assert_trees_equal(state["v"], lstate["personal"], atol=1e-12)


def test_apfl_with_alpha_zero_is_fedavg(make_spec: Callable[..., RunSpec]) -> None:
    fedavg, _, _ = train(make_spec(*SMALL, "algorithm=fedavg"))
    apfl, _, log = train(make_spec(*SMALL, "algorithm=apfl", "algorithm.alpha=0"))
    assert_trees_equal(apfl, fedavg)
    algo = make_algo("apfl", alpha=0.0)
    state = unstack(log[-1]["states"].rows, 0)
    assert_trees_equal(algo.personal_model(apfl, state), apfl)  # the personalised model is the global one


def test_apfl_mixes_the_local_and_the_global_model() -> None:
    algo = make_algo("apfl", alpha=0.25)
    w = algo.model.init_params()
    v = {k: t + 1.0 for k, t in w.items()}
    mixed = algo.personal_model(w, {"v": v})
    assert_trees_equal(mixed, {k: w[k] + 0.25 for k in w}, atol=1e-12)


def test_fedrep_trains_the_head_first_then_the_body() -> None:
    fl = FLConfig(local_epochs=3, batch_size=6)  # one step per epoch for n_i = 6: head, head, body
    algo = make_algo("fedrep", fl=fl)
    head = set(algo.private)
    params = algo.model.init_params()
    ctx = ctx_for(algo, params, lr=0.5)._replace(size=torch.tensor(6.0, dtype=torch.float64))
    w, changed = params, []
    for _ in range(3):
        new, _, state, _ = algo.client_step(w, None, tiny_batch(), ctx)
        changed.append({k for k in new if not torch.equal(new[k], {**w, **ctx.state["personal"]}[k])})
        w, ctx = new, ctx._replace(state=state)
    assert changed == [head, head, set(params) - head]
    _, state = algo.client_finish(params, w, ctx, torch.tensor(3))
    assert float(state["t"]) == 0.0  # the counter restarts every round


def test_fedbabu_never_trains_the_head(make_spec: Callable[..., RunSpec]) -> None:
    params, _, log = train(make_spec(*SMALL, "algorithm=fedbabu", "fl.momentum=0.9", "fl.weight_decay=0.01"))
    init = log[0]["start"]
    head = [k for k in params if k not in log[-1]["uploads"]["params"]]
    assert head and all(torch.equal(params[k], init[k]) for k in head)
    assert any(not torch.equal(params[k], init[k]) for k in log[-1]["uploads"]["params"])


def test_fedbn_keeps_batchnorm_parameters_and_statistics_local(make_spec: Callable[..., RunSpec]) -> None:
    spec = make_spec(*[o for o in SMALL if not o.startswith("model.")], "algorithm=fedbn", "model=resnet8",
                     "data.image_size=32", "fl.rounds=1", "fl.clients=3")  # fmt: skip
    params, _, log = train(spec)
    rows = log[-1]["states"].rows
    stats = rows["buffers"]
    assert stats and all("running" in k or "num_batches" in k for k in stats)
    mean = next(k for k in stats if k.endswith("running_mean"))
    assert not torch.equal(stats[mean][0], stats[mean][1])  # each client's own statistics
    bn = next(iter(rows["personal"]))
    assert torch.equal(params[bn], log[0]["start"][bn])  # the global BatchNorm parameters are not averaged


def test_fedbn_without_batchnorm_is_refused(make_spec: Callable[..., RunSpec]) -> None:
    with pytest.raises(ConfigError) as err:
        make_algo("fedbn", tiny_model())
    assert err.value.field == "model.name"


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["algorithm=fedper", "algorithm.head=[nope]"], "algorithm.head: 'nope' names no layer"),
        (["eval.local_test=split", "eval.local_test_fraction=0"], "eval.local_test_fraction: must be in (0.0, 1.0)"),
        (["eval.local_test=split", "eval.local_test_fraction=1"], "eval.local_test_fraction: must be in (0.0, 1.0)"),
        (["eval.local_test=split", "eval.finetune_steps=-1"], "eval.finetune_steps: must be >= 0"),
        (["eval.finetune_steps=3"], "eval.finetune_steps: fine-tuned models are evaluated on local test splits"),
        (["eval.local_test=shuffle"], "eval.local_test: invalid value 'shuffle'; valid: auto, none, split, partition"),
        (["eval.finetune_epochs=1"], "eval.finetune_epochs: fine-tuned models are evaluated on local test splits"),
        (
            ["eval.local_test=split", "eval.finetune_steps=2", "eval.finetune_epochs=1"],
            "eval.finetune_epochs: fine-tune by steps or by epochs",
        ),
        (["eval.local_test=split", "eval.finetune_momentum=0.9"], "eval.finetune_momentum: no fine-tuning to apply"),
        (
            ["eval.local_test=split", "eval.finetune_steps=2", "eval.finetune_momentum=1"],
            "eval.finetune_momentum: must be in [0.0, 1.0)",
        ),
        (
            ["algorithm=ditto", "algorithm.prox=exact"],
            "algorithm.prox: invalid value 'exact'; valid: explicit, implicit",
        ),
        (["algorithm=apfl", "algorithm.form=fedtorch"], "algorithm.form: invalid value 'fedtorch'; valid: paper, code"),
        (["algorithm=pfedme", "algorithm.score=w"], "algorithm.score: invalid value 'w'; valid: theta, code"),
        (["algorithm=lg_fedavg", "algorithm.warm_rounds=-1"], "algorithm.warm_rounds: must be >= 0"),
        (["algorithm=lg_fedavg", "algorithm.warm_lr=0"], "algorithm.warm_lr: must be > 0"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, args: list[str], words: str
) -> None:
    refused_in_one_line(tmp_path, monkeypatch, capsys, [*SMALL, *args], words)


@pytest.mark.parametrize("name", ["fedper", "ditto", "fedrep"])
def test_kill_and_resume_restores_personal_state_bit_for_bit(
    name: str, tmp_path: Path, make_spec: Callable[..., RunSpec], monkeypatch: pytest.MonkeyPatch
) -> None:
    over = (*SPLIT, f"algorithm={name}", "fl.rounds=4", "checkpoint.every=2", "eval.finetune_steps=2",
            "hardware.engine=vectorised", "fl.local_epochs=2")  # fmt: skip
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    whole.mkdir()
    cut.mkdir()
    run(make_spec(*over), whole)
    real = loop.train_step

    def killed_in_round_4(experiment, state, rnd):  # noqa: ANN001, ANN202
        if rnd == 3:
            raise KeyboardInterrupt
        return real(experiment, state, rnd)

    monkeypatch.setattr(loop, "train_step", killed_in_round_4)
    assert run(make_spec(*over), cut)["status"] == "interrupted"
    monkeypatch.setattr(loop, "train_step", real)
    assert run(make_spec(*over), cut)["resumed_from_round"] == 3  # Ctrl-C saved its last finished round
    timings = list(TIMING_COLUMNS)
    pd.testing.assert_frame_equal(
        pd.read_csv(cut / "metrics.csv").drop(columns=timings), pd.read_csv(whole / "metrics.csv").drop(columns=timings)
    )
    assert (cut / "clients.csv").read_bytes() == (whole / "clients.csv").read_bytes()


SHAPES = ((1, 28, 28), (3, 32, 32), (3, 28, 28), (3, 64, 64), (80,))


def _build(name: str) -> FunctionalModel | None:
    entry = MODELS.get(name)
    for shape in SHAPES:
        try:
            return FunctionalModel(entry.obj(build_params(entry.params, {}, "model"), shape, 10))
        except ConfigError:  # another input shape
            continue
    return None


@pytest.mark.parametrize("name", MODELS.names())
def test_every_registered_model_declares_its_classifier_as_the_head(name: str) -> None:
    model = _build(name)
    assert model is not None, f"{name} builds for none of {SHAPES}"
    head = model.head_keys()
    weights = dict(model.module.named_parameters())
    assert head and weights[head[0]].shape[0] == 10  # the classifier: one output per class
    for method in ("fedper", "fedrep", "lg_fedavg", "fedbabu"):  # every method that splits it takes it
        algo = make_algo(method, model, FLConfig(local_epochs=2))
        assert set(algo.private) | set(algo.shared) <= set(weights)


def test_a_head_naming_a_block_takes_its_layers_and_a_bad_name_lists_the_layers() -> None:
    model = tiny_model()  # Sequential: 0 Linear, 1 Tanh, 2 Linear
    assert model.head_keys(["2"]) == ["2.weight", "2.bias"]
    assert model.head_keys([]) == []
    with pytest.raises(ConfigError, match=r"'1' names no layer of the model; valid: a list of 0, 2"):
        model.head_keys(["1"])


def test_pfedme_step_by_hand_and_theta_restarts_from_the_broadcast_model() -> None:
    algo = make_algo("pfedme", lam=2.0, inner_steps=1, personal_lr=0.1)
    w0 = algo.model.init_params()
    stale = {k: t + 5.0 for k, t in w0.items()}  # last round's theta: ignored at a round's first step
    ctx = ctx_for(algo, w0, lr=0.05)._replace(state={"theta": stale, "fresh": torch.ones((), dtype=torch.float64)})
    batch = tiny_batch()
    w, _, state, _ = algo.client_step(w0, None, batch, ctx)
    g = plain_grad(algo.model, w0, batch)
    theta = {k: w0[k] - 0.1 * g[k] for k in w0}  # theta starts at w^t, so the prox term is 0 at the first step
    assert_trees_equal(state["theta"], theta, atol=1e-12)
    assert_trees_equal(w, {k: w0[k] - 0.05 * 2.0 * (w0[k] - theta[k]) for k in w0}, atol=1e-12)
    assert float(state["fresh"]) == 0.0
    assert float(algo.client_finish(w0, w, ctx._replace(state=state), torch.tensor(1))[1]["fresh"]) == 1.0


def test_pfedme_server_mixes_with_beta() -> None:
    algo = make_algo("pfedme", beta=2.0)
    w = algo.model.init_params()
    up = {k: torch.stack([t + 1.0, t + 3.0]) for k, t in w.items()}
    info = RoundInfo(0, 2, torch.tensor([0, 1]), torch.tensor([1.0, 1.0]), torch.tensor([1, 1]), 0.1)
    new, _, _ = algo.aggregate(w, {}, {"params": up}, torch.tensor([0.5, 0.5], dtype=torch.float64), info)
    assert_trees_equal(new, {k: t + 4.0 for k, t in w.items()}, atol=1e-12)  # (1 - 2) w + 2 (w + 2)


# A split or a round that trains nothing of one side (issue 50, point 3): refused in one line naming the keys, exit 2,
# the run dir left with Hydra's record and the error only (no metrics, checkpoint, partition or summary).
NOTHING_TRAINED = [
    (["algorithm=fedrep"], "algorithm.rep_epochs: 1 of fl.local_epochs=1 leaves the personal head no epoch"),
    (["algorithm=fedrep", "fl.local_epochs=3", "algorithm.rep_epochs=3"], "of fl.local_epochs=3 leaves the personal"),
    (["algorithm=fedrep", "fl.local_steps=2"], "algorithm.rep_epochs: 1 body epoch(s) of the largest client"),
    (["algorithm=fedrep", "fl.local_epochs=2", "model.hidden=[]"], "algorithm.head: the split leaves the shared body"),
    (["algorithm=fedper", 'algorithm.head=["1","3"]'], "algorithm.head: the split leaves the shared body empty"),
    (["algorithm=fedper", "algorithm.head=[]"], "algorithm.head: the split leaves the personal head empty (that is"),
    (["algorithm=fedper", 'algorithm.head=[""]'], "algorithm.head: '' names no layer of the model; valid: a list of"),
    (["algorithm=lg_fedavg", "algorithm.head=[]"], "algorithm.head: the split leaves the global layers empty"),
    (["algorithm=lg_fedavg", 'algorithm.head=["1","3"]'], "algorithm.head: the split leaves the local layers empty"),
]


@pytest.mark.parametrize(("args", "words"), NOTHING_TRAINED)
def test_a_split_or_round_that_trains_nothing_is_refused_and_nothing_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, args: list[str], words: str
) -> None:
    refused_in_one_line(tmp_path, monkeypatch, capsys, [*SMALL, *args], words)
    assert {p.name for p in (tmp_path / "run").iterdir()} <= {".hydra", "error.txt"}


def test_fedrep_at_the_authors_epochs_is_accepted(make_spec: Callable[..., RunSpec]) -> None:
    # scripts/FedRep_cifar10_2shards.sh: --local_ep 11 --local_rep_ep 1 (10 head epochs, then 1 on the body)
    algo = make_algo("fedrep", fl=FLConfig(local_epochs=11, batch_size=6))
    ctx = ctx_for(algo, algo.model.init_params())._replace(size=torch.tensor(6.0, dtype=torch.float64))
    assert float(algo.head_steps(ctx)) == 10
