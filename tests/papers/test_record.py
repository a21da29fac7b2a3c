"""``python -m fedrun.papers.record``: an evidence record from run directories, read back by the scorecard."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from fedrun.core.errors import ConfigError
from fedrun.papers.record import build_record, main
from fedrun.papers.scorecard import evidence_runs, scorecard
from fedrun.papers.targets import BY_NAME

SHA = "0123456789abcdef0123456789abcdef01234567"


def fake_run(
    root: Path,
    name: str,
    method: str,
    algorithm: str,
    seed: int = 0,
    participation: float = 0.1,
    final: float = 0.8,
    best: float = 0.85,
    rounds: int = 3,
    evaluated: int = 3,
    code: dict | None = None,
    **summary: object,
) -> Path:
    d = root / name
    (d / ".hydra").mkdir(parents=True)
    cfg = {
        "algorithm": {"name": algorithm},
        "fl": {"rounds": rounds, "participation": participation},
        "seed": seed,
        "tags": {"method": method, "preset": "fedcos_table4_fmnist_mlp"},
        "data": {"name": "fmnist"},
    }
    (d / "config.yaml").write_text(yaml.safe_dump(cfg))
    overrides = ["experiment=fedcos_table4_fmnist_mlp", f"algorithm={algorithm}", f'++tags.method="{method}"']
    (d / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    blob = {
        "status": "completed",
        "data_standin": False,
        "test_acc_final": final,
        "test_acc_best": best,
        "wall_time_s": 123.4,
        "code": {"commit": SHA, "dirty": False} if code is None else code,
        "format": 1,
        **summary,
    }
    if code == {}:
        del blob["code"]
    (d / "summary.json").write_text(json.dumps(blob))
    rows = "\n".join(f"{r},{final}" for r in range(1, evaluated + 1))
    (d / "metrics.csv").write_text(f"round,test_acc\n{rows}\n")
    return d


def test_a_record_from_run_dirs_holds_the_commands_commit_seeds_and_numbers(tmp_path: Path) -> None:
    avg = fake_run(tmp_path, "avg", "FedAvg", "fedavg", final=0.7606, best=0.82151)
    cos = fake_run(tmp_path, "cos", "FedCos(0.05)", "fedcos", final=0.7791, best=0.8507)
    rec = build_record([avg, cos], "fedcos_table4_fmnist_mlp_10pct", "fedcos-table4", "2 cores, load 3")
    assert rec["commit"] == SHA and "commit_note" not in rec
    assert rec["paper"] == "FedCos" and rec["table"] == "IV" and rec["seeds"] == [0]
    assert (
        rec["command"][1]
        == "fedrun experiment=fedcos_table4_fmnist_mlp algorithm=fedcos '++tags.method=\"FedCos(0.05)\"'"
    )
    assert rec["wall_time_s"] == {"FedAvg": {"0": 123}, "FedCos(0.05)": {"0": 123}}
    assert rec["load"] == "2 cores, load 3" and rec["full_length"] is True
    got = {(c["row"], c["column"]): c["values"]["0"] for c in rec["cells"]}
    assert got == {
        ("FedAvg", "FMNIST 10% Best"): 82.15,
        ("FedAvg", "FMNIST 10% Last"): 76.06,
        ("FedCos(0.05)", "FMNIST 10% Best"): 85.07,
        ("FedCos(0.05)", "FMNIST 10% Last"): 77.91,
    }
    card = scorecard(evidence_runs([rec]), BY_NAME["fedcos-table4"])
    last = card[(card["row"] == "FedCos(0.05)") & (card["column"] == "FMNIST 10% Last")].iloc[0]
    assert last["ours"] == pytest.approx(77.91) and last["paper"] == pytest.approx(85.22)
    only = build_record([avg], "x", "fedcos-table4", "l", columns=["FMNIST 10% Last"])
    assert [c["column"] for c in only["cells"]] == ["FMNIST 10% Last"]


def test_runs_without_a_recorded_commit_take_it_from_the_command_line(tmp_path: Path) -> None:
    old = fake_run(tmp_path, "old", "FedAvg", "fedavg", code={})
    with pytest.raises(ValueError, match=r"--commit: the runs did not record their code.*valid: --commit SHA"):
        build_record([old], "x", "fedcos-table4", "l")
    rec = build_record([old], "x", "fedcos-table4", "l", commit="1168bd7", note="9,900 test images")
    assert rec["commit"] == "1168bd7" and "did not record" in rec["commit_note"]
    assert rec["note"] == "9,900 test images"
    dirty = fake_run(tmp_path, "dirty", "FedAvg", "fedavg", code={"commit": SHA, "dirty": True})
    assert "uncommitted" in build_record([dirty], "x", "fedcos-table4", "l")["commit_note"]
    with pytest.raises(ValueError, match="--commit: fff but the runs recorded"):
        build_record([dirty], "x", "fedcos-table4", "l", commit="fff")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"status": "running"}, "status: 'running'; valid: completed"),
        ({"data_standin": True}, "data_standin: the run trained on stand-in data"),
        ({"evaluated": 2}, "metrics.csv: last evaluated round 2, fl.rounds 3"),
        ({"participation": 0.5}, "cells: no cell of FedCos for preset fedcos_table4_fmnist_mlp"),
    ],
)
def test_a_run_that_is_not_full_length_real_evidence_is_refused(tmp_path: Path, kwargs: dict, message: str) -> None:
    bad = fake_run(tmp_path, "bad", "FedAvg", "fedavg", **kwargs)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build_record([bad], "x", "fedcos-table4", "l")


def test_the_command_writes_the_record_and_refuses_bad_input_in_one_line(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    a = fake_run(tmp_path, "a", "FedAvg", "fedavg", seed=0)
    b = fake_run(tmp_path, "b", "FedAvg", "fedavg", seed=1, final=0.78)
    out = tmp_path / "rec.json"
    assert main([str(a), str(b), "--id", "r", "--target", "fedcos-table4", "--load", "l", "--out", str(out)]) == 0
    rec = json.loads(out.read_text())
    assert rec["seeds"] == [0, 1] and rec["cells"][1]["values"] == {"0": 80.0, "1": 78.0}
    out2 = tmp_path / "never.json"
    assert main([str(a), "--id", "r", "--target", "fedcos-table9", "--load", "l", "--out", str(out2)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fedrun.papers.record: --target: unknown target 'fedcos-table9'; valid: fedima-table1")
    assert err.count("\n") == 1 and not out2.exists()
    assert main([str(a), str(a), "--id", "r", "--target", "fedcos-table4", "--load", "l"]) == 2
    assert "two runs of FedAvg seed 0" in capsys.readouterr().err


def test_runs_of_one_row_and_seed_in_two_settings_keep_both_wall_times(tmp_path: Path) -> None:
    ten = fake_run(tmp_path, "ten", "FedAvg", "fedavg", participation=0.1, wall_time_s=100.0)
    twenty = fake_run(tmp_path, "twenty", "FedAvg", "fedavg", participation=0.2, wall_time_s=200.0)
    rec = build_record([ten, twenty], "two_settings", "fedcos-table4", "2 cores")
    walls = rec["wall_time_s"]
    assert sorted(w["0"] for w in walls.values()) == [100, 200]
    assert all(k.startswith("FedAvg (") and "fl.participation=0." in k for k in walls)


def test_runs_that_fill_two_tables_are_recorded_one_table_at_a_time(tmp_path: Path) -> None:
    """A backdoor run fills a cell of the robust target's accuracy table (1) and of its ASR table (2): a record
    holds one table, chosen with ``--table``."""
    d = fake_run(tmp_path, "bd", "FedAvg", "fedavg", rounds=30, evaluated=30, test_acc_last_k=0.789, asr_last_k=0.7246)
    cfg = yaml.safe_load((d / "config.yaml").read_text())
    cfg["tags"]["preset"] = "robust_fmnist"
    cfg["attack"] = {"name": "backdoor"}
    (d / "config.yaml").write_text(yaml.safe_dump(cfg))
    (d / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(["experiment=robust_fmnist", "attack=backdoor"]))
    with pytest.raises(ConfigError, match=r"--table: the cells span tables 1, 2; valid: one table per record"):
        build_record([d], "r", "robust-fmnist", "test")
    for table, value in (("1", 78.9), ("2", 72.46)):
        record = build_record([d], "r", "robust-fmnist", "test", table=table)
        assert record["table"] == table and [c["values"] for c in record["cells"]] == [{"0": value}]
