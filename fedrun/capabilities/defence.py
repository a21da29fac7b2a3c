"""Byzantine-robust aggregation as a capability (``defence.*``; fedrun/robust/, docs/robustness.md).

``defence.name`` names a registered rule (fedrun/robust/defences/), ``defence.pre`` a pre-aggregator in front of it
(NNM, bucketing), ``defence.f`` the Byzantine uploads per cohort it tolerates (unset: ceil(attack.fraction x m)).
It is an upload stage whose :meth:`~fedrun.upload.base.UploadStage.replace_sum` is the rule's aggregate of the rows
the server received, which the method then steps from as from the weighted mean: only a method that declares it
does so (``steps_from_mean``) runs with a defence. FLTrust's root update is trained at w^t on the run's proxy split
when the round is planned; centered clipping's previous aggregate is the capability's state, checkpointed.

Refused in one line: a method that does not step from the mean, DP-FedAvg (``privacy.mode=client``: robust
aggregation is not covered by its analysis), FLTrust without a proxy split or under DP-SGD, and a rule no cohort of
the run can satisfy (e.g. fixed-size cohorts of m <= 2f + 2 for Krum). A round whose cohort is too small for the
rule (Bernoulli sampling, dropouts) keeps w^t, with ``defence_skipped`` = 1 and one log line.
"""

from __future__ import annotations

import math
from dataclasses import asdict, fields
from typing import Any, ClassVar

import torch

from fedrun.capabilities.base import Capability, DataSplit, RoundCtx, RunView, StateView
from fedrun.config.registry import ALGORITHMS, CAPABILITIES
from fedrun.core.errors import ConfigError
from fedrun.core.tree import Tree
from fedrun.data.proxy import carve_proxy
from fedrun.robust.base import DEFENCES, PREAGGREGATORS, Defence, PreAggregator, refusal
from fedrun.robust.malicious import malicious_clients
from fedrun.robust.root import root_update
from fedrun.robust.settings import NONE, DefenceSettings, check_unused_keys
from fedrun.robust.stages import DefenceStage
from fedrun.upload.base import UploadStage


def build_rule(settings: Any) -> tuple[Defence, tuple[PreAggregator, ...]]:
    """The chosen rule and pre-aggregator, their settings read from the section."""
    entry = DEFENCES.get(settings.name)
    defence: Defence = entry.obj(_params(entry.params, settings))
    if settings.pre == NONE:
        return defence, ()
    pre = PREAGGREGATORS.get(settings.pre)
    mixer: PreAggregator = pre.obj(_params(pre.params, settings))
    return defence, (mixer,)


def _params(params: type | None, settings: Any) -> Any:
    return params(**{f.name: getattr(settings, f.name) for f in fields(params)}) if params is not None else None


def byzantine(settings: DefenceSettings, attack: Any) -> Any:
    """f of a cohort of m: ``defence.f``, else ceil(attack.fraction x m) (the attack section's fraction, its default
    when no attack runs: the server's assumption)."""
    if settings.f is not None:
        fixed = settings.f
        return lambda m: fixed
    fraction = float(attack.fraction)
    return lambda m: math.ceil(fraction * m - 1e-9)


def largest_cohort(spec: Any) -> int:
    """The most uploads a round of the run can aggregate: the fixed cohort, or every client (Bernoulli sampling)."""
    fl = spec.fl
    return int(fl.cohort_size) if fl.sampling == "fixed" else int(fl.clients)


