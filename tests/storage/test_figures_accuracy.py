"""A run's accuracy.png reads as the reports do (issue 33, point 7): whole rounds on the x axis, accuracy in %, and a
title that names the setting (partition, its alpha, clients, seed) read from the run's config.yaml."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pytest
import yaml

from fedrun.storage.figures import plot_curves

ROWS = [{"round": r, "test_acc": a, "train_acc": a + 0.05} for r, a in enumerate([0.41, 0.54, 0.66, 0.68, 0.7], 1)]


@pytest.fixture
def kept(monkeypatch: pytest.MonkeyPatch) -> list:
    """Figures that save_figure wrote, kept open (plt.close does nothing) to inspect."""
    figs: list = []
    monkeypatch.setattr(plt, "close", figs.append)
    return figs


def _run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    cfg = {"seed": 3, "fl": {"clients": 20}, "partition": {"name": "dirichlet", "alpha": 0.1, "min_size": 10}}
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    return run


def test_accuracy_png_has_whole_rounds_percent_and_the_setting_in_its_title(tmp_path: Path, kept: list) -> None:
    run = _run_dir(tmp_path)
    plot_curves(ROWS, run / "accuracy.png", "fedavg on fmnist")
    assert (run / "accuracy.png").stat().st_size > 0
    (ax,) = kept[0].axes
    ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks), ticks  # not 1.5, 2.5, ...
    assert "%" in ax.get_ylabel()
    test_line = next(line for line in ax.get_lines() if line.get_label() == "global model, test")
    assert list(test_line.get_ydata()) == pytest.approx([41, 54, 66, 68, 70])
    title = " ".join(ax.get_title().split())
    assert "fedavg on fmnist" in title and "dirichlet" in title and "alpha=0.1" in title and "seed 3" in title
    assert "20 clients" in title


def test_accuracy_png_without_a_config_keeps_the_given_title(tmp_path: Path, kept: list) -> None:
    plot_curves(ROWS[:2], tmp_path / "accuracy.png", "fedavg on fmnist")
    assert kept[0].axes[0].get_title() == "fedavg on fmnist"
