"""Validation: a composed config into a typed :class:`~fedrun.config.schema.RunSpec`, every range and cross-field rule
checked (each section's own, then each capability's: :meth:`~fedrun.capabilities.base.Capability.check`), so a bad
value fails before any work with one line naming the field and the valid choices."""

from __future__ import annotations

import math
import re
from collections.abc import Collection
from dataclasses import fields, is_dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from fedrun.config import sections
from fedrun.config.fit import check_model_fits_data
from fedrun.config.imports import load_imports, not_imported_hint
from fedrun.config.registry import ALGORITHMS, DATASETS, ENGINES, MODELS, PARTITIONS, build_params
from fedrun.config.resources import check_resources
from fedrun.config.schema import (
    CheckpointConfig,
    Component,
    CorruptConfig,
    FLConfig,
    HardwareConfig,
    IMAConfig,
    OutputConfig,
    ProxyConfig,
    RunSpec,
    TrackingConfig,
    config_keys,
    engine_options,
    eval_class,
    hardware_class,
)
from fedrun.core.errors import ConfigError


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


def check_capabilities(spec: RunSpec) -> None:
    """Each capability's settings made definite from the rest of the run (its ``resolve``), its rules across
    sections (its ``check``), in order, and what it refuses before any data (its ``preflight``)."""
    for cap in sections.capabilities():
        settings = spec.sections[cap.name] = cap.resolve(spec.sections[cap.name], spec)
        cap.check(settings, spec)
        if cap.active(settings):
            cap.preflight(settings, spec)


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
        eval=_section(eval_class(), raw.get("eval"), "eval"),
        output=_section(OutputConfig, raw.get("output"), "output"),
        checkpoint=_section(CheckpointConfig, raw.get("checkpoint"), "checkpoint"),
        seed=raw.get("seed", 0),
        cache_dir=raw.get("cache_dir"),
        raw=raw,
        ima=_section(IMAConfig, raw.get("ima"), "ima"),
        proxy=_section(ProxyConfig, raw.get("proxy"), "proxy"),
        corrupt=_section(CorruptConfig, raw.get("corrupt"), "corrupt"),
        tracking=_section(TrackingConfig, raw.get("tracking"), "tracking"),
    )
    spec.sections = sections.build_sections(raw, {"eval": spec.eval})
    if not isinstance(spec.seed, int) or isinstance(spec.seed, bool) or not 0 <= spec.seed < 2**32:
        # the RNG keys take the seed modulo 2**32: larger seeds would silently repeat smaller ones
        raise ConfigError("seed", f"must be an integer in [0, 2**32), got {spec.seed!r}")
    engines = ("auto", *ENGINES.names())
    if spec.hardware.engine not in engines:
        raise ConfigError("hardware.engine", f"invalid value {spec.hardware.engine!r}; valid: {', '.join(engines)}")
    extra = set(raw) - config_keys()
    if extra:
        raise ConfigError(sorted(extra)[0], "unknown top-level key")
    check_step_scalars(spec)
    check_capabilities(spec)
    check_resources(spec)  # before the fit check, which may build the model on CPU
    check_model_fits_data(spec)
    return spec
