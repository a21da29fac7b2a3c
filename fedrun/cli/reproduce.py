"""``fedrun-reproduce``: run one paper table's sweep (or its smoke version) and print it in the paper's layout.

fedrun-reproduce list                      every target: paper, runs, estimated CPU cost
fedrun-reproduce run fedlaw-table3 [--smoke] [--dry-run] [--out DIR] [--methods FedAvg,FedLAW] [--presets P,...]
                                   [--set KEY=VALUES] [--override KEY=VALUE] [--parallel auto|off|N]

A full sweep runs one ``fedrun -m`` process per (preset, method), then prints the table and the scorecard of its
runs (``fedrun-report scorecard TARGET OUT``: each published cell, ours | paper | difference; a -smoke sweep is
never compared, and says so in one line). ``--smoke`` adds the shrink of
fedrun/papers/smoke.py to the same commands and runs their jobs in this process (fedrun/cli/reproduce_sweep.py: same
jobs, directories and results), so start-up and data loading are paid once, not per command; on idle cores its
commands run side by side in processes forked from this one (``--parallel``, fedrun/cli/reproduce_side.py).
``--dry-run`` prints the ``fedrun -m ...`` and ``fedrun-report ...`` commands, quoted for a POSIX shell: each line
pastes and runs as is.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from fedrun.config import location as conf_location
from fedrun.host.allocator import tune_glibc_malloc
from fedrun.host.interrupts import exit_code, signal_name
from fedrun.papers.cost import (
    SEC_PER_SAMPLE,
    calibration,
    client_samples,
    estimated_models,
    preset_cfg,
)
from fedrun.papers.cost import cost_seconds as full_cost
from fedrun.papers.smoke import (
    SMOKE_SEC_PER_SAMPLE,
    SMOKE_START_S,
    smoke_method_overrides,
    smoke_overrides,
    smoke_seconds,
)
from fedrun.papers.targets import BY_NAME, TARGETS, Target

CONF_DIR = str(conf_location.CONF_DIR)  # the folder of the package fedrun.conf


def commands(
    target: Target,
    out: Path,
    smoke: bool = False,
    methods: list[str] | None = None,
    presets: list[str] | None = None,
    overrides: list[str] | None = None,
) -> list[list[str]]:
    """One ``fedrun -m`` command per (preset, method); each sweeps settings and seeds into its own dir.
    ``overrides`` (``--override``) end each command's settings, after the smoke shrink's."""
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
                *(overrides or []),
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


def curves_args(target: Target, out: Path) -> list[list[str]]:
    """``fedrun-report`` arguments of each figure of this target (``Target.figures``): one metric against the round,
    a line per method, a panel per table column."""
    cols = ",".join(target.report_cols)
    return [["curves", str(out), "--rows", "tags.method", "--cols", cols, "--metric", m] for m in target.figures]


def no_cells(target: Target) -> str | None:
    """Why ``target`` has no scorecard (fedrun/papers/scorecard.py's :func:`no_cells`), or None."""
    from fedrun.papers.scorecard import no_cells as why_none

    return why_none(target)


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


def cost_seconds(target: Target, smoke: bool = False) -> tuple[float, bool]:
    """(estimated CPU seconds, whether every model's rate was measured): the full sweep's
    (:func:`fedrun.papers.cost.cost_seconds`) or, ``smoke``, the -smoke sweep in one process
    (fedrun/papers/smoke.py)."""
    if not smoke:
        return full_cost(target)
    models = {preset_cfg(p)["model"]["name"] for p in target.presets} | set(
        dict(target.sweep).get("model", "").split(",")
    )
    total = SMOKE_START_S + sum(smoke_seconds(preset_cfg(p), target.sweep, target.methods) for p in target.presets)
    return total, models - {""} <= SMOKE_SEC_PER_SAMPLE.keys()


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
        "\nCost = client-samples x s/sample of the model + per-run and per-invocation start-up (fedrun/papers/cost.py)."
        f" Measured at full length: {', '.join(SEC_PER_SAMPLE)}; '~': a rate estimated from training steps of the"
        f" model x {calibration():.1f} (full-run / step rate of the measured models), neither bound:"
        f" {', '.join(estimated_models())}."
        " -smoke: all runs in one process, per-model train/eval rates of the shrunk runs"
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
    run.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting added to every run, last (e.g. hardware.stack=off, hardware.threads=2)",
    )
    run.add_argument(
        "--parallel",
        default=None,
        metavar="auto|off|N",
        help="--smoke: its commands side by side in forked processes, one per idle core (default auto)",
    )
    if not argv:
        ap.print_help(sys.stderr)
        sys.exit(2)
    return ap.parse_args(argv)


