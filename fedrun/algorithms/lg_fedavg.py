"""LG-FedAvg (Liang et al. 2020, "Think Locally, Act Globally"): local representations, global layers.

Each client keeps its own local layers and only the global layers are averaged by the server (Sec. 3,
Algorithm 1). ``algorithm.head`` names the global layers (default: the model's last layer). The authors' code
(pliang279/LG-FedAvg, ``main_lg.py``) makes the last ``--num_layers_keep`` entries of a model's ``weight_keys``
global: on their MNIST MLP (784-512-256-256-128-10) 3 of 5, the last three linear layers (fedrun's
``model=mlp model.hidden=[512,256,256,128]``: ``algorithm.head=["5","7","9"]``); on their CIFAR CNN
``weight_keys`` lists fc1, fc2, fc3, conv2, conv1, so ``--num_layers_keep 2`` makes the two convolutions global
and the three FC layers local.

The authors start LG-FedAvg from a FedAvg-trained model (``main_lg.py`` asserts ``--load_fed``: the README's
MNIST run loads ``best_400.pt``, CIFAR-10 ``best_1200.pt``) and copy it to every client. ``warm_rounds=W``
does that within one run: rounds 0..W-1 are FedAvg on the whole model (every layer uploaded and averaged),
and from round W on the local layers stay on the clients, each client's starting from the global model's at
round W (those layers of the global model are never averaged again, so a client that has not trained since
keeps taking them from it). ``warm_lr`` is the local lr of those rounds (the authors' ``main_fed.py`` calls
``LocalUpdate.train`` without ``lr``, so it trains at that function's default 0.1 whatever ``--lr`` says).
The split point is server state broadcast with w^t (a 0-d flag), so every engine and a resumed run see it.

``select_on_test=true`` reports, beside each client's current local model, its best so far as judged on its
own local test split (``local_best_acc_*``): ``main_lg.py`` keeps ``best_net_list[user]``, the local model of
the round with the best accuracy on the user's test data. That is model selection on test data, offered to
compare with the paper's numbers, not as an unbiased estimate.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedrun.algorithms.base import Batch, ClientContext, RoundInfo, sgd_step
from fedrun.algorithms.personal import HeadParams, SplitModel
from fedrun.config.registry import ALGORITHMS, positive
from fedrun.config.schema import FLConfig
from fedrun.core.tree import Tensors, Tree, nbytes, weighted_mean
from fedrun.models.base import FunctionalModel


@dataclass
class LGParams(HeadParams):
    """``head``: the global layers (averaged); ``warm_rounds``/``warm_lr``: a FedAvg start; ``select_on_test``."""

    warm_rounds: int = 0  # FedAvg rounds on the whole model before the local layers split off (main_lg --load_fed)
    warm_lr: float | None = None  # the local lr of those rounds (None: fl.lr's schedule; main_fed.py trains at 0.1)
    select_on_test: bool = False  # also report each client's best local model so far on its TEST split (main_lg.py)

    def __post_init__(self) -> None:
        positive("warm_rounds", self.warm_rounds, allow_zero=True)
        positive("warm_lr", self.warm_lr)


@ALGORITHMS.register("lg_fedavg", LGParams)
class LGFedAvg(SplitModel):
    """The local layers are personal, the global layers (``algorithm.head``) shared; optionally a FedAvg start."""

    stacks = True  # (tests/engines/test_stacked.py)

    hp: LGParams

    def __init__(self, hp: LGParams, fl: FLConfig, model: FunctionalModel) -> None:
        super().__init__(hp, fl, model)
        shared = set(model.head_keys(hp.head))
        self.keep_split([k for k, _ in model.module.named_parameters() if k not in shared], "local layers",
                        "global layers")  # fmt: skip
        self.warm = hp.warm_rounds > 0
        self.select_on_test = hp.select_on_test

    # ---- the FedAvg start (warm_rounds > 0) -------------------------------------------------------------------
    def local_lr(self, rnd: int, lr: float) -> float:
        return self.hp.warm_lr if rnd < self.hp.warm_rounds and self.hp.warm_lr is not None else lr

    def server_init(self, params: Tensors) -> Tree:
        """``split``: 1 once the local layers have split off (from round ``warm_rounds`` on)."""
        return {"split": torch.zeros((), dtype=next(iter(params.values())).dtype)} if self.warm else {}

    def broadcast(self, params: Tensors, server_state: Tree) -> Tree:
        return {"split": server_state["split"]} if self.warm else {}

    def broadcast_bytes(self, params: Tensors, extras: Tree) -> int:
        """Before the split the whole model is sent, after it the global layers (the flag is not counted)."""
        if self.warm and not bool(extras["split"]):
            return nbytes(params)
        return nbytes({k: params[k] for k in self.shared})

    def client_init(self, params: Tensors) -> Tree:
        """``own``: 1 once the client's local layers are its own (it trained after the split), else the global
        model's are taken."""
        state = super().client_init(params)
        if not self.warm:
            return state
        return {**state, "own": torch.zeros((), dtype=next(iter(params.values())).dtype)}

    def local_parts(self, params: Tensors, state: Tree) -> Tensors:
        """The client's local layers: its own once it has them, else those of ``params``."""
        if not self.warm:
            return dict(state["personal"])
        own = state["own"] > 0
        return {k: torch.where(own, t, params[k]) for k, t in state["personal"].items()}

    def client_step(
        self, params: Tensors, opt: Tensors | None, batch: Batch, ctx: ClientContext
    ) -> tuple[Tensors, Tensors | None, Tree, torch.Tensor]:
        """One SGD step on w = {global layers as trained so far, the client's local layers}."""
        w = {**params, **self.local_parts(params, ctx.state)}
        grads, loss = self.local_grad(w, batch, ctx)
        fl = self.fl
        new, new_opt = sgd_step(w, grads, opt, ctx.lr, fl.momentum, fl.weight_decay, fl.grad_clip)
        return new, new_opt, {**ctx.state, "personal": {k: new[k] for k in self.private}}, loss

    def client_finish(self, start: Tensors, end: Tensors, ctx: ClientContext, steps: torch.Tensor) -> tuple[Tree, Tree]:
        """After the split: the global layers are uploaded and the local ones become the client's own; before it,
        the whole model is uploaded (FedAvg)."""
        if not self.warm:
            return super().client_finish(start, end, ctx, steps)
        split = ctx.extras["split"]
        state = {**ctx.state, "own": torch.zeros_like(ctx.state["own"]) + split}
        if bool(split):  # the same for the whole cohort: a broadcast flag, never a per-client value
            return {"params": {k: end[k] for k in self.shared}}, state
        return {"params": dict(end)}, state

    def aggregate(
        self, params: Tensors, server_state: Tree, uploads: Tree, weights: torch.Tensor, info: RoundInfo
    ) -> tuple[Tensors, Tree, dict[str, float]]:
        """The weighted mean of what was uploaded (the whole model before the split, the global layers after)."""
        new = {**params, **weighted_mean(uploads["params"], weights)}
        if not self.warm:
            return new, server_state, {}
        split = torch.full_like(server_state["split"], float(info.round + 1 >= self.hp.warm_rounds))
        return new, {**server_state, "split": split}, {}

    def personal_model(self, params: Tensors, client_state: Tree) -> Tensors:
        return {**params, **self.local_parts(params, client_state)}
