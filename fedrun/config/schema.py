"""Structured-config schema (registered with Hydra's ConfigStore) and validation into typed objects.

Hydra checks types and unknown keys while composing, against ``fedrun_schema`` (the sections below) and
each component's schema (:func:`store_schemas`); :func:`validate` then checks every range and cross-field
rule and builds each component's hyperparameter dataclass from its registry, so a bad value fails before
any work with one line naming the field.
"""

from __future__ import annotations

import functools
import math
import re
import typing
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, fields, is_dataclass, make_dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from fedrun.config.imports import load_imports, not_imported_hint
from fedrun.config.registry import (
    ALGORITHMS,
    DATASETS,
    ENGINES,
    MODELS,
    PARTITIONS,
    DataSignature,
    build_params,
    field_default,
    in_range,
    positive,
    schema_of,
)
from fedrun.config.resources import check_resources
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
    # personalised evaluation (docs/personalised.md): none | split (each client's own data, PFLlib/FL-bench) |
    # partition (the test set dealt out with each client's label distribution); local_acc_* columns, clients.csv
    local_test: str = "none"
    local_test_fraction: float = 0.25  # split: the share of each client's samples held out (PFLlib's train_ratio 0.75)
    local_test_seed: int | None = None  # the draw of the local test splits (None: the run's seed)
    finetune_steps: int = 0  # k SGD steps of each client's model on its own training data before it is evaluated
    finetune_lr: float | None = None  # the fine-tuning lr (None: the round's local lr)
    finetune_epochs: int = 0  # or E passes over its training data, shuffled, without replacement (FedBABU: 5)
    finetune_momentum: float = 0.0  # the fine-tuning's SGD momentum (0: plain SGD; FedBABU: 0.9)
    unseen_clients: int = 0  # U more clients of the same partition that never train: unseen_acc_* (new clients)

    def __post_init__(self) -> None:
        positive("every", self.every)
        positive("batch_size", self.batch_size)
        in_range("target", self.target, 0.0, 1.0)
        positive("last_k", self.last_k)
        one_of("client_acc_split", self.client_acc_split, ("test", "train"))
        one_of("local_test", self.local_test, ("none", "split", "partition"))
        in_range(
            "local_test_fraction",
            self.local_test_fraction,
            0.0,
            1.0,
            lo_open=True,
            hi_open=True,
            why="0 leaves no local test sample, 1 no training sample",
        )
        positive("finetune_steps", self.finetune_steps, allow_zero=True)
        positive("finetune_lr", self.finetune_lr)
        positive("finetune_epochs", self.finetune_epochs, allow_zero=True)
        in_range("finetune_momentum", self.finetune_momentum, 0.0, 1.0, hi_open=True)
        if self.finetune_steps and self.finetune_epochs:
            raise ConfigError("finetune_epochs", "fine-tune by steps or by epochs; valid: 0 with eval.finetune_steps")
        if self.finetune_momentum and not (self.finetune_steps or self.finetune_epochs):
            why = "no fine-tuning to apply it to; valid: 0, or with eval.finetune_steps or eval.finetune_epochs"
            raise ConfigError("finetune_momentum", why)
        positive("unseen_clients", self.unseen_clients, allow_zero=True)
        if self.unseen_clients and self.local_test == "none":
            raise ConfigError(
                "unseen_clients",
                "unseen clients are evaluated on local test splits; valid: 0, or eval.local_test=split or partition",
            )
        if (self.finetune_steps or self.finetune_epochs) and self.local_test == "none":
            raise ConfigError(
                "finetune_steps" if self.finetune_steps else "finetune_epochs",
                "fine-tuned models are evaluated on local test splits; valid: 0, or"
                " eval.local_test=split or partition with it",
            )


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

    def __post_init__(self) -> None:
        if not (self.device in ("cpu", "cuda", "auto") or self.device.startswith("cuda:")):
            raise ConfigError("device", f"invalid value {self.device!r}; valid: cpu, cuda, cuda:N, auto")
        positive("threads", self.threads, allow_zero=True)
        one_of("precision", self.precision, ("fp32", "fp64", "bf16"))


@dataclass
class CheckpointConfig:
    """Periodic run-state checkpoints for resume (``checkpoint.*``)."""

    every: int = 5  # write the run state every N rounds (0: never; a killed run then restarts from round 0)
    keep_final: bool = True  # keep a checkpoint of the finished run (false: delete it to save disk)

    def __post_init__(self) -> None:
        positive("every", self.every, allow_zero=True)


