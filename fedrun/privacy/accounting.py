"""The privacy budget, from Google's ``dp-accounting`` library (never a hand-written formula).

Every round (client-level DP-FedAvg) or local step (sample-level DP-SGD) is one Poisson-subsampled Gaussian
mechanism: ``PoissonSampledDpEvent(q, GaussianDpEvent(z))``, composed ``steps`` times; the accountant (RDP,
Mironov 2017 / Mironov et al. 2019, or PLD, Doroshenko et al. 2022) turns the composition into epsilon at delta.
The budget is a pure function of (q, z, steps, delta, accountant), so a resumed run recomputes it.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import sys
from collections.abc import Iterator
from typing import Any

from fedrun.core.errors import ConfigError
from fedrun.core.extras import require_extra

ACCOUNTANTS = ("rdp", "pld")
MAX_NOISE = 1e3  # the largest z the target-epsilon search tries: a model under more noise learns nothing
# the smallest: below it PLD's discretised loss grid takes gigabytes, and the budget is in the hundreds anyway
MIN_NOISE = 0.3
# single-mechanism PLDs kept (each ~0.5-1.7 MB): a run's (q, z), or one per client size under sample-level DP
PLD_MEMO = 32


@contextlib.contextmanager
def _quiet_absl() -> Iterator[None]:
    """dp-accounting's RDP logs (absl) each order it excludes as a warning: expected, not the user's concern.

    absl's ``log`` also calls ``logging.basicConfig()`` when the root logger has no handler, which would leave a
    handler on the root logger bound to whatever ``sys.stderr`` is then; a NullHandler held on the root for the
    duration keeps the process's logging as it was."""
    logger, root, hold = logging.getLogger("absl"), logging.getLogger(), logging.NullHandler()
    level = logger.level
    logger.setLevel(logging.ERROR)
    root.addHandler(hold)
    try:
        yield
    finally:
        root.removeHandler(hold)
        logger.setLevel(level)


@functools.cache
def _library() -> Any:
    """dp-accounting, imported once (only a private run pays for it).

    Its absl logging binds a handler to whatever ``sys.stderr`` is when absl is first imported, and closes that
    stream when logging is reconfigured (Hydra does) unless it is the ``sys.stderr`` of that moment: pointed at the
    process's own stderr, it never closes a stream that a caller redirected (a test's capture, a launcher's log).
    """
    dp_accounting = require_extra("dp_accounting", "privacy", "privacy.mode")  # one line without the extra
    import absl.logging
    from dp_accounting import pld, rdp  # noqa: F401 - the accountants' modules

    handler = absl.logging.get_absl_handler().python_handler
    if handler.stream is not sys.__stderr__:
        handler.stream = sys.__stderr__
    _memoise_mechanism_plds(pld.privacy_loss_distribution)
    return dp_accounting


def _memoise_mechanism_plds(module: Any) -> None:
    """Have dp-accounting build each subsampled Gaussian's privacy loss distribution once a process.

    ``PLDAccountant`` builds it (``from_gaussian_mechanism``) on every ``compose``, ~0.75 of the ~0.95 CPU-s of
    each round's PLD budget, before composing it with itself ``steps`` times. It is a pure function of its
    arguments, and composing returns new distributions, so a kept one gives the same budget to the bit
    (tests/privacy/test_accounting.py checks against the library in a process of its own)."""
    build = module.from_gaussian_mechanism
    if not hasattr(build, "cache_info"):
        module.from_gaussian_mechanism = functools.lru_cache(maxsize=PLD_MEMO)(build)


def _accountant(name: str) -> object:
    lib = _library()
    return lib.rdp.RdpAccountant() if name == "rdp" else lib.pld.PLDAccountant()


def _event(q: float, z: float) -> object:
    lib = _library()
    return lib.PoissonSampledDpEvent(q, lib.GaussianDpEvent(z))


