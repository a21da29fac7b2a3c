"""An evidence record's setup is found from the run: the settings its config holds with another value than its
command composes today (issue 38 point 3: a record that forgot to say its proxy size pooled with the new ones)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from fedrun.core.errors import ConfigError
from fedrun.papers.drift import composed_now, setup_drift
from fedrun.papers.record import build_record, main
from fedrun.storage.rundir import RunDir
from tests.conftest import REPO

PRESET = "fedlaw_table3_fmnist_mlp"
COMMAND = [f"experiment={PRESET}", "algorithm=fedlaw", "partition.alpha=0.1", "seed=9", '++tags.method="FedLAW"',
           f"++tags.preset={PRESET}", "hardware.threads=1", "output.quiet=true"]  # fmt: skip
# the preset's proxy size, read from its YAML, not through the code under test
YAML = yaml.safe_load((REPO / "conf/experiment" / f"{PRESET}.yaml").read_text())
PER_CLASS_NOW, LR_NOW = YAML["proxy"]["per_class"], YAML["fl"]["lr"]


def ran(root: Path, name: str = "run", **changes: object) -> Path:
    """A finished FedLAW run directory whose config is what COMMAND composes today, with ``changes``
    (dotted key -> value; None deletes the key) applied as if the run had been made with older code."""
    cfg = composed_now(COMMAND)
    for dotted, value in changes.items():
        *path, leaf = dotted.split(".")
        node = cfg
        for part in path:
            node = node[part]
        if value is None:
            del node[leaf]
        else:
            node[leaf] = value
    d = root / name
    (d / ".hydra").mkdir(parents=True)
    (d / "config.yaml").write_text(yaml.safe_dump(cfg))
    (d / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(COMMAND))
    rounds = cfg["fl"]["rounds"]
    summary = {"status": "completed", "data_standin": False, "test_acc_last_k": 0.8627, "wall_time_s": 9.0,
               "code": {"commit": "a" * 40, "dirty": False}, "format": 1}  # fmt: skip
    (d / "summary.json").write_text(json.dumps(summary))
    (d / "metrics.csv").write_text("round,test_acc\n" + "".join(f"{r},0.86\n" for r in range(1, rounds + 1)))
    return d


def drift(d: Path) -> dict[str, str]:
    return setup_drift(RunDir(d), yaml.safe_load((d / "config.yaml").read_text()))


def test_a_run_of_the_preset_as_it_is_now_has_no_drift(tmp_path: Path) -> None:
    assert drift(ran(tmp_path)) == {}


def test_a_changed_setting_is_found_and_hardware_output_and_new_settings_are_not(tmp_path: Path) -> None:
    old = 10 if PER_CLASS_NOW != 10 else 20
    changes = {"proxy.per_class": old, "hardware.threads": 4, "output.plots": False, "eval.local_test": None}
    assert drift(ran(tmp_path, **changes)) == {"proxy.per_class": f"{old} (the preset now: {PER_CLASS_NOW})"}
    # the inputs' scaling, a key the run identity leaves out at its old default ("dataset"), still counts
    assert YAML["data"]["normalize"] != "dataset"
    inputs = drift(ran(tmp_path, "inputs", **{"data.normalize": "dataset"}))
    assert inputs == {"data.normalize": f"dataset (the preset now: {YAML['data']['normalize']})"}


def test_a_record_lists_the_drift_unless_a_stated_fact_names_it(tmp_path: Path) -> None:
    d = ran(tmp_path, **{"proxy.per_class": 10, "fl.lr": 0.05})
    found = build_record([d], "r", "fedlaw-table3", "2 cores")
    assert found["setup"] == {
        "proxy.per_class": f"10 (the preset now: {PER_CLASS_NOW})",
        "fl.lr": f"0.05 (the preset now: {LR_NOW})",
    }
    stated = build_record([d], "r", "fedlaw-table3", "2 cores", setup={"proxy": "proxy.per_class=10: 100 images"})
    assert stated["setup"] == {"proxy": "proxy.per_class=10: 100 images", "fl.lr": f"0.05 (the preset now: {LR_NOW})"}
    decay = build_record([d], "r", "fedlaw-table3", "2 cores", setup={"decay": "fl.lr_decay=0.99, as now"})
    assert "fl.lr" in decay["setup"]  # a fact naming fl.lr_decay does not state fl.lr
    assert "setup" not in build_record([ran(tmp_path, "now")], "r", "fedlaw-table3", "2 cores")


def test_overrides_that_no_longer_compose_and_a_bad_setup_fact_are_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = ran(tmp_path)
    (d / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([*COMMAND, "fl.renamed_since=3"]))
    with pytest.raises(ConfigError, match="setup: its overrides no longer compose"):
        drift(d)
    args = [str(ran(tmp_path, "ok")), "--id", "r", "--target", "fedlaw-table3", "--load", "l", "--setup", "no-equals"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--setup" in err[0] and "FACT=TEXT" in err[0]