OBJECTIVES = ("last_k", "final", "best")  # summary.json's test_acc_last_k / _final / _best


@dataclass
class OutputConfig:
    """What a run prints and writes (``output.*``)."""

    quiet: bool = False  # no progress bar or summary table (the default inside a multirun)
    plots: bool = True  # write accuracy.png in the run directory
    objective: str = "last_k"  # what a run returns to a Hydra sweeper (Optuna): summary.json's test_acc_<objective>

    def __post_init__(self) -> None:
        one_of("objective", self.objective, OBJECTIVES)


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


IMA_SCHEDULES = ("exd", "clr", "cd", "ed", "nad", "sd")


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
    schedule: str = "exd"  # the client lr after t_s: exd (FedIMA's default) | clr | cd | ed | nad | sd (see above)
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
        one_of("schedule", self.schedule, IMA_SCHEDULES)
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


STRAGGLER_POLICIES = ("drop", "partial")
STRAGGLER_WORK = ("epochs", "steps")
DEVICE_PROFILES = ("uniform", "tiers", "trace")
SERVERS = ("sync", "fedasync", "fedbuff")
# the keys of an async server (system.server): without effect, and left out of a run's identity, when it is sync
ASYNC_KEYS = ("server", "concurrency", "buffer", "server_lr", "mixing", "staleness", "staleness_a", "staleness_b",
              "eval_every_seconds")  # fmt: skip
STALENESS = ("constant", "polynomial", "hinge")


@dataclass
class SystemConfig:
    """The simulated system the clients run on (``system.*``; fedrun/system/, docs/systems.md): who fails to report,
    who straggles, each client's device and the round's deadline. At its defaults (``system=ideal``) no client fails,
    none straggles and no clock is kept: the run is the same, bit for bit and column for column, as one without it.

    Every draw is keyed by (seed, round, client) (fedrun/core/rng.py), so a run, its resume and every method under
    one seed see the same dropouts and stragglers.
    """

    dropout: float = 0.0  # p: a sampled client fails to report w.p. p (per-client rates: a trace's dropout entries)
    stragglers: float = 0.0  # the share of each cohort that does only part of its local work (FedProx sec. 5.2)
    straggler_policy: str = "drop"  # drop: stragglers are not aggregated (FedProx's FedAvg); partial: their work is
    straggler_work: str = "epochs"  # a straggler runs U{1..E-1} of its E epochs (FedProx's code) or U{1..S-1} steps
    devices: str = "uniform"  # the clients' devices: uniform (one mid device), tiers (drawn per client), trace (file)
    trace: str | None = None  # devices=trace: a device trace file (JSON, or FedScale's pickles: docs/systems.md)
    deadline: float | None = None  # simulated seconds a round waits; clients that report later are dropped
    over_selection: float = 1.0  # sample ceil(f x cohort) clients and keep the first cohort-many to report (f >= 1)
    server: str = "sync"  # sync: rounds; fedasync (Xie et al. 2019) or fedbuff (Nguyen et al. 2022): asynchronous
    concurrency: int | None = None  # C: clients training at once under an async server; None: fl's cohort size
    buffer: int = 10  # K: fedbuff's updates per server step (Nguyen et al. 2022 sec. 5: K = 10)
    server_lr: float = 1.0  # eta_g: fedbuff's server step size, w += eta_g x mean delta (1: the buffer's average)
    mixing: float = 0.6  # alpha: fedasync's w = (1 - a_t) w + a_t x_new, a_t = alpha s(t - tau) (Xie et al. sec. 6)
    staleness: str = "constant"  # s(t - tau): constant 1, polynomial (t-tau+1)^-a, hinge (Xie et al. sec. 3)
    staleness_a: float = 0.5  # a of polynomial and hinge (Xie et al. sec. 6: poly a = 0.5; hinge a = 10, b = 4)
    staleness_b: float = 4.0  # b of hinge: staleness up to b is not discounted (Xie et al. sec. 6: b = 4)
    eval_every_seconds: float | None = (
        None  # async: evaluate when the clock passes each multiple of T (None: eval.every)
    )

    def __post_init__(self) -> None:
        in_range("dropout", self.dropout, 0.0, 1.0)
        in_range("stragglers", self.stragglers, 0.0, 1.0)
        one_of("straggler_policy", self.straggler_policy, STRAGGLER_POLICIES)
        one_of("straggler_work", self.straggler_work, STRAGGLER_WORK)
        one_of("devices", self.devices, DEVICE_PROFILES)
        if (self.devices == "trace") != bool(self.trace):
            raise ConfigError(
                "trace" if self.devices == "trace" else "devices",
                "devices=trace reads system.trace, and only it does; valid: both set, or devices=uniform|tiers"
                " with trace=null",
            )
        positive("deadline", self.deadline)
        if not (isinstance(self.over_selection, int | float) and 1.0 <= self.over_selection < math.inf):
            raise ConfigError(
                "over_selection", f"must be a factor >= 1 (1: no over-selection), got {self.over_selection}"
            )
        self._check_async()

    def _check_async(self) -> None:
        one_of("server", self.server, SERVERS)
        one_of("staleness", self.staleness, STALENESS)
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
        if self.server == "sync" and self.eval_every_seconds is not None:
            raise ConfigError("eval_every_seconds", "evaluates an async server's stream; valid: null with server=sync")

    @property
    def ideal(self) -> bool:
        """Whether this is the ideal system (every key at its default): no system model runs, no columns added."""
        return self == SystemConfig()


