"""A ``metrics.csv`` column in words, for the axes and titles of figures (``fedrun-report curves``, the diagnostics
plot): ``local_acc_mean`` is "personalised accuracy, mean over clients (%)". An accuracy (a column with an ``acc``
part, stored as a fraction) is drawn in percent, as the tables print it: :func:`is_accuracy` says which to scale.
A column this module does not know is its name with spaces.
"""

from __future__ import annotations

# the part before a per-client statistic (fedrun/metrics/personal.py, fedrun/metrics/clients.py)
_SUBJECTS = {
    "local_acc": "personalised accuracy",
    "local_global_acc": "global model's accuracy on the clients' test data",
    "unseen_acc": "unseen clients' personalised accuracy",
    "unseen_global_acc": "global model's accuracy on unseen clients",
    "client_acc": "global model's accuracy per client",
}
_STATISTICS = {
    "mean": "mean over clients",
    "wmean": "mean over test samples",
    "std": "std over clients",
    "worst10": "mean of the worst 10% of clients",
    "best10": "mean of the best 10% of clients",
    "min": "worst client",
    "max": "best client",
}
_COLUMNS = {
    "test_acc": "test accuracy",
    "train_acc": "training accuracy",
    "test_loss": "test loss",
    "local_loss": "clients' training loss",
    "grad_coherence": "local gradient coherence",
    "global_update_norm": "norm of the global update",
    "global_grad_norm": "norm of the global gradient",
    "client_dist_mean": "client-to-global distance, mean over clients",
    "client_dist_max": "client-to-global distance, largest",
    "sim_clock": "simulated clock (s)",
    "asr": "attack success rate",
    "round": "round",
}


def is_accuracy(column: str) -> bool:
    """Whether ``column`` holds an accuracy (a fraction in metrics.csv, drawn in percent): a backdoor's attack success
    rate ``asr`` is one (the accuracy of the triggered test images' target label)."""
    return "acc" in column.split("_") or column == "asr"


def metric_name(column: str) -> str:
    """``column`` in words, without its unit."""
    if column in _COLUMNS:
        return _COLUMNS[column]
    subject, _, statistic = column.rpartition("_")
    if subject in _SUBJECTS and statistic in _STATISTICS:
        return f"{_SUBJECTS[subject]}, {_STATISTICS[statistic]}"
    return column.replace("_", " ")


def metric_label(column: str) -> str:
    """An axis label for ``column``: its words, with ``(%)`` for an accuracy."""
    return metric_name(column) + (" (%)" if is_accuracy(column) else "")
