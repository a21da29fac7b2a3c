"""How a finished run's config differs from what the same command runs now: the ``setup`` facts of its evidence
record (:mod:`fedrun.papers.setups`), found rather than remembered.

The run's Hydra overrides are composed against today's ``conf/`` and every setting that decides a run's results
(:func:`fedrun.config.identity.comparable`: not output, tracking, checkpoints, paths) is compared. A difference
means the preset (or a default) moved since the run: e.g. FedLAW's ``proxy.per_class`` went from 10 to 20 (issue 38
point 7), so a record of the older runs must say it, or the scorecard pools them with runs of the new setup. A
setting the run's config lacks (added since) is not a difference, because a new setting's default keeps old runs
bit-identical; nor are the run's labels and hardware (``tags``, ``hardware``).
"""

from __future__ import annotations

from typing import Any

import yaml
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from fedrun.config import location
from fedrun.config.identity import comparable, flat
from fedrun.config.schema import store_schemas
from fedrun.core.errors import ConfigError
from fedrun.storage.rundir import RunDir

# how the run was labelled and executed (threads, engine, device), not the setup a paper's cell describes
EXECUTION = ("tags.", "hardware.")


def composed_now(overrides: list[str]) -> dict[str, Any]:
    """The resolved config that ``fedrun OVERRIDES`` composes from today's ``conf/`` (not validated, not run)."""
    GlobalHydra.instance().clear()
    store_schemas()
    try:
        with initialize_config_dir(config_dir=str(location.CONF_DIR), version_base=None):
            cfg = compose(config_name="config", overrides=overrides)
        return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    finally:
        GlobalHydra.instance().clear()


def run_overrides(rd: RunDir, cfg: dict[str, Any]) -> list[str]:
    """The run's command-line overrides (Hydra's record), or its preset alone when there is none."""
    f = rd.hydra_overrides_file
    if f.is_file():
        return [str(o) for o in yaml.safe_load(f.read_text()) or []]
    preset = (cfg.get("tags") or {}).get("preset")
    return [f"experiment={preset}"] if preset else []


def setup_drift(rd: RunDir, cfg: dict[str, Any]) -> dict[str, str]:
    """``{setting: "RAN (the preset now: NOW)"}`` for each setting the run's ``cfg`` holds with another value than
    its command composes today; :class:`ConfigError` naming the run when its overrides no longer compose."""
    try:
        composed = composed_now(run_overrides(rd, cfg))  # Hydra keeps hydra.* out of this record
    except (HydraException, OmegaConfBaseException) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        why = f"its overrides no longer compose ({first}); valid: runs whose command composes with today's conf/"
        raise ConfigError(f"{rd.path}: setup", why) from None
    now = flat(composed)
    # comparable() also drops a later-added key while it is at its old default, so both sides decide what counts
    decisive = {k for c in (cfg, composed) for k in flat(comparable(c))}
    out = {}
    for key, ran in flat(cfg).items():
        if key in decisive and key in now and now[key] != ran and not key.startswith(EXECUTION):
            out[key] = f"{ran} (the preset now: {now[key]})"
    return out