def check_system(spec: RunSpec) -> None:
    """Refuse a ``system`` section the run's ``fl`` settings cannot honour, in one line naming the key."""
    sy, fl = spec.system, spec.fl
    if sy.over_selection > 1 and fl.train_all:
        raise ConfigError(
            "system.over_selection",
            "over-selection keeps the first cohort-many sampled clients to report, but fl.train_all trains every"
            " client; valid: 1 with fl.train_all=true",
        )
    if sy.server != "sync":
        check_async_system(sy, fl)
        if spec.compression.name != "none":  # async_rounds steps the model itself, outside aggregate_round's pipeline
            raise ConfigError(
                "compression.name",
                f"not with system.server={sy.server}: the upload pipeline runs in synchronous rounds; valid: none,"
                " or system.server=sync",
            )
    # with fl.local_steps set there are no epochs: a straggler's work is then counted in steps (fedrun/system/model.py)
    if sy.stragglers and sy.straggler_work == "epochs" and fl.local_steps is None and fl.local_epochs < 2:
        raise ConfigError(
            "system.straggler_work",
            f"epochs: a straggler runs U{{1..E-1}} of E local epochs, but fl.local_epochs={fl.local_epochs}; valid:"
            " steps, or fl.local_epochs >= 2",
        )


PRIVACY_MODES = ("none", "client", "sample")
# methods whose upload is the client's model alone and whose server step is a function of the mean update: the
# clipped, noised sum of DP-FedAvg replaces that mean (McMahan et al. 2018; FedOpt: Reddi et al. 2021 sec. 5)
DP_CLIENT_METHODS = ("fedavg", "fedprox", "fedavgm", "fedadam", "fedadagrad", "fedyogi", "fedopt")


