"""The shrink rule of the documentation's command test (tests/docs/test_doc_commands.py, docs/extending.md).

A ``fedrun`` command shown in the docs runs with the shrink of the ``-smoke`` reproduce targets appended
(:func:`fedrun.papers.smoke.smoke_overrides`: 2 rounds, at most 5 clients, one local step of batch <= 4,
300/100 samples evaluated once, stand-in data where a dataset's files are missing, no checkpoints, one thread),
plus ``output.plots=false`` and a ``cache_dir`` of the test's own. Overrides that come later win, so the
command's own ``fl.rounds=200`` becomes 2 rounds while its method, data, model, partition and sweep stay.
Commands that run nothing (``--help``, ``--version``, ``--cfg``, ``--info``...) and ``resume=DIR`` (it continues a
run the page started, already shrunk; a resume refuses a changed config) are left as they are.
"""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from fedrun.config.location import CONF_DIR
from fedrun.config.schema import store_schemas
from fedrun.papers.smoke import smoke_method_overrides, smoke_overrides

RUNS_NOTHING = {"--help", "-h", "--version", "--cfg", "-c", "--info", "-i", "--hydra-help", "--shell-completion"}
SWEEP_FUNCTIONS = ("choice(", "range(", "interval(", "glob(", "tag(")


def split_top(value: str) -> list[str]:
    """``a,b`` -> [a, b]; commas inside brackets, parentheses or quotes do not split (``[1,2]`` is one value)."""
    parts, depth, quote, cur = [], 0, "", ""
    for ch in value:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        cur += ch
    return [*parts, cur]


def shrunk_argv(args: list[str], cache_dir: Path) -> list[str]:
    """``args`` (a ``fedrun`` command line without the program) with the shrink appended."""
    if any(a.split("=", 1)[0] in RUNS_NOTHING for a in args):
        return args
    if any(a.startswith("resume=") for a in args):  # continues a run of the page, which was itself shrunk
        return args
    plain: list[str] = []
    swept: dict[str, str] = {}
    search: list[str] = []
    it = iter(args)
    for a in it:
        if a in ("-m", "--multirun"):
            continue
        if a in ("--config-dir", "-cd"):
            search.append(str(Path(next(it)).resolve()))
            continue
        if a.startswith("--config-dir="):
            search.append(str(Path(a.split("=", 1)[1]).resolve()))
            continue
        if a.startswith(("-", "hydra.", "hydra/", "+imports=", "imports=")) or "=" not in a:
            continue
        key, value = a.split("=", 1)
        if value.startswith(SWEEP_FUNCTIONS):
            swept[key.lstrip("+")] = value
            continue
        values = split_top(value)
        if len(values) > 1:
            swept[key.lstrip("+")] = value
        plain.append(f"{key}={values[0]}")
    if search:
        plain.append("hydra.searchpath=[" + ",".join(f"file://{p}" for p in search) + "]")
    GlobalHydra.instance().clear()
    if "fedrun_schema.yaml" not in ConfigStore.instance().repo:  # stored already where fedrun.cli.main is imported
        store_schemas()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
            cfg = OmegaConf.to_container(compose(config_name="config", overrides=plain), resolve=False)
    finally:
        GlobalHydra.instance().clear()
    assert isinstance(cfg, dict)
    algorithm = [a for a in plain if a.startswith("algorithm=")]
    extra = smoke_overrides(cfg, swept) + smoke_method_overrides(tuple(algorithm))
    return [*args, *extra, "output.plots=false", f"cache_dir={cache_dir}"]
