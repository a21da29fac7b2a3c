"""pFedMe's code option: the authors' personal step adds mu * theta (fedrun/algorithms/pfedme.py); the paper's
Algorithm 1 (mu = 0) is checked by hand in test_personalised.py."""

from __future__ import annotations

from client_methods_util import assert_trees_equal, ctx_for, make_algo, tiny_batch


def test_mu_adds_mu_theta_to_each_personal_step() -> None:
    plain = make_algo("pfedme", inner_steps=1, personal_lr=0.1)
    code = make_algo("pfedme", inner_steps=1, personal_lr=0.1, mu=0.5)
    w = plain.model.init_params()
    _, _, a, _ = plain.client_step(w, None, tiny_batch(), ctx_for(plain, w, lr=0.05))
    _, _, b, _ = code.client_step(w, None, tiny_batch(), ctx_for(code, w, lr=0.05))
    assert_trees_equal(b["theta"], {k: a["theta"][k] - 0.1 * 0.5 * w[k] for k in w}, atol=1e-12)  # theta starts at w
