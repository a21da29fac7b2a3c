"""Build an evidence record (``fedrun/papers/evidence/*.json``) from finished run directories.

``python -m fedrun.papers.record RUN_DIR... --id ID --target TARGET --load TEXT [--column C]... [--commit SHA]
[--note TEXT] [--out FILE]`` reads each run's ``config.yaml`` (preset ``tags.preset``, method row
``tags.method``, seed, the cell's setting), ``summary.json`` (status, stand-in flag, the metrics, wall time,
the code it ran) and ``metrics.csv`` (that every round of ``fl.rounds`` was evaluated), and the command from
Hydra's ``.hydra/overrides.yaml``. A run's cells are the shipped cells
(:func:`fedrun.papers.scorecard.load_cells`) of the target's paper with the run's preset and row whose setting
the run's config matches (``--column``: only these columns). The load on the machine is not in a run
directory, so it is an argument. Runs of before fedrun recorded its code (``summary.json`` ``code``) need
``--commit``; the record then says so.

The record's ``setup`` says how its runs differ from what their commands run now (:mod:`fedrun.papers.drift`):
each ``--setup FACT=TEXT`` given, then every drifted setting no fact names, as ``RAN (the preset now: NOW)``.

A record holds full-length runs on real data only: a run that did not complete, stopped early or ran on
stand-in data is refused (exit 2, one line, nothing written).
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from fedrun.core.errors import ConfigError
from fedrun.papers.drift import run_overrides, setup_drift
from fedrun.papers.scorecard import PERCENT, load_cells, same, setting_pairs
from fedrun.papers.targets import BY_NAME, Target
from fedrun.storage.atomic import atomic_write
from fedrun.storage.rundir import RunDir, Summary, UnreadableRunFile
from fedrun.storage.status import Status

# a record's commit_note when its runs' checkout had uncommitted changes: what that means for a reader
UNCOMMITTED = (
    "run from a checkout with uncommitted changes to tracked files: its code may differ from this commit's, so a"
    " rerun at this commit may not give these numbers (the note says what changed, where it is known)"
)


def _get(cfg: dict[str, Any], dotted: str) -> Any:
    """``cfg`` at a dotted key (``algorithm=x`` reads ``algorithm.name``); KeyError when absent."""
    node: Any = cfg
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(dotted)
        node = node[part]
    if isinstance(node, dict) and "name" in node:
        node = node["name"]
    return node


def _matches(cfg: dict[str, Any], setting: str) -> bool:
    for key, values in setting_pairs(setting):
        try:
            have = _get(cfg, key)
        except KeyError:
            return False
        if not any(same(have, v) for v in values.split(",")):
            return False
    return True


def run_command(rd: RunDir, cfg: dict[str, Any]) -> str:
    """``fedrun`` with the run's command-line overrides (Hydra's record), or its preset when there is none."""
    return " ".join(["fedrun", *(shlex.quote(o) for o in run_overrides(rd, cfg))])


def _fail(rd: RunDir, field: str, message: str) -> ConfigError:
    return ConfigError(f"{rd.path}: {field}", message)


def evidence_files(rd: RunDir) -> tuple[dict[str, Any], Summary]:
    """The config and summary of a run that can be evidence: completed, on the real data, every round of
    ``fl.rounds`` evaluated. :class:`ConfigError` naming the run and field otherwise."""
    try:
        cfg, summary = rd.read_config(), rd.read_summary()
    except UnreadableRunFile as e:
        raise _fail(rd, "run files", str(e)) from None
    if cfg is None or summary is None:
        files = f"{rd.config_file.name} or {rd.summary_file.name}"
        raise _fail(rd, "run files", f"no {files}; valid: a fedrun run directory")
    if not summary.completed:
        status = summary.fields.get("status")
        raise _fail(rd, "status", f"{status!r}; valid: {Status.COMPLETED} (evidence is full-length runs)")
    if summary.data_standin:
        raise _fail(rd, "data_standin", "the run trained on stand-in data; valid: runs on the real data")
    rounds = int(_get(cfg, "fl.rounds"))
    if not rd.metrics_file.is_file():
        raise _fail(rd, rd.metrics_file.name, "missing; valid: a run directory with its per-round metrics")
    evaluated = pd.read_csv(rd.metrics_file)["round"]
    if evaluated.empty or int(evaluated.max()) != rounds:
        last = int(evaluated.max()) if not evaluated.empty else 0
        why = f"last evaluated round {last}, fl.rounds {rounds}; valid: a full-length run"
        raise _fail(rd, rd.metrics_file.name, why)
    return cfg, summary


def read_run(rd: RunDir, target: Target, columns: list[str] | None, table: str | None = None) -> dict[str, Any]:
    """One run's facts: preset, row, seed, command, commit, wall time and its cells ({column: (metric,
    setting, value in points)}). :class:`ConfigError` naming the run and field when it cannot be evidence."""
    cfg, summary = evidence_files(rd)
    s = summary.fields  # the cells' metrics, by the names the paper's cells give
    tags = cfg.get("tags") or {}
    preset, row = tags.get("preset"), tags.get("method")
    if preset not in target.presets:
        raise _fail(
            rd, "tags.preset", f"{preset!r} is not a preset of {target.name}; valid: {', '.join(target.presets)}"
        )
    labels = [m.label for m in target.methods]
    if row is None:
        raise _fail(rd, "tags.method", f"not set; valid: one of {', '.join(labels)} (++tags.method=...)")
    cells = load_cells(target.paper)
    mine = cells[(cells["preset"] == preset) & (cells["row"] == row)]
    mine = mine[[_matches(cfg, st) for st in mine["setting"]]]
    if columns:
        mine = mine[mine["column"].isin(columns)]
    if table is not None:  # one run can fill cells of two tables (a backdoor's accuracy and its ASR)
        mine = mine[mine["table"].astype(str) == table]
    spanned = sorted(set(mine["table"].astype(str)))
    if len(spanned) > 1:  # its cells would share a column's name
        raise ConfigError("--table", f"the cells span tables {', '.join(spanned)}; valid: one table per record")
    if mine.empty:
        have = cells[cells["preset"] == preset]
        raise _fail(
            rd,
            "cells",
            f"no cell of {target.paper} for preset {preset}, row {row!r} and this run's settings"
            f"{' in ' + ', '.join(columns) if columns else ''}; valid rows: {', '.join(dict.fromkeys(have['row']))}",
        )
    out: dict[str, tuple[str, str, str, float | None]] = {}
    for _, c in mine.iterrows():
        metric = c["metric"]
        v = s[metric] if metric in s else best_round(rd, metric)
        value = None if v is None else round(float(v) * PERCENT.get(metric, 100.0), 2)
        out[c["column"]] = (c["table"], metric, c["setting"], value)
    return {
        "preset": preset,
        "row": row,
        "seed": int(cfg["seed"]),
        "command": run_command(rd, cfg),
        "code": dict(summary.code) if summary.code is not None else None,
        "wall_time_s": round(summary.wall_time_s or 0.0),
        "cells": out,
        "data": cfg.get("data", {}).get("name"),
        "drift": setup_drift(rd, cfg),
    }


def best_round(rd: RunDir, metric: str) -> float:
    """A cell's metric that summary.json does not hold, ``<column>_best``: the best evaluated round's value of
    metrics.csv's ``<column>`` (pFedMe's PM, each run's best round of ``local_acc_wmean``: plot_utils.py
    average_data's max over rounds). :class:`ConfigError` naming the metric when neither file has it."""
    column = metric.removesuffix("_best")
    values = pd.read_csv(rd.metrics_file).get(column) if metric.endswith("_best") else None
    if values is None or values.dropna().empty:
        raise _fail(rd, f"summary.{metric}", f"missing from {rd.summary_file.name} and {rd.metrics_file.name}")
    return float(values.max())


