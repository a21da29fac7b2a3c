"""Every metrics.csv column a figure can draw has words and one unit: percent for an accuracy, as the tables print
it (issue 51: ``local_acc_mean`` on an axis, in fractions)."""

from __future__ import annotations

import pytest

from fedrun.metrics.diagnostics import DIAGNOSTIC_COLUMNS
from fedrun.metrics.personal import STATS
from fedrun.storage.metric_words import is_accuracy, metric_label, metric_name

PERSONAL = [f"{p}_{s}" for p in ("local_acc", "local_global_acc", "unseen_acc", "unseen_global_acc") for s in STATS]
SPREAD = [f"client_acc_{s}" for s in ("mean", "std", "min", "max")]  # fedrun/metrics/clients.py
COLUMNS = ["test_acc", "train_acc", "test_loss", "local_loss", *PERSONAL, *SPREAD, *DIAGNOSTIC_COLUMNS]


def test_the_issues_example() -> None:
    assert metric_label("local_acc_mean") == "personalised accuracy, mean over clients (%)"
    assert metric_label("test_acc") == "test accuracy (%)" and metric_label("test_loss") == "test loss"


@pytest.mark.parametrize("column", COLUMNS)
def test_every_drawable_column_is_in_words_and_an_accuracy_in_percent(column: str) -> None:
    assert "_" not in metric_name(column), metric_name(column)
    assert metric_label(column).endswith(" (%)") == is_accuracy(column) == ("acc" in column.split("_"))


def test_an_unknown_column_is_its_name_with_spaces() -> None:
    assert metric_label("my_new_metric") == "my new metric"
    assert metric_label("my_acc") == "my acc (%)"


def test_a_backdoors_attack_success_rate_is_drawn_in_percent_in_words() -> None:
    assert is_accuracy("asr") and metric_label("asr") == "attack success rate (%)"
