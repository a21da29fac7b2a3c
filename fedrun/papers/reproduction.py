"""The documentation's reproduction pages, generated from what fedrun ships about the five papers.

- ``reproduction.md``: every cell of the evidence records (``fedrun/papers/evidence/*.json``, full-length runs
  on real data) as ours | paper | difference, with the record's command, commit, seeds, wall time and load;
- ``papers/<paper>.md``: the paper's reproduce targets (:mod:`fedrun.papers.targets`: presets, method rows,
  swept settings, seeds) and each preset with its header comment (which cites the paper) and its values;
- :func:`status_line`: the README's one line on the reproduction, which a test compares with the README so it
  cannot go stale.

The site's build hook (``docs/hooks.py``) calls :func:`doc_pages`, which adds the registries' reference pages
(:mod:`fedrun.config.catalogue`). ``python -m fedrun.papers.reproduction`` prints the status line.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from fedrun.config import catalogue, location
from fedrun.papers.claims import claims
from fedrun.papers.scorecard import PAPERS, TOLERANCE, evidence_runs, load_evidence, no_cells, scorecard
from fedrun.papers.targets import BY_NAME, TARGETS, Target

PAGE = "reproduction.md"


def anchor(name: str) -> str:
    """A heading's id for ``name`` (Markdown's ids drop dots: ``dir0.3`` would not match a link)."""
    return name.replace(".", "-")


def record_card(record: dict[str, Any]) -> pd.DataFrame:
    """The scorecard lines (ours, ours_std, n, paper, difference, reproduced) of one evidence record's cells, of
    its one table (the same runs can fill cells of another: a backdoor run's accuracy and its ASR)."""
    return scorecard(evidence_runs([record]), BY_NAME[record["target"]], table=str(record["table"]))


def target_cards(records: list[dict[str, Any]] | None = None) -> list[tuple[Target, pd.DataFrame]]:
    """Per target with published cells, its scorecard of the records' runs pooled (each cell's seeds from every
    record, a seed of the current setup superseding the same seed of an older one: :func:`evidence_runs`), as
    ``fedrun-report scorecard`` prints it; targets the records fill no cell of are left out."""
    records = load_evidence() if records is None else records
    runs = evidence_runs(records)
    if runs.empty:
        return []
    named = {r["target"] for r in records}
    cards = [(t, scorecard(runs, t)) for t in TARGETS if t.name in named and not no_cells(t)]
    return [(t, c) for t, c in cards if not c.empty]


def counts(
    records: list[dict[str, Any]] | None = None, cards: list[tuple[Target, pd.DataFrame]] | None = None
) -> tuple[int, int, int]:
    """(records, distinct paper cells measured (run, with a published value), those within 1.5 points of the paper
    or our seed spread). A cell counts once however many records hold its seeds: its seeds are pooled, as the
    target's scorecard pools them. ``cards``: the records' :func:`target_cards`, when the caller has them."""
    records = load_evidence() if records is None else records
    cards = target_cards(records) if cards is None else cards
    # a cell counts when it ran and the paper publishes its value (pFedMe's table is an image: no value shipped)
    ran = [c.loc[(c["n"] > 0) & c["paper"].notna()] for _, c in cards]
    measured = sum(len(c) for c in ran)
    within = sum(int(c["reproduced"].astype(bool).sum()) for c in ran)
    return len(records), measured, within


def claim_counts(
    records: list[dict[str, Any]] | None = None, cards: list[tuple[Target, pd.DataFrame]] | None = None
) -> tuple[int, int, int]:
    """(claims reproduced, not reproduced, not resolved) on the records' cells, over every target the scorecard
    judges (a paper's claim: the proposed method's gain over a baseline, :mod:`fedrun.papers.claims`); claims
    whose rows share no seed, and targets of unknown budget, are not counted."""
    cards = target_cards(records) if cards is None else cards
    yes = no = unresolved = 0
    for t, card in cards:
        if t.budget_unknown:
            continue
        c = claims(card, t.paper)
        c = c[c["seeds"].map(len) > 0]
        resolved = c["resolved"].astype(bool)
        yes += int(c.loc[resolved, "reproduced"].astype(bool).sum())
        no += int(resolved.sum()) - int(c.loc[resolved, "reproduced"].astype(bool).sum())
        unresolved += int((~resolved).sum())
    return yes, no, unresolved


def status_line(records: list[dict[str, Any]] | None = None) -> str:
    """The README's status of the reproduction, one line, from the evidence records as they are now."""
    records = load_evidence() if records is None else records
    cards = target_cards(records)
    n_records, measured, within = counts(records, cards)
    yes, no, unresolved = claim_counts(records, cards)
    return (
        f"**Reproduction status:** {measured} paper cells measured full-length on real data (each cell once, its "
        f"seeds pooled over {n_records} evidence records), {within} of them within {TOLERANCE} points of the paper "
        "or of our seed spread; of the papers' claims on them (a proposed method's gain over a baseline), "
        f"{yes} reproduced, {no} not, {unresolved} not resolved by the seeds run; every cell with its command: "
        "[docs/reproducing.md](docs/reproducing.md#measured-cells)."
    )


def _num(v: float, fmt: str = "{:.2f}") -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else fmt.format(v)


def _wall(record: dict[str, Any]) -> str:
    walls = record.get("wall_time_s", {})
    return "; ".join(
        f"{row}: " + ", ".join(f"{s:,} s (seed {seed})" for seed, s in w.items()) for row, w in walls.items()
    )


def _cells(record: dict[str, Any], card: pd.DataFrame | None = None) -> list[dict[str, str]]:
    """The cells of one evidence record as the page prints them: row, column, ours (± std), per seed, paper,
    difference, within (``card``: its :func:`record_card`, computed here when not given)."""
    card = record_card(record) if card is None else card
    values = {(c["row"], c["column"]): c["values"] for c in record["cells"]}
    out = []
    for _, c in card.iterrows():
        std = f" ± {c['ours_std']:.2f}" if not math.isnan(c["ours_std"]) else ""
        seeds = ", ".join(f"{v:.2f}" for v in values.get((c["row"], c["column"]), {}).values())
        out.append(
            {
                "row": c["row"],
                "column": c["column"],
                "ours": f"{_num(c['ours'])}{std}",
                "seeds": seeds,
                "paper": _num(c["paper"]),
                "difference": _num(c["difference"], "{:+.2f}"),
                # "-" where either side is missing (pFedMe's cells hold no published value)
                "within": ("yes" if c["reproduced"] else "no") if c["n"] and not math.isnan(c["paper"]) else "-",
            }
        )
    return out


def _table_title(record: dict[str, Any]) -> str:
    return f"{record['paper']} Table {record['table']}: `{record['preset']}`"


def record_section(record: dict[str, Any], cells: list[dict[str, str]]) -> str:
    """One evidence record (a ``###`` section under its paper table's heading): its cells (:func:`_cells`), then
    how they were run."""
    out = [f"### Record `{record['id']}` {{ #{anchor(record['id'])} }}", ""]
    out += ["| row | column | ours | per seed | paper | difference | within |", "|---|---|---|---|---|---|---|"]
    for c in cells:
        out.append(
            f"| {c['row']} | {c['column']} | {c['ours']} | {c['seeds']} | {c['paper']} | {c['difference']} "
            f"| {c['within']} |"
        )
    out.append("")
    commands = record["command"] if isinstance(record["command"], list) else [record["command"]]
    if len(commands) == 1:
        out += [f"- command: `{commands[0]}`"]
    else:
        out += ["- commands:", *(f"    - `{c}`" for c in commands)]
    commit = f"`{record['commit']}`" + (
        f" ({catalogue.prose(record['commit_note'])})" if record.get("commit_note") else ""
    )
    out += [f"- commit: {commit}"]
    out += [f"- seeds: {', '.join(map(str, record.get('seeds', [])))}; data: {record.get('data', '')}"]
    out += [f"- wall time: {_wall(record)}", f"- load: {catalogue.prose(record.get('load', ''))}"]
    out += [f"- target: `make reproduce-{record['target']}`, metric `{record['cells'][0]['metric']}`", ""]
    return "\n".join(out)


def overview(records: list[dict[str, Any]], cells: list[list[dict[str, str]]]) -> list[str]:
    """``## All cells``: every measured cell on one table (``cells``: each record's :func:`_cells`), each linking
    to its record's section."""
    out = ["## All cells", "", "| table | row | column | ours | paper | difference | within |"]
    out.append("|---|---|---|---|---|---|---|")
    for r, mine in zip(records, cells, strict=True):
        link = f"[{r['paper']} Table {r['table']}](#{anchor(r['id'])})"
        for c in mine:
            out.append(
                f"| {link} | {c['row']} | {c['column']} | {c['ours']} | {c['paper']} | {c['difference']} "
                f"| {c['within']} |"
            )
    return [*out, ""]


def reproduction_page(records: list[dict[str, Any]] | None = None) -> str:
    """``reproduction.md``: the status, every cell on one table, then per paper table (one heading each, so the
    contents name it once) its evidence records' cells and provenance. Each record is scored once (its
    :func:`record_card`) for the overview and its section; the counts pool the records' seeds per target
    (:func:`counts`)."""
    records = load_evidence() if records is None else records
    cards = [record_card(r) for r in records]
    cells = [_cells(r, card) for r, card in zip(records, cards, strict=True)]
    n_records, measured, within = counts(records)
    out = [
        "# Measured cells",
        "",
        f"Generated from the evidence records in `fedrun/papers/evidence/` ({n_records} records): {measured} cells "
        f"of the papers' tables measured full-length on real data, {within} within {TOLERANCE} points of the "
        "paper's value or of our spread over seeds, each cell's seeds pooled over the records that hold them. The "
        "tables below list each record's own cells, so a cell whose seeds ran in several records appears once per "
        "record, its *ours* the mean over that record's seeds (± sample std when there are several); *within* "
        "applies the rule to them. `fedrun-report scorecard <target>` pools them as the count does. How the targets "
        "and presets are set up: [Reproducing the papers](reproducing.md).",
        "",
        *overview(records, cells),
    ]
    tables: dict[str, list[tuple[dict[str, Any], list[dict[str, str]]]]] = {}
    for r, rc in zip(records, cells, strict=True):
        tables.setdefault(_table_title(r), []).append((r, rc))
    for title, mine in tables.items():
        out += [f"## {title}", ""] + [record_section(r, rc) for r, rc in mine]
    return "\n".join(out)


def used_by() -> dict[str, list[str]]:
    """Per algorithm name, the paper targets whose rows run it (for the method pages)."""
    out: dict[str, list[str]] = {}
    for t in TARGETS:
        for meth in t.methods:
            alg = next((o.split("=", 1)[1] for o in meth.overrides if o.startswith("algorithm=")), None)
            if alg:
                line = f"[{t.paper}](../../papers/{t.paper.lower()}.md) `{t.name}`: row *{meth.label}*"
                out.setdefault(alg, []).append(line)
    return out


def _target_section(t: Target) -> list[str]:
    out = [f"### `{t.name}`", "", f"`make reproduce-{t.name}`; `make reproduce-{t.name}-smoke` for the shrunk sweep."]
    out += ["", f"- runs: {t.runs():,} ({t.runs(True):,} in the -smoke sweep); seeds: {', '.join(map(str, t.seeds))}"]
    out += [f"- presets: {', '.join(f'[`{p}`](#{anchor(p)})' for p in t.presets)}"]
    if t.sweep:
        out += [f"- swept: {'; '.join(f'`{k}={v}`' for k, v in t.sweep)}"]
    if t.select:
        out += [f"- `{t.select}` picked per method and setting by the best mean over seeds"]
    if t.note:
        out += [f"- note: {catalogue.prose(t.note)}"]
    out += ["", "| row | overrides |", "|---|---|"]
    for meth in t.methods:
        extra = "".join(f"; on `{p}`: `{' '.join(o)}`" for p, o in meth.per_preset)
        out.append(f"| {meth.label} | `{' '.join(meth.overrides)}`{extra} |")
    return [*out, ""]


def preset_section(preset: str, conf_dir: Path | None = None) -> list[str]:
    """A preset: its header comment (the paper's setting and where each value comes from), then its values."""
    path = (conf_dir or location.CONF_DIR) / "experiment" / f"{preset}.yaml"
    header, _ = catalogue.yaml_comments(path)
    body = "\n".join(
        line for line in path.read_text(encoding="utf-8").splitlines() if line.strip() and not line.startswith("#")
    )
    return [f"### `{preset}` {{ #{anchor(preset)} }}", "", catalogue.paragraphs(header), "", "```yaml", body, "```", ""]


def paper_page(paper: str, records: list[dict[str, Any]]) -> str:
    """``papers/<paper>.md``: the paper's targets, its measured cells and its presets."""
    targets = [t for t in TARGETS if t.paper == paper]
    presets = list(dict.fromkeys(p for t in targets for p in t.presets))
    mine = [r for r in records if r["paper"] == paper]
    out = [f"# {paper}", ""]
    out += [
        f"Generated from `fedrun/papers/targets.py` and `conf/experiment/`: {len(targets)} targets over "
        f"{len(presets)} presets. What departs from the paper, and why: [Reproducing the papers](../reproducing.md).",
        "",
        "## Measured cells",
        "",
    ]
    if mine:
        out += [f"- [{_table_title(r)}](../{PAGE}#{anchor(r['id'])}) ({len(r['cells'])} cells)" for r in mine]
    else:
        out += ["No full-length cell of this paper has been measured on real data yet."]
    out += ["", "## Targets", ""]
    for t in targets:
        out += _target_section(t)
    out += ["## Presets", ""]
    for p in presets:
        out += preset_section(p)
    return "\n".join(out)


def site_papers() -> list[str]:
    """The papers with a page: the five, then any other paper a target reproduces (FedProx's stragglers)."""
    return list(dict.fromkeys([*PAPERS, *(t.paper for t in TARGETS)]))


def papers_index() -> str:
    """``papers/index.md``: one line per paper with its targets."""
    out = ["# The papers", "", "Generated from `fedrun/papers/targets.py`: each paper's reproduce targets.", ""]
    out += ["| paper | targets |", "|---|---|"]
    for paper in site_papers():
        names = ", ".join(f"`{t.name}`" for t in TARGETS if t.paper == paper)
        out.append(f"| [{paper}]({paper.lower()}.md) | {names} |")
    return "\n".join(out) + "\n"


def doc_pages(records: list[dict[str, Any]] | None = None) -> dict[str, str]:
    """Every generated page of the documentation site, by path under ``docs/``."""
    records = load_evidence() if records is None else records
    out = catalogue.pages(used_by())
    out[PAGE] = reproduction_page(records)
    out["papers/index.md"] = papers_index()
    for paper in site_papers():
        out[f"papers/{paper.lower()}.md"] = paper_page(paper, records)
    return out


if __name__ == "__main__":
    print(status_line())
