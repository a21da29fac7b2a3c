"""The proxy set: class-balanced or long-tailed carve-out of the test split, batches, runner wiring."""

from __future__ import annotations

import pytest
import torch

from fedrun.config.schema import ProxyConfig
from fedrun.core.errors import ConfigError
from fedrun.data.base import Split
from fedrun.data.proxy import ProxySet, carve_proxy, proxy_counts
from fedrun.run.experiment import build_experiment


def labelled(n_per_class: int = 30, classes: int = 10) -> Split:
    y = torch.arange(classes).repeat(n_per_class)
    return Split(torch.arange(len(y)).float()[:, None], y)


def test_balanced_proxy_is_disjoint_from_the_evaluation_split_and_seeded() -> None:
    test = labelled()
    proxy, rest = carve_proxy(test, 10, ProxyConfig(per_class=10), seed=3)
    assert torch.bincount(proxy.y, minlength=10).tolist() == [10] * 10
    ids_p, ids_r = set(proxy.x[:, 0].tolist()), set(rest.x[:, 0].tolist())
    assert not ids_p & ids_r and len(ids_p | ids_r) == len(test)
    again, _ = carve_proxy(test, 10, ProxyConfig(per_class=10), seed=3)
    other, _ = carve_proxy(test, 10, ProxyConfig(per_class=10), seed=4)
    assert torch.equal(again.x, proxy.x) and not torch.equal(other.x, proxy.x)


def test_long_tailed_proxy_counts() -> None:
    assert proxy_counts(100, 10, 10.0) == [int(100 * 0.1 ** (k / 9)) for k in range(10)]
    assert proxy_counts(100, 10, 10.0)[0] == 100 and proxy_counts(100, 10, 10.0)[-1] == 10
    proxy, _ = carve_proxy(labelled(200), 10, ProxyConfig(per_class=100, rho=10.0), seed=0)
    assert torch.bincount(proxy.y, minlength=10).tolist() == proxy_counts(100, 10, 10.0)
    small, _ = carve_proxy(labelled(5), 10, ProxyConfig(per_class=10), seed=0)
    assert len(small) == 50  # a class with fewer samples gives all it has


def test_epoch_batches_shuffle_or_balance_classes() -> None:
    proxy, _ = carve_proxy(labelled(200), 10, ProxyConfig(per_class=100, rho=10.0), seed=0)
    plain = ProxySet(proxy, 10, batch_size=128)
    batches = plain.epoch_batches(torch.Generator().manual_seed(0))
    assert sorted(torch.cat(batches).tolist()) == list(range(len(proxy)))
    assert max(len(b) for b in batches) == 128
    balanced = ProxySet(proxy, 10, batch_size=128, balanced_sampling=True)
    g = torch.Generator().manual_seed(0)
    drawn = torch.cat([torch.cat(balanced.epoch_batches(g)) for _ in range(50)])
    freq = torch.bincount(proxy.y[drawn], minlength=10).double()
    freq /= freq.sum()
    assert freq.min() > 0.08 and freq.max() < 0.12  # ~uniform although class 0 has 10x class 9


def test_config_values_are_checked(make_spec) -> None:  # noqa: ANN001 - fixture
    with pytest.raises(ConfigError, match="proxy.rho"):
        make_spec("proxy.rho=0.5")
    with pytest.raises(ConfigError, match="proxy.per_class"):
        make_spec("proxy.per_class=-1")
    assert make_spec().proxy.per_class == 10


def test_runner_evaluates_every_method_without_the_proxy_images(make_spec) -> None:  # noqa: ANN001 - fixture
    common = ("experiment=smoke", "data.max_train_samples=300", "data.max_test_samples=500", "fl.clients=3")
    fedavg = build_experiment(make_spec("algorithm=fedavg", *common))
    fedlaw = build_experiment(make_spec("algorithm=fedlaw", *common))
    assert len(fedavg.fed.test) == len(fedlaw.fed.test) == 500 - 100
    assert torch.equal(fedavg.fed.test.y, fedlaw.fed.test.y)
    proxy = fedlaw.algorithm.setup_env.proxy
    assert torch.bincount(proxy.split.y, minlength=10).tolist() == [10] * 10
    imgs = {x.numpy().tobytes() for x in fedlaw.fed.test.x}
    assert not any(x.numpy().tobytes() in imgs for x in proxy.split.x)
    with pytest.raises(ConfigError, match="proxy.per_class"):
        build_experiment(make_spec("algorithm=fedlaw", "proxy.per_class=0", *common))
    assert len(build_experiment(make_spec("algorithm=fedavg", "proxy.per_class=0", *common)).fed.test) == 500
