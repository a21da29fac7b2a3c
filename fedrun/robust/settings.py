"""The ``attack`` and ``defence`` sections (fedrun/capabilities/attack.py, defence.py; docs/robustness.md).

Each section's own keys are here; each registered attack's (defence's, pre-aggregator's) settings dataclass joins
its section after them (fedrun/config/sections.py), so ``attack.z`` is ALIE's z and ``defence.beta`` the trimmed
mean's beta. At their defaults (``attack=none``, ``defence=none``) nothing runs and a run is bit for bit the run of
before the sections existed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fedrun.config.registry import positive
from fedrun.core.errors import ConfigError
from fedrun.robust.base import ATTACKS, DEFENCES, PREAGGREGATORS
from fedrun.robust.malicious import check_fraction

NONE = "none"  # attack.name, defence.name, defence.pre without one
FIRST_ROUND = 1  # metrics.csv's first round (the run loop's round 0)


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _one_of(field: str, value: str, names: list[str]) -> None:
    valid = (NONE, *names)
    if value not in valid:
        raise ConfigError(field, f"invalid value {value!r}; valid: {', '.join(valid)}")


@dataclass(frozen=True)
class AttackSettings:
    """Poisoning attacks (``attack.*``): which attack, and the share of all clients that are malicious.

    The malicious clients are a fixed set, round(fraction x clients) of them drawn from the seed
    (:func:`fedrun.robust.malicious.malicious_clients`); they take part when sampled, like anyone else. A data
    attack poisons their training samples; a model attack replaces their uploads (it knows its own update, or with
    ``knowledge=omniscient`` the round's honest ones, where the attack has the choice).

    They attack in rounds ``start_round``..``end_round`` (1-based as metrics.csv's ``round``, inclusive; by default
    every round): a single round of model replacement (Bagdasaryan et al. 2020, sec. 4), attacks at fixed rounds
    (Sun et al. 2019), then how long a backdoor lasts. Outside the window they are honest clients: clean samples,
    honest uploads.
    """

    name: str = "none"  # none | label_flip | backdoor | sign_flip | gaussian | scaling | alie | ipm | min_max ...
    fraction: float = 0.2  # f: the share of all clients that are malicious (Fang et al. 2020, FLTrust: 20%)
    start_round: int = FIRST_ROUND  # the first round they attack (1: from the start)
    end_round: int | None = None  # the last round they attack, inclusive (None: to the end)

    def __post_init__(self) -> None:
        _one_of("name", self.name, ATTACKS.names())
        if not isinstance(self.fraction, (int, float)) or not math.isfinite(self.fraction):
            raise ConfigError("fraction", f"must be a finite number in [0.0, 1.0), got {self.fraction!r}")
        check_fraction(float(self.fraction), "fraction")
        start, end = self.start_round, self.end_round
        if not _whole(start) or start < FIRST_ROUND:
            raise ConfigError("start_round", f"must be an integer >= {FIRST_ROUND} (the first round), got {start!r}")
        if end is not None and (not _whole(end) or end < start):
            raise ConfigError(
                "end_round", f"must be null (to the end) or an integer >= attack.start_round ({start}), got {end!r}"
            )

    @property
    def windowed(self) -> bool:
        """Whether the attackers attack in some rounds only (``start_round``, ``end_round`` set)."""
        return self.start_round != FIRST_ROUND or self.end_round is not None

    @property
    def on(self) -> bool:
        return self.name != NONE


@dataclass(frozen=True)
class DefenceSettings:
    """Byzantine-robust aggregation (``defence.*``): the rule in place of the weighted mean, a pre-aggregator in
    front of it, and f, the Byzantine uploads per cohort it is set to tolerate.

    ``f`` unset: ceil(attack.fraction x m) in a cohort of m uploads (``attack.fraction`` is the server's
    assumption even under ``attack=none``, so a sweep's no-attack baseline runs the same rule as its attacks).
    """

    name: str = "none"  # none | mean | median | trimmed_mean | krum | multi_krum | bulyan | geomed | ...
    pre: str = "none"  # none | nnm (Allouah et al. 2023) | bucketing (Karimireddy et al. 2022), before the rule
    f: int | None = None  # Byzantine uploads per cohort the rule tolerates; None: ceil(attack.fraction x m)

    def __post_init__(self) -> None:
        _one_of("name", self.name, DEFENCES.names())
        _one_of("pre", self.pre, PREAGGREGATORS.names())
        positive("f", self.f, allow_zero=True)
        if self.pre != NONE and self.name == NONE:
            raise ConfigError(
                "pre", f"{self.pre} mixes the uploads in front of a rule, and defence.name is none; valid: none, or a"
                " rule (defence.name=mean: the pre-aggregator before the plain mean)",
            )  # fmt: skip

    @property
    def on(self) -> bool:
        return self.name != NONE


def check_unused_keys(
    settings: object, chosen: tuple[str, ...], contributors: list[tuple[str, type | None]], section: str
) -> None:
    """Refuse a key joined to ``section`` by a registered choice that the run did not choose (``attack.z`` is ALIE's:
    set under ``attack=ipm`` it would be silently ignored), in one line naming the key and its owners. A key the
    chosen ones share is theirs; a key at its default is left alone."""
    mine = {f for name, params in contributors if name in chosen and params is not None
            for f in getattr(params, "__dataclass_fields__", {})}  # fmt: skip
    for _, params in contributors:
        fields = getattr(params, "__dataclass_fields__", {}) if params is not None else {}
        for key, f in fields.items():
            if key in mine or getattr(settings, key, f.default) == f.default:
                continue
            owners = [n for n, p in contributors if p is not None and key in getattr(p, "__dataclass_fields__", {})]
            rules = [o for o in owners if section != "defence" or o in DEFENCES.names()]
            pres = [o for o in owners if o not in rules]
            what = [f"{section}.name={'|'.join(rules)}"] if rules else []
            what += [f"defence.pre={'|'.join(pres)}"] if pres else []
            picked = ", ".join(c for c in chosen if c != NONE) or NONE
            raise ConfigError(
                f"{section}.{key}",
                f"is a setting of {', '.join(owners)}, not of {picked}; valid: {' or '.join(what)}, or leave it unset",
            )
