"""``fedrun-reproduce``: run one paper table's sweep (or its smoke version) and print it in the paper's layout.

fedrun-reproduce list                      every target: paper, runs, estimated CPU cost
fedrun-reproduce run fedlaw-table3 [--smoke] [--dry-run] [--out DIR] [--methods FedAvg,FedLAW] [--presets P,...]

A full sweep runs one ``fedrun -m`` process per (preset, method), then prints the table and the scorecard of its
runs (``fedrun-report scorecard TARGET OUT``: each published cell, ours | paper | difference; a -smoke sweep is
never compared, and says so in one line). ``--smoke`` adds the shrink of
fedrun/papers/smoke.py to the same commands and runs their jobs in this process (fedrun/cli/reproduce_sweep.py: same
jobs, directories and results), so start-up and data loading are paid once, not per command. ``--dry-run`` prints
the ``fedrun -m ...`` and ``fedrun-report ...`` commands, quoted for a POSIX shell: each line pastes and runs as is.
"""

from __future__ import annotations

import argparse
import copy
import functools
import os
import re
import shlex
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from fedrun.config import location as conf_location
from fedrun.config.schema import store_schemas
from fedrun.host.allocator import tune_glibc_malloc
from fedrun.papers.smoke import (
    SMOKE_SEC_PER_SAMPLE,
    SMOKE_START_S,
    smoke_method_overrides,
    smoke_overrides,
    smoke_seconds,
)
from fedrun.papers.targets import BY_NAME, TARGETS, Target

CONF_DIR = str(conf_location.CONF_DIR)  # the folder of the package fedrun.conf
# training-set sizes used for the cost estimate (approximate where marked)
TRAIN_SIZE = {
    "fmnist": 60000,
    "mnist": 60000,
    "cifar10": 50000,
    "cifar100": 50000,
    "emnist": 139586,
    "digit5": 125000,
    "pacs": 8000,
    "shakespeare": 395060,
}  # digit5/pacs: rough; shakespeare: FedCos Table V's 143 roles (data.roles=143, split=random)
# Cost model, measured on this machine's CPU (2 shared cores, nice 19): wall seconds per client-sample of a
# full-length run (training + per-round evaluation), by model; models not measured use the slowest measured rate
# and are listed as a lower bound. Plus a fixed cost per run and per `fedrun -m` invocation (start-up, data load),
# measured on a -smoke target (fedcos-table2: ~4 s start-up + ~12 s first-job data load, then ~1.5-2 s per run).
# mlp: FedLAW Table 3 FMNIST-MLP FedAvg seed 8, 774 s wall for 36.0M client-samples (vectorised engine, chunk 20)
# ima_cnn: FedIMA Table I FMNIST-CNN shards FedAvg, the full 300 rounds (sequential engine, 1 thread, two runs at
# once on the 2 cores): 3,440 s wall for 9.0M client-samples (the earlier 1.17e-3 came from 3 rounds under load)
# fedcos_mlp: FedCos Table II FedAvg, round 3 (the fastest of 3 at full size): 19.7 s for 358,400 client-samples
# lstm: FedCos Table V FedAvg at full size, 1 thread, sequential engine, CPU seconds of a round (load average 12, so
# process time, not wall): 35.1 s at 10% (7,000 client-samples; 8.1 s training, 27.0 s evaluating 98,839 windows in
# 128-row chunks) and 44.1 s at 20% (14,000; 16.8 + 27.4): 3.8e-3 s per client-sample over the sweep. The
# evaluation does not grow with the cohort: a 10% run costs ~33% more than this, a 20% run ~16% less.
SEC_PER_SAMPLE = {"mlp": 2.15e-5, "fedcos_mlp": 5.5e-5, "ima_cnn": 3.8e-4, "lstm": 3.8e-3}
RUN_OVERHEAD_S = 2.0
INVOCATION_OVERHEAD_S = 15.0


def preset_cfg(preset: str) -> dict[str, Any]:
    """The composed (unvalidated) config of a preset, as a plain dict (a fresh copy; composed once)."""
    return copy.deepcopy(_preset_cfg(preset))


