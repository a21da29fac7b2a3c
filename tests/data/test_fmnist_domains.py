"""The offline domain-shift benchmark: real Fashion-MNIST (Debian package) rendered as domains."""

from __future__ import annotations

import numpy as np
import pytest

from fedrun.config.registry import build_params
from fedrun.core.errors import ConfigError
from fedrun.data.sources.fmnist_domains import STYLES, FMNISTDomainsParams, load_fmnist_domains, render


def test_render_styles() -> None:
    gray = np.zeros((4, 28, 28), dtype=np.uint8)
    gray[:, :, :14] = 200  # left half bright
    rng = np.random.default_rng(0)
    plain = render(gray, "plain", rng)
    assert plain.shape == (4, 3, 28, 28) and plain.dtype == np.uint8
    assert (plain[:, 0] == gray).all() and (plain[:, 1] == plain[:, 2]).all()
    assert (render(gray, "invert", rng)[:, 0] == 255 - gray).all()
    rot = render(gray, "rotate", rng)[:, 0]
    assert (rot == np.rot90(gray, 1, axes=(1, 2))).all() and not (rot == gray).all()
    noisy = render(gray, "noise", rng)[:, 0].astype(int)
    assert 20 < np.abs(noisy - gray).mean() < 120
    col = render(gray, "colour", rng)
    assert not (col[:, 0] == col[:, 1]).all()  # really coloured


def test_fmnist_domains_loads_with_domain_ids() -> None:
    d = load_fmnist_domains(FMNISTDomainsParams())
    assert d.input_shape == (3, 28, 28) and d.num_classes == 10
    assert d.domain_names == list(STYLES)
    assert len(d.train) == 60000 and len(d.test) == 10000
    for split in (d.train, d.test):
        counts = np.bincount(split.domain.numpy(), minlength=5)
        assert counts.max() - counts.min() <= 1  # balanced
    x, dom = d.train.x.numpy(), d.train.domain.numpy()
    bright = [x[dom == k].mean() for k in range(5)]
    assert bright[STYLES.index("invert")] > 150 > bright[STYLES.index("plain")]


def test_fmnist_domains_bad_config() -> None:
    with pytest.raises(ConfigError, match="data.domains"):
        build_params(FMNISTDomainsParams, {"domains": ["plain", "sepia"]}, "data")
    with pytest.raises(ConfigError, match="data.longtail_rho"):
        build_params(FMNISTDomainsParams, {"longtail_rho": 0.5}, "data")