def wall_key(run: dict[str, Any], runs: list[dict[str, Any]]) -> str:
    """The row a run's wall time is listed under; with the run's setting added when another run of the same row
    and seed differs in it (FedIMA's ``ima.enabled=false`` and ``true``), so neither time overwrites the other."""
    twins = [r for r in runs if r is not run and (r["row"], r["seed"]) == (run["row"], run["seed"])]
    if not twins:
        return str(run["row"])
    settings = sorted({cell[2] for cell in run["cells"].values()})
    return f"{run['row']} ({'; '.join(settings)})"


def _commit(runs: list[dict[str, Any]], commit: str | None) -> tuple[str | None, str | None]:
    """The commit the runs ran (recorded, or ``commit`` given for runs of before fedrun recorded it) and a note on
    it; :class:`ConfigError` when the runs ran different, unversioned or unrecorded code."""
    codes = {json.dumps(r["code"], sort_keys=True) for r in runs if r["code"]}
    recorded = [json.loads(c) for c in codes]
    if any("commit" not in c for c in recorded) or len(recorded) > 1:
        raise ConfigError(
            "code", f"the runs ran different or unversioned code: {sorted(codes)}; valid: runs of one commit"
        )
    commit_note = None
    if recorded:
        code = recorded[0]
        if commit and not code["commit"].startswith(commit):
            raise ConfigError("--commit", f"{commit} but the runs recorded {code['commit']}; valid: leave it out")
        if any(r["code"] is None for r in runs):
            raise ConfigError("code", "some runs recorded their commit and some did not; valid: one record each")
        commit = code["commit"]
        if code["dirty"]:
            commit_note = UNCOMMITTED
    elif commit is None:
        raise ConfigError("--commit", "the runs did not record their code (run before fedrun did); valid: --commit SHA")
    else:
        commit_note = "given with --commit; the runs did not record their commit"
    return commit, commit_note


