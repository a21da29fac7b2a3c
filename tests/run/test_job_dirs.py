"""Sweep job directories (fedrun/run/job_dirs.py): named by what varies, keyed by the hash of the config that
decides the results, found again by that hash."""

from __future__ import annotations

from pathlib import Path

import yaml
from omegaconf import OmegaConf

from fedrun.config.identity import config_key
from fedrun.run.job_dirs import LABEL_CHARS, find_job_dir, job_dir_name, job_label, new_folder_name
from tests.conftest import compose_cfg


def _key(overrides: list[str]) -> str:
    return config_key(OmegaConf.to_container(compose_cfg(overrides), resolve=True))  # type: ignore[arg-type]


def test_the_job_dir_is_what_varies_then_a_hash_of_the_result_relevant_config() -> None:
    """Before: the 12-hex hash alone (``382f9ed5382c``), which told a user nothing."""
    name = job_dir_name(compose_cfg(["seed=0"]), ["seed=0"])
    assert name == _key(["seed=0"])[:8]  # nothing varies: the hash alone
    assert job_dir_name(compose_cfg(["seed=0"]), ["algorithm=fedavg", "seed=0"], {"seed"}) == f"seed=0-{name}"
    jobs = ["algorithm=fedprox", "seed=1", "fl.rounds=2"]
    assert job_dir_name(compose_cfg(jobs), jobs, {"algorithm", "seed"}) == f"algorithm=fedprox,seed=1-{_key(jobs)[:8]}"
    # the same config however the command spells it; settings that do not change results do not count
    assert job_dir_name(compose_cfg([]), []) == name
    assert job_dir_name(compose_cfg(["output.plots=false", "checkpoint.every=1", "cache_dir=/x"]), []) == name
    assert job_dir_name(compose_cfg(["seed=1"]), []) != name
    assert job_dir_name(compose_cfg(["algorithm=fedprox"]), []) != job_dir_name(compose_cfg(["algorithm=fedavg"]), [])
    # a config that does not resolve is keyed by its overrides (validation then names the field in error.txt)
    bad = job_dir_name(compose_cfg(["fl.lr=${undefined.key}"]), ["fl.lr=${undefined.key}"])
    assert bad.startswith("unresolved-") and bad != job_dir_name(compose_cfg(["fl.lr=${x}"]), ["fl.lr=${x}"])


def test_folder_names_are_safe_and_bounded() -> None:
    """No '/', no quote or space, never hidden, at most LABEL_CHARS before the hash; the hash keeps them apart."""
    assert job_label(["++tags.method='FedProx(0.1)'", "seed=0"], {"tags.method"}) == "tags.method=FedProx(0.1)"
    assert job_label(["data.root=/data/a b", "seed=1"], {"data.root", "seed"}) == "data.root=%2Fdata%2Fa%20b,seed=1"
    assert job_label(["tags.x=ü;$(rm)"], {"tags.x"}) == "tags.x=%C3%BC%3B%24(rm)"
    assert job_label([".x=1"], {".x"}).startswith("%2E")
    long = "model.hidden=[" + ",".join(["512"] * 60) + "]"
    label = job_label([long, "seed=3"], {"model.hidden", "seed"})
    assert label.startswith("model.hidden=[512,512") and "...," in label and label.endswith("seed=3")
    many = [f"tags.k{i}={'v' * 30}" for i in range(10)]
    assert len(job_label(many, {f"tags.k{i}" for i in range(10)})) == LABEL_CHARS
    a = new_folder_name(None, job_label([long], {"model.hidden"}), "a" * 64)
    b = new_folder_name(None, job_label([long.replace("]", ",1]")], {"model.hidden"}), "b" * 64)
    assert a.rsplit("-", 1)[0] == b.rsplit("-", 1)[0] and a != b  # cut the same: the hash still tells them apart
    assert "/" not in a and len(a.encode()) < 255


def test_a_job_finds_its_folder_by_its_hash_whatever_the_rest_of_its_name(tmp_path: Path) -> None:
    """A grown sweep varies more keys (new names), and sweeps of older fedrun named folders by the 12-hex hash:
    either way a job finds its folder by the hash, and a short hash shared with another config is not taken."""
    key, other = _key(["seed=0"]), _key(["seed=1"])
    (tmp_path / "index.yaml").write_text("{}")
    assert find_job_dir(tmp_path, key) is None
    (tmp_path / key[:12]).mkdir()  # an old sweep's folder
    assert find_job_dir(tmp_path, key) == key[:12]
    (tmp_path / key[:12]).rmdir()
    (tmp_path / f"seed=0-{key[:8]}").mkdir()  # a sweep that varied only the seed
    assert find_job_dir(tmp_path, key) == f"seed=0-{key[:8]}"
    assert job_dir_name(compose_cfg(["seed=0"]), ["seed=0", "algorithm=fedavg"], {"seed", "algorithm"}, tmp_path) == (
        f"seed=0-{key[:8]}"
    )
    # another config's folder that ends in this key's short hash (a collision): not this job's
    clash = tmp_path / f"algorithm=x-{key[:8]}"
    (tmp_path / f"seed=0-{key[:8]}").rmdir()
    clash.mkdir()
    (clash / "config.yaml").write_text(yaml.safe_dump(OmegaConf.to_container(compose_cfg(["seed=1"]))))
    assert find_job_dir(tmp_path, key) is None
    assert find_job_dir(tmp_path, other) is None  # its hash is not other's either
    assert new_folder_name(tmp_path, "seed=0", key) == f"seed=0-{key[:12]}"