@dataclass
class PrivacyConfig:
    """Differential privacy (``privacy.*``; fedrun/privacy/, docs/privacy.md). ``mode``: none; client (DP-FedAvg,
    McMahan et al. 2018: each client's update clipped to norm ``clip``, N(0, z^2 clip^2) added to the sum, epsilon
    per client's participation); sample (DP-SGD inside each client, Abadi et al. 2016: per-sample gradients clipped
    to ``clip``, N(0, z^2 clip^2) added to their sum, epsilon per sample of a client's data). The budget comes from
    dp-accounting at ``delta``; ``target_epsilon`` solves z over the whole run instead of ``noise_multiplier``.
    """

    mode: str = "none"  # none | client (DP-FedAvg) | sample (DP-SGD in each client)
    clip: float = 1.0  # S (client: update norm; sample: per-sample gradient norm C); adaptive: its starting value
    noise_multiplier: float = 1.0  # z: the noise's std is z x clip (ignored when target_epsilon is set)
    target_epsilon: float | None = None  # solve z (dp-accounting) so the whole run spends this epsilon at delta
    delta: float = 1e-5  # the delta epsilon is reported at (1e-5: McMahan et al. 2018 use ~1/N^1.1; Opacus' examples)
    accountant: str = "rdp"  # rdp (Renyi DP, Mironov 2017) | pld (privacy loss distributions: tighter, slower)
    # client: poisson (each client independently w.p. fl.participation, what the accountant assumes) | fixed
    # (fl.participation x N clients without replacement: accounted as Poisson with q = m/N, labelled as such)
    sampling: str = "poisson"
    adaptive_clip: bool = False  # client: quantile-based adaptive clipping (Andrew et al. 2021, Alg. 1)
    target_quantile: float = 0.5  # gamma: the share of updates left unclipped the clip tracks (Andrew et al.: 0.5)
    clip_lr: float = 0.2  # eta: S <- S exp(-eta (b_bar - gamma)) (Andrew et al. 2021: 0.2)
    clip_count_stddev: float | None = None  # sigma_b of the unclipped count's noise; None: m_expected / 20 (Andrew)

    def __post_init__(self) -> None:
        one_of("mode", self.mode, PRIVACY_MODES)
        positive("clip", self.clip)
        if not (isinstance(self.noise_multiplier, int | float) and 0 <= self.noise_multiplier < math.inf):
            raise ConfigError(
                "noise_multiplier", f"must be a finite number >= 0 (0: no noise), got {self.noise_multiplier}"
            )
        positive("target_epsilon", self.target_epsilon)
        in_range("delta", self.delta, 0.0, 1.0, lo_open=True, hi_open=True)
        one_of("accountant", self.accountant, ("rdp", "pld"))
        one_of("sampling", self.sampling, ("poisson", "fixed"))
        in_range("target_quantile", self.target_quantile, 0.0, 1.0)
        positive("clip_lr", self.clip_lr, allow_zero=True)
        positive("clip_count_stddev", self.clip_count_stddev)


def check_privacy(spec: RunSpec) -> None:
    """Refuse a ``privacy`` section the rest of the run cannot honour, in one line naming the key."""
    pv, fl = spec.privacy, spec.fl
    if pv.mode == "none":
        return
    if fl.sampling != "fixed":
        raise ConfigError(
            "fl.sampling",
            "under differential privacy privacy.sampling chooses the cohort; valid: fixed (the default) with"
            " privacy.sampling=poisson|fixed",
        )
    if fl.train_all or not spec.system.ideal:
        key = "fl.train_all" if fl.train_all else "system"
        raise ConfigError(key, "is not covered by the privacy analysis; valid: fl.train_all=false, system=ideal")
    if pv.mode == "client" and spec.algorithm.name not in DP_CLIENT_METHODS:
        raise ConfigError(
            "algorithm.name",
            f"{spec.algorithm.name} uploads more than its model or aggregates otherwise than by the mean update, which"
            f" DP-FedAvg's clipped noisy sum replaces; valid with privacy.mode=client: {', '.join(DP_CLIENT_METHODS)}",
        )
    if pv.mode == "sample" and pv.adaptive_clip:
        raise ConfigError(
            "privacy.adaptive_clip", "is client-level DP's (Andrew et al. 2021); valid: false with mode=sample"
        )


COMPRESSORS = ("none", "topk", "randk", "qsgd", "sign")  # fedrun/upload/compression.py registers each but none


@dataclass
class CompressionConfig:
    """Compression of the clients' uploads (``compression.*``; fedrun/upload/, docs/compression.md): a compressor
    applied to each client's update w_i - w^t (and to a method's extra uploads, e.g. SCAFFOLD's delta_c), with
    optional client-side error feedback. At its defaults (``compression=none``) no upload pipeline runs and the
    run is bit for bit the run of before the section existed.
    """

    name: str = "none"  # none | topk | randk (Stich et al. 2018) | qsgd (Alistarh et al. 2017) | sign (EF-signSGD)
    ratio: float = 0.01  # topk/randk: the share of the update's entries kept, k = ceil(ratio * d) (fedrun's choice)
    k: int | None = None  # topk/randk: the entries of the model update kept (1..d), instead of ratio
    levels: int = 16  # qsgd: s, the quantisation levels per sign (QSGD's experiments use s = 2^2..2^8; fedrun's 16)
    error_feedback: bool = False  # keep e_i <- p_i - C(p_i) per client, sent with the next update (Karimireddy 2019)

    def __post_init__(self) -> None:
        one_of("name", self.name, COMPRESSORS)
        if not 0.0 < self.ratio <= 1.0:
            raise ConfigError("ratio", f"the share of entries kept, got {self.ratio}; valid: (0, 1] (0 sends nothing)")
        if self.k is not None and (isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1):
            raise ConfigError("k", f"the entries kept, got {self.k!r}; valid: a whole number >= 1, or null (ratio)")
        if isinstance(self.levels, bool) or not isinstance(self.levels, int) or self.levels < 1:
            raise ConfigError("levels", f"qsgd's s, got {self.levels!r}; valid: a whole number of levels >= 1")
        if self.error_feedback and self.name == "none":
            raise ConfigError(
                "error_feedback",
                "feeds back what a compressor dropped; valid: false with name=none,"
                f" or name one of {', '.join(COMPRESSORS[1:])}",
            )


