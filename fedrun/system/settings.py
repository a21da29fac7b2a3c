"""The ``system`` section: the simulated system the clients run on (fedrun/system/, docs/systems.md).

Its choices are registries, not lists: ``system.devices`` names a registered device profile
(fedrun/system/profiles/) and ``system.server`` ``sync`` or a registered asynchronous server
(fedrun/system/servers/). A server with keys of its own declares them in the dataclass it registers with; they
join this section after its own keys (:func:`fedrun.capabilities.base.section_class`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Literal

from fedrun.config.registry import in_range, positive
from fedrun.core.errors import ConfigError
from fedrun.system.registries import DEVICE_PROFILES, SERVERS

SYNC = "sync"  # system.server's value for synchronous rounds: no asynchronous server
# the keys of the asynchronous servers: without effect, and left out of a run's identity, when server is sync
ASYNC_KEYS = ("server", "concurrency", "buffer", "server_lr", "mixing", "staleness", "staleness_a", "staleness_b",
              "eval_every_seconds")  # fmt: skip


@dataclass(frozen=True)
class SystemSettings:
    """The simulated system (``system.*``): who fails to report, who straggles, each client's device, the round's
    deadline, and the server (synchronous rounds, or an asynchronous server's event stream). At its defaults
    (``system=ideal``) no client fails, none straggles and no clock is kept: the run is the same, bit for bit and
    column for column, as one without it.

    Every draw is keyed by (seed, round, client) (fedrun/core/rng.py), so a run, its resume and every method under
    one seed see the same dropouts and stragglers.
    """

    dropout: float = 0.0  # p: a sampled client fails to report w.p. p (per-client rates: a trace's dropout entries)
    stragglers: float = 0.0  # the share of each cohort that does only part of its local work (FedProx sec. 5.2)
    # drop: stragglers are not aggregated (FedProx's FedAvg); partial: each runs a uniformly drawn part of its work
    straggler_policy: Literal["drop", "partial"] = "drop"
    # a straggler runs U{1..E-1} of its E epochs (FedProx's code) or U{1..S-1} steps
    straggler_work: Literal["epochs", "steps"] = "epochs"
    devices: str = "uniform"  # the clients' devices: uniform (one mid device), tiers (drawn per client), trace (file)
    trace: str | None = None  # devices=trace: a device trace file (JSON, or FedScale's pickles: docs/systems.md)
    deadline: float | None = None  # simulated seconds a round waits; clients that report later are dropped
    over_selection: float = 1.0  # sample ceil(f x cohort) clients and keep the first cohort-many to report (f >= 1)
    server: str = "sync"  # sync: rounds; fedasync (Xie et al. 2019) or fedbuff (Nguyen et al. 2022): asynchronous
    concurrency: int | None = None  # C: clients training at once under an async server; None: fl's cohort size
    buffer: int = 10  # K: fedbuff's updates per server step (Nguyen et al. 2022 sec. 5: K = 10)
    server_lr: float = 1.0  # eta_g: fedbuff's server step size, w += eta_g x mean delta (1: the buffer's average)
    mixing: float = 0.6  # alpha: fedasync's w = (1 - a_t) w + a_t x_new, a_t = alpha s(t - tau) (Xie et al. sec. 6)
    # s(t - tau): constant 1, polynomial (t-tau+1)^-a, hinge (Xie et al. sec. 3)
    staleness: Literal["constant", "polynomial", "hinge"] = "constant"
    staleness_a: float = 0.5  # a of polynomial and hinge (Xie et al. sec. 6: poly a = 0.5; hinge a = 10, b = 4)
    staleness_b: float = 4.0  # b of hinge: staleness up to b is not discounted (Xie et al. sec. 6: b = 4)
    eval_every_seconds: float | None = (
        None  # async: evaluate when the clock passes each multiple of T (None: eval.every)
    )

    def __post_init__(self) -> None:
        in_range("dropout", self.dropout, 0.0, 1.0)
        in_range("stragglers", self.stragglers, 0.0, 1.0)
        if self.devices not in DEVICE_PROFILES.names():
            raise ConfigError("devices", f"invalid value {self.devices!r}; valid: {', '.join(DEVICE_PROFILES.names())}")
        DEVICE_PROFILES.get(self.devices).obj.check(self)
        positive("deadline", self.deadline)
        if not (isinstance(self.over_selection, int | float) and 1.0 <= self.over_selection < math.inf):
            raise ConfigError(
                "over_selection", f"must be a factor >= 1 (1: no over-selection), got {self.over_selection}"
            )
        self._check_async()

    def _check_async(self) -> None:
        servers = (SYNC, *SERVERS.names())
        if self.server not in servers:
            raise ConfigError("server", f"invalid value {self.server!r}; valid: {', '.join(servers)}")
        for name in ("concurrency", "buffer"):
            v = getattr(self, name)
            if v is not None and not (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
                raise ConfigError(name, f"must be a whole number of clients >= 1, got {v!r}")
        positive("server_lr", self.server_lr)
        positive("eval_every_seconds", self.eval_every_seconds)
        in_range("mixing", self.mixing, 0.0, 1.0, lo_open=True)
        for name in ("staleness_a", "staleness_b"):
            v = getattr(self, name)
            if not (isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v < math.inf):
                raise ConfigError(name, f"must be a finite number >= 0, got {v!r}")
        if self.server == SYNC and self.eval_every_seconds is not None:
            raise ConfigError("eval_every_seconds", "evaluates an async server's stream; valid: null with server=sync")

    @property
    def ideal(self) -> bool:
        """Whether this is the ideal system (every key at its default): no system model runs, no columns added."""
        return all(getattr(self, f.name) == f.default for f in fields(SystemSettings))

    @property
    def asynchronous(self) -> bool:
        """Whether an asynchronous server replaces the synchronous rounds."""
        return self.server != SYNC

    @classmethod
    def of(cls, spec: Any) -> SystemSettings:
        """The run's ``system`` section (a :class:`~fedrun.config.schema.RunSpec`'s)."""
        out: SystemSettings = spec.sections["system"]
        return out
