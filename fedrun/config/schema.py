"""Structured-config schema (registered with Hydra's ConfigStore): the run's root sections, and the whole schema
with the sections built from registries (every engine's keys, every capability's section: fedrun/config/sections.py).

Hydra checks types and unknown keys while composing, against ``fedrun_schema`` and each component's schema
(:func:`store_schemas`); fedrun/config/validate.py then checks every range and cross-field rule into a typed
:class:`RunSpec`, so a bad value fails before any work with one line naming the field.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, is_dataclass, make_dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from hydra.core.config_store import ConfigStore

from fedrun.config import sections
from fedrun.config.registry import (
    ALGORITHMS,
    DATASETS,
    MODELS,
    PARTITIONS,
    build_params,
    field_default,
    in_range,
    positive,
    schema_of,
)
from fedrun.core.errors import ConfigError
from fedrun.storage.tracking import TRACKERS, TrackingSection, require_trackers

T = TypeVar("T")


def one_of(field_name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(field_name, f"invalid value {value!r}; valid: {', '.join(choices)}")


@dataclass
class FLConfig:
    """Federated-learning settings (``fl.*``): who trains, how much, and how updates are combined."""

    clients: int = 20  # N, the clients the training set is split across (fedrun's quick default; presets: the paper's)
    rounds: int = 30  # R, communication rounds (fedrun's quick default; presets: the paper's)
    participation: float = 1.0  # C, the fraction of the clients sampled each round (1: all, as cross-silo)
    sampling: str = "fixed"  # fixed: a fixed-size sample without replacement; bernoulli: each client w.p. participation
    train_all: bool = False  # every client trains each round, the sampled ones are aggregated (FedLAW Alg. 1 / code)
    local_epochs: int = 1  # E, passes over its data a client makes per round
    local_steps: int | None = None  # a fixed number of local steps; overrides local_epochs when set
    batch_size: int = 50  # B, the local minibatch (FedAvg's B = 50)
    lr: float = 0.05  # the clients' SGD learning rate
    momentum: float = 0.0  # the clients' SGD momentum (0: plain SGD)
    weight_decay: float = 0.0  # the clients' L2 weight decay
    lr_decay: float = 1.0  # lr at round t = lr * lr_decay**t
    keep_momentum: bool = False  # keep each client's momentum buffer across rounds (FedLAW's code) or reset it
    weighting: str = "size"  # aggregation weights: size (n_i / sum n_j over the cohort) or uniform
    grad_clip: float | None = None  # clip the local gradient's global norm (FL-Simulator uses 10)

    def __post_init__(self) -> None:
        positive("clients", self.clients)
        positive("rounds", self.rounds)
        in_range("participation", self.participation, 0.0, 1.0, lo_open=True)
        one_of("sampling", self.sampling, ("fixed", "bernoulli"))
        positive("local_epochs", self.local_epochs)
        positive("local_steps", self.local_steps)
        positive("batch_size", self.batch_size)
        positive("lr", self.lr, allow_zero=True)
        in_range("momentum", self.momentum, 0.0, 1.0)
        positive("weight_decay", self.weight_decay, allow_zero=True)
        in_range("lr_decay", self.lr_decay, 0.0, 1.0, lo_open=True)
        one_of("weighting", self.weighting, ("size", "uniform"))
        positive("grad_clip", self.grad_clip)
        if self.sampling == "fixed" and int(self.participation * self.clients) < 1:
            raise ConfigError(
                "participation",  # build_params adds the "fl." prefix
                f"{self.participation} x {self.clients} clients samples no client per round; raise it to >= 1/clients",
            )

    def lr_at(self, rnd: int) -> float:
        """The configured local lr of round ``rnd`` (0-based): lr * lr_decay^rnd."""
        return self.lr * self.lr_decay**rnd

    @property
    def cohort_size(self) -> int:
        """Clients per round under fixed-size sampling: max(int(C*K), 1) as in FedAvg's reference code."""
        return max(int(self.participation * self.clients), 1)