def check_async_system(sy: SystemConfig, fl: FLConfig) -> None:
    """Refuse an async server (``system.server``) with what has no meaning on its event stream, in one line: round
    notions (a deadline, over-selection, fl.train_all, Bernoulli cohorts), failures and stragglers (not simulated
    under async yet), more concurrent clients than clients, and a FedBuff buffer larger than the concurrency."""
    c = sy.concurrency if sy.concurrency is not None else fl.cohort_size
    refusals = (
        ("system.deadline", sy.deadline is not None, "null (an async server has no rounds to close)"),
        ("system.over_selection", sy.over_selection > 1, "1 (an async server has no rounds to close)"),
        ("system.dropout", sy.dropout > 0, "0 (failures are not simulated under an async server yet)"),
        ("system.stragglers", sy.stragglers > 0, "0 (a device's speed already sets its completion time)"),
        ("fl.train_all", fl.train_all, "false (an async server trains only the clients it dispatches)"),
        ("fl.sampling", fl.sampling != "fixed", "fixed (an async server dispatches a fixed number of clients)"),
        ("system.concurrency", c > fl.clients, f"at most fl.clients={fl.clients}"),
        ("system.buffer", sy.server == "fedbuff" and sy.buffer > c, f"at most the concurrency C={c} (K <= C)"),
    )
    for key, bad, valid in refusals:
        if bad:
            raise ConfigError(key, f"not with system.server={sy.server}; valid: {valid}")


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
    system: SystemConfig = field(default_factory=SystemConfig)
    privacy: PrivacyConfig = field(default_factory=PrivacyConfig)
    compression: CompressionConfig = field(default_factory=CompressionConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    seed: int = 0  # keys every random draw: init, partition, cohorts, batches (fedrun/core/rng.py)
    cache_dir: str | None = "outputs/.cache"  # partitions and engine=auto's timings kept between runs; None: none kept
    tags: dict[str, Any] = field(default_factory=dict)  # free report labels (method, preset); no effect on a run
    imports: list[str] = field(default_factory=list)  # the user's modules registering methods etc.: load_imports


ConfigStore.instance().store(name="fedrun_schema", node=FedrunConfig)

COMPONENT_GROUPS = {"algorithm": ALGORITHMS, "data": DATASETS, "partition": PARTITIONS, "model": MODELS}


def store_schemas() -> None:
    """Store every registered component's schema in Hydra's ConfigStore as ``schema/<group>/<name>``: the base
    each option of the group composes on (``defaults: [/schema/<group>/<name>@_here_, _self_]``), so OmegaConf
    checks its keys and types while composing, for ``--cfg``, runs and multiruns alike.

    Loads every registry (all of fedrun's components): called by the entry points before Hydra composes,
    not on import, since the components import this module. Storing again is harmless (a user's module in
    ``imports`` registers later; its YAML composes without a schema base and is checked by validate()).
    """
    store = ConfigStore.instance()
    for group, registry in COMPONENT_GROUPS.items():
        for name in registry.names():
            params = registry.get(name).params
            store.store(group=f"schema/{group}", name=name, node=schema_of(params or NoParams, name))
    store.store(name="fedrun_schema", node=fedrun_schema())


def hardware_class() -> type[HardwareConfig]:
    """The whole ``hardware`` section: :class:`HardwareConfig`'s keys, then each registered engine's options (the
    fields of the params dataclass it registered with), in registry order, each once."""
    return _hardware_class(tuple(ENGINES.names()))


@functools.lru_cache(maxsize=8)
def _hardware_class(names: tuple[str, ...]) -> type[HardwareConfig]:
    own = {f.name for f in fields(HardwareConfig)}
    options: dict[str, tuple[Any, Any, str, tuple[Any, Any]]] = {}
    for name in names:
        params = ENGINES.get(name).params
        if params is None:
            continue
        hints = typing.get_type_hints(params)
        for f in fields(params):
            if f.name in own:
                raise RuntimeError(f"engine '{name}' declares hardware.{f.name}, a key every engine shares")
            known = options.get(f.name)
            if known is not None and (known[0], known[3]) != (hints[f.name], (f.default, f.default_factory)):
                raise RuntimeError(f"engines '{known[2]}' and '{name}' declare hardware.{f.name} differently")
            options.setdefault(f.name, (hints[f.name], field_default(f), name, (f.default, f.default_factory)))
    extra = [(key, tp, default) for key, (tp, default, _, _) in options.items()]
    return make_dataclass("HardwareConfig", extra, bases=(HardwareConfig,))


def engine_options(params: type[T], hw: HardwareConfig) -> T:
    """One engine's options (its params dataclass ``params``) read from the ``hardware`` section ``hw``; a key the
    section lacks (a config saved before the engine existed) takes its default."""
    values = {f.name: getattr(hw, f.name) for f in fields(params) if hasattr(hw, f.name)}  # type: ignore[arg-type]
    return build_params(params, values, "hardware", ignore=())


def fedrun_schema() -> type:
    """``FedrunConfig`` with its ``hardware`` section as :func:`hardware_class` (every registered engine's keys):
    what Hydra composes on, stored by :func:`store_schemas`."""
    hints = typing.get_type_hints(FedrunConfig)
    hardware = hardware_class()
    spec = [
        (f.name, hardware, field(default_factory=hardware))
        if f.name == "hardware"
        else (f.name, hints[f.name], field_default(f))
        for f in fields(FedrunConfig)
    ]
    return make_dataclass("FedrunConfig", spec)


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
    system: SystemConfig = field(default_factory=SystemConfig)
    privacy: PrivacyConfig = field(default_factory=PrivacyConfig)
    compression: CompressionConfig = field(default_factory=CompressionConfig)


def _component(group: str, registry: Any, node: Any) -> Component:
    node = dict(node or {})
    if "name" not in node:
        raise ConfigError(f"{group}.name", f"missing; valid: {', '.join(registry.names())}")
    entry = registry.get(node["name"])
    params = build_params(entry.params, node, group) if entry.params is not None else None
    return Component(entry.name, entry.obj, params)


def _section(cls: type, node: Any, prefix: str) -> Any:
    return build_params(cls, dict(node or {}), prefix, ignore=())


def _hardware(node: Any) -> HardwareConfig:
    """The ``hardware`` section, every key checked: the shared ones here, each engine's by its params dataclass."""
    hw: HardwareConfig = _section(hardware_class(), node, "hardware")
    for name in ENGINES.names():
        params = ENGINES.get(name).params
        if params is not None:
            engine_options(params, hw)
    return hw


def _raw_value(cfg: DictConfig, key: str) -> Any:
    """The value at ``key`` (``fl.lr``, ``model.hidden[0]``) as written, its interpolation unresolved; None when a
    part is missing (OmegaConf's public API: the unresolved container, walked)."""
    node: Any = OmegaConf.to_container(cfg, resolve=False)
    for part in re.findall(r"[^.\[\]]+", key):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def resolve(cfg: DictConfig) -> dict[str, Any]:
    """The config as plain containers, every interpolation resolved; a failing one is a ConfigError naming
    its field (``${undefined.key}``, recursion, an unknown resolver, a value of the wrong type)."""
    try:
        return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None) or "config"
        why = re.sub(r"^While dereferencing interpolation '.*?': ", "", str(e).splitlines()[0])
        value = _raw_value(cfg, key)
        shown = f"cannot resolve {value!r}: " if isinstance(value, str) and "${" in value else ""
        raise ConfigError(key, f"{shown}{why}") from None


