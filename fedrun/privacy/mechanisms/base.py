"""The privacy-mechanism contract (``privacy.mode``): how noise enters a run, and what it spends.

A mechanism is one module of this package registering a subclass of :class:`Mechanism` by name
(``@MECHANISMS.register("client")``). It says what epsilon protects (:attr:`Mechanism.unit`), which method and
settings it can run with (:meth:`Mechanism.check`), where its noise goes (an upload stage, a wrapped local
gradient: the hooks of fedrun/capabilities/base.py it implements), and its accounting: one dp-accounting event per
round (or local step), composed over what the run did (:meth:`Mechanism.epsilon`).

The noise multiplier z is the run's state, not configuration: solved once for ``privacy.target_epsilon`` over
``fl.rounds`` when the run starts (or ``privacy.noise_multiplier``), saved in the checkpoint, and kept by a resume
and by an extension (a longer ``fl.rounds``), whose later rounds use the same noise. A resumed or extended run
therefore never solves it: :attr:`Mechanism.z` is solved when first needed, and a checkpoint sets it before then
(the search takes seconds, PLD's tens of seconds, for a z the resume would discard). So epsilon, the composition
of the noise every round used, never decreases within a run; an extension past the rounds z was solved for spends
more than the target, and the summary says so (``extended_past_target``).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch

from fedrun.algorithms.base import Algorithm
from fedrun.core.tree import Tree
from fedrun.privacy.accounting import check_reachable, noise_for_epsilon
from fedrun.privacy.registries import MECHANISMS as MECHANISMS
from fedrun.privacy.settings import PrivacySettings


class Mechanism:
    """A differential-privacy mechanism of a run: its noise multiplier (state), its hooks, its accounting."""

    title: ClassVar[str] = ""  # the mechanism's name in words ("DP-FedAvg"): the run's titles and summary
    unit: ClassVar[str] = ""  # what epsilon protects ("one client's whole data")

    def __init__(self, settings: PrivacySettings, run: Any) -> None:
        self.settings = settings
        self.run = run
        self.fl = run.spec.fl
        self.seed: int = run.spec.seed
        self._z: float | None = None  # :attr:`z`: the checkpoint's, or solved when first needed
        self.solved_for: int | None = None if settings.target_epsilon is None else self.fl.rounds
        if settings.target_epsilon is not None:  # a target no noise reaches: refused now, not when z is first needed
            q, steps = self.budget()
            check_reachable(q, steps, settings.delta, settings.target_epsilon, settings.accountant)

    @property
    def z(self) -> float:
        """The noise multiplier of every round: the checkpoint's (:meth:`load_state_dict`, on a resume or an
        extension), else :meth:`noise`'s, solved here when first needed, once."""
        if self._z is None:
            self._z, self.solved_for = self.noise()
        return self._z

    @z.setter
    def z(self, value: float) -> None:
        self._z = value

    # -- what a mechanism defines
    @classmethod
    def check(cls, settings: PrivacySettings, spec: Any) -> None:
        """Refuse (a ConfigError naming the key) a method or setting this mechanism cannot protect."""

    @classmethod
    def preflight(cls, settings: PrivacySettings, spec: Any) -> None:
        """Refuse, before any data is read, a target no noise reaches when the budget needs no data."""

    def budget(self) -> tuple[float, int]:
        """(q, compositions) of the run's largest spender over ``fl.rounds``: what a target epsilon is solved for."""
        raise NotImplementedError

    def epsilon(self, rounds: int) -> float:
        """The budget spent after ``rounds`` rounds at ``privacy.delta`` (dp-accounting), at the run's z."""
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        """summary.json's ``privacy`` entry: what epsilon covers and how it is computed."""
        return {}

    # -- the hooks it may implement (fedrun/capabilities/base.py)
    def sampling(self) -> bool:
        """Whether it draws the cohort itself (Poisson sampling, what the accountant assumes)."""
        return False

    def wrap(self, algorithm: Algorithm) -> Algorithm:
        return algorithm

    def upload_stages(self) -> list[Any]:
        return []

    def weighting(self) -> str | None:
        return None

    def empty_round(self, state: Any, rnd: int) -> dict[str, float] | None:
        """The step of a round whose cohort is empty (None: the round keeps w^t)."""
        return None

    # -- the noise multiplier as state
    def noise(self) -> tuple[float, int | None]:
        """(z, the rounds it was solved for): solved with dp-accounting for ``target_epsilon`` over ``fl.rounds``
        (a ConfigError when no z reaches it), else ``noise_multiplier`` (solved for nothing: None)."""
        s = self.settings
        if s.target_epsilon is None:
            return float(s.noise_multiplier), None
        q, steps = self.budget()
        return noise_for_epsilon(q, steps, s.delta, s.target_epsilon, s.accountant), self.fl.rounds

    def state_dict(self) -> Tree:
        """z and the rounds it was solved for. z is NaN while not yet needed: the fresh state a resume checks its
        checkpoint's shapes against is taken before the checkpoint's z is loaded, and must not solve one. (Every
        round needs z, and the privacy capability's ``start`` fixes it before the first: no saved state holds NaN.)"""
        z, solved = math.nan if self._z is None else self._z, self.solved_for or 0
        return {"noise_multiplier": torch.tensor(z, dtype=torch.float64), "solved_for": torch.tensor(solved)}

    def load_state_dict(self, tree: Tree) -> None:
        """The z the earlier rounds of this run used: every later round keeps it (NaN: not yet known, see
        :meth:`state_dict`)."""
        z = float(tree["noise_multiplier"])
        self._z = None if math.isnan(z) else z
        self.solved_for = int(tree["solved_for"]) or None

    def record(self) -> dict[str, Any]:
        """The noise of every round (one z for the whole run) and what it was solved for: summary.json's words."""
        out: dict[str, Any] = {"noise_multiplier": self.z, "noise_rounds": f"1-{self.fl.rounds}"}
        if self.solved_for is not None:
            out["noise_solved_for_rounds"] = self.solved_for
            out["extended_past_target"] = self.fl.rounds > self.solved_for
        return out