@CAPABILITIES.register("defence")
class DefenceCapability(Capability):
    """A robust aggregation rule in place of the weighted mean of the uploads."""

    name: ClassVar[str] = "defence"
    section: ClassVar[str] = "defence"
    position: ClassVar[int] = 60
    Settings: ClassVar[type] = DefenceSettings

    @classmethod
    def active(cls, settings: DefenceSettings) -> bool:
        return settings.on

    @classmethod
    def choices(cls) -> dict[str, list[str]]:
        return {"name": [NONE, *DEFENCES.names()], "pre": [NONE, *PREAGGREGATORS.names()]}

    @classmethod
    def contributors(cls) -> list[tuple[str, type | None]]:
        rules = [(n, DEFENCES.get(n).params) for n in DEFENCES.names()]
        return rules + [(n, PREAGGREGATORS.get(n).params) for n in PREAGGREGATORS.names()]

    @classmethod
    def stack_blocker(cls, settings: DefenceSettings) -> str | None:
        """It stacks: the robust aggregate replaces its own run's weighted sum after the client step; FLTrust's root
        update is trained in its run's own turn (keyed by its seed); centered clipping's centre is its run's state."""
        return None

    @classmethod
    def transforms_uploads(cls, settings: DefenceSettings) -> str | None:
        return "defence.name" if settings.on else None

    @classmethod
    def check(cls, settings: DefenceSettings, spec: Any) -> None:
        """Refuse what robust aggregation cannot be run with, in one line naming the key (module docstring)."""
        check_unused_keys(settings, (settings.name, settings.pre), cls.contributors(), cls.section)
        if not settings.on:
            return
        if not spec.algorithm.obj.declares("steps_from_mean"):
            ok = [n for n in ALGORITHMS.names() if ALGORITHMS.get(n).obj.declares("steps_from_mean")]
            raise ConfigError(
                "algorithm.name",
                f"{spec.algorithm.name} uploads more than its model or aggregates otherwise than by the mean update,"
                f" which defence.name={settings.name} replaces; valid with a defence: {', '.join(ok)}",
            )
        mode = spec.sections["privacy"].mode
        if mode == "client":
            raise ConfigError(
                "privacy.mode",
                f"client: DP-FedAvg's analysis covers the noisy mean, not defence.name={settings.name}'s aggregate;"
                " valid with a defence: none, sample, local",
            )
        if DEFENCES.get(settings.name).obj.needs_root:
            if not spec.proxy.per_class:
                raise ConfigError("proxy.per_class", "fltrust trains its root update on the proxy split; set it > 0")
            if mode != NONE:
                raise ConfigError(
                    "privacy.mode", f"{mode}: fltrust's root update is trained without privacy; valid: none"
                )
        cls._check_cohort(settings, spec)

    @classmethod
    def _check_cohort(cls, settings: DefenceSettings, spec: Any) -> None:
        """Refuse a rule that not even the run's largest cohort satisfies."""
        defence, pre = build_rule(settings)
        m = largest_cohort(spec)
        f = byzantine(settings, spec.sections["attack"])(m)
        why = refusal(defence, pre, m, f)
        if why is not None:
            key = "defence.f" if settings.f is not None else "defence.name"
            raise ConfigError(
                key,
                f"{why}: the run's largest cohort (fl.sampling={spec.fl.sampling}, {m} of fl.clients={spec.fl.clients})"
                f" cannot hold the f={f} it tolerates; valid: a larger cohort, a smaller f (defence.f, attack.fraction)"
                " or another rule",
            )

    @classmethod
    def words(cls, settings: DefenceSettings) -> str:
        if not settings.on:
            return ""
        f = f"f={settings.f}" if settings.f is not None else "f from attack.fraction"
        pre = f"{settings.pre} + " if settings.pre != NONE else ""
        return f"defence {pre}{settings.name} ({f})"

    @classmethod
    def tag(cls, settings: DefenceSettings) -> str:
        if not settings.on:
            return ""
        pre = f"{settings.pre}-" if settings.pre != NONE else ""
        return f"{pre}{settings.name}" + (f"-f{settings.f}" if settings.f is not None else "")

    @classmethod
    def identity(cls, node: dict[str, Any], raw: dict[str, Any]) -> dict[str, Any] | None:
        """No defence at the section's defaults drops out: the runs of before the section existed keep theirs."""
        defaults = {f.name: f.default for f in fields(DefenceSettings)}
        defaults.update({f.name: f.default for _, p in cls.contributors() if p is not None for f in fields(p)})
        return None if all(node.get(k, v) == v for k, v in defaults.items()) else node

    @classmethod
    def split_data(cls, settings: DefenceSettings, spec: Any, split: DataSplit) -> None:
        """FLTrust's root dataset: the run's proxy split, carved as the run carves it (the same seeded draw)."""
        if settings.on and DEFENCES.get(settings.name).obj.needs_root:
            split.prepared[cls.name] = carve_proxy(split.data.test, split.data.num_classes, spec.proxy, spec.seed)[0]

    def __init__(self, settings: DefenceSettings, run: RunView) -> None:
        super().__init__(settings, run)
        spec = run.spec
        self.defence, self.pre = build_rule(settings)
        attack = spec.sections["attack"]
        bad = malicious_clients(spec.seed, spec.fl.clients, attack.fraction) if attack.on else None
        self.root_split = run.prepared[self.name].to(run.device) if self.name in run.prepared else None
        self._root: torch.Tensor | None = None
        self.stage = DefenceStage(
            self.defence, self.pre, byzantine(settings, attack),
            torch.as_tensor(bad, dtype=torch.long) if bad is not None else None, self.root,
        )  # fmt: skip
        if self.defence.stateful:  # the centre of the first round is zero (Karimireddy et al. 2021): the state's shape
            dim = sum(t.numel() for t in run.model.init_params().values() if t.is_floating_point())
            self.stage.previous = torch.zeros(dim, dtype=torch.float32, device=run.device)

    def root(self) -> torch.Tensor:
        """FLTrust's server update of the round (trained when the round was planned)."""
        assert self._root is not None, "the root update is trained in plan()"
        return self._root

    def plan(self, ctx: RoundCtx, state: StateView) -> None:
        """FLTrust: the server's update g_0 at w^t on its root data, before the cohort trains."""
        if self.root_split is None:
            return
        run = self.run
        self._root = root_update(
            run.algorithm, run.fed, self.root_split, state.params, ctx.extras, ctx.lr, run.spec.seed, ctx.rnd
        ).to(run.device)

    def upload_stages(self) -> list[UploadStage]:
        return [self.stage]

    # -- state and record
    def state_dict(self) -> Tree:
        """Centered clipping's previous aggregate (the centre of the next round), and the rounds skipped."""
        out: Tree = {"skipped": torch.tensor(self.skipped_rounds(), dtype=torch.long)}
        if self.stage.previous is not None:
            out["previous"] = self.stage.previous.detach().cpu().clone()
        return out

    def load_state_dict(self, tree: Tree, legacy: dict[str, Any]) -> None:
        prev = tree.get("previous")
        if isinstance(prev, torch.Tensor):
            self.stage.previous = prev.to(self.run.device)
        skipped = tree.get("skipped")
        self.stage.skipped = int(skipped) if isinstance(skipped, torch.Tensor) else 0

    def skipped_rounds(self) -> int:
        return self.stage.skipped

    def snapshot(self) -> Any:
        prev = self.stage.previous
        return (prev.clone() if prev is not None else None, self.stage.skipped)

    def restore(self, snap: Any) -> None:
        self.stage.previous, self.stage.skipped = snap

    def describe(self) -> dict[str, Any]:
        """summary.json's ``defence``: the rule, its pre-aggregator, f and their settings."""
        out: dict[str, Any] = {"name": self.settings.name, "pre": self.settings.pre}
        out["f"] = self.settings.f if self.settings.f is not None else "ceil(attack.fraction x m)"
        if self.defence.hp is not None:
            out["params"] = asdict(self.defence.hp)
        if self.pre and self.pre[0].hp is not None:
            out["pre_params"] = asdict(self.pre[0].hp)
        return {"defence": out}

    def summarize(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        return {"defence": {**self.describe()["defence"], "skipped_rounds": self.skipped_rounds()}}

    def lines(self, summary: dict[str, Any]) -> list[tuple[str, str]]:
        skipped = summary.get("defence", {}).get("skipped_rounds", 0)
        tail = f"; {skipped} round(s) too small for it kept w^t" if skipped else ""
        return [("defence", self.words(self.settings) + tail)]
