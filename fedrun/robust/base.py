"""The contracts of robust aggregation and of attacks, and their registries.

A defence is a pure function of the cohort's flat uploads ``x`` [m, d] (row i: client i's upload, float32 or
float64) and of what the server knows of the round (:class:`ServerView`: the Byzantine count f it is set to
tolerate, the aggregation weights p_i, FLTrust's root update, the previous aggregate, a keyed generator). It
returns an :class:`Aggregate`: the aggregate [d] and, where the rule decides it, which uploads it kept and the
weight each got. Nothing loops over clients in Python: pairwise distances are one matrix product
(:mod:`fedrun.robust.distances`).

A pre-aggregator (NNM, bucketing) maps the m uploads to m' mixtures y = M x (M [m', m], rows summing to one) in
front of any defence; :func:`robust_aggregate` composes them, and maps the defence's weights on the mixtures back
to the uploads (weights_x = weights_y M), so "which uploads were dropped" stays about clients.

An attack is either a data attack (a function of a batch dict ``{"x", "y"}``: label flipping, backdoor) or a model
attack: a function of the attackers' own (honestly trained) uploads [a, d] and, when ``knowledge`` is
``omniscient``, of the honest uploads of the round [h, d], returning the a uploads the attackers send.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch

from fedrun.core.errors import ConfigError
from fedrun.core.registry import Registry
from fedrun.core.rng import torch_gen

Knowledge = Literal["own", "omniscient"]


@dataclass(frozen=True)
class Aggregate:
    """A defence's result: ``value`` [d]; ``weights`` [m] where the rule is linear in the uploads (value = sum_i
    weights_i x_i, plus any noise the rule adds; Krum's one-hot, Multi-Krum's 1/k on the kept, FLTrust's trust
    times rescaling); ``selected`` [m] bool where the rule keeps some uploads and drops the others."""

    value: torch.Tensor
    weights: torch.Tensor | None = None
    selected: torch.Tensor | None = None


@dataclass(frozen=True)
class ServerView:
    """What the server knows of a round: ``f`` the Byzantine uploads the rule is set to tolerate among these m;
    ``weights`` the aggregation weights p_i [m] (summing to one; None: uniform); ``root`` FLTrust's server update
    [d] from its root data; ``previous`` the previous round's aggregate [d] (centered clipping's centre; None:
    zeros); ``generator`` a keyed generator for the rule's randomness (bucketing's shuffle, norm bounding's noise;
    :func:`round_generator` ``(seed, "defence", rnd)``)."""

    f: int = 0
    weights: torch.Tensor | None = None
    root: torch.Tensor | None = None
    previous: torch.Tensor | None = None
    generator: torch.Generator | None = None

    def p(self, x: torch.Tensor) -> torch.Tensor:
        """The aggregation weights as ``x``'s dtype [m] (uniform when none were given)."""
        m = x.shape[0]
        if self.weights is None:
            return torch.full((m,), 1.0 / m, dtype=x.dtype, device=x.device)
        return self.weights.to(x.dtype)


class Defence(ABC):
    """A robust aggregation rule with its settings ``hp`` (a registered params dataclass).

    ``decides``: it reports which uploads it kept or how it weighted them (:class:`Aggregate`). ``needs_root``:
    it needs FLTrust's root update. ``stateful``: it reads the previous round's aggregate (the caller keeps it
    across rounds and checkpoints it).
    """

    name: ClassVar[str] = ""
    decides: ClassVar[bool] = False
    needs_root: ClassVar[bool] = False
    stateful: ClassVar[bool] = False

    def __init__(self, hp: Any) -> None:
        self.hp = hp

    def min_uploads(self, f: int) -> int:
        """The smallest cohort this rule handles with ``f`` Byzantine uploads among it."""
        return 1

    def refuse(self, n: int, f: int) -> str | None:
        """Why ``n`` uploads with ``f`` Byzantine are too few for this rule, or None."""
        need = self.min_uploads(f)
        return None if n >= need else f"{self.name} needs at least {need} uploads to tolerate {f} Byzantine"

    @abstractmethod
    def __call__(self, x: torch.Tensor, view: ServerView) -> Aggregate:
        """The aggregate of the uploads ``x`` [m, d]."""


