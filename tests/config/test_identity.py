"""One identity module: ``config_key`` (a sweep job's directory, fedrun-report's duplicates) and the resume
fingerprint with each legacy form a checkpoint may carry, pinned to the values fedrun wrote before (a change
here would orphan existing sweep directories and checkpoints)."""

from __future__ import annotations

import copy
from typing import Any

from fedrun.config.identity import (
    config_key,
    fingerprint,
    fingerprints,
    legacy_extension_fingerprint,
    legacy_fingerprint,
    saved_config_key,
)
from fedrun.report.collect import read_run

RAW: dict[str, Any] = {
    "seed": 0,
    "algorithm": {"name": "fedavg", "lr": 0.1},
    "data": {"name": "fmnist", "root": "data", "download": True, "augment": "none"},
    "fl": {"rounds": 10, "clients": 4},
    "hardware": {"device": "cpu", "engine": "auto"},
    "eval": {"every": 1, "last_k": 5},
    "output": {"quiet": True},
    "cache_dir": "/tmp/c",
}
# the values of fedrun before this module owned them all (checkpoint.fingerprint(s), report/collect.fingerprint)
KEY = "933373d51d055c4ae497ecf0cf45464c92265b0fec15bb52dbc9520f70caf5f0"
FINGERPRINT = "c47cf7a4e3e92a908c80cd524e13de0d017c8de09f41338d8a2e3cc0756ed2f5"
LEGACY = "adddf958ce626f20460cf682759d1e2c01db72802026e2a6fd934f7d132ad186"
LEGACY_EXTENSION_FROM_6 = "f853a609e576818c3c9577dc1659ddf580f13e1d2d609860138d8240d0ff7de9"


def test_config_key_is_the_sweep_jobs_and_the_reports_identity() -> None:
    assert config_key(RAW) == KEY
    assert saved_config_key(RAW) == KEY
    moved = copy.deepcopy(RAW)
    moved["data"]["root"], moved["hardware"]["device"], moved["output"] = "/elsewhere", "cuda", {}
    assert config_key(moved) == KEY  # keys that do not change results
    assert config_key({**RAW, "seed": 1}) != KEY


def test_a_saved_config_that_does_not_serialise_still_has_a_key() -> None:
    mixed = {"seed": 0, "tags": {1: "a", "b": 2}}  # keys of mixed types: json.dumps(sort_keys=True) refuses them
    assert len(saved_config_key(mixed)) == 64 and saved_config_key(mixed) == saved_config_key(copy.deepcopy(mixed))


def test_the_resume_fingerprint_is_todays_form() -> None:
    assert fingerprint(RAW) == FINGERPRINT
    assert fingerprint({**RAW, "fl": {**RAW["fl"], "rounds": 20}}) == FINGERPRINT  # extending keeps it
    assert fingerprint({**RAW, "hardware": {**RAW["hardware"], "device": "cuda"}}) == FINGERPRINT  # moving device


def test_legacy_form_whole_config_with_device() -> None:
    """Checkpoints of before runs could be extended or move device carry the hash of the whole config."""
    assert legacy_fingerprint(RAW) == LEGACY
    assert legacy_fingerprint({**RAW, "hardware": {**RAW["hardware"], "device": "cuda"}}) != LEGACY
    assert LEGACY in fingerprints(RAW, 10) and LEGACY in fingerprints(RAW, 6)


def test_legacy_form_of_a_finished_run_being_extended() -> None:
    """A finished 6-round run's final checkpoint of that time carries the legacy hash of its 6-round config."""
    assert legacy_extension_fingerprint(RAW, 6) == LEGACY_EXTENSION_FROM_6
    assert legacy_extension_fingerprint(RAW, 10) is None  # not an extension: a resume
    assert fingerprints(RAW, 6) == (FINGERPRINT, LEGACY, LEGACY_EXTENSION_FROM_6)
    assert fingerprints(RAW, 10) == (FINGERPRINT, LEGACY)


def test_the_report_keys_duplicates_by_config_key(tmp_path) -> None:  # noqa: ANN001 - pytest's tmp_path
    import yaml

    (tmp_path / "config.yaml").write_text(yaml.safe_dump(RAW))
    (tmp_path / "summary.json").write_text('{"status": "completed"}')
    assert read_run(tmp_path)["fingerprint"] == KEY[:16]  # what report/collect.fingerprint gave