@dataclass
class EvalConfig:
    """Evaluation (``eval.*``)."""

    every: int = 1  # evaluate the global model every N rounds, and always after the last
    train_acc: bool = False  # also the accuracy on the whole training set (a train_acc column)
    batch_size: int = 2048  # evaluation batch (memory only: the numbers do not depend on it)
    target: float | None = None  # test accuracy (in [0,1]) whose first reaching round is reported
    last_k: int = 10  # the summary's "last-k mean" (the papers use the last 10 evaluated rounds)
    client_acc: bool = False  # per-client accuracy spread (FedSAM): client_acc_mean/_std... columns
    client_acc_split: str = "test"  # test: the test split re-weighted to each client's data; train: own data
    diagnostics: bool = False  # FedLAW coherence / global-gradient norm, FedIMA client-global distance
    client_weights: bool = False  # each cohort client's weight in the aggregate per round: client_weights.csv
    # personalised evaluation (eval.local_test, ...) joins this section: fedrun/metrics/local_settings.py

    def __post_init__(self) -> None:
        positive("every", self.every)
        positive("batch_size", self.batch_size)
        in_range("target", self.target, 0.0, 1.0)
        positive("last_k", self.last_k)
        one_of("client_acc_split", self.client_acc_split, ("test", "train"))


@dataclass
class HardwareConfig:
    """Where and how clients are simulated (``hardware.*``): the keys every engine shares.

    Each engine adds its own options to the section, declared by the params dataclass it registers with
    (``hardware.chunk`` and ``hardware.compile``: the vectorised engine; ``hardware.actors`` and
    ``hardware.address``: Ray's): :func:`hardware_class` is the whole section, :func:`engine_options` one engine's
    typed view of it.
    """

    device: str = "cpu"  # cpu | cuda | cuda:N | auto
    engine: str = "auto"  # a registered engine, or auto: the fastest of those that can run this method here, timed
    threads: int = 0  # torch intra-op threads; 0: one per idle CPU core, measured at start (fedrun/host/threads.py)
    precision: str = "fp32"  # fp32 | fp64 | bf16 (bf16 autocast, meant for CUDA)
    # a sweep's jobs that differ only in seed, lr, method scalars or partition run as one vectorised cohort:
    # auto (as many as fit in memory) | off | N (at most N jobs together); docs/sweeps.md
    stack: str = "auto"
    # a sweep's jobs (and stacks) run side by side in processes of their own: auto (one per idle core and as many
    # as memory holds, for jobs with threads 0) | off | N (N processes); docs/sweeps.md
    parallel: str = "auto"

    def __post_init__(self) -> None:
        if not (self.device in ("cpu", "cuda", "auto") or self.device.startswith("cuda:")):
            raise ConfigError("device", f"invalid value {self.device!r}; valid: cpu, cuda, cuda:N, auto")
        positive("threads", self.threads, allow_zero=True)
        one_of("precision", self.precision, ("fp32", "fp64", "bf16"))
        self.stack = str(self.stack).strip()
        if self.stack in ("False", "false"):  # YAML reads a bare ``off`` as false
            self.stack = "off"
        if self.stack not in ("auto", "off") and not (self.stack.isdigit() and int(self.stack) >= 1):
            raise ConfigError("stack", f"invalid value {self.stack!r}; valid: auto, off, or a width N >= 1")
        self.parallel = str(self.parallel).strip()
        if self.parallel in ("False", "false"):  # YAML reads a bare ``off`` as false
            self.parallel = "off"
        if self.parallel not in ("auto", "off") and not (self.parallel.isdigit() and int(self.parallel) >= 1):
            raise ConfigError("parallel", f"invalid value {self.parallel!r}; valid: auto, off, or N >= 1 processes")

    @property
    def stack_width(self) -> int | None:
        """The most jobs of a sweep stacked together: None for ``auto`` (as many as fit), 1 for ``off``."""
        return None if self.stack == "auto" else 1 if self.stack == "off" else int(self.stack)

    @property
    def parallel_workers(self) -> int | None:
        """The processes a sweep's jobs run in side by side: None for ``auto`` (chosen from the idle cores and the
        memory), 1 for ``off`` (one job after another, in the sweep's own process)."""
        return None if self.parallel == "auto" else 1 if self.parallel == "off" else int(self.parallel)


@dataclass
class CheckpointConfig:
    """Periodic run-state checkpoints for resume (``checkpoint.*``)."""

    every: int = 5  # write the run state every N rounds (0: never; a killed run then restarts from round 0)
    keep_final: bool = True  # keep a checkpoint of the finished run (false: delete it to save disk)

    def __post_init__(self) -> None:
        positive("every", self.every, allow_zero=True)


@dataclass
class OutputConfig:
    """What a run prints and writes (``output.*``)."""

    quiet: bool = False  # no progress bar or summary table (the default inside a multirun)
    plots: bool = True  # write accuracy.png in the run directory
    # what a run returns to a Hydra sweeper (Optuna): summary.json's test_acc_<objective> (last_k, final, best)
    objective: Literal["last_k", "final", "best"] = "last_k"


