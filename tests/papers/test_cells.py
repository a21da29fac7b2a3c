"""The published cells shipped in fedrun/papers/cells/ equal the tables in the papers' texts.

One whole table per paper is re-read from the text here, with its own parsing, and compared number by number
with the shipped cells; every shipped value must also occur in its paper's text. The texts live outside the
repository (``FEDRUN_SEEDS``, default /work/shared/seeds).
"""

from __future__ import annotations

import csv
import html
import os
import re
import subprocess
from importlib import resources
from pathlib import Path

import pytest

from fedrun.papers.scorecard import PAPERS, load_cells
from fedrun.papers.targets import BY_NAME

SEEDS = Path(os.environ.get("FEDRUN_SEEDS", "/work/shared/seeds"))
needs_texts = pytest.mark.skipif(not (SEEDS / "fedlaw.txt").is_file(), reason=f"papers' texts not in {SEEDS}")


# PFLlib's "paper" is its benchmark page (TsingZ0/PFLlib docs/benchmark.html), read from a fetched copy of its repo
PFLLIB_GIT = Path(os.environ.get("FEDRUN_PFLLIB_GIT", "/work/.mirror/TsingZ0+PFLlib/repo"))


def pfllib_page() -> str | None:
    """The benchmark page's text (tags dropped, one cell per line), or None without the repository."""
    if not PFLLIB_GIT.is_dir():
        return None
    r = subprocess.run(
        ["git", "--git-dir", str(PFLLIB_GIT), "show", "HEAD:docs/benchmark.html"], capture_output=True, text=True
    )
    if r.returncode:
        return None
    body = re.sub(r"<(script|style).*?</\1>", "", r.stdout, flags=re.S)
    return "\n".join(x.strip() for x in html.unescape(re.sub(r"<[^>]+>", "\n", body)).splitlines() if x.strip())


def text(paper: str) -> list[str]:
    if paper == "PFLlib":
        return (pfllib_page() or "").splitlines()
    return (SEEDS / f"{paper.lower()}.txt").read_text().splitlines()


def shipped(paper: str, table: str) -> list[tuple[str, float]]:
    cells = load_cells(paper)
    cells = cells[cells["table"] == table]
    return [(r, v) for r, v in zip(cells["row"], cells["value"], strict=True)]


def test_every_paper_ships_cells_with_a_target_for_each_preset() -> None:
    cells = load_cells()
    assert set(cells["paper"]) == set(PAPERS)
    assert list(cells.columns[:6]) == ["paper", "table", "row", "column", "value", "spread"]
    presets = {p for t in BY_NAME.values() for p in t.presets}
    assert set(cells["preset"]) - {""} <= presets
    assert not cells.duplicated(["paper", "table", "row", "column"]).any()
    per_paper = cells.groupby("paper").size().to_dict()
    want = {"FedCos": 124, "FedGAM": 261, "FedIMA": 192, "FedLAW": 331, "FedSAM": 252, "pFedMe": 8, "PFLlib": 20}
    assert per_paper == {**want, "Robust": 88}
    # pFedMe's Table 1 is an image (no text of it here): its cells say where our runs are, with no published value;
    # the robust-FL papers' Fashion-MNIST values were not found as text either (docs/robustness.md): their claims are
    assert cells.loc[cells["paper"].isin(["pFedMe", "Robust"]), "value"].isna().all()


@needs_texts
@pytest.mark.parametrize("paper", PAPERS)
def test_every_shipped_value_occurs_in_its_papers_text(paper: str) -> None:
    if paper == "PFLlib" and pfllib_page() is None:
        pytest.skip(f"PFLlib's repository not in {PFLLIB_GIT}")
    if paper != "PFLlib" and not (SEEDS / f"{paper.lower()}.txt").is_file():
        assert load_cells(paper)["value"].isna().all()  # no text, no published value shipped (pFedMe)
        return
    body = "\n".join(text(paper))
    with (resources.files("fedrun.papers") / "cells" / f"{paper.lower()}.csv").open(encoding="utf-8") as f:
        raw = list(csv.DictReader(f))
    assert raw
    for cell in raw:
        if not cell["column"].startswith("σ("):  # FedGAM's sigma "1.6 × 10 3" is shipped as 0.0016
            assert cell["value"] in body, cell
        assert cell["spread"] in body, cell


def test_pfllib_fmnist_columns_equal_the_benchmark_page() -> None:
    """The page's first table: per method a row of eight "mean ± std" cells, FMNIST the first of the pathological
    three and the first of the practical five; the ten rows fedrun has, in the page's order."""
    page = pfllib_page()
    if page is None:
        pytest.skip(f"PFLlib's repository not in {PFLLIB_GIT}")
    lines = page.splitlines()
    start = lines.index("Leaderboard")
    want = {}
    for i in range(start, len(lines) - 8):
        cells = lines[i + 1 : i + 9]
        if all(re.fullmatch(r"\d+\.\d\d ± \d+\.\d\d", c) for c in cells) and lines[i] not in want:
            want[lines[i]] = [tuple(float(x) for x in cells[k].split(" ± ")) for k in (0, 3)]
    cells = load_cells("PFLlib")
    rows = list(dict.fromkeys(cells["row"]))
    assert rows == [r for r in want if r in rows] and len(rows) == 10
    for k, column in enumerate(("FMNIST pathological", "FMNIST practical Dir(0.1)")):
        mine = cells[cells["column"] == column]
        assert [(r, v, sd) for r, v, sd in zip(mine["row"], mine["value"], mine["spread"], strict=True)] == [
            (r, *want[r][k]) for r in rows
        ]
    assert (cells["unknown"].str.startswith("the lr")).all()  # the page states no lr: every cell says so