@functools.cache
def _preset_cfg(preset: str) -> dict[str, Any]:
    GlobalHydra.instance().clear()
    store_schemas()
    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        cfg = compose(config_name="config", overrides=[f"experiment={preset}"])
    GlobalHydra.instance().clear()
    return OmegaConf.to_container(cfg, resolve=False)  # type: ignore[return-value]


def commands(
    target: Target, out: Path, smoke: bool = False, methods: list[str] | None = None, presets: list[str] | None = None
) -> list[list[str]]:
    """One ``fedrun -m`` command per (preset, method); each sweeps settings and seeds into its own dir."""
    cmds = []
    swept = dict(target.sweep)
    seeds = target.seeds[:1] if smoke else target.seeds
    for preset in target.presets:
        if presets and preset not in presets:
            continue
        extra = smoke_overrides(preset_cfg(preset), swept) if smoke else []
        for i, meth in enumerate(target.methods):
            if methods and meth.label not in methods:
                continue
            cmd = [
                sys.executable,
                "-m",
                "fedrun.cli",
                "-m",
                f"experiment={preset}",
                *meth.for_preset(preset),
                *target.extra,
                *(f"{k}={v}" for k, v in target.sweep),
                f"seed={','.join(map(str, seeds))}",
                f"++tags.method='{meth.label}'",
                f"++tags.preset={preset}",
                "output.quiet=true",
                "output.plots=false",
                *extra,
                *(smoke_method_overrides(meth.overrides) if smoke else []),
                f"hydra.sweep.dir={out / preset / f'm{i:02d}'}",
            ]
            cmds.append(cmd)
    return cmds


def report_args(target: Target, out: Path) -> list[str]:
    """``fedrun-report`` arguments that print this target's table in its paper's layout."""
    args = [
        "table",
        str(out),
        "--layout",
        target.layout,
        "--rows",
        "tags.method",
        "--cols",
        ",".join(target.report_cols),
    ]
    return args + (["--select", target.select] if target.select else [])


def scorecard_args(target: Target, out: Path) -> list[str]:
    """``fedrun-report`` arguments that print the scorecard of this target's runs (fedrun/papers/scorecard.py)."""
    return ["scorecard", target.name, str(out)]


# what a POSIX shell reads literally inside double quotes (and "'" needs no quoting there)
_DOUBLE_QUOTE_SAFE = re.compile(r"[^\\\"$`!]*")


def shell_quote(word: str) -> str:
    """``word`` quoted for a POSIX shell, readably: ``shlex.quote``, but a word holding single quotes (Hydra's
    quoted strings, ``++tags.method='FedAvg'``) in double quotes when nothing in it is special there."""
    if "'" in word and _DOUBLE_QUOTE_SAFE.fullmatch(word):
        return f'"{word}"'
    return shlex.quote(word)


def shell_line(words: list[str]) -> str:
    """A command line that a POSIX shell splits back into ``words``."""
    return " ".join(shell_quote(w) for w in words)


def fedrun_line(cmd: list[str]) -> str:
    """A :func:`commands` entry (``python -m fedrun.cli -m ...``) as the ``fedrun -m ...`` a user types."""
    return shell_line(["fedrun", *cmd[3:]])


SMOKE_NOT_COMPARED = (
    "scorecard: not compared; -smoke runs are shrunk (fedrun/papers/smoke.py), so no cell of them is the paper's"
    " (make reproduce-{name} runs the full-length cells and ends with the scorecard)"
)


def preset_samples(target: Target, preset: str) -> float:
    """Client samples trained by the target's runs of one preset, from its rounds, cohort and local work."""
    cfg = preset_cfg(preset)
    fl = cfg["fl"]
    n = TRAIN_SIZE.get(cfg["data"]["name"], 50000)
    per_client = (
        fl["local_steps"] * fl["batch_size"] if fl.get("local_steps") else fl["local_epochs"] * n / fl["clients"]
    )
    runs = target.runs() / len(target.presets)
    # a swept participation (FedCos Tables IV, V: 10% and 20%) counts each value's cohort, not the preset's alone
    rates = [float(r) for r in dict(target.sweep).get("fl.participation", str(fl["participation"])).split(",")]
    cohort = sum(max(int(r * fl["clients"]), 1) for r in rates) / len(rates)
    return runs * fl["rounds"] * cohort * per_client


