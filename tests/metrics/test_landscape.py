"""Landscape geometry on a known quadratic loss: lines, the plane through three models, filter-normalised directions."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedrun.core.tree import dot, norm, sq_norm, sub
from fedrun.metrics.landscape import (
    filter_normalised_direction,
    grid_scan,
    line_scan,
    plane_axes,
    plane_through,
    random_plane,
)

F64 = torch.float64
C = {"w": torch.tensor([[1.0, -2.0], [0.5, 0.0]], dtype=F64), "b": torch.tensor([0.3, -0.1], dtype=F64)}


def quadratic(params: dict) -> tuple[float, float]:
    """A convex loss ||w - C||^2 with its minimum at C, and an 'error' that is a different function of it."""
    q = float(sq_norm(sub(params, C)))
    return q, q / (1 + q)


def _model(seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {k: torch.randn(v.shape, generator=g, dtype=torch.float64) for k, v in C.items()}


def test_line_from_a_model_to_itself_is_flat() -> None:
    a = _model(0)
    scan = line_scan(a, a, np.linspace(-0.5, 1.5, 9), quadratic)
    assert np.allclose(scan["loss"], quadratic(a)[0]) and np.allclose(scan["error"], quadratic(a)[1])


def test_line_follows_the_quadratic() -> None:
    a, b = _model(0), _model(1)
    alphas = np.linspace(-0.5, 1.5, 9)
    scan = line_scan(a, b, alphas, quadratic)
    da, dab = sub(a, C), sub(b, a)  # loss(t) = ||da + t dab||^2
    expect = float(sq_norm(da)) + 2 * alphas * float(dot(da, dab)) + alphas**2 * float(sq_norm(dab))
    np.testing.assert_allclose(scan["loss"], expect, rtol=1e-10)
    assert scan["loss"][2] == pytest.approx(quadratic(a)[0]) and scan["loss"][6] == pytest.approx(quadratic(b)[0])


def test_plane_through_three_models_reproduces_them_at_the_anchors() -> None:
    ws = [_model(0), _model(1), _model(2)]
    plane = plane_through(*ws)
    assert float(norm(plane.u)) == pytest.approx(1.0) and float(norm(plane.v)) == pytest.approx(1.0)
    assert float(dot(plane.u, plane.v)) == pytest.approx(0.0, abs=1e-12)
    for (x, y), w in zip(plane.anchors, ws, strict=True):
        scan = grid_scan(plane, [x], [y], quadratic)
        assert scan["loss"][0, 0] == pytest.approx(quadratic(w)[0], rel=1e-10)
        assert scan["error"][0, 0] == pytest.approx(quadratic(w)[1], rel=1e-10)
    xs, ys = plane_axes(plane.anchors, 5, 0.25)
    assert xs.min() < plane.anchors[:, 0].min() and ys.max() > plane.anchors[:, 1].max()
    grid = grid_scan(plane, xs, ys, quadratic)
    assert grid["loss"].shape == (5, 5) and np.all(grid["loss"] >= 0)


def test_degenerate_planes_are_refused() -> None:
    a, b = _model(0), _model(1)
    mid = {k: (a[k] + b[k]) / 2 for k in a}
    with pytest.raises(ValueError, match="collinear"):
        plane_through(a, b, mid)
    with pytest.raises(ValueError, match="identical"):
        plane_through(a, a, b)


def test_filter_normalised_directions() -> None:
    params = {"conv": torch.randn(4, 3, 2, 2), "fc": torch.randn(5, 7), "bias": torch.randn(5)}
    d = filter_normalised_direction(params, torch.Generator().manual_seed(0))
    torch.testing.assert_close(d["conv"].flatten(1).norm(dim=1), params["conv"].flatten(1).norm(dim=1))
    torch.testing.assert_close(d["fc"].norm(dim=1), params["fc"].norm(dim=1))
    assert torch.count_nonzero(d["bias"]) == 0  # Li et al.'s ignore=biasbn
    kept = filter_normalised_direction(params, torch.Generator().manual_seed(0), ignore_1d=False)
    assert float(kept["bias"].norm()) == pytest.approx(float(params["bias"].norm()), rel=1e-5)
    p1, p2 = random_plane(params, seed=3), random_plane(params, seed=3)
    torch.testing.assert_close(p1.u, p2.u)  # seeded
    assert not torch.allclose(p1.u["fc"], p1.v["fc"])  # two different directions
    centre = grid_scan(random_plane(C, seed=1), [0.0], [0.0], quadratic)
    assert centre["loss"][0, 0] == pytest.approx(0.0)  # the plane is centred on the model itself
