"""Differential privacy as a capability (``privacy.*``; fedrun/privacy/, docs/privacy.md).

``privacy.mode`` names a registered mechanism (fedrun/privacy/mechanisms/): client-level DP-FedAvg, an upload
stage; sample-level DP-SGD, a form of the method. The capability plugs either in through the same hooks and keeps
what every mechanism shares: the noise multiplier as state (solved once, kept by resumes and extensions), the
budget spent as a metrics column that never decreases, and what the run's summary says of it.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any, ClassVar

from fedrun.algorithms.base import Algorithm
from fedrun.capabilities.base import Capability, RoundCtx, RunView, StateView
from fedrun.config.fit import model_buffers
from fedrun.config.registry import CAPABILITIES
from fedrun.config.validate import FLOAT_MAX
from fedrun.core.errors import ConfigError
from fedrun.core.tree import Tensors, Tree
from fedrun.data.cohorts import sample_clients
from fedrun.privacy.registries import MECHANISMS
from fedrun.privacy.settings import NONE, PrivacySettings


@CAPABILITIES.register("privacy")
class Privacy(Capability):
    """A privacy mechanism of the run, its noise as state, and its epsilon."""

    name: ClassVar[str] = "privacy"
    section: ClassVar[str] = "privacy"
    position: ClassVar[int] = 20
    Settings: ClassVar[type] = PrivacySettings
    leads: ClassVar[bool] = True
    legacy_counters: ClassVar[dict[str, tuple[str, float, bool]]] = {"dp_clip": ("client-level DP's clip", 0.0, True)}

    @classmethod
    def active(cls, settings: PrivacySettings) -> bool:
        return settings.on

    @classmethod
    def check(cls, settings: PrivacySettings, spec: Any) -> None:
        """Refuse a ``privacy`` section the rest of the run cannot honour, in one line naming the key."""
        if not settings.on:
            return
        fl = spec.fl
        if fl.sampling != "fixed":
            raise ConfigError(
                "fl.sampling",
                "under differential privacy privacy.sampling chooses the cohort; valid: fixed (the default) with"
                " privacy.sampling=poisson|fixed",
            )
        others = [n for n in CAPABILITIES.names() if n != cls.name and CAPABILITIES.get(n).obj.alters_clients]
        busy = [n for n in others if CAPABILITIES.get(n).obj.active(spec.sections[n])]
        if fl.train_all or busy:
            key = "fl.train_all" if fl.train_all else busy[0]
            raise ConfigError(key, "is not covered by the privacy analysis; valid: fl.train_all=false, system=ideal")
        bound = math.sqrt(FLOAT_MAX[spec.hardware.precision])
        if settings.clip > bound:  # clip x z x noise and clip x update enter float arithmetic of the run's dtype
            raise ConfigError(
                "privacy.clip",
                f"{settings.clip!r} overflows {spec.hardware.precision} arithmetic in a clipped update or its noise;"
                f" valid: 0 < clip <= {bound:.3g}",
            )
        if model_buffers(spec):  # (checked again on the built model: a dataset without a registered signature)
            raise ConfigError("privacy.mode", batchnorm_refusal(settings, spec))
        MECHANISMS.get(settings.mode).obj.check(settings, spec)

    @classmethod
    def words(cls, settings: PrivacySettings) -> str:
        if not settings.on:
            return ""
        title = MECHANISMS.get(settings.mode).obj.title
        noise = (
            f"eps {settings.target_epsilon:g}"
            if settings.target_epsilon is not None
            else f"z {settings.noise_multiplier:g}"
        )
        return f"{title} ({noise})"

    @classmethod
    def tag(cls, settings: PrivacySettings) -> str:
        if not settings.on:
            return ""
        title = MECHANISMS.get(settings.mode).obj.title.lower().replace(" ", "-")
        t = settings.target_epsilon
        return f"{title}-eps{t:g}" if t is not None else f"{title}-z{settings.noise_multiplier:g}"

    def __init__(self, settings: PrivacySettings, run: RunView) -> None:
        super().__init__(settings, run)
        if run.model.buffers:
            raise ConfigError("privacy.mode", batchnorm_refusal(settings, run.spec))
        self.mechanism = MECHANISMS.get(settings.mode).obj(settings, run)

    @classmethod
    def choices(cls) -> dict[str, list[str]]:
        return {"mode": [NONE, *MECHANISMS.names()]}

    @classmethod
    def contributors(cls) -> list[tuple[str, type | None]]:
        return [(n, MECHANISMS.get(n).params) for n in MECHANISMS.names()]

    @classmethod
    def stack_blocker(cls, settings: PrivacySettings) -> str | None:
        """DP-FedAvg and local noise stack (upload stages, their noise keyed by each run's seed, their budget each run's
        state); DP-SGD does not: it trains a form of the method whose step carries the run's own noise multiplier."""
        if settings.mode == "sample":
            return "DP-SGD (privacy.mode=sample) trains a form of the method that holds its run's noise multiplier"
        return None

    @classmethod
    def preflight(cls, settings: PrivacySettings, spec: Any) -> None:
        """A target epsilon no noise reaches is refused before any data is read (where the budget needs no data)."""
        MECHANISMS.get(settings.mode).obj.preflight(settings, spec)

    # -- the hooks, the mechanism's
    def wrap(self, algorithm: Algorithm) -> Algorithm:
        out: Algorithm = self.mechanism.wrap(algorithm)
        return out

    def upload_stages(self) -> list[Any]:
        out: list[Any] = self.mechanism.upload_stages()
        return out

    def choose(self, ctx: RoundCtx) -> None:
        if self.mechanism.sampling():  # Poisson: each client w.p. q, the cohort possibly empty
            ctx.sampled = sample_clients(self.run.spec.fl, self.run.spec.seed, ctx.rnd, True)
            ctx.keep = len(ctx.sampled)

    def weighting(self) -> str | None:
        out: str | None = self.mechanism.weighting()
        return out

    def empty_round(self, ctx: RoundCtx, state: StateView) -> bool:
        columns = self.mechanism.empty_round(state, ctx.rnd)
        if columns is None:
            return False
        ctx.columns.update(columns)
        return True

    def eval_columns(self, rnd: int, state: StateView, model: Tensors, lr: float) -> dict[str, float]:
        """The budget spent so far at ``privacy.delta`` (dp-accounting), and the noise the rounds used."""
        return {"epsilon": self.mechanism.epsilon(rnd + 1), "noise_multiplier": self.mechanism.z}

    # -- state and record
    def state_dict(self) -> Tree:
        out: Tree = self.mechanism.state_dict()
        return out

    def load_state_dict(self, tree: Tree, legacy: dict[str, Any]) -> None:
        if tree:
            self.mechanism.load_state_dict(tree)
        elif "dp_clip" in legacy and hasattr(self.mechanism, "dp"):  # a checkpoint of before the contract
            self.mechanism.dp.clip = float(legacy["dp_clip"])

    def snapshot(self) -> Any:
        return self.state_dict()

    def restore(self, snap: Any) -> None:
        self.mechanism.load_state_dict(snap)

    def describe(self) -> dict[str, Any]:
        return {"privacy": {**self.mechanism.describe(), **self.mechanism.record()}}

    def summarize(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        """The budget the whole run spent (docs/privacy.md), the noise its rounds used, and whether an extension
        took it past the target the noise was solved for."""
        out: dict[str, Any] = {"privacy": {**self.mechanism.describe(), **self.mechanism.record()}}
        if rows and "epsilon" in rows[-1]:
            out["epsilon_final"] = float(rows[-1]["epsilon"])
            out["delta"] = self.settings.delta
        return out

    def lines(self, summary: dict[str, Any]) -> list[tuple[str, str]]:
        if "epsilon_final" not in summary:
            return []
        m, eps = self.mechanism, summary["epsilon_final"]
        spent = f"epsilon {eps:.4g} at delta {self.settings.delta:g} ({m.title}, z = {m.z:.4g})"
        out = [("privacy spent", spent)]
        if summary["privacy"].get("extended_past_target"):
            target, solved = self.settings.target_epsilon, m.solved_for
            out.append(("privacy target", f"epsilon {target:g} over {solved} rounds: exceeded by the extension"))
        return out

    def brief(self, summary: dict[str, Any]) -> str:
        return f"eps {summary['epsilon_final']:.3g}" if "epsilon_final" in summary else ""

    def start(self, run_dir: Path | None, start: int) -> None:
        """The noise multiplier fixed before the first round (a resume's is the checkpoint's, loaded by now; a new
        run's solved now if nothing needed it yet); a run longer than the rounds it was solved for (an extension)
        says so."""
        m = self.mechanism
        z = m.z
        if m.solved_for is not None and self.run.spec.fl.rounds > m.solved_for:
            print(
                f"fedrun: privacy: the noise (z={z:.6g}) was solved for privacy.target_epsilon="
                f"{self.settings.target_epsilon:g} over {m.solved_for} rounds; {self.run.spec.fl.rounds} rounds spend"
                f" epsilon {m.epsilon(self.run.spec.fl.rounds):.4g} (summary.json says so)",
                file=sys.stderr,
            )


def batchnorm_refusal(settings: PrivacySettings, spec: Any) -> str:
    """Why a model with BatchNorm statistics cannot run under privacy, and what can."""
    return (
        f"{settings.mode}: model={spec.model.name} has BatchNorm statistics, which the privacy analysis does not cover"
        " (shared across samples, uploaded unclipped); valid: a model without BatchNorm (e.g. mlp, cnn) or privacy=none"
    )