def client_samples(target: Target) -> float:
    """Client samples trained by the whole sweep."""
    return sum(preset_samples(target, p) for p in target.presets)


def cost_seconds(target: Target, smoke: bool = False) -> tuple[float, bool]:
    """(estimated CPU seconds, whether every model's rate was measured): per preset, client-samples x the
    model's measured rate (unmeasured models: the FedIMA CNN's rate, a rough guess), plus the fixed cost of
    each run and each multirun invocation. ``smoke``: the -smoke sweep in one process (fedrun/papers/smoke.py)."""
    if smoke:
        models = {preset_cfg(p)["model"]["name"] for p in target.presets} | set(
            dict(target.sweep).get("model", "").split(",")
        )
        total = SMOKE_START_S + sum(smoke_seconds(preset_cfg(p), target.sweep, target.methods) for p in target.presets)
        return total, models - {""} <= SMOKE_SEC_PER_SAMPLE.keys()
    total, measured = 0.0, True
    for preset in target.presets:
        model = preset_cfg(preset)["model"]["name"]
        measured &= model in SEC_PER_SAMPLE
        total += preset_samples(target, preset) * SEC_PER_SAMPLE.get(model, max(SEC_PER_SAMPLE.values()))
    invocations = len(target.presets) * len(target.methods)
    return total + target.runs() * RUN_OVERHEAD_S + invocations * INVOCATION_OVERHEAD_S, measured