def _cells(runs: list[dict[str, Any]]) -> tuple[dict[tuple[str, str], dict[str, Any]], dict[str, dict[str, int]]]:
    """The record's cells ((row, column) -> its values by seed) and wall times (row -> seconds by seed)."""
    cells: dict[tuple[str, str], dict[str, Any]] = {}
    wall: dict[str, dict[str, int]] = {}
    for r in runs:
        for column, (_, metric, setting, value) in r["cells"].items():
            cell = cells.setdefault(
                (r["row"], column),
                {"row": r["row"], "column": column, "metric": metric, "setting": setting, "values": {}},
            )
            if str(r["seed"]) in cell["values"]:
                raise ConfigError("seed", f"two runs of {r['row']} seed {r['seed']}; valid: one run per row and seed")
            cell["values"][str(r["seed"])] = value
        wall.setdefault(wall_key(r, runs), {})[str(r["seed"])] = r["wall_time_s"]
    return cells, wall


def _setup(runs: list[dict[str, Any]], facts: dict[str, str]) -> dict[str, str]:
    """The record's setup: the facts given, then each drifted setting that no fact names (in its name or text)."""
    drift: dict[str, list[str]] = {}
    for r in runs:
        for key, text in r["drift"].items():
            if text not in drift.setdefault(key, []):
                drift[key].append(text)
    stated = " ".join([*facts, *facts.values()])
    named = {k for k in drift if re.search(rf"(?<![\w.]){re.escape(k)}(?![\w.])", stated)}  # fl.lr: not fl.lr_decay
    return {**facts, **{k: "; ".join(v) for k, v in drift.items() if k not in named}}