def parse_parallel(text: str) -> str | None:
    """``text`` as ``--parallel`` reads it (``auto``, ``off`` or a count of at least 1), or None: not valid."""
    text = text.strip().lower()
    if text in ("auto", "off"):
        return text
    return text if text.isdigit() and int(text) >= 1 else None


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
    except KeyboardInterrupt as e:  # each run stopped at its next pause and kept its last round
        print(f"fedrun-reproduce: stopped by {signal_name(e)}; the same command resumes the runs", file=sys.stderr)
        return exit_code(e)


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
    for item in args.override:
        key = item.partition("=")[0].lstrip("+~")
        if "=" not in item or not key or key.startswith("hydra.") or key == "hydra":
            return _fail(f"--override: {item!r} is not a run setting; valid: KEY=VALUE of a run (not hydra.*)")
    parallel = parse_parallel(args.parallel or "auto")
    if parallel is None or args.parallel is not None and not args.smoke:
        why = "not valid" if parallel is None else "a --smoke option (a full sweep: --override hardware.parallel=N)"
        return _fail(f"--parallel: {args.parallel!r} is {why}; valid: auto, off, or a count of processes >= 1")
    cmds = commands(target, out, args.smoke, methods, presets, args.override)
    if args.dry_run:
        print("\n".join(fedrun_line(cmd) for cmd in cmds))
    elif args.smoke:  # seconds-long runs: start-up and data loading paid once (forked workers share them)
        if _smoke([cmd[4:] for cmd in cmds], parallel):
            print("fedrun-reproduce: a sweep failed; the table below shows which runs", file=sys.stderr)
    else:
        for cmd in cmds:
            print(f"[reproduce] {fedrun_line(cmd)}", flush=True)
            if _run_sweep(cmd):
                print("fedrun-reproduce: a sweep failed; the table below shows which runs", file=sys.stderr)
    return _report(target, out, args.smoke, args.dry_run)


def _run_sweep(cmd: list[str]) -> int:
    """One ``fedrun -m`` of a full sweep, in a session of its own, so that a signal reaches it once, from here
    (Ctrl-C at the terminal would reach both, and a second signal stops a run at once): it stops its job as a run
    stops and this command ends with 128 + the signal. Nonzero: the sweep failed."""
    from fedrun.cli.reproduce_side import wait_forwarding

    proc = subprocess.Popen(cmd, start_new_session=True)
    code = wait_forwarding([proc.pid], "fedrun -m")
    proc.returncode = code  # reaped above: Popen need not look for it again
    return code


def _smoke(cmds: list[list[str]], parallel: str) -> int:
    """Run a -smoke target's ``fedrun -m`` argument lists in this process, or side by side
    (fedrun/cli/reproduce_side.py); the number of commands that failed."""
    from fedrun.cli.reproduce_side import choose, run_side_by_side
    from fedrun.cli.reproduce_sweep import run_commands

    tune_glibc_malloc()
    workers, why = choose(parallel, cmds)
    return run_side_by_side(cmds, workers, why) if workers > 1 else run_commands(cmds)


def _report(target: Target, out: Path, smoke: bool, dry_run: bool) -> int:
    """The table, the figures (``Target.figures``) and the scorecard of ``target``'s runs under ``out`` (or, with
    ``dry_run``, their ``fedrun-report`` command lines)."""
    steps = [report_args(target, out), *curves_args(target, out)]
    card = None if smoke or no_cells(target) else scorecard_args(target, out)
    if dry_run:
        for rep in [*steps, *([card] if card else [])]:
            print(shell_line(["fedrun-report", *rep]))
        return 0
    from fedrun.cli.report import main as report_main

    for rep in steps:
        code = report_main(rep)
        if code != 0:
            return code
    print()
    if smoke:
        print(SMOKE_NOT_COMPARED.format(name=target.name))
        return 0
    if card is None:
        print(no_cells(target))
        return 0
    return report_main(card)


if __name__ == "__main__":
    sys.exit(main())