@functools.lru_cache(maxsize=4096)
def epsilon(q: float, z: float, steps: int, delta: float, accountant: str = "rdp") -> float:
    """Epsilon at ``delta`` after ``steps`` compositions of the Poisson-sampled (rate ``q``) Gaussian mechanism
    of noise multiplier ``z`` (std z x sensitivity); 0 for no step, inf for z = 0."""
    if steps == 0:
        return 0.0
    if z == 0:
        return math.inf
    acc = _accountant(accountant)
    with _quiet_absl():
        acc.compose(_event(q, z), steps)  # type: ignore[attr-defined]
        return float(acc.get_epsilon(delta))  # type: ignore[attr-defined]


class _Cached:
    """The accountant :func:`noise_for_epsilon` hands dp-accounting's search: each budget it asks for is
    :func:`epsilon`'s, cached. The search evaluates both ends of its bracket and its root again, each a budget
    already computed or about to be (the check of z = MIN_NOISE, :func:`check_reachable`'s z = MAX_NOISE, the run's
    last round): PLD's take seconds each, the z = MIN_NOISE one the longest. The same numbers to the bit: the
    accountants compose ``SelfComposedDpEvent(e, n)`` as ``e`` composed ``n`` times, which :func:`epsilon` does."""

    def __init__(self, accountant: str) -> None:
        self.accountant = accountant
        self.ledger = _library().NoOpDpEvent()  # a fresh accountant's, as the search checks
        self._budget: tuple[float, float, int] | None = None

    def compose(self, event: Any, count: int = 1) -> _Cached:
        """Note ``SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(z)), steps)`` composed ``count``
        times."""
        sampled = event.event
        self._budget = (sampled.sampling_probability, sampled.event.noise_multiplier, event.count * count)
        return self

    def get_epsilon(self, target_delta: float) -> float:
        assert self._budget is not None, "compose an event first"
        q, z, steps = self._budget
        return epsilon(q, z, steps, target_delta, self.accountant)


def check_reachable(q: float, steps: int, delta: float, target: float, accountant: str = "rdp") -> None:
    """Refuse a ``target`` epsilon that no noise multiplier up to MAX_NOISE reaches over ``steps`` (a ConfigError
    naming ``privacy.target_epsilon``): :func:`noise_for_epsilon`'s refusals, without its search. One budget, at
    z = MAX_NOISE (cached): what a run checks before it knows whether it will solve z at all (a resumed or extended
    run keeps its checkpoint's, fedrun/privacy/mechanisms/base.py)."""
    if not target > 0:
        raise ConfigError("privacy.target_epsilon", f"must be > 0, got {target}")
    best = epsilon(q, MAX_NOISE, steps, delta, accountant)
    if best > target:
        raise ConfigError(
            "privacy.target_epsilon",
            f"{target} is unreachable over {steps} steps at q={q:g}, delta={delta:g} ({accountant}): even noise"
            f" multiplier {MAX_NOISE:g} gives epsilon {best:.4g}; valid: a target >= {best:.4g}, or fewer rounds",
        )


@functools.lru_cache(maxsize=256)
def noise_for_epsilon(q: float, steps: int, delta: float, target: float, accountant: str = "rdp") -> float:
    """The smallest noise multiplier z in [MIN_NOISE, MAX_NOISE] whose budget after ``steps`` reaches ``target``
    epsilon at ``delta`` (dp-accounting's ``calibrate_dp_mechanism``, a bracketed root search on the accountant
    itself, to its default tolerance); MIN_NOISE when that already does. Kept for the process, as :func:`epsilon`
    is: the search takes seconds (PLD: tens of seconds), which the jobs of a sweep run in one process that vary no
    privacy setting would each repeat for the same z.

    Raises a ConfigError naming ``privacy.target_epsilon`` when even z = MAX_NOISE does not reach it (an RDP
    accountant's epsilon has a floor of log(1/delta)/(alpha_max - 1) for any noise).
    """
    dp_accounting = _library()
    check_reachable(q, steps, delta, target, accountant)
    if epsilon(q, MIN_NOISE, steps, delta, accountant) <= target:
        return MIN_NOISE
    with _quiet_absl():
        z = dp_accounting.calibrate_dp_mechanism(
            lambda: _Cached(accountant),
            lambda s: dp_accounting.SelfComposedDpEvent(_event(q, s), steps),
            target,
            delta,
            dp_accounting.ExplicitBracketInterval(MIN_NOISE, MAX_NOISE),
        )
    return float(z)
