"""Fine-tuning at evaluation (fedrun/metrics/finetune.py): k steps with replacement and no momentum are fedrun's
FedAvg-FT as before the options existed, bit for bit; momentum is torch.optim.SGD's; epochs are FedBABU's
shuffled passes, each client stopping after its own; the new eval keys keep older runs' identity."""

from __future__ import annotations

import copy
from collections.abc import Callable

import numpy as np
import torch
from torch import nn
from torch.func import vmap

from fedrun.config.identity import comparable
from fedrun.config.schema import RunSpec
from fedrun.core import autodiff
from fedrun.core.rng import np_rng
from fedrun.core.tree import Tensors
from fedrun.metrics.finetune import FineTune, sgd, tune_plan
from fedrun.models.base import FunctionalModel
from fedrun.run.experiment import build_experiment
from fedrun.run.state import fresh_state
from tests.metrics.local_eval_util import local_evaluation
from tests.metrics.test_personal import SMALL

G = torch.Generator().manual_seed(0)
X = torch.randn(20, 4, generator=G, dtype=torch.float64)
Y = torch.randint(0, 3, (20,), generator=G)
PARTS = [torch.arange(0, 7), torch.arange(7, 10)]  # two clients: 7 and 3 samples


def _model() -> FunctionalModel:
    torch.manual_seed(1)
    return FunctionalModel(nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 3)).double())


def _batch(idx: torch.Tensor) -> dict[str, torch.Tensor]:
    return {"x": X[idx], "y": Y[idx]}


def _torch_sgd(model: FunctionalModel, start: Tensors, batches: list[torch.Tensor], lr: float, mu: float) -> Tensors:
    """The reference: torch.optim.SGD on a copy of the module over ``batches`` (each a list of sample indices)."""
    module = copy.deepcopy(model.module)
    module.load_state_dict(start)
    opt = torch.optim.SGD(module.parameters(), lr=lr, momentum=mu)
    for idx in batches:
        opt.zero_grad()
        nn.functional.cross_entropy(module(X[idx]), Y[idx]).backward()
        opt.step()
    return {k: v.detach() for k, v in module.named_parameters()}


def test_k_steps_without_momentum_are_the_old_fine_tuning_bit_for_bit(make_spec: Callable[..., RunSpec]) -> None:
    exp = build_experiment(make_spec(*SMALL, "algorithm=fedper", "eval.local_test=split", "eval.finetune_steps=3"))
    ev = local_evaluation(exp, None, 0)
    assert ev is not None and ev.ft == FineTune(3, None, exp.spec.fl.batch_size, 0, 0.0)
    state = fresh_state(exp)
    clients = [0, 2, 3]
    stacked = ev.own_models(exp.algorithm, state.params, state.clients.gather(torch.tensor(clients)), 3)
    got = ev.finetuned(stacked, clients, 5, 0.07)
    # fedrun's fine-tuning before eval.finetune_epochs/_momentum (commit 921bea2, metrics/personal.py)
    rows = []
    for cid in clients:
        part = ev.train_parts[cid]
        draw = np_rng(exp.spec.seed, "finetune", 5, cid).integers(0, int(part.numel()), size=(3, ev.ft.batch))
        rows.append(part[torch.as_tensor(draw)])
    old = stacked
    for b in torch.stack(rows, 1):
        g = vmap(autodiff.grad(exp.model.loss))(old, exp.fed.batch(b))
        old = {k: p - 0.07 * g[k] for k, p in old.items()}
    for k in old:
        assert torch.equal(got[k], old[k]), k


def test_momentum_is_torch_sgds() -> None:
    model = _model()
    w = model.init_params()
    ft = FineTune(steps=4, lr=0.2, batch=3, momentum=0.9)
    plan = tune_plan(ft, PARTS[:1], 0, 0, [0]).client(0)
    got = sgd(w, plan, _batch, autodiff.grad(model.loss), 0.2, 0.9)
    want = _torch_sgd(model, w, list(plan.idx), 0.2, 0.9)
    for k in w:
        torch.testing.assert_close(got[k], want[k], atol=1e-12, rtol=0)


def test_epochs_pass_over_each_clients_data_and_stop_each_client_after_its_own() -> None:
    ft = FineTune(lr=0.3, batch=3, epochs=2, momentum=0.5)
    plan = tune_plan(ft, PARTS, 0, 1, [0, 1])
    assert plan.w is not None and plan.live is not None
    assert plan.live.sum(0).tolist() == [2 * 3, 2 * 1]  # ceil(7 / 3) and ceil(3 / 3) steps an epoch
    for j, n in enumerate((7, 3)):
        seen = plan.idx[:, j][plan.w[:, j] > 0][: n * 2]  # the real samples, in order
        per = -(-n // 3)
        for e in range(2):  # each epoch every sample once, its last batch short
            assert sorted(seen[e * n : (e + 1) * n].tolist()) == PARTS[j].tolist()
            assert plan.w[(e + 1) * per - 1, j].sum() == n - 3 * (per - 1)
    model = _model()
    w = model.init_params()
    stacked = {k: t.unsqueeze(0).repeat(2, *[1] * t.dim()) for k, t in w.items()}
    got = sgd(stacked, plan, _batch, vmap(autodiff.grad(model.loss)), 0.3, 0.5)
    for j in range(2):  # each client as a shuffled DataLoader without drop_last under torch.optim.SGD would take it
        batches = [plan.idx[t, j][plan.w[t, j] > 0] for t in range(int(plan.live[:, j].sum()))]
        want = _torch_sgd(model, w, batches, 0.3, 0.5)
        for k in w:
            torch.testing.assert_close(got[k][j], want[k], atol=1e-12, rtol=0)


def test_the_draws_are_keyed_so_a_plan_is_the_same_on_every_call() -> None:
    ft = FineTune(batch=3, epochs=2)
    a, b = tune_plan(ft, PARTS, 3, 4, [0, 1]), tune_plan(ft, PARTS, 3, 4, [0, 1])
    assert torch.equal(a.idx, b.idx)
    assert not torch.equal(a.idx, tune_plan(ft, PARTS, 3, 5, [0, 1]).idx)  # another round, other draws


def test_the_new_keys_at_their_defaults_keep_older_runs_identity() -> None:
    raw = {"seed": 0, "algorithm": {"name": "fedavg"}, "eval": {"every": 1, "finetune_steps": 0}}
    new = {**raw, "eval": {**raw["eval"], "finetune_epochs": 0, "finetune_momentum": 0.0}}
    assert comparable(new) == comparable(raw)
    assert comparable({**raw, "eval": {**raw["eval"], "finetune_epochs": 5}}) != comparable(raw)


def test_fedbabus_fine_tuning_runs_end_to_end_and_repeats(make_spec: Callable[..., RunSpec]) -> None:
    over = (*SMALL, "algorithm=fedbabu", "eval.local_test=split", "eval.finetune_epochs=2",
            "eval.finetune_momentum=0.9", "eval.finetune_lr=0.01")  # fmt: skip
    accs = []
    for _ in range(2):
        exp = build_experiment(make_spec(*over))
        ev = local_evaluation(exp, None, 0)
        assert ev is not None
        state = fresh_state(exp)
        accs.append(ev(exp.algorithm, state.params, state.clients, 0, 0.1)["local_acc_mean"])
        plain = ev.accuracies(exp.algorithm, state.params, None, 0, 0.1)[0]  # the global model, not fine-tuned
    assert accs[0] == accs[1] and not np.isclose(accs[0], np.nanmean(plain))
