"""Min-sum, the second AGR-agnostic attack of Shejwalkar and Houmansadr 2021 (NDSS, Sec. IV-B): as min-max
(:mod:`fedrun.robust.attacks.min_max`: m = b - gamma p, the same perturbations and knowledge), with the largest
gamma that keeps m's sum of squared distances to the known updates within that of any of them:

    argmax_gamma  sum_i ||m - x_i||^2  <=  min_i sum_j ||x_i - x_j||^2

(the authors' ``our_attack_score``: the bound is the least of the updates' sums). The sum is the quadratic
A - 2 gamma C + r gamma^2 q with C = sum_i c_i (zero when b is the updates' mean), so ``solver=exact`` is a
closed form; ``solver=search`` the authors' halving search.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedrun.robust.attacks.min_max import Perturbation, Solver, Terms, halving_search, largest_gamma, terms
from fedrun.robust.base import ATTACKS, AttackView, Knowledge, ModelAttack
from fedrun.robust.distances import sq_dists


@dataclass
class MinSumParams:
    """``perturbation``: the direction p; ``solver``: the exact largest gamma or the authors' halving search."""

    knowledge: Knowledge | None = None  # None: omniscient, the paper's main setting: the benign updates are known
    perturbation: Perturbation = "std"  # the authors' release scripts: dev_type = 'std'
    solver: Solver = "exact"


@ATTACKS.register("min_sum", MinSumParams)
class MinSum(ModelAttack):
    name = "min_sum"
    paper_knowledge = "omniscient"
    hp: MinSumParams

    def gamma(self, reference: torch.Tensor, t: Terms) -> float:
        bound = sq_dists(reference).sum(dim=1).min()
        r = reference.shape[0]
        total_a, total_c = t.a.sum().reshape(1), t.c.sum().reshape(1)
        if self.hp.solver == "exact":
            return largest_gamma(total_a, total_c, r * t.q, bound)
        return halving_search(lambda g: bool(total_a - 2 * g * total_c + g * g * r * t.q <= bound))

    def __call__(self, own: torch.Tensor, honest: torch.Tensor | None, view: AttackView) -> torch.Tensor:
        ref = self.reference(own, honest)
        t = terms(ref, self.hp.perturbation)
        return (t.b - self.gamma(ref, t) * t.p).expand_as(own).clone()
