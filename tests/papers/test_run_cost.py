"""reproduce-list's cost estimate: client-samples of a target whose sweep changes the cohort."""

from __future__ import annotations

from fedrun.cli.reproduce import SEC_PER_SAMPLE, cost_seconds, preset_samples
from fedrun.papers.targets import BY_NAME


def test_swept_participation_counts_each_cohort() -> None:
    # FedCos Table V: 4 methods x {10%, 20%} of 143 roles, 250 rounds of 50 local steps of batch 10
    target = BY_NAME["fedcos-table5"]
    per_method_and_rate = [250 * cohort * 50 * 10 for cohort in (14, 28)]  # int(0.1 * 143), int(0.2 * 143)
    assert preset_samples(target, "fedcos_table5_shakespeare_lstm") == 4 * sum(per_method_and_rate)


def test_lstm_rate_is_measured() -> None:
    seconds, measured = cost_seconds(BY_NAME["fedcos-table5"])
    assert measured and "lstm" in SEC_PER_SAMPLE
    assert seconds > 2.1e7 * SEC_PER_SAMPLE["lstm"]  # plus start-up per run and per invocation
