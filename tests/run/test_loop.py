"""fedrun.run.loop: a run with nothing to evaluate on is refused before training."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedrun.cli import main as cli
from tests.conftest import compose_cfg
from tests.run.test_resume import SMALL


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        (["data.max_test_samples=30"], "proxy.per_class: 10 per class takes all 30 test samples"),
        (["data.max_test_samples=200", "proxy.per_class=50"], "proxy.per_class: 50 per class takes all 200 test"),
    ],
)
def test_an_empty_test_split_is_refused_before_training(
    tmp_path: Path, capsys: pytest.CaptureFixture, overrides: list[str], says: str
) -> None:
    run_dir = tmp_path / "run"
    with pytest.raises(SystemExit) as e:
        cli.execute(compose_cfg([*SMALL, *overrides, f"cache_dir={tmp_path / 'cache'}"]), run_dir, multirun=False)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith(f"fedrun: error: {says}")
    assert sorted(p.name for p in run_dir.iterdir()) == ["error.txt"]  # nothing ran, nothing half-written
