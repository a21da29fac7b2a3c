"""FLTrust (Cao, Fang, Liu and Gong 2021, "FLTrust: Byzantine-robust federated learning via trust
bootstrapping", NDSS, Sec. III-C, eq. (4)-(6)).

The server trains on its own small clean root dataset to a server update g_0 (given here as
:attr:`ServerView.root`; the run computes it, e.g. from its proxy split). Each upload gets the trust score
TS_i = ReLU(cos(g_i, g_0)), is rescaled to g_0's norm, g_i' = (||g_0|| / ||g_i||) g_i, and the aggregate is
g = sum_i TS_i g_i' / sum_j TS_j (zero when every score is zero). The weight of upload i in g is
TS_i ||g_0|| / (||g_i|| sum_j TS_j); the uploads of score zero are dropped. No setting.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedrun.robust.base import DEFENCES, Aggregate, Defence, ServerView, finite_rows


@dataclass
class FLTrustParams:
    """No settings: the root update comes with the round."""


def fltrust(x: torch.Tensor, g0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(the FLTrust aggregate [d], each upload's weight in it [m], the trust scores TS_i [m])."""
    tiny = torch.finfo(x.dtype).tiny
    x, finite = finite_rows(x)
    g0 = g0.to(x.dtype)
    norms = x.norm(dim=1).clamp_min(tiny)
    g0_norm = g0.norm().clamp_min(tiny)
    trust = torch.relu((x @ g0) / (norms * g0_norm)) * finite
    total = trust.sum()
    if float(total) == 0.0:
        zeros = torch.zeros_like(trust)
        return torch.zeros_like(g0), zeros, trust
    weights = trust * g0_norm / (norms * total)
    return weights @ x, weights, trust


@DEFENCES.register("fltrust", FLTrustParams)
class FLTrust(Defence):
    name = "fltrust"
    decides = True
    needs_root = True

    def __call__(self, x: torch.Tensor, view: ServerView) -> Aggregate:
        if view.root is None:
            raise ValueError("fltrust needs the server's root update (ServerView.root)")
        value, weights, trust = fltrust(x, view.root)
        return Aggregate(value, weights=weights, selected=trust > 0)
