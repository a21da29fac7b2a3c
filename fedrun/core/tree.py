"""Small helpers over parameter trees: ``dict[str, Tensor]``, possibly nested one level or more."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import torch

Tensors = dict[str, torch.Tensor]
Tree = dict[str, Any]


def tree_map(fn: Callable[..., torch.Tensor], tree: Tree, *rest: Tree) -> Tree:
    out: Tree = {}
    for k, v in tree.items():
        if isinstance(v, dict):
            out[k] = tree_map(fn, v, *(r[k] for r in rest))
        else:
            out[k] = fn(v, *(r[k] for r in rest))
    return out


def leaves(tree: Tree) -> list[torch.Tensor]:
    out: list[torch.Tensor] = []
    for v in tree.values():
        out.extend(leaves(v) if isinstance(v, dict) else [v])
    return out


def clone(tree: Tree) -> Tree:
    return tree_map(lambda t: t.detach().clone(), tree)


def zeros_like(tree: Tree) -> Tree:
    return tree_map(torch.zeros_like, tree)


def add(a: Tree, b: Tree, scale: float | torch.Tensor = 1.0) -> Tree:
    """a + scale * b."""
    return tree_map(lambda x, y: x + scale * y, a, b)


def sub(a: Tree, b: Tree) -> Tree:
    return tree_map(lambda x, y: x - y, a, b)


def scale(a: Tree, s: float | torch.Tensor) -> Tree:
    return tree_map(lambda x: x * s, a)


# sum() of tensors is a tensor for a tree with at least one leaf (every model's); an empty tree gives 0
def dot(a: Tree, b: Tree) -> torch.Tensor:
    return cast(torch.Tensor, sum((x * y).sum() for x, y in zip(leaves(a), leaves(b), strict=True)))


def sq_norm(a: Tree) -> torch.Tensor:
    return cast(torch.Tensor, sum(x.pow(2).sum() for x in leaves(a)))


def norm(a: Tree) -> torch.Tensor:
    return sq_norm(a).sqrt()


def stack(trees: list[Tree]) -> Tree:
    """List of same-shaped trees -> one tree with a leading [len(trees)] dimension."""
    return tree_map(lambda *xs: torch.stack(xs), trees[0], *trees[1:])


def unstack(tree: Tree, i: int) -> Tree:
    return tree_map(lambda t: t[i], tree)


def weighted_mean(stacked: Tree, weights: torch.Tensor) -> Tree:
    """sum_i weights[i] * stacked[i] for weights that sum to one (leading dim = clients)."""

    def wm(t: torch.Tensor) -> torch.Tensor:
        w = weights.to(t.dtype).reshape((-1,) + (1,) * (t.dim() - 1))
        return (w * t).sum(0)

    return tree_map(wm, stacked)


def nbytes(tree: Tree) -> int:
    return sum(t.numel() * t.element_size() for t in leaves(tree))


def all_finite(tree: Tree) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in leaves(tree) if t.is_floating_point())