class TrackingBase(TrackingSection):
    """The ``tracking`` section's checks; :data:`TrackingConfig` adds one field per registered tracker."""

    def __post_init__(self) -> None:
        # build_params hands nested sections over as mappings (a saved config's too): build and check them here
        for f in fields(self):
            params = TRACKERS.get(f.name).params
            value = getattr(self, f.name)
            if params is not None and isinstance(value, Mapping):
                setattr(self, f.name, build_params(params, dict(value), f.name, ignore=()))
        require_trackers(list(self.chosen()))


def _tracking_class() -> type[TrackingBase]:
    """The ``tracking`` section: a field per registered tracker (fedrun/storage/trackers/), the on/off switches (a
    tracker without settings, e.g. ``tensorboard``) first, then the settings sections, each by name."""
    spec: list[tuple[str, Any, Any]] = []
    for name in sorted(TRACKERS.names(), key=lambda n: (TRACKERS.get(n).params is not None, n)):
        params = TRACKERS.get(name).params
        spec.append(
            (
                name,
                bool,
                field(default=False, metadata={"note": f"log each round to {name} (fedrun/storage/trackers/)"}),
            )
            if params is None
            else (name, params, field(default_factory=params))
        )
    return make_dataclass("TrackingConfig", spec, bases=(TrackingBase,))


if TYPE_CHECKING:
    TrackingConfig = TrackingBase
else:
    TrackingConfig = _tracking_class()


@dataclass
class IMAConfig:
    """Iterative moving averaging on top of any algorithm (``ima.*``; FedIMA, Zhou et al., eq. 5, Table III).

    From round t_s = int(start * rounds) the global model is the mean of the last ``window`` models the
    base method's aggregation produced, and the client lr follows ``schedule``: exd = lr(t_s) x
    ``lr_decay``^(t - t_s) (mild client exploration, the paper's default); nad = no extra decay; clr =
    constant ``min_lr``; cd = triangular cycle lr(t_s) <-> ``min_lr`` of ``period`` rounds; sd = halve
    every ``period`` rounds; ed = one local epoch fewer every ``period`` rounds (at least 1).
    """

    enabled: bool = False  # IMA on top of the chosen algorithm
    start: float = 0.75  # t_s as a fraction of fl.rounds (FedIMA: 0.75 R)
    window: int = 5  # W (FedIMA default 5)
    lr_decay: float = 0.97  # EXD's per-round decay after t_s (FedIMA code)
    # the client lr after t_s: exd (FedIMA's default) | clr | cd | ed | nad | sd (see above)
    schedule: Literal["exd", "clr", "cd", "ed", "nad", "sd"] = "exd"
    min_lr: float = 5e-5  # CLR's constant lr and CD's lower end (FedIMA Table III)
    period: int = 20  # CD's cycle, SD's halving and ED's epoch-drop interval in rounds (FedIMA Table III)

    @classmethod
    def derived_rounds(cls, node: Mapping[str, Any], rounds: int) -> dict[str, int]:
        """The round ``fl.rounds`` = ``rounds`` decides (fedrun/config/identity.py round_schedule): t_s."""
        return {"start": int(node.get("start", cls.start) * rounds)} if node.get("enabled") else {}

    def __post_init__(self) -> None:
        in_range("start", self.start, 0.0, 1.0)
        positive("window", self.window)
        in_range("lr_decay", self.lr_decay, 0.0, 1.0, lo_open=True)
        positive("min_lr", self.min_lr)
        positive("period", self.period)


@dataclass
class ProxyConfig:
    """The server's proxy set (``proxy.*``), carved out of the test split before evaluation (FedLAW App. C).

    ``per_class`` samples of each class (class k keeps int(per_class * rho^(-k/(C-1))) when ``rho`` > 1,
    the long-tailed proxy of FedLAW Table 6) are removed from the test split for every method of a run
    config, so all methods are evaluated on the same images. 0 disables it (proxy methods then refuse to
    run). ``balanced_sampling`` draws proxy batches with class-balanced resampling; ``batch_size`` is the
    server's proxy batch (128 in FedLAW's code).
    """

    per_class: int = 10  # proxy samples per class taken from the test split (FedLAW App. C: 10); 0: no proxy
    rho: float = 1.0  # > 1: a long-tailed proxy, class k keeps per_class * rho^(-k/(C-1)) (FedLAW Table 6)
    balanced_sampling: bool = False  # draw proxy batches with class-balanced resampling
    batch_size: int = 128  # the server's proxy batch (FedLAW's code: 128)

    def __post_init__(self) -> None:
        positive("per_class", self.per_class, allow_zero=True)
        if self.rho < 1:
            raise ConfigError("rho", f"must be >= 1 (1 = class-balanced), got {self.rho}")
        positive("batch_size", self.batch_size)