# torch.finfo(dtype).max of each hardware.precision (bf16: autocast computes in bfloat16), written out so that
# validating a config does not import torch; tests/config/test_numeric_table.py pins them to torch.finfo.
FLOAT_MAX = {"fp32": 3.4028234663852886e38, "fp64": 1.7976931348623157e308, "bf16": 3.3895313892515355e38}


def check_step_scalars(spec: RunSpec) -> None:
    """Refuse a float hyperparameter of ``fl``, ``ima`` or the algorithm that the run's dtype cannot train with.

    Every such number enters a step as a scalar of the run's dtype that multiplies parameters, gradients or
    another hyperparameter: ``lr * (g + weight_decay * w)``, ``momentum * b``, ``server_lr * Delta``, a
    FedDyn/FedSMOO decay ``alpha + weight_decay``. torch fails outright ("value cannot be converted to type
    float without overflow") once a scalar or such a product exceeds finfo.max. The bound is sqrt(finfo.max)
    (1.8e19 in fp32 and bf16, 1.3e154 in fp64): a scalar at most that large, and the product of any two of
    them, is representable, so the first step cannot fail; what larger-but-finite steps do to the model is
    training, which the round loop ends as ``diverged``. No sensible rate or coefficient comes near it.
    """
    precision = spec.hardware.precision
    bound = math.sqrt(FLOAT_MAX[precision])
    sections = (("fl", spec.fl), ("ima", spec.ima), ("algorithm", spec.algorithm.params))
    for prefix, params in sections:
        if params is None or not is_dataclass(params):
            continue
        for f in fields(params):
            value = getattr(params, f.name)
            if isinstance(value, float) and abs(value) > bound:
                raise ConfigError(
                    f"{prefix}.{f.name}",
                    f"{value!r} overflows {precision} arithmetic in a training step; valid: |x| <= {bound:.3g}"
                    f" (sqrt of {precision}'s largest number {FLOAT_MAX[precision]:.4g})",
                )


