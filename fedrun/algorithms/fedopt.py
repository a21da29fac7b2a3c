"""Server optimisers over the mean client update (Reddi et al. 2021, "Adaptive Federated Optimization").

Clients run FedAvg's local SGD; the server treats Delta = sum_i p_i (w_i - w^t) as a pseudo-gradient:

- ``fedopt``     server SGD: w <- w + server_lr * Delta (FedCos's "FedOpt(1.5)": server_lr = 1.5).
- ``fedavgm``    server momentum: v <- beta v + Delta, w <- w + server_lr v (Hsu et al. 2019);
                 ``form=cos``: FedCos code's EMA v <- beta v + (1 - beta) Delta (v = Delta in round 0), w <- w + v.
- ``fedadagrad`` / ``fedadam`` / ``fedyogi`` (Reddi et al. Alg. 2): m <- b1 m + (1 - b1) Delta;
                 v <- v + Delta^2 | b2 v + (1 - b2) Delta^2 | v - (1 - b2) Delta^2 sign(v - Delta^2);
                 w <- w + server_lr m / (sqrt(v) + tau), no bias correction, m = v = 0 at the start
                 (FedIMA's code; Reddi et al. start v at tau^2).

The moments live in the server state (a tensor tree), so checkpoints save them. ``server_update`` is
the step from a given average, so IMA can window the plain averages and step from their mean, and
``ima_reset`` gives the zero moments that IMA's start round t_s steps from, for that round only, as
FedIMA's code does (the round after continues from the moments before t_s; see fedrun/algorithms/ima.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedrun.algorithms.base import AlgoParams, RoundInfo
from fedrun.algorithms.fedavg import FedAvg
from fedrun.config.registry import ALGORITHMS, in_range, positive
from fedrun.config.schema import one_of
from fedrun.core.tree import Tensors, Tree, tree_map, weighted_mean, zeros_like


@dataclass
class ServerSGDParams(AlgoParams):
    """``server_lr``: eta_g (FedCos "FedOpt(1.5)": 1.5; 1.0 is FedAvg)."""

    server_lr: float = 1.5  # eta_g: w <- w + eta_g * mean client update (FedCos's "FedOpt(1.5)"; 1.0 is FedAvg)

    def __post_init__(self) -> None:
        positive("server_lr", self.server_lr)


@dataclass
class FedAvgMParams(AlgoParams):
    """``server_lr`` eta_g, ``beta`` momentum; ``form``: standard (Hsu et al.) or cos (FedCos code EMA, beta 0.5)."""

    server_lr: float = 1.0  # eta_g in w <- w + eta_g v (Hsu et al. 2019)
    beta: float = 0.9  # server momentum (Hsu et al. 2019); use 0.5 with form=cos (FedCos's code)
    # standard: v <- beta v + Delta (Hsu et al.) | cos: FedCos code's EMA v <- beta v + (1-beta) Delta, w <- w + v
    form: str = "standard"

    def __post_init__(self) -> None:
        positive("server_lr", self.server_lr)
        one_of("form", self.form, ("standard", "cos"))
        # cos: v <- beta v + (1 - beta) Delta keeps the first round's Delta forever at beta = 1, ignoring every
        # later cohort; standard: beta = 1 is undamped momentum (as fl.momentum = 1), which still trains
        cos = self.form == "cos"
        in_range("beta", self.beta, 0.0, 1.0, hi_open=cos, why="form=cos keeps the first round's update forever")


@dataclass
class AdaptiveParams(AlgoParams):
    """FedIMA's code values: eta = 1e-2, beta1 = 0.9, beta2 = 0.99, tau = 1e-3 (Adam and Yogi)."""

    server_lr: float = 1e-2  # eta, the server step (FedIMA's code, utils/aggregator.py)
    beta1: float = 0.9  # first-moment decay (FedIMA's code)
    beta2: float = 0.99  # second-moment decay (FedIMA's code); unused by FedAdagrad
    tau: float = 1e-3  # adaptivity, added to sqrt(v) (FedIMA's code)

    def __post_init__(self) -> None:
        positive("server_lr", self.server_lr)
        # m <- beta1 m + (1 - beta1) Delta stays 0 at beta1 = 1: the server never moves. beta2 = 1 keeps v at 0,
        # a legitimate reduction (server momentum with step server_lr / tau), as beta1 = 0 (no first moment) is
        in_range("beta1", self.beta1, 0.0, 1.0, hi_open=True, why="1 keeps m at 0: the server model never moves")
        in_range("beta2", self.beta2, 0.0, 1.0)
        positive("tau", self.tau)


@dataclass
class AdagradParams(AdaptiveParams):
    """FedIMA's code values for FedAdagrad: eta = 0.1, beta1 = 0 (no first moment), tau = 1e-9."""

    server_lr: float = 0.1  # eta (FedIMA's code for FedAdagrad)
    beta1: float = 0.0  # no first moment (FedIMA's code for FedAdagrad)
    tau: float = 1e-9  # FedIMA's code for FedAdagrad


