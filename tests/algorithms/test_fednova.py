"""FedNova: a_i with local momentum (checked against actual momentum SGD), and the normalised average."""

from __future__ import annotations

import pytest
import torch
from client_methods_util import make_algo, tiny_model

from fedrun.algorithms.base import RoundInfo, sgd_step
from fedrun.algorithms.fednova import nova_a
from fedrun.config.schema import FLConfig
from fedrun.core.errors import ConfigError
from fedrun.core.tree import stack
from fedrun.run.experiment import build_experiment


def test_nova_a_matches_momentum_sgd_displacement() -> None:
    rho, tau, lr = 0.9, 7, 0.1
    # by hand: a = [tau - rho (1 - rho^tau)/(1 - rho)] / (1 - rho)
    expected = (tau - rho * (1 - rho**tau) / (1 - rho)) / (1 - rho)
    assert abs(float(nova_a(torch.tensor([tau]), rho)[0]) - expected) < 1e-12
    # a is the displacement of momentum SGD under a constant gradient, in units of lr * g
    w, buf, g = {"w": torch.zeros(())}, {"w": torch.zeros(())}, {"w": torch.ones(())}
    for _ in range(tau):
        w, buf = sgd_step(w, g, buf, lr, rho, 0.0, None)
    assert abs(float(-w["w"] / lr) - expected) < 1e-5
    assert torch.equal(nova_a(torch.tensor([3, 5]), 0.0), torch.tensor([3.0, 5.0], dtype=torch.float64))


def test_fednova_aggregate_by_hand() -> None:
    model = tiny_model()
    algo = make_algo("fednova", model, fl=FLConfig(momentum=0.5))
    w = model.init_params()
    ups = {"params": stack([{k: v - 1.0 for k, v in w.items()}, {k: v - 2.0 for k, v in w.items()}])}
    info = RoundInfo(0, 2, torch.tensor([0, 1]), torch.tensor([1.0, 3.0]), torch.tensor([2, 4]), 0.1)
    p = torch.tensor([0.25, 0.75], dtype=torch.float64)
    new, _, diag = algo.aggregate(w, {}, ups, p, info)
    a = [(t - 0.5 * (1 - 0.5**t) / 0.5) / 0.5 for t in (2, 4)]
    tau_eff = 0.25 * a[0] + 0.75 * a[1]
    step = tau_eff * (0.25 * 1.0 / a[0] + 0.75 * 2.0 / a[1])
    assert abs(diag["tau_eff"] - tau_eff) < 1e-12
    for k in w:
        torch.testing.assert_close(new[k], w[k] - step)


def test_fednova_equal_steps_plain_sgd_is_fedavg() -> None:
    model = tiny_model()
    algo = make_algo("fednova", model)
    w = model.init_params()
    ups = {"params": stack([{k: v - 1.0 for k, v in w.items()}, {k: v + 2.0 for k, v in w.items()}])}
    info = RoundInfo(0, 2, torch.tensor([0, 1]), torch.tensor([1.0, 3.0]), torch.tensor([3, 3]), 0.1)
    new, _, _ = algo.aggregate(w, {}, ups, torch.tensor([0.25, 0.75], dtype=torch.float64), info)
    for k in w:
        torch.testing.assert_close(new[k], w[k] + 1.25)


NOVA = ("algorithm=fednova", "data.max_train_samples=200", "fl.clients=4")


def test_fednova_refuses_momentum_kept_across_rounds(make_spec) -> None:  # noqa: ANN001
    # a_i normalises tau_i momentum steps from a zero buffer (the authors' code: a fresh SGD each round);
    # a buffer carried in from the last round adds displacement that a_i does not count
    spec = make_spec(*NOVA, "fl.momentum=0.9", "fl.keep_momentum=true")
    with pytest.raises(ConfigError) as err:
        build_experiment(spec)
    assert err.value.field == "fl.keep_momentum" and "\n" not in str(err.value)
    fresh = make_spec(*NOVA, "fl.momentum=0.9", "fl.keep_momentum=false")
    assert build_experiment(fresh).algorithm.fl.momentum == 0.9
    assert build_experiment(make_spec(*NOVA, "fl.keep_momentum=true"))
