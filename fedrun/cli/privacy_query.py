"""``fedrun --privacy-noise [override ...]``: the noise multiplier z that reaches ``privacy.target_epsilon`` over
the run the same command line would start, answered without training and without a run directory (docs/privacy.md,
"Choosing z from a target epsilon").

The answer is the run's own: z is solved as the run solves it (client level: :class:`ClientDP`'s q over
``fl.rounds`` rounds; sample level: the DP-SGD mechanism's worst client, whose size needs the data and its partition,
so those are loaded, as a run loads them), and the epsilon printed is dp-accounting's at that z. One line on stdout,
exit 0; bad input (no privacy, no target, an unreachable target, a bad override) one line on stderr, exit 2.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any, NoReturn

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from fedrun.cli import compose_checks
from fedrun.cli.main import CONF_DIR, EXIT_BAD_INPUT, error_line
from fedrun.config.schema import RunSpec
from fedrun.config.validate import validate
from fedrun.core.errors import ConfigError, DataError
from fedrun.privacy.accounting import epsilon, noise_for_epsilon
from fedrun.privacy.client import ClientDP
from fedrun.privacy.settings import PrivacySettings

FLAG = "--privacy-noise"


def main(argv: list[str]) -> NoReturn:
    """Answer ``fedrun --privacy-noise OVERRIDES``: the line of :func:`noise_line`, or one error line (exit 2)."""
    args = [a[1:] if a.startswith("+imports=") else a for a in argv if a != FLAG]
    try:
        line = noise_line(compose_spec(args))
    except (ConfigError, DataError) as e:
        print(f"fedrun: error: {e}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    except Exception as e:  # noqa: BLE001 - a composition error (bad override, unknown option) is bad input
        print(f"fedrun: error: {error_line(e)}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    print(line)
    sys.exit(0)


def compose_spec(args: list[str]) -> RunSpec:
    """The validated spec of ``fedrun ARGS``, composed as ``fedrun`` composes it (the same checks), not run."""
    compose_checks.install()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
            cfg = compose(config_name="config", overrides=args)
    finally:
        GlobalHydra.instance().clear()
    return validate(cfg, compose_checks.command_imports(args))


def solve(spec: RunSpec) -> tuple[float, float, int, str]:
    """(z, q, steps, what a step is) as the run solves them for ``privacy.target_epsilon``."""
    pv, fl = PrivacySettings.of(spec), spec.fl
    if not pv.on:
        raise ConfigError("privacy.mode", "none adds no noise to solve for; valid: client or sample (privacy=client)")
    if pv.target_epsilon is None:
        raise ConfigError("privacy.target_epsilon", "is not set, and z is solved for it; valid: a number > 0")
    if pv.mode == "client":
        q = ClientDP.rate(pv, fl)
        z = noise_for_epsilon(q, fl.rounds, pv.delta, pv.target_epsilon, pv.accountant)
        return z, q, fl.rounds, f"client level, {pv.sampling} sampling"
    from fedrun.run.experiment import build_experiment  # sample level: the clients' sizes, from data and partition

    sequential = dataclasses.replace(spec, hardware=dataclasses.replace(spec.hardware, engine="sequential"))
    cap = build_experiment(sequential).capability("privacy")
    assert cap is not None
    mechanism: Any = cap.mechanism  # type: ignore[attr-defined]
    q, steps = mechanism.budget()
    what = f"sample level: {steps} local steps of the smallest client, n={int(mechanism.sizes.min())}"
    return mechanism.z, q, steps, what


def noise_line(spec: RunSpec) -> str:
    """ "noise multiplier z=... reaches epsilon=... at delta=... over R rounds (..., q=..., accountant=...)"."""
    pv = PrivacySettings.of(spec)
    z, q, steps, what = solve(spec)
    eps = epsilon(q, z, steps, pv.delta, pv.accountant)
    return (
        f"noise multiplier z={z:.6g} reaches epsilon={eps:.6g} at delta={pv.delta:g} over {spec.fl.rounds} rounds"
        f" ({what}, q={q:.6g}, accountant={pv.accountant})"
    )
