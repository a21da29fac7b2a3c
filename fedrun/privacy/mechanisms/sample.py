"""``privacy.mode=sample``: DP-SGD inside each client (Abadi et al. 2016, Alg. 1; the arithmetic is
fedrun/privacy/sample.py's, Opacus' clipping and noise).

Its noise enters through the method: the run trains a DP-SGD form of the method (:func:`with_dp_sgd`, a subclass of
the method's own class, as IMA is a wrapper of any method), whose local gradient is the per-sample clipped, noised
one and whose training batches carry their keyed noise (its ``batch_extras``). Epsilon is per sample of a client's
data: each local step one Poisson-subsampled Gaussian at q_i = B / n_i, composed over the steps client i took; the
run reports the largest over the clients.
"""

from __future__ import annotations

import copy
import sys
from typing import Any, ClassVar

import numpy as np
import torch

from fedrun.algorithms.base import Algorithm, Batch, ClientContext
from fedrun.core.errors import ConfigError
from fedrun.core.tree import Tensors
from fedrun.data.cohorts import participations
from fedrun.data.federated import num_local_steps
from fedrun.privacy.mechanisms.base import MECHANISMS, Mechanism
from fedrun.privacy.sample import DPSGD, NoiseForBatches, SampleDP, dp_sgd_for
from fedrun.privacy.settings import PrivacySettings

DTYPES = {"fp32": torch.float32, "fp64": torch.float64, "bf16": torch.float32}


class DPSGDStep:
    """What a method becomes under DP-SGD: its :meth:`local_grad` is DP-SGD's on its own local objective, and its
    training batches carry the step's keyed noise. Every other hook is the method's own, so its ``client_step``
    (a split model's masked step, FedProx's proximal loss) runs with the private gradient."""

    dp_sgd: DPSGD
    dp_noise: NoiseForBatches

    def local_grad(self, params: Tensors, batch: Batch, ctx: ClientContext) -> tuple[Tensors, torch.Tensor]:
        return self.dp_sgd(self.local_loss, params, batch, ctx)  # type: ignore[attr-defined]

    def batch_extras(self, rnd: int, clients: torch.Tensor, step: int) -> dict[str, torch.Tensor]:
        return self.dp_noise(rnd, clients, step)


def with_dp_sgd(algorithm: Algorithm, dp: DPSGD, noise: NoiseForBatches) -> Algorithm:
    """A copy of ``algorithm`` whose class is its own with :class:`DPSGDStep` first (made once per method class,
    named in this module so that it pickles, e.g. to Ray's actors)."""
    base = type(algorithm)
    name = f"DPSGD_{base.__name__}"
    cls = getattr(sys.modules[__name__], name, None)
    if cls is None or cls.__mro__[2] is not base:
        cls = type(name, (DPSGDStep, base), {"__module__": __name__, "__qualname__": name})
        setattr(sys.modules[__name__], name, cls)
    out = copy.copy(algorithm)
    out.__class__ = cls
    out.dp_sgd, out.dp_noise = dp, noise  # type: ignore[attr-defined]
    return out


@MECHANISMS.register("sample")
class SampleLevel(Mechanism):
    """DP-SGD: the unit is one training sample of a client; z is solved for the client that spends the most."""

    title: ClassVar[str] = "DP-SGD"
    unit: ClassVar[str] = "one training sample of a client"

    def __init__(self, settings: PrivacySettings, run: Any) -> None:
        self.sizes = run.fed.sizes.numpy()
        super().__init__(settings, run)
        self.steps = np.array([num_local_steps(int(n), self.fl) for n in self.sizes])

    @classmethod
    def check(cls, settings: PrivacySettings, spec: Any) -> None:
        """DP-SGD replaces the plain gradient of the local objective: a method with its own gradient (SAM,
        SCAFFOLD...) is refused; so is client-level DP's adaptive clipping."""
        if settings.adaptive_clip:
            raise ConfigError(
                "privacy.adaptive_clip", "is client-level DP's (Andrew et al. 2021); valid: false with mode=sample"
            )
        if spec.algorithm.obj.local_grad is not Algorithm.local_grad:
            raise ConfigError(
                "algorithm.name",
                f"{spec.algorithm.name} computes its own local gradient, which DP-SGD's per-sample gradient would"
                " replace; valid with privacy.mode=sample: a method on the plain gradient (fedavg, fedprox, fedavgm,"
                " fedadam...)",
            )

    def budget(self) -> tuple[float, int]:
        return SampleDP.worst_case(self.fl, self.sizes)

    def epsilon(self, rounds: int) -> float:
        """The largest client's budget: its steps so far (rounds it was sampled in x its local steps) at q_i."""
        steps = participations(self.fl, self.seed, rounds) * self.steps
        return SampleDP(self.settings, self.fl, self.sizes, self.z).epsilon(steps)

    def wrap(self, algorithm: Algorithm) -> Algorithm:
        run, clip = self.run, self.settings.clip
        dim = sum(p.numel() for p in run.model.init_params().values())
        dtype = DTYPES[run.spec.hardware.precision]
        noise = NoiseForBatches(dim, lambda: self.z * clip, self.seed, dtype, run.fed.device)
        return with_dp_sgd(algorithm, dp_sgd_for(algorithm, clip), noise)

    def describe(self) -> dict[str, Any]:
        c = self.settings
        return {
            "mode": "sample (DP-SGD)", "unit": self.unit, "sampling": "fixed-size shuffled batches (accounted as"
            " Poisson with q_i = B/n_i)", "noise_multiplier": self.z, "clip": c.clip, "delta": c.delta,
            "accountant": f"{c.accountant} (dp-accounting)", "target_epsilon": c.target_epsilon,
            "epsilon_is": "the largest over the clients",
        }  # fmt: skip