@dataclass
class CorruptConfig:
    """Corrupted-label clients (``corrupt.*``; FedLAW Table 8): round(``fraction`` x N) clients, chosen from the
    seed, train with the two classes in ``labels`` swapped (see fedrun/data/corrupt.py). 0 = none."""

    fraction: float = 0.0  # the fraction of clients with corrupted labels (FedLAW Table 8); 0: none
    labels: list[int] = field(default_factory=lambda: [0, 1])  # the two classes a corrupted client swaps

    def __post_init__(self) -> None:
        in_range("fraction", self.fraction, 0.0, 1.0)
        if len(self.labels) != 2 or self.labels[0] == self.labels[1] or min(self.labels) < 0:
            raise ConfigError("labels", f"must be two different class ids >= 0, got {self.labels}")


@dataclass
class FedrunConfig:
    """The whole run configuration; component groups are free-form here and validated by their registry."""

    algorithm: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    partition: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    fl: FLConfig = field(default_factory=FLConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    ima: IMAConfig = field(default_factory=IMAConfig)
    proxy: ProxyConfig = field(default_factory=ProxyConfig)
    corrupt: CorruptConfig = field(default_factory=CorruptConfig)
    # (here: each capability's own section, fedrun/config/sections.py, in its order: system, privacy, compression...)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    seed: int = 0  # keys every random draw: init, partition, cohorts, batches (fedrun/core/rng.py)
    cache_dir: str | None = "outputs/.cache"  # partitions and engine=auto's timings kept between runs; None: none kept
    tags: dict[str, Any] = field(default_factory=dict)  # free report labels (method, preset); no effect on a run
    imports: list[str] = field(default_factory=list)  # the user's modules registering methods etc.: load_imports


def _composable(name: str, tp: Any, f: Any) -> tuple[str, Any, Any]:
    """A section as OmegaConf composes on it: its class as :func:`schema_of` makes it (a ``Literal`` of choices as
    ``str``), with its defaults; any other field as it is."""
    if isinstance(tp, type) and is_dataclass(tp):
        return name, schema_of(tp), field(default_factory=schema_of(tp))
    return name, tp, field_default(f)


_ROOT = typing.get_type_hints(FedrunConfig)
ConfigStore.instance().store(
    name="fedrun_schema",
    node=make_dataclass("FedrunConfig", [_composable(f.name, _ROOT[f.name], f) for f in fields(FedrunConfig)]),
)

COMPONENT_GROUPS = {"algorithm": ALGORITHMS, "data": DATASETS, "partition": PARTITIONS, "model": MODELS}


def store_schemas() -> None:
    """Store every registered component's schema in Hydra's ConfigStore as ``schema/<group>/<name>``: the base
    each option of the group composes on (``defaults: [/schema/<group>/<name>@_here_, _self_]``), so OmegaConf
    checks its keys and types while composing, for ``--cfg``, runs and multiruns alike.

    Loads every registry (all of fedrun's components): called by the entry points before Hydra composes,
    not on import, since the components import this module. Storing again is harmless (a user's module in
    ``imports`` registers later; its YAML composes without a schema base and is checked by validate()), and
    costs nothing while the registries and the schemas built from them are those stored last.
    """
    store = ConfigStore.instance()
    key = _schema_inputs()
    if _STORED.get("key") == key and store.repo.get("fedrun_schema.yaml") is _STORED.get("node"):
        return  # the same registries as last time, still in the store: the same schemas (OmegaConf's are costly)
    for group, registry in COMPONENT_GROUPS.items():
        for name in registry.names():
            params = registry.get(name).params
            store.store(group=f"schema/{group}", name=name, node=schema_of(params or NoParams, name))
    store.store(name="fedrun_schema", node=fedrun_schema())
    _STORED.update(key=key, node=store.repo.get("fedrun_schema.yaml"))


_STORED: dict[str, Any] = {}  # what store_schemas last stored: the registries it read, and its fedrun_schema node


def _schema_inputs() -> tuple[Any, ...]:
    """What :func:`store_schemas` builds the schemas from, as :func:`schema_of` (cached) makes them: each
    component's and each section's of the root, so a new registration, or a cleared cache (a changed default),
    changes it."""
    components = tuple(
        schema_of(registry.get(name).params or NoParams, name)
        for registry in COMPONENT_GROUPS.values()
        for name in registry.names()
    )
    hints = typing.get_type_hints(FedrunConfig)
    root = [hardware_class(), eval_class(), *(c for _, c in sections.owned_sections())]
    root += [hints[f.name] for f in fields(FedrunConfig)]
    return components, tuple(schema_of(t) if isinstance(t, type) and is_dataclass(t) else t for t in root)


def fedrun_schema() -> type:
    """What Hydra composes on (stored by :func:`store_schemas`): ``FedrunConfig`` with its ``hardware`` section as
    :func:`hardware_class` (every engine's keys), ``eval`` with the keys the capabilities join to it, and every
    capability's own section before ``tracking`` (fedrun/config/sections.py)."""
    hints = typing.get_type_hints(FedrunConfig)
    built = {"hardware": hardware_class(), "eval": eval_class()}
    spec: list[tuple[str, Any, Any]] = []
    for f in fields(FedrunConfig):
        if f.name == "tracking":
            spec += [
                (name, schema_of(cls), field(default_factory=schema_of(cls))) for name, cls in sections.owned_sections()
            ]
        spec.append(_composable(f.name, built.get(f.name, hints[f.name]), f))
    return make_dataclass("FedrunConfig", spec)


def run_sections() -> list[tuple[str, type]]:
    """Every section of a run in the order it composes, each as its whole class (``hardware`` with every engine's
    keys, ``eval`` with the keys joined to it, each capability's section): what the reference pages list."""
    hints = typing.get_type_hints(FedrunConfig)
    built = {"hardware": hardware_class(), "eval": eval_class()}
    out: list[tuple[str, type]] = []
    for f in fields(FedrunConfig):
        if f.name == "tracking":
            out += sections.owned_sections()
        tp = built.get(f.name, hints[f.name])
        if isinstance(tp, type) and is_dataclass(tp):
            out.append((f.name, tp))
    return out


def config_keys() -> frozenset[str]:
    """The top-level keys of a run's config: the root sections, each capability's, and ``experiment``."""
    return frozenset(
        {*FedrunConfig.__dataclass_fields__, *(name for name, _ in sections.owned_sections()), "experiment"}
    )


def hardware_class() -> type[HardwareConfig]:
    """The whole ``hardware`` section: :class:`HardwareConfig`'s keys, then each registered engine's options."""
    return sections.hardware_class(HardwareConfig)


def eval_class() -> type[EvalConfig]:
    """The whole ``eval`` section: :class:`EvalConfig`'s keys, then those of the capabilities that join it."""
    return sections.joined_class(EvalConfig, "eval")


def engine_options(params: type[T], hw: HardwareConfig) -> T:
    """One engine's options (its params dataclass ``params``) read from the ``hardware`` section ``hw``; a key the
    section lacks (a config saved before the engine existed) takes its default."""
    return sections.options_of(params, hw, "hardware")


@dataclass
class NoParams:
    """The hyperparameters of a component that has none: only its ``name``."""


@dataclass
class Component:
    """A validated registry choice: its name, implementation and built hyperparameters."""

    name: str
    obj: Any
    params: Any


@dataclass
class RunSpec:
    """A fully validated run: what the runner consumes."""

    algorithm: Component
    data: Component
    partition: Component
    model: Component
    hardware: HardwareConfig
    fl: FLConfig
    eval: EvalConfig
    output: OutputConfig
    seed: int
    cache_dir: str | None
    raw: dict[str, Any]
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    ima: IMAConfig = field(default_factory=IMAConfig)
    proxy: ProxyConfig = field(default_factory=ProxyConfig)
    corrupt: CorruptConfig = field(default_factory=CorruptConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    # each capability's settings by its name (fedrun/capabilities/): typed access is the reader's,
    # ``SystemSettings.of(spec)``; ``spec.system`` reads the section of that name too
    sections: dict[str, Any] = field(default_factory=dict)

    def __getattr__(self, name: str) -> Any:
        found = (self.__dict__.get("sections") or {}).get(name)
        if found is None:
            raise AttributeError(name)
        return found
