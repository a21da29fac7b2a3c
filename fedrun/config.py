"""Structured-config schema (registered with Hydra's ConfigStore) and validation into typed objects.

Hydra checks types and unknown keys while composing; :func:`validate` then checks every range and
cross-field rule and builds each component's hyperparameter dataclass from its registry, so a bad value
fails before any work with one line naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from fedrun.errors import ConfigError
from fedrun.registry import (
    ALGORITHMS,
    DATASETS,
    ENGINES,
    MODELS,
    PARTITIONS,
    build_params,
    in_range,
    positive,
)


def one_of(field_name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(field_name, f"invalid value {value!r}; valid: {', '.join(choices)}")


@dataclass
class FLConfig:
    """Federated-learning settings (``fl.*``): who trains, how much, and how updates are combined."""

    clients: int = 20
    rounds: int = 30
    participation: float = 1.0
    sampling: str = "fixed"  # fixed: a fixed-size sample without replacement; bernoulli: each client w.p. participation
    local_epochs: int = 1
    local_steps: int | None = None  # a fixed number of local steps; overrides local_epochs when set
    batch_size: int = 50
    lr: float = 0.05
    momentum: float = 0.0
    weight_decay: float = 0.0
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
                "fl.participation",
                f"{self.participation} x {self.clients} clients samples no client per round; raise it to >= 1/clients",
            )

    @property
    def cohort_size(self) -> int:
        """Clients per round under fixed-size sampling: max(int(C*K), 1) as in FedAvg's reference code."""
        return max(int(self.participation * self.clients), 1)


@dataclass
class EvalConfig:
    """Evaluation (``eval.*``)."""

    every: int = 1
    train_acc: bool = False
    batch_size: int = 2048
    target: float | None = None  # test accuracy (in [0,1]) whose first reaching round is reported
    last_k: int = 10  # the summary's "last-k mean" (the papers use the last 10 evaluated rounds)

    def __post_init__(self) -> None:
        positive("every", self.every)
        positive("batch_size", self.batch_size)
        in_range("target", self.target, 0.0, 1.0)
        positive("last_k", self.last_k)


@dataclass
class HardwareConfig:
    """Where and how clients are simulated (``hardware.*``)."""

    device: str = "cpu"  # cpu | cuda | cuda:N | auto
    engine: str = "sequential"  # sequential | vectorised | auto (the faster of the two, measured)
    threads: int = 0  # torch intra-op threads; 0 leaves torch's default
    precision: str = "fp32"  # fp32 | fp64 | bf16 (bf16 autocast, meant for CUDA)
    chunk: int | None = None  # vectorised engine: clients trained at once (None: sized from free memory)
    compile: bool = False  # vectorised engine: torch.compile the batched client step

    def __post_init__(self) -> None:
        if not (self.device in ("cpu", "cuda", "auto") or self.device.startswith("cuda:")):
            raise ConfigError("device", f"invalid value {self.device!r}; valid: cpu, cuda, cuda:N, auto")
        positive("threads", self.threads, allow_zero=True)
        positive("chunk", self.chunk)
        one_of("precision", self.precision, ("fp32", "fp64", "bf16"))


@dataclass
class OutputConfig:
    """What a run prints and writes (``output.*``)."""

    quiet: bool = False  # no progress bar or summary table (the default inside a multirun)
    plots: bool = True


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
    seed: int = 0
    cache_dir: str | None = "outputs/.cache"


ConfigStore.instance().store(name="fedrun_schema", node=FedrunConfig)


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


def _component(group: str, registry: Any, node: Any) -> Component:
    node = dict(node or {})
    if "name" not in node:
        raise ConfigError(f"{group}.name", f"missing; valid: {', '.join(registry.names())}")
    entry = registry.get(node["name"])
    params = build_params(entry.params, node, group) if entry.params is not None else None
    return Component(entry.name, entry.obj, params)


def _section(cls: type, node: Any, prefix: str) -> Any:
    return build_params(cls, dict(node or {}), prefix, ignore=())


def validate(cfg: DictConfig | dict[str, Any]) -> RunSpec:
    """Check every field and build the typed run spec; raises ConfigError naming the first bad field."""
    raw = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)
    spec = RunSpec(
        algorithm=_component("algorithm", ALGORITHMS, raw.get("algorithm")),
        data=_component("data", DATASETS, raw.get("data")),
        partition=_component("partition", PARTITIONS, raw.get("partition")),
        model=_component("model", MODELS, raw.get("model")),
        hardware=_section(HardwareConfig, raw.get("hardware"), "hardware"),
        fl=_section(FLConfig, raw.get("fl"), "fl"),
        eval=_section(EvalConfig, raw.get("eval"), "eval"),
        output=_section(OutputConfig, raw.get("output"), "output"),
        seed=raw.get("seed", 0),
        cache_dir=raw.get("cache_dir"),
        raw=raw,
    )
    if not isinstance(spec.seed, int) or isinstance(spec.seed, bool) or spec.seed < 0:
        raise ConfigError("seed", f"must be an integer >= 0, got {spec.seed!r}")
    engines = ("auto", *ENGINES.names())
    if spec.hardware.engine not in engines:
        raise ConfigError("hardware.engine", f"invalid value {spec.hardware.engine!r}; valid: {', '.join(engines)}")
    extra = set(raw) - {f for f in FedrunConfig.__dataclass_fields__} - {"experiment"}
    if extra:
        raise ConfigError(sorted(extra)[0], "unknown top-level key")
    return spec
