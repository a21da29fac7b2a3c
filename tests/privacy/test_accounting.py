"""The budget is dp-accounting's own computation for the same (q, z, steps, delta), never a formula of ours; the
noise solved for a target epsilon spends that epsilon; a target no noise reaches is refused in one line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fedrun.core.errors import ConfigError
from fedrun.privacy.accounting import MAX_NOISE, MIN_NOISE, epsilon, noise_for_epsilon


@pytest.mark.parametrize(("q", "z", "steps"), [(0.1, 1.0, 100), (1.0, 2.0, 10), (0.01, 0.8, 1000), (0.5, 1.3, 7)])
@pytest.mark.parametrize("name", ["rdp", "pld"])
def test_epsilon_is_the_librarys_own(q: float, z: float, steps: int, name: str) -> None:
    ours = epsilon(q, z, steps, 1e-5, name)  # first: fedrun's import of dp-accounting sets absl's stream up
    import dp_accounting  # not at the module's top: absl binds a handler to sys.stderr when first imported
    from dp_accounting import pld, rdp

    acc = rdp.RdpAccountant() if name == "rdp" else pld.PLDAccountant()
    acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z)), steps)
    assert ours == acc.get_epsilon(1e-5)


PLD_CASES = [(0.1, 1.1, steps) for steps in (1, 5, 40, 5)] + [(0.02, 0.9, 7), (1.0, 2.0, 3)]
LIBRARY_ALONE = """
import sys, dp_accounting
from dp_accounting import pld
for q, z, steps in eval(sys.argv[1]):
    acc = pld.PLDAccountant()
    acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z)), steps)
    print(repr(acc.get_epsilon(1e-5)))
"""


def test_pld_budgets_per_round_equal_the_librarys_alone_to_the_bit() -> None:
    """fedrun keeps each subsampled Gaussian's loss distribution (fedrun/privacy/accounting.py): every round's
    budget is still the library's own, computed in a process where nothing is kept; each (q, z) is built once."""
    from dp_accounting.pld import privacy_loss_distribution

    epsilon.cache_clear()
    epsilon(0.5, 5.0, 1, 1e-5, "pld")  # dp-accounting imported, its builder memoised
    build = privacy_loss_distribution.from_gaussian_mechanism
    build.cache_clear()  # type: ignore[attr-defined]
    ours = [repr(epsilon(q, z, steps, 1e-5, "pld")) for q, z, steps in PLD_CASES]
    assert build.cache_info().misses == 3  # type: ignore[attr-defined]  # one build per (q, z)
    alone = subprocess.run(
        [sys.executable, "-c", LIBRARY_ALONE, repr(PLD_CASES)], capture_output=True, text=True, timeout=600
    )
    assert alone.returncode == 0, alone.stderr
    assert ours == alone.stdout.split()


def test_epsilon_grows_with_rounds_and_shrinks_with_noise() -> None:
    eps = [epsilon(0.1, 1.0, t, 1e-5) for t in (0, 1, 10, 100)]
    assert eps[0] == 0 and eps == sorted(eps) and eps[1] < eps[3]
    assert epsilon(0.1, 2.0, 100, 1e-5) < epsilon(0.1, 1.0, 100, 1e-5)
    assert epsilon(0.1, 0.0, 5, 1e-5) == float("inf")


@pytest.mark.parametrize(("target", "name"), [(1.0, "rdp"), (8.0, "rdp"), (2.0, "pld")])
def test_the_solved_noise_spends_the_target(target: float, name: str) -> None:
    z = noise_for_epsilon(0.1, 50, 1e-5, target, name)
    assert MIN_NOISE < z < MAX_NOISE
    assert epsilon(0.1, z, 50, 1e-5, name) == pytest.approx(target, rel=1e-3)
    assert epsilon(0.1, z * 0.95, 50, 1e-5, name) > target  # the smallest such z, to the search's tolerance


def test_an_unreachable_target_is_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError) as e:
        noise_for_epsilon(0.1, 100, 1e-5, 0.001)
    assert e.value.field == "privacy.target_epsilon" and "unreachable" in e.value.message
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="must be > 0"):
        noise_for_epsilon(0.1, 100, 1e-5, 0.0)


def test_the_accountant_leaves_the_root_logger_as_it_was() -> None:
    import logging

    root = logging.getLogger()
    before = list(root.handlers)
    epsilon(0.1, 1.0, 123, 1e-5, "rdp")  # dp-accounting logs excluded RDP orders through absl
    noise_for_epsilon(0.1, 77, 1e-5, 3.0)
    assert root.handlers == before  # absl's basicConfig() did not run