class ServerOpt(FedAvg):
    """Base of the server optimisers: FMA = weighted mean, then :meth:`server_update` from it."""

    def aggregate(
        self, params: Tensors, server_state: Tree, uploads: Tree, weights: torch.Tensor, info: RoundInfo
    ) -> tuple[Tensors, Tree, dict[str, float]]:
        return self.server_update(params, server_state, weighted_mean(uploads["params"], weights), info)

    def server_update(
        self, params: Tensors, server_state: Tree, avg: Tensors, info: RoundInfo
    ) -> tuple[Tensors, Tree, dict[str, float]]:
        """w^{t+1} from w^t and the (possibly IMA-windowed) average of the client models."""
        raise NotImplementedError

    def ima_reset(self, server_state: Tree) -> Tree:
        """The state IMA's start round steps from, that round only (FedIMA: FedAdam/FedYogi moments zeroed)."""
        return server_state


@ALGORITHMS.register("fedopt", ServerSGDParams)
class ServerSGD(ServerOpt):
    """w^{t+1} = w^t + server_lr * Delta (FedCos, "FedOpt(1.5)")."""

    stacks = True  # (tests/engines/test_stacked.py)
    stack_scalars = ("server_lr",)

    steps_from_mean = True

    hp: ServerSGDParams

    def server_update(
        self, params: Tensors, server_state: Tree, avg: Tensors, info: RoundInfo
    ) -> tuple[Tensors, Tree, dict[str, float]]:
        lr = self.hp.server_lr
        return tree_map(lambda w, a: w + lr * (a - w), params, avg), server_state, {}


@ALGORITHMS.register("fedavgm", FedAvgMParams)
class FedAvgM(ServerOpt):
    """Server momentum (Hsu et al. 2019): v <- beta v + Delta, w <- w + server_lr v; or FedCos's EMA form."""

    stacks = True  # (tests/engines/test_stacked.py)
    stack_scalars = ("server_lr", "beta")

    steps_from_mean = True

    hp: FedAvgMParams

    def server_init(self, params: Tensors) -> Tree:
        return {"v": zeros_like(params), "started": torch.zeros((), dtype=torch.bool)}

    def server_update(
        self, params: Tensors, server_state: Tree, avg: Tensors, info: RoundInfo
    ) -> tuple[Tensors, Tree, dict[str, float]]:
        hp = self.hp
        delta = tree_map(lambda a, w: a - w, avg, params)
        if hp.form == "standard":
            v = tree_map(lambda v, d: hp.beta * v + d, server_state["v"], delta)
            new = tree_map(lambda w, v: w + hp.server_lr * v, params, v)
        else:
            started = bool(server_state["started"])
            v = tree_map(lambda v, d: hp.beta * v + (1 - hp.beta) * d if started else d, server_state["v"], delta)
            new = tree_map(lambda w, v: w + v, params, v)
        return new, {"v": v, "started": torch.ones((), dtype=torch.bool)}, {}


class Adaptive(ServerOpt):
    """FedAdagrad/FedAdam/FedYogi (Reddi et al. 2021, Alg. 2) with moments m, v in the server state."""

    hp: AdaptiveParams

    def server_init(self, params: Tensors) -> Tree:
        return {"m": zeros_like(params), "v": zeros_like(params)}

    def second_moment(self, v: torch.Tensor, d2: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def server_update(
        self, params: Tensors, server_state: Tree, avg: Tensors, info: RoundInfo
    ) -> tuple[Tensors, Tree, dict[str, float]]:
        hp = self.hp
        delta = tree_map(lambda a, w: a - w, avg, params)
        m = tree_map(lambda m, d: hp.beta1 * m + (1 - hp.beta1) * d, server_state["m"], delta)
        v = tree_map(lambda v, d: self.second_moment(v, d * d), server_state["v"], delta)
        new = tree_map(lambda w, m, v: w + hp.server_lr * m / (v.sqrt() + hp.tau), params, m, v)
        return new, {"m": m, "v": v}, {}

    def ima_reset(self, server_state: Tree) -> Tree:
        return zeros_like(server_state)


@ALGORITHMS.register("fedadagrad", AdagradParams)
class FedAdagrad(Adaptive):
    """v <- v + Delta^2 (Reddi et al. Alg. 2)."""

    stacks = True  # (tests/engines/test_stacked.py)
    stack_scalars = ("server_lr", "beta1", "beta2", "tau")

    steps_from_mean = True

    def second_moment(self, v: torch.Tensor, d2: torch.Tensor) -> torch.Tensor:
        return v + d2

    def ima_reset(self, server_state: Tree) -> Tree:
        return server_state  # FedIMA's code resets only FedAdam's and FedYogi's moments


@ALGORITHMS.register("fedadam", AdaptiveParams)
class FedAdam(Adaptive):
    """v <- beta2 v + (1 - beta2) Delta^2 (Reddi et al. Alg. 2)."""

    stacks = True  # (tests/engines/test_stacked.py)
    stack_scalars = ("server_lr", "beta1", "beta2", "tau")

    steps_from_mean = True

    def second_moment(self, v: torch.Tensor, d2: torch.Tensor) -> torch.Tensor:
        return self.hp.beta2 * v + (1 - self.hp.beta2) * d2


@ALGORITHMS.register("fedyogi", AdaptiveParams)
class FedYogi(Adaptive):
    """v <- v - (1 - beta2) Delta^2 sign(v - Delta^2) (Reddi et al. Alg. 2)."""

    stacks = True  # (tests/engines/test_stacked.py)
    stack_scalars = ("server_lr", "beta1", "beta2", "tau")

    steps_from_mean = True

    def second_moment(self, v: torch.Tensor, d2: torch.Tensor) -> torch.Tensor:
        return v - (1 - self.hp.beta2) * d2 * torch.sign(v - d2)
