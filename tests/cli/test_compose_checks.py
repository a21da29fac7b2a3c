"""fedrun/cli/compose_checks.py: what a command line names in ``imports``."""

from __future__ import annotations

import sys

import pytest

from fedrun.cli.compose_checks import command_imports


def test_the_modules_a_command_line_names() -> None:
    args = ["--config-dir", "myconf", "algorithm=fedslow", "imports=[mypkg.algo,other]", "resume=x"]
    assert command_imports(args) == ["mypkg.algo", "other"]
    assert command_imports(["+imports=[a]", "++imports=[b]"]) == ["a", "b"]
    assert command_imports(["-m", "imports=[a],[b,c]"]) == ["a", "b", "c"]  # a sweep over it
    assert command_imports(["fl.rounds=3", "tags.imports=x"]) == []


def test_by_default_the_jobs_overrides_as_hydra_recorded_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """A launcher's worker process (joblib, submitit) has its own sys.argv: the job's recorded overrides count."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    monkeypatch.setattr(sys, "argv", ["worker.py", "--some-flag"])
    monkeypatch.setattr(HydraConfig.instance(), "cfg", None)
    assert command_imports() == []
    recorded = OmegaConf.create({"hydra": {"overrides": {"task": ["fl.rounds=2", "imports=[mypkg.algo]"]}}})
    monkeypatch.setattr(HydraConfig.instance(), "cfg", recorded)
    assert command_imports() == ["mypkg.algo"]
