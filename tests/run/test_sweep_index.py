"""A sweep's index file (fedrun/run/sweep_index.py)."""

from __future__ import annotations

from pathlib import Path

from fedrun.run.sweep_index import find_jobs, read_index, record_job


def test_the_index_maps_each_job_dir_to_the_overrides_that_last_ran_it(tmp_path: Path) -> None:
    record_job(tmp_path, "aaa", ["seed=0", "algorithm=fedavg"])
    record_job(tmp_path, "bbb", ["seed=1", "++tags.method='FedProx(0.1)'"])
    record_job(tmp_path, "aaa", ["algorithm=fedavg", "seed=0", "fl.rounds=3"])
    assert read_index(tmp_path) == {
        "aaa": "algorithm=fedavg seed=0 fl.rounds=3",
        "bbb": "seed=1 ++tags.method='FedProx(0.1)'",
    }
    assert find_jobs(tmp_path, "seed=0") == [tmp_path / "aaa"]
    assert find_jobs(tmp_path, "seed=1", "++tags.method='FedProx(0.1)'") == [tmp_path / "bbb"]
    assert (tmp_path / "index.yaml").read_text().startswith("# fedrun sweep: job directory")