@dataclass(frozen=True)
class Mixed:
    """A pre-aggregator's output: the mixtures ``y`` [m', d], the mixing matrix ``mix`` [m', m] (y = mix @ x), and
    the view the defence after it gets (f and the weights of the mixtures)."""

    y: torch.Tensor
    mix: torch.Tensor
    view: ServerView


class PreAggregator(ABC):
    """A map from the m uploads to m' mixtures in front of a defence (NNM, bucketing)."""

    name: ClassVar[str] = ""

    def __init__(self, hp: Any) -> None:
        self.hp = hp

    def after(self, n: int, f: int) -> tuple[int, int]:
        """(mixtures, Byzantine mixtures at worst) out of ``n`` uploads with ``f`` Byzantine."""
        return n, f

    @abstractmethod
    def __call__(self, x: torch.Tensor, view: ServerView) -> Mixed:
        """The mixtures of ``x`` [m, d]."""


class Attack:
    """An attack with its settings ``hp``; ``kind`` is ``data`` (it changes the attackers' training batches) or
    ``model`` (it replaces the attackers' uploads)."""

    name: ClassVar[str] = ""
    kind: ClassVar[Literal["data", "model"]] = "model"

    def __init__(self, hp: Any) -> None:
        self.hp = hp


@dataclass(frozen=True)
class AttackView:
    """What the attackers know of a round besides the updates: ``n`` the uploads in the cohort (attackers
    included), ``weights`` the attackers' aggregation weights p_i [a] (None: 1/n each), the server's learning rate
    ``server_lr`` (model replacement's gamma), and a keyed ``generator`` for the attack's randomness
    (:func:`round_generator` ``(seed, "attack", rnd)``)."""

    n: int
    weights: torch.Tensor | None = None
    server_lr: float = 1.0
    generator: torch.Generator | None = None


class ModelAttack(Attack):
    """A model-poisoning attack: :meth:`__call__` maps the attackers' own uploads ``own`` [a, d] (what each would
    have sent, trained honestly) and, for an omniscient attacker, the round's honest uploads ``honest`` [h, d] to
    the a uploads they send. ``knowledge`` (a setting, its default the paper's): ``own`` estimates what the attack
    needs from ``own`` only; ``omniscient`` from ``honest``."""

    kind = "model"
    # what the attacker knows in its paper, when its settings leave ``knowledge`` unset (None); an attack whose
    # params declare no ``knowledge`` has no choice: it uses its own update only (or none: Gaussian noise)
    paper_knowledge: ClassVar[Knowledge] = "own"

    @classmethod
    def has_choice(cls, params: type | None) -> bool:
        """Whether an attack of settings class ``params`` lets ``knowledge`` be set."""
        return params is not None and "knowledge" in getattr(params, "__dataclass_fields__", {})

    @property
    def knowledge(self) -> Knowledge:
        """``hp.knowledge``, or the paper's when unset."""
        k: Knowledge | None = getattr(self.hp, "knowledge", None)
        return self.paper_knowledge if k is None else k

    def reference(self, own: torch.Tensor, honest: torch.Tensor | None) -> torch.Tensor:
        """The uploads the attack's statistics come from: ``honest`` when omniscient, else ``own``."""
        if self.knowledge == "own":
            return own
        if honest is None or honest.shape[0] == 0:
            raise ValueError(f"{self.name} is omniscient: it needs the round's honest uploads")
        return honest

    @abstractmethod
    def __call__(self, own: torch.Tensor, honest: torch.Tensor | None, view: AttackView) -> torch.Tensor:
        """The uploads [a, d] the attackers send."""


