"""FedProx's Synthetic(alpha, beta) (fedrun/data/sources/synthetic.py): the properties each reading states, measured
on the generated data (device sizes, the split, the input law, how labels follow the inputs)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedrun.core.errors import ConfigError
from fedrun.data.sources.synthetic import SyntheticParams, code_devices, load_synthetic, paper_devices


def device_counts(split, devices: int) -> np.ndarray:
    return np.bincount(split.domain.numpy(), minlength=devices)


def test_code_sizes_are_uncapped_and_split_90_10() -> None:
    """generate_synthetic.py: lognormal(4, 2) + 50 samples, no cap; the first int(0.9 n) of each device train."""
    d = load_synthetic(SyntheticParams(variant="code", seed=0))
    train, test = device_counts(d.train, 30), device_counts(d.test, 30)
    n = train + test
    assert n.min() >= 50 and n.max() > 5000  # seed 0 draws a device above the paper reading's cap
    assert (train == (0.9 * n).astype(int)).all()
    assert [len(c) for c in d.natural_clients] == train.tolist()
    paper = load_synthetic(SyntheticParams(seed=0))
    p_train, p_test = device_counts(paper.train, 30), device_counts(paper.test, 30)
    p_n = p_train + p_test
    assert p_n.max() <= 5000 and (p_test == np.maximum(1, (0.2 * p_n).astype(int))).all()


def test_test_fraction_overrides_either_variant() -> None:
    for variant in ("paper", "code"):
        d = load_synthetic(SyntheticParams(variant=variant, test_fraction=0.5, devices=5, seed=3))
        n = device_counts(d.train, 5) + device_counts(d.test, 5)
        assert abs(len(d.test.y) / n.sum() - 0.5) < 0.01, variant


@pytest.mark.parametrize(("variant", "spread"), [("code", 4.0), ("paper", 2.0)])
def test_beta_is_a_standard_deviation_in_the_code_and_a_variance_in_the_paper(variant: str, spread: float) -> None:
    """B_k ~ N(0, beta) and v_k ~ N(B_k, 1): a device's mean input over its 60 features is B_k plus noise of
    sd ~ 1/sqrt(60), so its spread over 400 devices is beta (code) or sqrt(beta) (paper) for beta = 4."""
    p = SyntheticParams(variant=variant, alpha=0.0, beta=4.0, devices=400, mean_size=0.0, seed=1)
    xs, _, _ = (code_devices if variant == "code" else paper_devices)(p)
    means = np.array([x.mean() for x in xs])
    assert abs(means.std(ddof=1) / spread - 1) < 0.12


@pytest.mark.parametrize("variant", ["code", "paper"])
def test_inputs_within_a_device_have_the_diagonal_covariance(variant: str) -> None:
    """x ~ N(v_k, Sigma), Sigma_jj = j^-1.2: feature j's variance around its device's mean, pooled over devices."""
    xs, _, _ = (code_devices if variant == "code" else paper_devices)(SyntheticParams(variant=variant, seed=0))
    resid = np.concatenate([x - x.mean(axis=0) for x in xs])
    var = resid.var(axis=0)
    j = np.arange(1, 61)
    assert np.allclose(var / j**-1.2, 1.0, atol=0.06)
    assert abs(np.corrcoef(resid[:, 0], resid[:, 1])[0, 1]) < 0.03  # diagonal: features uncorrelated


@pytest.mark.parametrize("variant", ["code", "paper"])
def test_labels_are_a_linear_argmax_of_the_inputs(variant: str) -> None:
    """y = argmax(W_k x + b_k): on one device a multinomial logistic regression separates the labels (almost)
    exactly. A device's inputs sit near v_k (Sigma is small), so most of its samples share a class; the device
    taken is the one with the most samples outside its commonest class."""
    xs, ys, _ = (code_devices if variant == "code" else paper_devices)(SyntheticParams(variant=variant, seed=4))
    k = int(np.argmax([len(y) - np.bincount(y).max() for y in ys]))
    x, y = torch.tensor(xs[k], dtype=torch.float64), torch.tensor(ys[k])
    assert len(y) - torch.bincount(y).max() >= 20
    model = torch.nn.Linear(60, 10).double()
    opt = torch.optim.LBFGS(model.parameters(), max_iter=500, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        return loss

    opt.step(closure)
    assert (model(x).argmax(1) == y).double().mean() > 0.97


def test_alpha_moves_every_class_logit_alike_so_labels_ignore_it() -> None:
    """W_k, b_k ~ N(u_k, 1) share the mean u_k across classes: u_k adds u_k (1 + sum_j x_j) to every logit, so
    the labels do not depend on alpha (the code draws the same normals whatever alpha is)."""
    _, y1, _ = code_devices(SyntheticParams(variant="code", alpha=0.1, beta=1.0, seed=2))
    _, y2, _ = code_devices(SyntheticParams(variant="code", alpha=3.0, beta=1.0, seed=2))
    assert all(np.array_equal(a, b) for a, b in zip(y1, y2, strict=True))


def test_the_same_seed_gives_the_same_data_and_another_seed_other_data() -> None:
    a, b = (load_synthetic(SyntheticParams(variant="code", seed=7)) for _ in range(2))
    c = load_synthetic(SyntheticParams(variant="code", seed=8))
    assert torch.equal(a.train.x, b.train.x) and torch.equal(a.test.y, b.test.y)
    assert a.train.x.shape != c.train.x.shape or not torch.equal(a.train.x, c.train.x)


def test_bad_variant_and_test_fraction_name_the_field(make_spec) -> None:
    with pytest.raises(ConfigError, match=r"data\.variant.*valid: paper, code"):
        make_spec("data=synthetic", "data.variant=leaf")
    with pytest.raises(ConfigError, match=r"data\.test_fraction"):
        make_spec("data=synthetic", "data.test_fraction=1.0")
    assert make_spec("data=synthetic").data.params.held_out == 0.2
    assert make_spec("data=synthetic", "data.variant=code").data.params.held_out == 0.1
