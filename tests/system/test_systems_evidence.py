"""scripts/systems_evidence.py: the FedProx Figure 1 record's cells and claim checks, and the async comparison's
time to accuracy, from hand-made run directories; runs of another commit or a dirty checkout are refused."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("systems_evidence", ROOT / "scripts" / "systems_evidence.py")
assert _spec is not None and _spec.loader is not None
systems_evidence = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(systems_evidence)
PRESET = "fedprox_fig1_synthetic_1_1"  # the target folder holds the preset's folder, which holds the three sweeps


def _run(d: Path, cfg: dict, rows: list[dict], code: dict | None = None) -> None:
    (d / ".hydra").mkdir(parents=True)
    (d / "config.yaml").write_text(yaml.safe_dump(cfg))
    (d / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"seed={cfg.get('seed', 0)}"]))
    summary = {"status": "completed", "wall_time_s": 12.0, "code": code or {"commit": "abc1234def", "dirty": False}}
    (d / "summary.json").write_text(json.dumps(summary))
    keys = list(rows[0])
    (d / "metrics.csv").write_text(
        ",".join(keys) + "\n" + "".join(",".join(str(r[k]) for k in keys) + "\n" for r in rows)
    )


def _fedprox_sweep(root: Path, code: dict | None = None) -> Path:
    # FedAvg's loss swings and stays high at 50% and 90%; FedProx mu=0 ends lower, mu=1 lower and steady
    for m, (method, level, swing) in enumerate(
        (("FedAvg", 0.6, 0.3), ("FedProx (μ=0)", 0.4, 0.2), ("FedProx (μ=1)", 0.3, 0.0))
    ):
        for share in (0, 0.5, 0.9):
            loss = [level + (swing * share if r % 2 else 0.0) for r in range(1, 201)]
            rows = [
                {"round": r, "train_loss": x, "test_acc": 0.9 - x / 2} for r, x in zip(range(1, 201), loss, strict=True)
            ]
            cfg = {"seed": 0, "tags": {"method": method}, "system": {"stragglers": share}}
            _run(root / PRESET / f"m0{m}" / f"system.stragglers={share}", cfg, rows, code)
    return root


def test_the_fedprox_record_checks_the_papers_claims(tmp_path: Path) -> None:
    record = systems_evidence.fedprox_record(_fedprox_sweep(tmp_path), "test")
    assert record["commit"] == "abc1234" and len(record["cells"]) == 9
    cell = next(c for c in record["cells"] if c["method"] == "FedAvg" and c["stragglers"] == 0.9)
    assert cell["train_loss_last"] == pytest.approx(0.6) and cell["train_loss_std_second_half"] == pytest.approx(0.135)
    assert cell["curve"]["200"]["train_loss"] == pytest.approx(0.6) and "250" not in cell["curve"]
    assert [c["holds"] for c in record["claims"]] == [True, True, True, True]


def test_a_claim_that_fails_is_reported_as_failing(tmp_path: Path) -> None:
    sweep = _fedprox_sweep(tmp_path)
    d = sweep / PRESET / "m02" / "system.stragglers=0.9"  # mu=1 at 90% now swings more than FedAvg
    rows = [{"round": r, "train_loss": 0.3 + (0.5 if r % 2 else 0.0), "test_acc": 0.5} for r in range(1, 201)]
    (d / "metrics.csv").write_text(
        "round,train_loss,test_acc\n" + "".join(f"{r['round']},{r['train_loss']},{r['test_acc']}\n" for r in rows)
    )
    claims = systems_evidence.fedprox_record(sweep, "test")["claims"]
    assert [(c["stragglers"], c["holds"]) for c in claims] == [(0.5, True), (0.5, True), (0.9, True), (0.9, False)]


def test_runs_of_a_dirty_checkout_or_missing_runs_are_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="clean commit"):
        systems_evidence.fedprox_record(_fedprox_sweep(tmp_path / "a", {"commit": "abc", "dirty": True}), "test")
    sweep = _fedprox_sweep(tmp_path / "b")
    (sweep / PRESET / "m01" / "system.stragglers=0" / "summary.json").write_text(json.dumps({"status": "running"}))
    with pytest.raises(SystemExit, match="unfinished"):
        systems_evidence.fedprox_record(sweep, "test")


def test_the_async_record_times_the_first_evaluation_past_each_threshold(tmp_path: Path) -> None:
    for name, accs in (
        ("fedavg", [0.5, 0.76, 0.79, 0.81]),
        ("fedbuff", [0.7, 0.8, 0.74, 0.85]),
        ("fedasync", [0.9] * 4),
    ):
        rows = [
            {"round": r + 1, "test_acc": a, "sim_clock": 100.0 * (r + 1), "staleness_mean": 1.0, "staleness_max": 2}
            for r, a in enumerate(accs)
        ]
        _run(tmp_path / name, {"seed": 0}, rows)
    record = systems_evidence.async_record(tmp_path, "test", {"fedbuff": 3.0})
    by = {s["server"]: s for s in record["servers"]}
    assert by["fedavg"]["reach_75"] == {"round": 2, "sim_clock": 200.0} and by["fedavg"]["reach_80"]["round"] == 4
    assert by["fedbuff"]["reach_80"]["round"] == 2 and by["fedbuff"]["test_acc_last10"] == pytest.approx(0.7725)
    assert by["fedbuff"]["cpu_user_s"] == 3.0 and by["fedasync"]["staleness_max"] == 2