class DataAttack(Attack):
    """A data-poisoning attack: :meth:`poison` changes the attackers' training batches ``{"x", "y"}``: ``y``
    [*lead, B] and ``x`` [*lead, B, *input] (``lead`` empty for one client's batch, [k] for a stacked cohort's);
    ``attacker`` [*lead] bool says which rows are the attackers' (None: all)."""

    kind = "data"

    def check(self, num_classes: int, input_shape: tuple[int, ...]) -> None:
        """Refuse (ConfigError naming the field) a setting the dataset cannot take."""
        return None

    @abstractmethod
    def poison(
        self, batch: dict[str, torch.Tensor], num_classes: int, attacker: torch.Tensor | None = None
    ) -> dict[str, torch.Tensor]:
        """The attacker's batch as it trains on it."""

    @abstractmethod
    def poison_client(
        self, x: torch.Tensor, y: torch.Tensor, num_classes: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One attacker's training samples ``x`` [n, ...], ``y`` [n] as it trains on them in a run (poisoned once,
        before training; ``generator``: keyed by the seed and the client, for a choice of samples)."""


def round_generator(seed: int, purpose: str, rnd: int) -> torch.Generator:
    """The keyed CPU generator of a round's robust-FL randomness (``purpose``: ``defence`` for bucketing's shuffle
    and norm bounding's noise, ``attack`` for the attacks' draws), from fedrun/core/rng.py: the same draws on every
    engine, rerun and resume, whatever else the run drew."""
    return torch_gen(seed, "robust", purpose, rnd)


def finite_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(``x`` with its rows holding a non-finite entry zeroed, the mask [m] of the finite rows): a rule gives such
    an upload (an attacker's inf or nan) weight 0 instead of letting 0 * inf turn the aggregate into nan. A row is
    finite when its sum is (one pass, no [m, d] mask: a row of finite entries whose sum overflows counts as
    non-finite too)."""
    finite = torch.isfinite(x.sum(dim=1))
    if bool(finite.all()):
        return x, finite
    return torch.where(finite[:, None], x, torch.zeros_like(x)), finite


DEFENCES: Registry[type[Defence]] = Registry("defence", "fedrun.robust.defences")
PREAGGREGATORS: Registry[type[PreAggregator]] = Registry("preaggregator", "fedrun.robust.preagg")
ATTACKS: Registry[type[Attack]] = Registry("attack", "fedrun.robust.attacks")


def refusal(defence: Defence, pre: tuple[PreAggregator, ...], n: int, f: int) -> str | None:
    """Why ``defence`` (after ``pre``) cannot handle ``n`` uploads of which ``f`` Byzantine, or None when it can.

    For a round that is too small (the caller says so per round) and up front, with the largest cohort the run
    can have (the caller refuses the config when even that one is too small)."""
    if f < 0 or f > n:
        return f"{f} Byzantine uploads among {n} is not a count; valid: 0..{n}"
    m, g = n, f
    for p in pre:
        m, g = p.after(m, g)
    why = defence.refuse(m, g)
    if why is None:
        return None
    via = f" ({m} after {', '.join(p.name for p in pre)})" if pre else ""
    return f"{why}, got {n}{via}"


def check_cohort(defence: Defence, pre: tuple[PreAggregator, ...], n: int, f: int, field: str = "defence") -> None:
    """Raise a one-line ConfigError naming ``field`` when :func:`refusal` has a reason."""
    why = refusal(defence, pre, n, f)
    if why is not None:
        raise ConfigError(field, why)


def robust_aggregate(
    x: torch.Tensor, defence: Defence, view: ServerView, pre: tuple[PreAggregator, ...] = ()
) -> Aggregate:
    """``defence`` after the pre-aggregators ``pre`` (in order) on the uploads ``x`` [m, d]; the weights and
    selection come back per upload (a mixture's weight spread over the uploads it mixes)."""
    mix: torch.Tensor | None = None
    y, v = x, view
    for p in pre:
        out = p(y, v)
        y, v = out.y, out.view
        mix = out.mix if mix is None else out.mix @ mix
    agg = defence(y, v)
    if mix is None:
        return agg
    weights = agg.weights @ mix if agg.weights is not None else None
    selected = None
    if agg.selected is not None:
        selected = (agg.selected.to(mix.dtype) @ mix) > 0
    return Aggregate(agg.value, weights, selected)
