"""The personalised methods' paper and code forms (issue 50, point 2): each option's defining property and its
reduction, checked by hand on a tiny float64 model.

- Ditto: the paper's explicit proximal step (the default, and the authors' trainers_MTL/ditto.py) and the implicit
  one (``prox=implicit``, fedrun's step before) differ by the factor 1 / (1 + eta lambda);
- APFL ``form=code`` (FedTorch): outputs mixed, v stepped at the updated w; alpha = 0 is the global model, alpha = 1
  the paper's form, and on a linear model the output mixture is the parameter mixture;
- pFedMe ``score=code``: the personalised model scored is w_i, the local model at the end of the round.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from client_methods_util import SMALL, assert_trees_equal, ctx_for, make_algo, plain_grad, tiny_batch, train
from torch import nn

from fedrun.config.schema import RunSpec
from fedrun.core.tree import unstack
from fedrun.models.base import FunctionalModel
from fedrun.run.experiment import build_experiment
from fedrun.run.state import fresh_state
from tests.metrics.local_eval_util import local_evaluation


def _moved(params: dict[str, torch.Tensor], by: float) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    return {k: t + by * torch.randn(t.shape, generator=g, dtype=t.dtype) for k, t in params.items()}


# ---- Ditto ---------------------------------------------------------------------------------------------------------
def test_dittos_default_is_the_papers_explicit_step_by_hand() -> None:
    algo = make_algo("ditto", lam=1.0)
    w0 = algo.model.init_params()
    v = _moved(w0, 0.3)  # v away from w^t, so the proximal term acts
    ctx = ctx_for(algo, w0, state={"v": v}, lr=0.05)
    _, _, state, _ = algo.client_step(w0, None, tiny_batch(), ctx)
    g = plain_grad(algo.model, v, tiny_batch())
    assert_trees_equal(state["v"], {k: v[k] - 0.05 * (g[k] + 1.0 * (v[k] - w0[k])) for k in v}, atol=1e-12)


def test_dittos_implicit_step_is_the_explicit_one_shrunk_by_one_plus_eta_lambda() -> None:
    steps = {}
    for prox in ("explicit", "implicit"):
        algo = make_algo("ditto", lam=1.0, prox=prox)
        w0 = algo.model.init_params()
        v = _moved(w0, 0.3)
        _, _, state, _ = algo.client_step(w0, None, tiny_batch(), ctx_for(algo, w0, state={"v": v}, lr=0.05))
        steps[prox] = torch.cat([(state["v"][k] - v[k]).flatten() for k in v])
    ratio = steps["implicit"] / steps["explicit"]
    torch.testing.assert_close(ratio, torch.full_like(ratio, 1 / 1.05), atol=1e-12, rtol=0)  # 4.76% shorter


# ---- APFL ----------------------------------------------------------------------------------------------------------
def _linear() -> FunctionalModel:
    torch.manual_seed(3)
    return FunctionalModel(nn.Sequential(nn.Linear(4, 2)).double())


def test_apfl_code_form_steps_v_at_the_updated_w_through_the_output_mixture() -> None:
    algo = make_algo("apfl", alpha=0.3, form="code")
    w0 = algo.model.init_params()
    v = _moved(w0, 0.5)
    batch = tiny_batch()
    w1, _, state, _ = algo.client_step(w0, None, batch, ctx_for(algo, w0, state={"v": v}, lr=0.1))
    assert_trees_equal(w1, {k: w0[k] - 0.1 * plain_grad(algo.model, w0, batch)[k] for k in w0}, atol=1e-12)
    leaves = {k: t.detach().clone().requires_grad_(True) for k, t in v.items()}
    out = 0.3 * algo.model.logits(leaves, batch["x"]) + 0.7 * algo.model.logits(w1, batch["x"])  # FedTorch's mixture
    grads = torch.autograd.grad(torch.nn.functional.cross_entropy(out, batch["y"]), list(leaves.values()))
    assert_trees_equal(state["v"], {k: v[k] - 0.1 * g for (k, g) in zip(leaves, grads, strict=True)}, atol=1e-12)


def test_apfl_code_form_at_alpha_one_is_the_paper_form() -> None:
    w0 = make_algo("apfl").model.init_params()
    v = _moved(w0, 0.5)
    got = {}
    for form in ("paper", "code"):
        algo = make_algo("apfl", alpha=1.0, form=form)
        _, _, state, _ = algo.client_step(w0, None, tiny_batch(), ctx_for(algo, w0, state={"v": v}, lr=0.1))
        got[form] = state["v"]
    assert_trees_equal(got["code"], got["paper"], atol=1e-12)  # local training of v in both


def test_apfl_code_form_at_alpha_zero_predicts_with_the_global_model() -> None:
    algo = make_algo("apfl", alpha=0.0, form="code")
    w = algo.model.init_params()
    own = algo.personal_model(w, {"v": _moved(w, 1.0)})
    x = tiny_batch()["x"]
    assert torch.equal(algo.own_logits(own, x), algo.model.logits(w, x))


def test_on_a_linear_model_the_output_mixture_is_the_parameter_mixture() -> None:
    model = _linear()
    paper, code = make_algo("apfl", model, alpha=0.3), make_algo("apfl", model, alpha=0.3, form="code")
    w = model.init_params()
    state = {"v": _moved(w, 1.0)}
    x = tiny_batch()["x"]
    mixed = paper.own_logits(paper.personal_model(w, state), x)
    torch.testing.assert_close(code.own_logits(code.personal_model(w, state), x), mixed, atol=1e-12, rtol=0)
    # ... and so the code form differs from the paper's only in where v's gradient is taken: at the updated w
    v = state["v"]
    w1, _, a, _ = code.client_step(w, None, tiny_batch(), ctx_for(code, w, state=state, lr=0.1))
    _, _, b, _ = paper.client_step(w1, None, tiny_batch(), ctx_for(paper, w1, state={"v": v}, lr=0.1))
    assert_trees_equal(a["v"], b["v"], atol=1e-12)


def test_apfl_code_form_is_evaluated_by_its_output_mixture(make_spec: Callable[..., RunSpec]) -> None:
    exp = build_experiment(make_spec(*SMALL, "algorithm=apfl", "algorithm.form=code", "algorithm.alpha=0.4",
                                     "eval.local_test=partition"))  # fmt: skip
    state = fresh_state(exp)
    gen = torch.Generator().manual_seed(0)
    for t in state.clients.rows["v"].values():  # every client its own v
        t.add_(torch.randn(t.shape, generator=gen))
    ev = local_evaluation(exp, None, 0)
    assert ev is not None
    got = ev.accuracies(exp.algorithm, state.params, state.clients, 0, 0.1)[1]
    model, want = exp.model, []
    model.module.eval()
    for cid, part in enumerate(ev.local.parts):
        v = unstack(state.clients.rows, cid)["v"]
        b = exp.fed.batch(torch.as_tensor(part), ev.split)
        with torch.no_grad():
            out = 0.4 * model.logits(v, b["x"]) + 0.6 * model.logits(state.params, b["x"])
        want.append(float((out.argmax(1) == b["y"]).double().mean()))
    model.module.train()
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want, dtype=torch.float64))
    assert len(set(want)) > 1


# ---- pFedMe --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("engine", ["sequential", "vectorised"])
def test_pfedme_code_scoring_evaluates_w_i_after_local_training(make_spec: Callable[..., RunSpec], engine: str) -> None:
    over = (*SMALL, "algorithm=pfedme", "fl.local_steps=3", f"hardware.engine={engine}")
    paper, _, plog = train(make_spec(*over))
    code, _, clog = train(make_spec(*over, "algorithm.score=code"))
    assert_trees_equal(code, paper)  # the scoring changes nothing in training
    algo = build_experiment(make_spec(*over, "algorithm.score=code")).algorithm
    rows, uploads = clog[-1]["states"].rows, clog[-1]["uploads"]["params"]
    for i in range(4):  # every client trained in the last round: its scored model is the w_i it uploaded
        state = unstack(rows, i)
        assert_trees_equal(algo.personal_model(code, state), {k: u[i] for k, u in uploads.items()})
        assert not torch.equal(state["w"]["1.weight"], state["theta"]["1.weight"])  # theta_i, the paper's, differs


def test_ima_wrapping_a_method_keeps_its_predictor_and_selection() -> None:
    from fedrun.algorithms.ima import IMA
    from fedrun.config.schema import IMAConfig

    apfl = make_algo("apfl", alpha=0.3, form="code")
    w = apfl.model.init_params()
    own, x = apfl.personal_model(w, {"v": _moved(w, 1.0)}), tiny_batch()["x"]
    wrapped = IMA(apfl, IMAConfig(enabled=True))
    assert torch.equal(wrapped.own_logits(own, x), apfl.own_logits(own, x))
    assert torch.equal(wrapped.own_loss(own, tiny_batch()), apfl.own_loss(own, tiny_batch()))
    assert IMA(make_algo("lg_fedavg", select_on_test=True), IMAConfig(enabled=True)).select_on_test
