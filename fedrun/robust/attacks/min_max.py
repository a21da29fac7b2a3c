"""Min-max, an AGR-agnostic attack (Shejwalkar and Houmansadr 2021, "Manipulating the Byzantine: optimizing model
poisoning attacks and defenses for federated learning", NDSS, Sec. IV-B): every attacker sends
m = b - gamma p, b the mean of the updates it knows and p a perturbation direction, with the largest gamma that
keeps m no farther from any of those updates than the farthest two of them are from each other:

    argmax_gamma  max_i ||m - x_i||^2  <=  max_{i,j} ||x_i - x_j||^2.

Perturbations p (the paper's): ``unit_vec`` b / ||b||, ``sign`` sign(b), ``std`` the coordinate-wise standard
deviation of the updates (the authors' release scripts run ``std``, the default here). ``knowledge=omniscient``
(the benign updates of the round known; the paper's main setting) or ``own`` (the attackers' own benign updates:
the authors' ``*-unknown-benign-gradients`` scripts).

Since ||b - gamma p - x_i||^2 = a_i - 2 gamma c_i + gamma^2 q (a_i = ||b - x_i||^2, c_i = <p, b - x_i>,
q = ||p||^2) the constraint is one quadratic per update: ``solver=exact`` takes the largest root (one pass of
deviations over the updates and one Gram product, no search). ``solver=search`` is the authors' code
(vrt1shjwlkr/NDSS21-Model-Poisoning, ``our_attack_dist``): gamma from 10, moved by halving steps until they fall
below 1e-5, which cannot go past 20.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch

from fedrun.robust.base import ATTACKS, AttackView, Knowledge, ModelAttack
from fedrun.robust.distances import sq_dists

Perturbation = Literal["unit_vec", "sign", "std"]
Solver = Literal["exact", "search"]


@dataclass
class MinMaxParams:
    """``perturbation``: the direction p; ``solver``: the exact largest gamma or the authors' halving search."""

    knowledge: Knowledge | None = None  # None: omniscient, the paper's main setting: the benign updates are known
    perturbation: Perturbation = "std"  # the authors' release scripts: dev_type = 'std'
    solver: Solver = "exact"  # exact: the largest feasible gamma; search: the authors' (gamma from 10, step 1e-5)


@dataclass(frozen=True)
class Terms:
    """What min-max and min-sum solve with: the mean b [d], the perturbation p [d], and the quadratic's terms
    ||b - gamma p - x_i||^2 = a_i - 2 gamma c_i + gamma^2 q (a_i = ||b - x_i||^2, c_i = <p, b - x_i>, q = ||p||^2)."""

    b: torch.Tensor
    p: torch.Tensor
    a: torch.Tensor
    c: torch.Tensor
    q: torch.Tensor


def terms(reference: torch.Tensor, kind: Perturbation) -> Terms:
    """The mean, the perturbation (``unit_vec`` b / ||b||, ``sign`` sign(b), ``std`` the coordinate-wise standard
    deviation) and the quadratic's terms, from one pass of deviations x_i - b."""
    b = reference.mean(dim=0)
    dev = reference - b
    if kind == "unit_vec":
        p = torch.div(b, b.norm().clamp_min(torch.finfo(b.dtype).tiny))
    elif kind == "sign":
        p = torch.sign(b)
    elif reference.shape[0] > 1:
        p = ((dev * dev).sum(dim=0) / (reference.shape[0] - 1)).sqrt()  # coordinate_std, from these deviations
    else:
        p = torch.zeros_like(b)
    return Terms(b, p, dev.norm(dim=1).pow(2), -(dev @ p), p.pow(2).sum())


def halving_search(feasible: Callable[[float], bool], start: float = 10.0, tol: float = 1e-5) -> float:
    """The authors' search for the largest feasible gamma: from ``start``, step start/2, halving each time."""
    gamma, step, good = start, start, 0.0
    while abs(good - gamma) > tol:
        if feasible(gamma):
            good = gamma
            gamma += step / 2
        else:
            gamma -= step / 2
        step /= 2
    return good


def largest_gamma(a: torch.Tensor, c: torch.Tensor, q: torch.Tensor, bound: torch.Tensor) -> float:
    """The largest gamma >= 0 with a_i - 2 gamma c_i + gamma^2 q <= bound for every i (0 when q = 0)."""
    if float(q) == 0.0:
        return 0.0
    disc = (c.pow(2) - q * (a - bound)).clamp_min(0.0)
    return max(0.0, float(((c + disc.sqrt()) / q).min()))


@ATTACKS.register("min_max", MinMaxParams)
class MinMax(ModelAttack):
    name = "min_max"
    paper_knowledge = "omniscient"
    hp: MinMaxParams

    def gamma(self, reference: torch.Tensor, t: Terms) -> float:
        bound = sq_dists(reference).max()
        if self.hp.solver == "exact":
            return largest_gamma(t.a, t.c, t.q, bound)
        return halving_search(lambda g: bool((t.a - 2 * g * t.c + g * g * t.q).max() <= bound))

    def __call__(self, own: torch.Tensor, honest: torch.Tensor | None, view: AttackView) -> torch.Tensor:
        ref = self.reference(own, honest)
        t = terms(ref, self.hp.perturbation)
        return (t.b - self.gamma(ref, t) * t.p).expand_as(own).clone()
