"""The simulated system as a capability (``system.*``; fedrun/system/, docs/systems.md).

Synchronous rounds: ``choose`` over-selects the cohort, ``plan`` decides who fails to report and how much each
straggler works, ``report`` puts the workers on the simulated clock and keeps those within the deadline and among
the first cohort-many (:class:`~fedrun.system.model.SystemModel`). Under an asynchronous server
(``system.server``, fedrun/system/servers/) the capability is the run's driver instead: each loop step is one
server update of the server's event stream. Its state is the simulated clock, and an async server's event queue.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, ClassVar

import torch

from fedrun.capabilities.base import Capability, RoundCtx, RunView, StateView
from fedrun.config.registry import CAPABILITIES
from fedrun.core.errors import ConfigError
from fedrun.core.tree import Tree
from fedrun.system.model import SystemModel
from fedrun.system.registries import DEVICE_PROFILES, SERVERS
from fedrun.system.settings import ASYNC_KEYS, SYNC, SystemSettings


@CAPABILITIES.register("system")
class System(Capability):
    """Dropout, stragglers, devices, deadlines, over-selection and the clock; or an asynchronous server."""

    name: ClassVar[str] = "system"
    section: ClassVar[str] = "system"
    position: ClassVar[int] = 10
    Settings: ClassVar[type] = SystemSettings
    alters_clients: ClassVar[bool] = True
    legacy_counters: ClassVar[dict[str, tuple[str, float, bool]]] = {"clock": ("the simulated clock", 0.0, False)}

    @classmethod
    def active(cls, settings: SystemSettings) -> bool:
        return not settings.ideal

    @classmethod
    def check(cls, settings: SystemSettings, spec: Any) -> None:
        """Refuse a ``system`` section the run's ``fl`` settings cannot honour, in one line naming the key."""
        fl = spec.fl
        if settings.over_selection > 1 and fl.train_all:
            raise ConfigError(
                "system.over_selection",
                "over-selection keeps the first cohort-many sampled clients to report, but fl.train_all trains every"
                " client; valid: 1 with fl.train_all=true",
            )
        if settings.asynchronous:
            SERVERS.get(settings.server).obj.check(settings, fl)
            for other in CAPABILITIES.names():
                cap, section = CAPABILITIES.get(other).obj, spec.sections.get(other)
                key = cap.transforms_uploads(section) if section is not None else None
                if key is not None:  # an async server steps the model itself, outside the upload pipeline
                    raise ConfigError(
                        key,
                        f"not with system.server={settings.server}: the upload pipeline runs in synchronous rounds;"
                        f" valid: its default, or system.server={SYNC}",
                    )
        # with fl.local_steps set there are no epochs: a straggler's work is then counted in steps (system/model.py)
        if (
            settings.stragglers
            and settings.straggler_work == "epochs"
            and fl.local_steps is None
            and fl.local_epochs < 2
        ):
            raise ConfigError(
                "system.straggler_work",
                f"epochs: a straggler runs U{{1..E-1}} of E local epochs, but fl.local_epochs={fl.local_epochs};"
                " valid: steps, or fl.local_epochs >= 2",
            )

    @classmethod
    def words(cls, settings: SystemSettings) -> str:
        if settings.ideal:
            return ""
        if settings.asynchronous:
            c = f"C={settings.concurrency}" if settings.concurrency is not None else "C=cohort"
            k = f", K={settings.buffer}" if settings.server == "fedbuff" else ""
            return f"{settings.server} ({c}{k}, {settings.devices} devices)"
        parts = [
            f"dropout {settings.dropout:g}" if settings.dropout else "",
            f"{settings.stragglers:.0%} stragglers ({settings.straggler_policy})" if settings.stragglers else "",
            f"{settings.devices} devices" if settings.devices != "uniform" else "",
            f"deadline {settings.deadline:g} s" if settings.deadline is not None else "",
            f"over-selection {settings.over_selection:g}" if settings.over_selection > 1 else "",
        ]
        return "system: " + ", ".join(p for p in parts if p) if any(parts) else "simulated clock"

    @classmethod
    def tag(cls, settings: SystemSettings) -> str:
        if settings.ideal:
            return ""
        return settings.server if settings.asynchronous else "system"

    @classmethod
    def identity(cls, node: dict[str, Any], raw: dict[str, Any]) -> dict[str, Any] | None:
        """The async servers' keys drop out with synchronous rounds, the whole section at the ideal system: the
        runs of before either existed keep their identity."""
        out = dict(node)
        if out.get("server", SYNC) == SYNC:
            for k in ASYNC_KEYS:
                out.pop(k, None)
        if all(out.get(f.name, f.default) == f.default for f in fields(SystemSettings)):
            return None
        return out

    @classmethod
    def stack_blocker(cls, settings: SystemSettings) -> str | None:
        """It stacks: who works, their budgets, the clock and an async server's queue are each run's own, outside the
        client step; the stacked engine cuts each row's plan to its budget (tests/engines/test_stacked.py)."""
        return None

    def __init__(self, settings: SystemSettings, run: RunView) -> None:
        super().__init__(settings, run)
        spec = run.spec
        self.model = SystemModel(settings, spec.fl, spec.seed, run.fed.sizes.numpy())
        self.clock = 0.0  # the simulated clock after the finished rounds (seconds)
        self.server: Any = None
        if settings.asynchronous:
            self.server = SERVERS.get(settings.server).obj(settings, spec.fl, spec.seed, self.model)
        self._plan: Any = None

    @classmethod
    def choices(cls) -> dict[str, list[str]]:
        return {"devices": DEVICE_PROFILES.names(), "server": [SYNC, *SERVERS.names()]}

    @classmethod
    def contributors(cls) -> list[tuple[str, type | None]]:
        """Keys a registered server or device profile declares join the ``system`` section."""
        return [(n, SERVERS.get(n).params) for n in SERVERS.names()] + [
            (n, DEVICE_PROFILES.get(n).params) for n in DEVICE_PROFILES.names()
        ]

    def bind(self, run: RunView) -> None:
        if self.server is not None:  # an async server steps only FedAvg's average
            self.server.check_method(self.settings.server, run.algorithm, run.model)

    def drive(self) -> Any:
        return self.server

    # -- a synchronous round
    def choose(self, ctx: RoundCtx) -> None:
        ctx.sampled, ctx.keep = self.model.sample(ctx.rnd, ctx.sampled)

    def plan(self, ctx: RoundCtx, state: StateView) -> None:
        assert ctx.trained is not None
        run, algo = self.run, self.run.algorithm
        self.model.count_flops(algo, run.fed, state.params, ctx.extras, ctx.lr)
        self._plan = self.model.plan(ctx.rnd, ctx.trained.numpy(), algo.round_fl(ctx.rnd), self.clock)
        ctx.works, ctx.budgets = self._plan.works, self._plan.budgets

    def report(self, ctx: RoundCtx) -> None:
        plan, res, fl = self._plan, ctx.result, self.run.algorithm.round_fl(ctx.rnd)
        assert ctx.trained is not None
        seconds = self.model.client_seconds(
            plan.clients[plan.works], res.steps.numpy(), fl, ctx.down_bytes, ctx.up_bytes
        )
        target = ctx.keep if self.settings.over_selection > 1 else len(ctx.trained)
        close = self.model.close(plan, target, seconds)
        self.clock += close.seconds
        ctx.reports = close.reports
        ctx.columns.update(
            {
                "sim_seconds": close.seconds,
                "sim_clock": self.clock,
                "dropped": int(plan.dropped.sum()),
                "stragglers": int(plan.straggles.sum()),
                "late": close.late,
                "over_selected": close.discarded,
            }
        )

    # -- state and record
    @property
    def now(self) -> float:
        """The simulated clock (seconds): an async server's queue's, else the rounds' sum."""
        return float(self.server.queue.clock) if self.server is not None else self.clock

    def state_dict(self) -> Tree:
        clock = torch.tensor(self.now, dtype=torch.float64)
        return {"clock": clock} if self.server is None else {"clock": clock, "events": self.server.state_dict()}

    def load_state_dict(self, tree: Tree, legacy: dict[str, Any]) -> None:
        where = legacy.get("where", "checkpoint")
        if tree:
            self.clock = float(tree["clock"])
            if self.server is not None and "events" in tree:
                self.server.load_state_dict(tree["events"], where)
            return
        self.clock = float(legacy.get("clock", 0.0))  # absent from checkpoints of before the simulated clock
        if self.server is not None and legacy.get("events"):
            self.server.load_state_dict(legacy["events"], where)

    def snapshot(self) -> Any:
        return (self.clock, self.server.snapshot() if self.server is not None else None)

    def restore(self, snap: Any) -> None:
        self.clock, queue = snap
        if self.server is not None:
            self.server.restore(queue)

    def summarize(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        return {"sim_clock": self.now}  # the simulated clock at the end (seconds)

    def lines(self, summary: dict[str, Any]) -> list[tuple[str, str]]:
        return [("simulated clock", f"{summary['sim_clock']:,.1f} s ({self.words(self.settings)})")]

    def brief(self, summary: dict[str, Any]) -> str:
        return f"clock {summary['sim_clock']:,.1f} s"

    def step_word(self) -> str | None:
        return "server update" if self.server is not None else None