@needs_texts
def test_fedlaw_table3_equals_the_text() -> None:
    lines = text("fedlaw")
    start = next(i for i, line in enumerate(lines) if line.startswith("Table 3:"))
    want = []
    for line in lines[start + 4 : start + 12]:
        label = re.match(r"^(.*?)\s+\d", line).group(1)
        want += [(label, float(x)) for x in line[len(label) :].split()]
    assert len(want) == 8 * 12
    assert shipped("FedLAW", "3") == want


@needs_texts
def test_fedsam_table1_equals_the_text() -> None:
    line = next(x for x in text("fedsam") if x.startswith("Algorithm EMNIST CIFAR-10 CIFAR-100"))
    body = line.split("Round", 3)[-1]
    tokens = re.findall(r"[A-Za-z][A-Za-z-]*|\d+\.\d+|\d+|-(?=\s|$)", body)
    want_values, want_spreads, row = [], [], None
    numbers: list[str] = []
    for tok in tokens + ["END"]:
        if tok[0].isalpha():
            for k in range(0, len(numbers), 5):  # train, (spread), validation, (spread), round
                tr, trs, va, vas, rnd = numbers[k : k + 5]
                want_values += [(row, float(tr)), (row, float(va)), (row, None if rnd == "-" else float(rnd))]
                want_spreads += [float(trs), float(vas), None]
            row, numbers = tok, []
        else:
            numbers.append(tok)
    cells = load_cells("FedSAM")
    cells = cells[cells["table"] == "1"]
    got = [(r, None if v != v else v) for r, v in zip(cells["row"], cells["value"], strict=True)]
    assert got == want_values and len(got) == 7 * 9
    assert [None if s != s else s for s in cells["spread"]] == want_spreads


@needs_texts
def test_fedcos_table2_equals_the_text() -> None:
    lines = text("fedcos")
    start = next(i for i, line in enumerate(lines) if line.startswith("| FedAvg | 74.91"))
    want = []
    for line in lines[start : start + 9]:
        parts = [p.strip() for p in line.strip("| ").split("|")]
        want += [(parts[0], float(p.split("(")[0])) for p in parts[1:5]]
    assert shipped("FedCos", "II") == want and len(want) == 36


@needs_texts
def test_fedgam_table5_equals_the_text() -> None:
    lines = text("fedgam")
    start = next(i for i, line in enumerate(lines) if line.replace("\xa0", " ").startswith("AlgorithmC = 0.2"))
    want = []
    for line in lines[start + 1 : start + 10]:
        label = re.match(r"^([A-Za-z-]+?)(?=\d)", line).group(1)
        want += [(label, float(x)) for x in re.findall(r"\d+\.\d\d", line.split(" ")[0])]
    got = [(r, v) for r, v in shipped("FedGAM", "5")]
    assert [x for x in got if x[1] >= 1] == want and len(want) == 9 * 5


@needs_texts
def test_fedima_table1_equals_the_text() -> None:
    lines = text("fedima")
    start = next(i for i, line in enumerate(lines) if line.startswith("| FMNIST (CNN) |"))
    pairs = [p for line in lines[start : start + 16] for p in re.findall(r"(\d+\.\d+)\((\d+\.\d+)\)", line)]
    want = [float(x) for p in pairs for x in p]
    assert [v for _, v in shipped("FedIMA", "I")] == want and len(want) == 12 * 8 * 2


def test_fedsam_presets_run_long_enough_for_every_published_round(make_spec) -> None:
    # issue 24 point 2: the paper's Round column reaches 893; a preset of fewer rounds can only print "-" there
    cells = load_cells("FedSAM")
    rounds = cells[cells["metric"] == "round_to_target"]
    assert rounds["value"].max() == 893
    for preset, grp in rounds.groupby("preset"):
        assert make_spec(f"experiment={preset}").fl.rounds >= grp["value"].max(), preset


def test_cells_and_evidence_are_declared_package_data() -> None:
    # an installed fedrun reads them with importlib.resources: pyproject.toml must put them in the wheel
    import tomllib

    from tests.conftest import REPO

    data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert set(data["fedrun.papers"]) == {"cells/*.csv", "evidence/*.json"}
    papers = REPO / "fedrun" / "papers"
    assert {p.name for p in (papers / "cells").glob("*.csv")} == {f"{p.lower()}.csv" for p in PAPERS}
    assert len(list((papers / "evidence").glob("*.json"))) >= 3