_FIT_CACHE: dict[tuple[str, str, DataSignature], str | None] = {}
# the largest model (parameters and buffers, in numbers) fit_error runs on CPU with zero weights: at most 128 MB
# of float32; the largest registered one, wrn56_4 on CIFAR, holds 13.6 million
PROBE_ON_CPU = 32_000_000


def fit_error(model: str, params: Any, data: DataSignature) -> str | None:
    """Why model ``model`` with hyperparameters ``params`` cannot train on data of signature ``data``; None if it can.

    The model is built as its registry entry builds it on PyTorch's meta device (shapes, no memory, no
    initialisation) and run on a batch of two zero inputs of the data's kind (float images or features, int64
    token ids). A model of up to :data:`PROBE_ON_CPU` numbers (every registered one at its papers' sizes) runs on
    CPU with zero weights: milliseconds, where the meta kernels' Python decompositions import ``torch._dynamo``
    (about a second of the start-up of every run that never uses it). A larger one runs on the meta device,
    which computes shapes and no numbers, and again on CPU with zero weights for token ids (the meta kernels let
    a float layer take them) or an operation without a meta kernel. What that raises (the model's own input
    check, or PyTorch's error: a shape or dtype mismatch) is the why, as is an output that is not one score per
    class. Nothing is trained, and the answer is kept for the process (validating a sweep's jobs checks each pair
    once).
    """
    key = (model, repr(params), data)
    if key not in _FIT_CACHE:
        _FIT_CACHE[key] = _probe(MODELS.get(model).obj, params, data)
    return _FIT_CACHE[key]


def _probe(build: Any, params: Any, data: DataSignature) -> str | None:
    import torch  # only here: the rest of validation runs without it

    dtype = torch.int64 if data.inputs == "tokens" else torch.float32
    try:
        with torch.device("meta"):
            module = build(params, data.input_shape, data.num_classes).eval()
            real = sum(t.numel() for t in (*module.parameters(), *module.buffers())) <= PROBE_ON_CPU
            if not real:
                try:
                    out = module(torch.zeros((2, *data.input_shape), dtype=dtype))
                    real = data.inputs == "tokens"  # the meta kernels let a float layer take integer ids
                except (NotImplementedError, RuntimeError) as e:
                    if "meta" not in str(e):  # an operation without a meta kernel (.item()...): run it for real
                        raise
                    real = True
        if real:
            module = module._apply(_zeros_on_cpu)
            with torch.no_grad():
                out = module(torch.zeros((2, *data.input_shape), dtype=dtype))
    except ConfigError as e:
        return e.message
    except Exception as e:  # noqa: BLE001 - whatever the model raises on this input is why it does not fit
        return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (2, data.num_classes):
        got = list(out.shape[1:]) if isinstance(out, torch.Tensor) else type(out).__name__
        return f"it gives {got} per input, not the {data.num_classes} class scores"
    return None


def _zeros_on_cpu(t: Any) -> Any:  # t: a tensor on the meta device
    """A CPU tensor of zeros of ``t``'s shape and dtype: ``Module.to_empty``'s ``empty_like`` of a meta tensor runs
    PyTorch's Python reference, which imports sympy (about half a second of every run's start-up)."""
    import torch

    return torch.zeros(t.shape, dtype=t.dtype)


