"""Evidence records of pFedMe's Table 1 (target pfedme-synthetic): the personalised model's cell (PM) is the best
round of metrics.csv's local_acc_wmean, which summary.json does not hold; the global model's (GM) test_acc_best."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from fedrun.core.errors import ConfigError
from fedrun.papers.record import build_record
from tests.papers.test_record import SHA


def pfedme_run(root: Path, method: str, local: list[float] | None, best: float = 0.8) -> Path:
    d = root / method
    (d / ".hydra").mkdir(parents=True)
    preset = "pfedme_table1_synthetic_mlr"
    cfg = {"algorithm": {"name": method.lower()}, "fl": {"rounds": 3}, "seed": 0, "data": {"name": "synthetic"},
           "tags": {"method": method, "preset": preset}}  # fmt: skip
    (d / "config.yaml").write_text(yaml.safe_dump(cfg))
    (d / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"experiment={preset}", f"++tags.method={method}"]))
    summary = {"status": "completed", "data_standin": False, "test_acc_final": 0.7, "test_acc_best": best,
               "wall_time_s": 60.0, "code": {"commit": SHA, "dirty": False}, "format": 1}  # fmt: skip
    (d / "summary.json").write_text(json.dumps(summary))
    rows = [f"{r},0.7" + (f",{local[r - 1]}" if local else "") for r in (1, 2, 3)]
    (d / "metrics.csv").write_text("round,test_acc" + (",local_acc_wmean" if local else "") + "\n" + "\n".join(rows))
    return d


def test_pm_is_the_best_round_of_local_acc_wmean_and_gm_the_summarys_best(tmp_path: Path) -> None:
    me = pfedme_run(tmp_path, "pFedMe", [0.81, 0.8734, 0.86], best=0.7912)
    per = pfedme_run(tmp_path, "Per-FedAvg", [0.7, 0.65, 0.7567])
    rec = build_record([me, per], "pfedme_test", "pfedme-synthetic", "2 cores")
    got = {(c["row"], c["column"]): c["values"]["0"] for c in rec["cells"]}
    assert got == {
        ("pFedMe", "Synthetic, MLR (GM)"): 79.12,
        ("pFedMe", "Synthetic, MLR (PM)"): 87.34,
        ("Per-FedAvg", "Synthetic, MLR (PM)"): 75.67,
    }


def test_a_run_without_local_test_columns_names_the_metric(tmp_path: Path) -> None:
    run = pfedme_run(tmp_path, "Per-FedAvg", None)
    with pytest.raises(ConfigError, match=r"summary\.local_acc_wmean_best.*metrics\.csv"):
        build_record([run], "pfedme_test", "pfedme-synthetic", "2 cores")


def test_the_reproduction_page_leaves_within_blank_without_a_published_value(tmp_path: Path) -> None:
    from fedrun.papers.reproduction import _cells

    rec = build_record([pfedme_run(tmp_path, "pFedMe", [0.8, 0.9, 0.85])], "pfedme_test", "pfedme-synthetic", "2 cores")
    cells = {c["column"]: c for c in _cells(rec)}
    assert cells["Synthetic, MLR (PM)"]["ours"].startswith("90.00")
    assert {c["paper"] for c in cells.values()} == {"-"} and {c["within"] for c in cells.values()} == {"-"}