def list_targets() -> str:
    """The table ``make reproduce-list`` prints."""
    lines = [
        "| target | paper | runs | client-samples | est. CPU h | -smoke runs | est. -smoke min | notes |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for t in TARGETS:
        full, measured = cost_seconds(t)
        smoke, _ = cost_seconds(t, smoke=True)
        est = f"{full / 3600:.1f}" if measured else f"~{full / 3600:.0f}"
        lines.append(
            f"| reproduce-{t.name} | {t.paper} | {t.runs()} | {client_samples(t):.2e} | {est} | "
            f"{t.runs(True)} | {smoke / 60:.1f} | {t.note} |"
        )
    lines.append(
        "\nCost = client-samples x measured s/sample of the model (FMNIST MLP, FedIMA CNN, Shakespeare LSTM measured;"
        " '~': a model not measured, costed at the slowest measured rate, the LSTM's: a lower bound) + per-run and"
        " per-invocation start-up. -smoke: all runs in one process, per-model train/eval rates of the shrunk runs"
        " + per-run and start-up cost, all measured"
        " (fedrun/papers/smoke.py); a dataset missing here is replaced by stand-in data of its shape"
        " (data.standin). CPU only; GPU not measured."
    )
    return "\n".join(lines)


RUN_DESCRIPTION = (
    "A full sweep runs one `fedrun -m` process per (preset, method), then prints the table in the paper's layout and"
    " the scorecard (each published cell: ours | paper | difference). --smoke shrinks the same sweep to seconds per run"
    " (stand-in data where a dataset is missing) and runs it in this process; it is never compared with the paper."
    " --dry-run prints the fedrun and fedrun-report commands, quoted so that each line pastes into a shell."
)


def parse_args(argv: list[str]) -> argparse.Namespace:
    """``list`` or ``run TARGET [options]``; a first word that is neither is a target (``scripts/reproduce.py
    TARGET ...`` of earlier versions)."""
    if argv and argv[0] not in ("list", "run", "-h", "--help"):
        argv = ["run", *argv]
    ap = argparse.ArgumentParser(
        prog="fedrun-reproduce",
        description="Run one paper table's sweep (or its smoke version) and print it in the paper's layout.",
        epilog="fedrun-reproduce run --help: its options. Make: make reproduce-list, make reproduce-<target>,"
        " make reproduce-<target>-smoke (REPRO_ARGS=... adds options).",
    )
    sub = ap.add_subparsers(dest="command", metavar="SUBCOMMAND", title="subcommands", required=True)
    sub.add_parser("list", help="every target: paper, runs, estimated CPU cost (full and -smoke)")
    run = sub.add_parser("run", help="a target's sweep, then its table (and scorecard)", description=RUN_DESCRIPTION)
    run.add_argument("target", metavar="TARGET", help="a target name, e.g. fedlaw-table3 (fedrun-reproduce list)")
    run.add_argument(
        "--smoke",
        action="store_true",
        help="the same sweep shrunk to seconds per run (fedrun/papers/smoke.py), run in this process",
    )
    run.add_argument("--dry-run", action="store_true", help="print the commands (they paste into a shell) only")
    run.add_argument("--out", type=Path, default=None, help="sweep root (default outputs/reproduce/<target>[-smoke])")
    run.add_argument("--methods", default="", help="comma-separated method labels to keep")
    run.add_argument("--presets", default="", help="comma-separated presets to keep")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUES", help="replace a swept key's values")
    if not argv:
        ap.print_help(sys.stderr)
        sys.exit(2)
    return ap.parse_args(argv)


def hydra_plain(text: str) -> bool:
    """Whether ``hydra.sweep.dir=<text>`` reads back as ``text`` in Hydra's override grammar (a comma would sweep,
    a quote or bracket would not parse)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        override = OverridesParser.create().parse_override(f"hydra.sweep.dir={text}")
    except HydraException:
        return False
    return not override.is_sweep_override() and override.value() == text


def _fail(message: str) -> int:
    print(f"fedrun-reproduce: error: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    """The ``fedrun-reproduce`` command; a closed stdout (``fedrun-reproduce list | head``) ends it quietly."""
    try:
        code = _main(sys.argv[1:] if argv is None else argv)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to say, even at exit
        return 0


def _main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.command == "list":
        print(list_targets())
        return 0
    name = args.target.removeprefix("reproduce-")
    if name not in BY_NAME:
        return _fail(f"unknown target '{name}'; valid: {', '.join(BY_NAME)}")
    target = BY_NAME[name]
    for item in args.set:
        key, _, values = item.partition("=")
        if key not in dict(target.sweep):
            return _fail(f"--set: '{key}' is not swept by {name}; valid: {', '.join(k for k, _ in target.sweep)}")
        target = replace(target, sweep=tuple((k, values if k == key else v) for k, v in target.sweep))
    out = args.out or Path("outputs/reproduce") / (name + ("-smoke" if args.smoke else ""))
    if not hydra_plain(str(out)):
        return _fail(
            f"--out: {out!r} is not a plain Hydra value (hydra.sweep.dir); valid: a path without , ' \" = ( ) [ ] {{ }}"
        )
    methods = [x for x in args.methods.split(",") if x] or None
    presets = [x for x in args.presets.split(",") if x] or None
    cmds = commands(target, out, args.smoke, methods, presets)
    if args.dry_run:
        print("\n".join(fedrun_line(cmd) for cmd in cmds))
    elif args.smoke:  # seconds-long runs: one process for all, so start-up and data loading are paid once
        from fedrun.cli.reproduce_sweep import run_commands

        tune_glibc_malloc()
        if run_commands([cmd[4:] for cmd in cmds]):
            print("fedrun-reproduce: a sweep failed; the table below shows which runs", file=sys.stderr)
    else:
        for cmd in cmds:
            print(f"[reproduce] {fedrun_line(cmd)}", flush=True)
            if subprocess.run(cmd, check=False).returncode != 0:
                print("fedrun-reproduce: a sweep failed; the table below shows which runs", file=sys.stderr)
    rep = report_args(target, out)
    if args.dry_run:
        print(shell_line(["fedrun-report", *rep]))
        if not args.smoke:
            print(shell_line(["fedrun-report", *scorecard_args(target, out)]))
        return 0
    from fedrun.cli.report import main as report_main

    code = report_main(rep)
    if code != 0:
        return code
    print()
    if args.smoke:
        print(SMOKE_NOT_COMPARED.format(name=name))
        return 0
    return report_main(scorecard_args(target, out))


if __name__ == "__main__":
    sys.exit(main())