def models_for(data: DataSignature) -> list[str]:
    """The registered models that train on data of signature ``data`` at their default hyperparameters."""
    fits = []
    for name in MODELS.names():
        cls = MODELS.get(name).params
        if fit_error(name, build_params(cls, {}, "model") if cls is not None else None, data) is None:
            fits.append(name)
    return fits


def check_model_fits_data(spec: RunSpec) -> None:
    """Refuse, before any file is read, a model that cannot train on the dataset: one line naming both, the
    dataset's input, why, and the models that fit it. Driven by the dataset's registered signature
    (:class:`~fedrun.config.registry.DataSignature`) and the model's own builder (:func:`fit_error`), so a new
    dataset or model is covered; a dataset that registered no signature (a user's) is not checked here."""
    entry = DATASETS.get(spec.data.name)
    if entry.signature is None:
        return
    data = entry.signature(spec.data.params)
    why = fit_error(spec.model.name, spec.model.params, data)
    if why is None:
        return
    d, m = spec.data.name, spec.model.name
    valid = ", ".join(models_for(data)) or "none of the registered models"
    raise ConfigError(
        "model.name", f"model={m} does not fit data={d} ({data.describe()}): {why}; valid with data={d}: {valid}"
    )


def validate(cfg: DictConfig | dict[str, Any], imports: Collection[str] = ()) -> RunSpec:
    """Check every field and build the typed run spec; raises ConfigError naming the first bad field.

    ``imports``: the modules the current command named itself (fedrun's command line). Of the config's own
    ``imports`` only these are imported (fedrun/config/imports.py): a config file or a run dir never runs code.
    """
    raw = resolve(cfg) if isinstance(cfg, DictConfig) else dict(cfg)
    skipped = load_imports(raw.get("imports"), imports)
    try:
        return _validated(raw)
    except ConfigError as e:
        if not skipped:
            raise
        raise ConfigError(e.field, e.message + not_imported_hint(skipped)) from None


def _validated(raw: dict[str, Any]) -> RunSpec:
    spec = RunSpec(
        algorithm=_component("algorithm", ALGORITHMS, raw.get("algorithm")),
        data=_component("data", DATASETS, raw.get("data")),
        partition=_component("partition", PARTITIONS, raw.get("partition")),
        model=_component("model", MODELS, raw.get("model")),
        hardware=_hardware(raw.get("hardware")),
        fl=_section(FLConfig, raw.get("fl"), "fl"),
        eval=_section(EvalConfig, raw.get("eval"), "eval"),
        output=_section(OutputConfig, raw.get("output"), "output"),
        checkpoint=_section(CheckpointConfig, raw.get("checkpoint"), "checkpoint"),
        seed=raw.get("seed", 0),
        cache_dir=raw.get("cache_dir"),
        raw=raw,
        ima=_section(IMAConfig, raw.get("ima"), "ima"),
        proxy=_section(ProxyConfig, raw.get("proxy"), "proxy"),
        corrupt=_section(CorruptConfig, raw.get("corrupt"), "corrupt"),
        tracking=_section(TrackingConfig, raw.get("tracking"), "tracking"),
        system=_section(SystemConfig, raw.get("system"), "system"),
        privacy=_section(PrivacyConfig, raw.get("privacy"), "privacy"),
        compression=_section(CompressionConfig, raw.get("compression"), "compression"),
    )
    if not isinstance(spec.seed, int) or isinstance(spec.seed, bool) or not 0 <= spec.seed < 2**32:
        # the RNG keys take the seed modulo 2**32: larger seeds would silently repeat smaller ones
        raise ConfigError("seed", f"must be an integer in [0, 2**32), got {spec.seed!r}")
    engines = ("auto", *ENGINES.names())
    if spec.hardware.engine not in engines:
        raise ConfigError("hardware.engine", f"invalid value {spec.hardware.engine!r}; valid: {', '.join(engines)}")
    extra = set(raw) - {f for f in FedrunConfig.__dataclass_fields__} - {"experiment"}
    if extra:
        raise ConfigError(sorted(extra)[0], "unknown top-level key")
    check_step_scalars(spec)
    check_system(spec)
    check_privacy(spec)
    check_resources(spec)  # before the fit check, which may build the model on CPU
    check_model_fits_data(spec)
    return spec
