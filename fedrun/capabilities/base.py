"""The capability contract: one shape for everything beyond the method that acts inside a round.

A capability (the simulated system and its asynchronous servers, differential privacy, upload compression,
personalised evaluation...) is one registered subclass of :class:`Capability` (``@CAPABILITIES.register(name)``,
fedrun/config/registry.py) with:

- its settings: a frozen dataclass (``Settings``), each default stated once with its source, its own range checks
  in ``__post_init__``; they are the config section ``section`` (or, with ``joins``, keys added to a root section:
  personalised evaluation's ``eval.local_test...``); :meth:`check` sees the whole validated run for rules across
  sections ("DP refuses dropout");
- its hooks at the fixed points of a round (below), called by fedrun/run/ in one place each, in the order of
  ``position``;
- its saved state as one tree (:meth:`state_dict` / :meth:`load_state_dict`), which checkpoints and resumes carry
  under its name, and a :meth:`snapshot` the run rewinds to when a round is interrupted;
- what it says of the run: :meth:`describe` (summary.json when the run starts), :meth:`summarize` (when it ends),
  :meth:`words` (the run's folder name, the summary table's and the plots' titles, the sweep's lines).

A synchronous round, with the hooks in the order they run (docs/design.md draws it):

    choose     the cohort: fedrun's sampling, or a capability's (Poisson sampling for DP, over-selection)
    plan       who of the trained clients works, and each worker's most local steps (dropouts, stragglers)
    (train)    the engine trains the workers from w^t: fedrun/run/rounds.py's one cohort-training step
    report     who of the workers reports (the deadline, the first cohort-many), on the simulated clock
    upload     each report's upload transformed by the capabilities' upload stages, in their ``order``
               (compression at 100, DP-FedAvg's clip at 200), then their hook on the weighted sum (DP noise)
    weigh      the aggregation weights (DP-FedAvg weighs clients uniformly)
    (aggregate) the method's server step
    columns    the round's metrics columns (the simulated clock, epsilon; personalised accuracy when evaluated)

A capability that replaces the round itself (an asynchronous server's event stream) is the run's ``driver``: the
run loop asks it for each step instead (:meth:`Capability.drive`). The hooks a capability does not override do
nothing, so a capability is only what differs from a run without it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np
import torch

from fedrun.config.registry import CAPABILITIES
from fedrun.upload.base import UploadContext
from fedrun.upload.pipeline import UPLOAD_STATE, UploadPipeline, build_pipeline, upload_layout

if TYPE_CHECKING:
    from fedrun.algorithms.base import Algorithm
    from fedrun.core.tree import Tensors, Tree
    from fedrun.data.federated import FederatedData
    from fedrun.engines.base import CohortResult
    from fedrun.models.base import FunctionalModel
    from fedrun.upload.base import UploadStage


@dataclass
class RunView:
    """What a capability sees of its run, from when it is built: the validated spec, the device, the clients' data,
    the model, the method (the final one, after every :meth:`Capability.wrap` and IMA, once bound), what each
    capability's :meth:`Capability.split_data` prepared, by name, and each client's samples (``parts``, as
    :meth:`Capability.client_data` saw them)."""

    spec: Any
    device: torch.device
    fed: FederatedData
    model: FunctionalModel
    algorithm: Algorithm
    prepared: dict[str, Any] = field(default_factory=dict)
    parts: list[np.ndarray] = field(default_factory=list)


class StateView(Protocol):
    """What a capability sees of the run state (fedrun/run/state.py's ``RunState``)."""

    params: Tensors
    server_state: Tree
    clients: Any
    train_time: float
    samples: int


class Train(Protocol):
    """The run's one cohort-training step (fedrun/run/rounds.py ``train_cohort_at``), handed to a driver."""

    def __call__(
        self, key: int, extras: Tree, clients: torch.Tensor, lr: float, budgets: torch.Tensor | None = None,
        at: int | None = None,
    ) -> CohortResult: ...  # fmt: skip


@dataclass
class RoundResult:
    """What a trained and aggregated round (or a driver's step) reports: its local lr and loss, the bytes it moved,
    the server's time, the method's and the optional diagnostics, the round's client-weight rows and the
    capabilities' columns."""

    rnd: int
    clients: int
    lr: float
    loss: float
    bytes_down: int
    bytes_up: int
    aggregate_seconds: float
    started: float
    diagnostics: dict[str, float] = field(default_factory=dict)
    weight_rows: list[dict[str, Any]] = field(default_factory=list)
    system: dict[str, float] = field(default_factory=dict)  # the capabilities' columns of this round


@dataclass
class DataSplit:
    """The run's data as its capabilities may split it before the clients' data is built: ``parts`` (each
    client's samples, the first ``fl.clients`` train), ``train_parts`` (what each trains on), the test split left
    after the proxy set (``test``; None: the dataset's) and what each capability prepared (``prepared[name]``,
    handed to it when it is built: ``RunView.prepared``)."""

    data: Any
    parts: list[np.ndarray]
    train_parts: list[np.ndarray]
    test: Any
    prepared: dict[str, Any] = field(default_factory=dict)


@dataclass
class RoundCtx:
    """One synchronous round as the hooks see it, filled in as it goes: the sampled cohort (``choose`` may replace it
    and lower ``keep``, the most reports aggregated), the trained clients, the round's lr and broadcast extras, who
    works and on which budgets (``plan``; None: everyone, whole plans), the workers' training ``result``, the bytes
    one client moves each way, who reports (``report``; None: every worker) and the round's ``columns``."""

    rnd: int
    sampled: np.ndarray
    keep: int
    trained: torch.Tensor | None = None
    lr: float = 0.0
    extras: Any = None
    works: np.ndarray | None = None
    budgets: torch.Tensor | None = None
    workers: torch.Tensor | None = None
    result: Any = None
    down_bytes: float = 0.0
    up_bytes: float = 0.0
    reports: np.ndarray | None = None
    columns: dict[str, float] = field(default_factory=dict)


class Capability:
    """A capability of a run: settings, hooks at the round's fixed points, state, and its words (module docstring).

    Subclasses set ``section`` and ``Settings`` and override what they do; ``position`` orders the sections after
    the root ones and the hooks within a round.
    """

    name: ClassVar[str] = ""
    section: ClassVar[str] = ""
    joins: ClassVar[bool] = False
    position: ClassVar[int] = 100
    Settings: ClassVar[type] = type(None)
    # it decides which clients fail, straggle or arrive late (what the privacy analysis does not cover)
    alters_clients: ClassVar[bool] = False
    # its evaluated columns lead the metrics row, right after the test accuracy and loss (epsilon)
    leads: ClassVar[bool] = False
    # what it kept in a checkpoint's counters before the contract: name -> (what it is, lower bound, 0 excluded)
    legacy_counters: ClassVar[dict[str, tuple[str, float, bool]]] = {}

    def __init__(self, settings: Any, run: RunView) -> None:
        self.settings = settings
        self.run = run

    # -- config time: classmethods of the settings alone (no run exists yet)
    @classmethod
    def active(cls, settings: Any) -> bool:
        """Whether the run's settings turn this capability on (off: it is not built and adds nothing)."""
        return False

    @classmethod
    def check(cls, settings: Any, spec: Any) -> None:
        """Refuse (a ConfigError naming the key) what the rest of the validated run ``spec`` makes meaningless."""
        return None

    @classmethod
    def words(cls, settings: Any) -> str:
        """What the run is, in a few words ("DP-FedAvg eps 8", "top-k 1% +EF"); "" when off."""
        return ""

    @classmethod
    def tag(cls, settings: Any) -> str:
        """A few characters for the run's folder name ("dp-fedavg-eps8", "topk0.01-ef"); "" when off."""
        return ""

    @classmethod
    def resolve(cls, settings: Any, spec: Any) -> Any:
        """Its settings made definite from the rest of the validated run (a default the method decides); as they are
        by default. A ConfigError names the bare key of its section."""
        return settings

    @classmethod
    def identity(cls, node: dict[str, Any], raw: dict[str, Any]) -> dict[str, Any] | None:
        """The section's part of a run's identity (fedrun/config/identity.py; ``raw``: the whole config); None: it
        drops out (at defaults, so that runs of before the capability existed keep theirs)."""
        return node

    @classmethod
    def choices(cls) -> dict[str, list[str]]:
        """Its keys whose valid values are a registry's names (``server``: sync and the registered servers)."""
        return {}

    @classmethod
    def contributors(cls) -> list[tuple[str, type | None]]:
        """(name, params dataclass or None) of its registered choices whose keys join its section (a server's)."""
        return []

    @classmethod
    def client_numel(cls, settings: Any, params: int) -> int:
        """Numbers of per-client state it keeps for each client, for a model of ``params`` numbers (the memory
        estimate at validation, fedrun/config/resources.py; 0 when off)."""
        return 0

    @classmethod
    def transforms_uploads(cls, settings: Any) -> str | None:
        """The key that has it transform the clients' uploads (an upload stage) with ``settings``, else None."""
        return None

    @classmethod
    def stack_blocker(cls, settings: Any) -> str | None:
        """Why a sweep's job with this capability on (``settings``) cannot train stacked with other jobs (one vmap over
        their cohorts, fedrun/engines/stacked.py; docs/sweeps.md), in a few words; None: it can, its state, draws and
        columns being its own run's. The default refuses: a capability stacks once it says so and a test checks it."""
        return f"{cls.name} has not been checked to stack"

    @classmethod
    def of(cls, spec: Any) -> Any:
        """This capability's settings in the validated run ``spec``."""
        return spec.sections[cls.name]

    # -- the data, before the clients' data is built
    @classmethod
    def extra_clients(cls, settings: Any) -> int:
        """Clients partitioned beyond ``fl.clients`` (that never train: unseen clients)."""
        return 0

    @classmethod
    def split_data(cls, settings: Any, spec: Any, split: DataSplit) -> None:
        """Take what it needs of the clients' data (local test splits) from ``split``, in place."""

    @classmethod
    def client_data(cls, settings: Any, spec: Any, data: Any, parts: list[np.ndarray]) -> Any:
        """The dataset the clients train on (``data``: as loaded, or with FedLAW's corrupted labels), e.g. with some
        clients' samples poisoned; ``data`` itself by default. The test split stays the loaded one."""
        return data

    # -- a built run
    @classmethod
    def preflight(cls, settings: Any, spec: Any) -> None:
        """What can be refused from the settings before any data is read (a target epsilon no noise reaches)."""

    def bind(self, run: RunView) -> None:
        """The run's method is final (``run.algorithm``, after every :meth:`wrap` and IMA): refuse what this
        capability cannot do with it (a ConfigError), before any engine is timed or round run."""

    def wrap(self, algorithm: Algorithm) -> Algorithm:
        """The method the run trains with (DP-SGD wraps the gradient); itself by default."""
        return algorithm

    def client_state(self) -> Tree:
        """Per-client state rows of this capability beside the method's ({}: none)."""
        return {}

    def upload_stages(self) -> list[UploadStage]:
        """Transforms of the cohort's uploads (fedrun/upload/base.py), run in their ``order``."""
        return []

    def drive(self) -> Any:
        """A driver replacing the synchronous round (an asynchronous server: fedrun/system/servers/), else None."""
        return None

    def start(self, run_dir: Path | None, start: int) -> None:
        """The run opens ``run_dir`` (None: a run without one) from round ``start``: files of its own are cut back
        to it (clients.csv)."""

    # -- a synchronous round, in this order
    def choose(self, ctx: RoundCtx) -> None:
        """Change the cohort (``ctx.sampled``, ``ctx.keep``) before anything trains."""

    def plan(self, ctx: RoundCtx, state: StateView) -> None:
        """Set who of ``ctx.trained`` works (``ctx.works``) and their budgets (``ctx.budgets``)."""

    def report(self, ctx: RoundCtx) -> None:
        """After training, set who of ``ctx.workers`` reports (``ctx.reports``) and add the round's columns."""

    def weighting(self) -> str | None:
        """The aggregation weighting this capability requires (``uniform``), else None (``fl.weighting``)."""
        return None

    def empty_round(self, ctx: RoundCtx, state: StateView) -> bool:
        """A round whose cohort is empty: True when this capability stepped the model itself (DP's noise alone)."""
        return False

    def eval_columns(self, rnd: int, state: StateView, model: Tensors, lr: float) -> dict[str, float]:
        """The columns of evaluated round ``rnd`` (0-based; ``model`` the global model evaluated)."""
        return {}

    # -- state and record
    def state_dict(self) -> Tree:
        """The state a checkpoint carries ({}: none)."""
        return {}

    def load_state_dict(self, tree: Tree, legacy: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; ``legacy``: a checkpoint of before the contract (its ``counters`` and
        ``events``), from which the capability takes what it saved there."""

    def snapshot(self) -> Any:
        """The state after a finished round, to rewind to when the next one is interrupted (None: stateless)."""
        return None

    def restore(self, snap: Any) -> None:
        """Rewind to :meth:`snapshot`'s ``snap``."""

    def describe(self) -> dict[str, Any]:
        """summary.json's entries of the run's setup ({}: none)."""
        return {}

    def summarize(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        """summary.json's entries when the run stops, from its metrics rows."""
        return {}

    def lines(self, summary: dict[str, Any]) -> list[tuple[str, str]]:
        """(what, value) rows of the run's summary table, from its summary (``summary.json``'s ``capability_lines``)."""
        return []

    def brief(self, summary: dict[str, Any]) -> str:
        """A few words for a sweep's line of the run ("personalised 77.57%", "eps 4.85"; "": none)."""
        return ""

    def step_word(self) -> str | None:
        """What one step of the run loop is, when not a round (an async server's "server update")."""
        return None


def active(spec: Any) -> list[tuple[type[Capability], Any]]:
    """(class, settings) of every capability the validated run ``spec`` turns on, in ``position`` order."""
    classes = sorted((CAPABILITIES.get(n).obj for n in CAPABILITIES.names()), key=lambda c: (c.position, c.name))
    return [(c, spec.sections[c.name]) for c in classes if c.active(spec.sections[c.name])]


class Capabilities:
    """A run's capabilities, each hook called on every one in order: the one place fedrun/run/ reaches them. Their
    upload stages run as one pipeline (fedrun/upload/pipeline.py), whose per-client rows (error feedback's residuals)
    are client state under :data:`~fedrun.upload.pipeline.UPLOAD_STATE`, which the engines never see."""

    def __init__(self, caps: list[Capability]) -> None:
        self.caps = caps
        drivers = [d for c in caps if (d := c.drive()) is not None]
        self.driver: Any = drivers[0] if drivers else None  # at most one replaces the round (validation ensures it)
        self.pipeline: UploadPipeline | None = None

    def bind_uploads(self, algorithm: Algorithm, params: Tensors) -> None:
        """The capabilities' upload stages as one pipeline over the method's upload parts (from one ``client_finish``
        on ``params``), each stage's settings checked against them before any work; none without stages."""
        self.pipeline = build_pipeline([stage for c in self.caps for stage in c.upload_stages()])
        if self.pipeline is not None:
            self.pipeline.bind(upload_layout(algorithm, params, algorithm.server_init(params)))

    def client_state(self) -> Tree:
        """One client's rows of the capabilities' state beside the method's ({}: none)."""
        out: Tree = {}
        for c in self.caps:
            out.update(c.client_state())
        return {**out, **self.pipeline.state_template()} if self.pipeline is not None else out

    @property
    def private_keys(self) -> tuple[str, ...]:
        """The client-state keys that are the capabilities' own: the engines never see them."""
        return (UPLOAD_STATE,) if self.pipeline is not None and self.pipeline.stateful else ()

    def upload_bytes(self, uploads: Tree) -> float | None:
        """What one client sends of the stacked ``uploads`` after the upload stages (None: as they are)."""
        return float(self.pipeline.bytes_per_client(uploads)) if self.pipeline is not None else None

    def uploads(
        self, state: StateView, rnd: int, uploads: Tree, clients: torch.Tensor, weights: torch.Tensor, run: RunView
    ) -> tuple[Tree, dict[str, float]]:
        """The cohort's ``uploads`` as the server receives them, after every upload stage (their stateful rows of
        ``clients`` read and written back, staged with the round's other client-state writes), and the stages'
        columns; as they are without stages."""
        pipe, algo = self.pipeline, run.algorithm
        if pipe is None:
            return uploads, {}
        rows = state.clients.gather(clients)[UPLOAD_STATE] if pipe.stateful else None
        extras = algo.broadcast(state.params, state.server_state) if any(p.broadcast_ref for p in pipe.parts) else {}
        ctx = UploadContext(rnd, clients, run.spec.seed, weights, run.device)
        sent, new_rows, diag = pipe.apply(state.params, extras, uploads, rows, ctx)
        if new_rows is not None:
            state.clients.scatter(clients, {UPLOAD_STATE: new_rows})
        return sent, diag

    @property
    def legacy_counters(self) -> dict[str, tuple[str, float, bool]]:
        """The counters the capabilities kept in checkpoints of before the contract, with their checks."""
        return {k: v for c in self.caps for k, v in c.legacy_counters.items()}

    def __iter__(self) -> Iterator[Capability]:
        return iter(self.caps)

    def choose(self, ctx: RoundCtx) -> None:
        for c in self.caps:
            c.choose(ctx)

    def plan(self, ctx: RoundCtx, state: StateView) -> None:
        for c in self.caps:
            c.plan(ctx, state)

    def report(self, ctx: RoundCtx) -> None:
        for c in self.caps:
            c.report(ctx)

    def weighting(self, default: str) -> str:
        return next((w for c in self.caps if (w := c.weighting()) is not None), default)

    def empty_round(self, ctx: RoundCtx, state: StateView) -> bool:
        return any(c.empty_round(ctx, state) for c in self.caps)

    def eval_columns(
        self, rnd: int, state: StateView, model: Tensors, lr: float
    ) -> tuple[dict[str, float], dict[str, float]]:
        """(the columns that lead the row, the others) of evaluated round ``rnd``."""
        lead: dict[str, float] = {}
        rest: dict[str, float] = {}
        for c in self.caps:
            (lead if c.leads else rest).update(c.eval_columns(rnd, state, model, lr))
        return lead, rest

    def start(self, run_dir: Path | None, start: int) -> None:
        for c in self.caps:
            c.start(run_dir, start)

    def state_dict(self) -> dict[str, Tree]:
        return {c.name: tree for c in self.caps if (tree := c.state_dict())}

    def load_state_dict(self, trees: dict[str, Tree], legacy: dict[str, Any]) -> None:
        for c in self.caps:
            c.load_state_dict(trees.get(c.name, {}), legacy)

    def snapshot(self) -> dict[str, Any]:
        return {c.name: c.snapshot() for c in self.caps}

    def restore(self, snaps: dict[str, Any]) -> None:
        for c in self.caps:
            c.restore(snaps[c.name])

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for c in self.caps:
            out.update(c.describe())
        return out

    def summarize(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        """Each capability's summary.json entries, and ``capability_lines``: the rows it adds to the summary table."""
        out: dict[str, Any] = {}
        for c in self.caps:
            out.update(c.summarize(rows))
        lines = [[what, value] for c in self.caps for what, value in c.lines(out)]
        brief = ", ".join(b for c in self.caps if (b := c.brief(out)))
        return {
            **out,
            **({"capability_lines": lines} if lines else {}),
            **({"capability_brief": brief} if brief else {}),
        }

    def step_word(self) -> str:
        """What one step of the run loop is: "round", or the driver's word."""
        return next((w for c in self.caps if (w := c.step_word()) is not None), "round")