def build_record(
    run_dirs: list[Path],
    record_id: str,
    target_name: str,
    load: str,
    columns: list[str] | None = None,
    commit: str | None = None,
    note: str | None = None,
    setup: dict[str, str] | None = None,
    table: str | None = None,
) -> dict[str, Any]:
    """The evidence record of ``run_dirs`` (one preset, one table; ``note``: what the runs do not say; ``setup``:
    facts on how they differ from the preset now, beyond the drifted settings found); :class:`ConfigError` on a
    bad input."""
    if target_name not in BY_NAME:
        raise ConfigError("--target", f"unknown target {target_name!r}; valid: {', '.join(BY_NAME)}")
    target = BY_NAME[target_name]
    if not run_dirs:
        raise ConfigError("RUN_DIR", "none given; valid: one or more finished run directories")
    for d in run_dirs:
        if not d.is_dir():
            raise ConfigError("RUN_DIR", f"{d}: no such directory")
    runs = [read_run(RunDir(d), target, columns, table) for d in run_dirs]
    for field in ("preset", "data"):
        if len({r[field] for r in runs}) > 1:
            raise ConfigError(
                field, f"the runs differ ({', '.join(sorted({str(r[field]) for r in runs}))}); valid: one per record"
            )
    tables = {t for r in runs for t, *_ in r["cells"].values()}
    if len(tables) > 1:
        raise ConfigError("--table", f"the cells span tables {', '.join(sorted(tables))}; valid: one table per record")
    commit, commit_note = _commit(runs, commit)
    cells, wall = _cells(runs)
    differs = _setup(runs, setup or {})
    commands = [r["command"] for r in runs]
    record: dict[str, Any] = {
        "id": record_id,
        "paper": target.paper,
        "table": tables.pop(),
        "target": target.name,
        "preset": runs[0]["preset"],
        "command": commands[0] if len(commands) == 1 else commands,
        "commit": commit,
        **({"commit_note": commit_note} if commit_note else {}),
        **({"note": note} if note else {}),
        "data": f"real {runs[0]['data']} (no stand-in)",
        "seeds": sorted({r["seed"] for r in runs}),
        "wall_time_s": wall,
        "load": load,
        "full_length": True,
        **({"setup": differs} if differs else {}),
        "cells": list(cells.values()),
    }
    return record


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m fedrun.papers.record", description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="+", type=Path, metavar="RUN_DIR", help="finished run directories")
    ap.add_argument("--id", required=True, help="the record's id (and file name under fedrun/papers/evidence/)")
    ap.add_argument("--target", required=True, help="the reproduction target, e.g. fedcos-table4")
    ap.add_argument(
        "--load", required=True, help="the machine's load while the runs ran (cores, threads, load average)"
    )
    ap.add_argument("--column", action="append", help="only this column of the table (repeatable)")
    ap.add_argument("--table", help="only this table's cells (the runs fill cells of more than one)")
    ap.add_argument("--commit", help="the code's commit, for runs that did not record it")
    ap.add_argument("--note", help="what the runs do not say (e.g. a setting changed since they ran)")
    ap.add_argument(
        "--setup",
        action="append",
        metavar="FACT=TEXT",
        help="how the runs differ from the preset now, in words (repeatable); a drifted setting it names is not "
        "listed again",
    )
    ap.add_argument("--out", type=Path, help="write the record here (default: print it)")
    return ap.parse_args(argv)


def _fact(text: str) -> tuple[str, str]:
    fact, sep, value = text.partition("=")
    if not sep or not fact.strip() or not value.strip():
        raise ConfigError("--setup", f"{text!r}; valid: FACT=TEXT, e.g. 'inputs=mean/std (the preset now: none)'")
    return fact.strip(), value.strip()


def main(argv: list[str] | None = None) -> int:
    """Print (or ``--out``: write atomically) the evidence record of the given runs; 2 on a bad input."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        facts = dict(_fact(f) for f in args.setup or [])
        record = build_record(
            args.dirs, args.id, args.target, args.load, args.column, args.commit, args.note, facts, args.table
        )
    except ConfigError as e:
        print(f"fedrun.papers.record: {e}", file=sys.stderr)
        return 2
    text = json.dumps(record, indent=2, ensure_ascii=False) + "\n"
    if args.out:
        atomic_write(args.out, text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
