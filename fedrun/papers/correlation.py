"""FedLAW Table 11: Pearson correlation of the clients' accumulated aggregation weights with their data size
and their heterogeneity degree (``fedrun-report --layout fedlaw_corr``).

Definitions (Li et al. ICML 2023, App. B.2, Table 11 caption):

- AW_i, the accumulated weight: client i's lambda (its relative weight in the aggregate, from the run's
  ``client_weights.csv``, written with ``eval.client_weights=true``) summed over the rounds of training
  (a round the client sat out adds 0);
- DS_i, the data size: the client's number of training samples (``partition.csv`` total);
- HD_i, the heterogeneity degree: "the reciprocal of the variance of class distribution for each client",
  1 / Var_k(q_ik) with q_i the client's class proportions (population variance over the C classes);
- DS x HD, their product ("we combine two factors by multiplication").

Each run gives one Pearson r per factor over its clients (clients without data, or with a perfectly uniform
class distribution, i.e. infinite HD, are left out). A cell is the mean +- std of r over seeds. The pooled
column (the paper's "E=1&E=5") correlates the clients of all column settings of the same seed together.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from fedrun.storage.rundir import RunDir

FACTORS = (("Dataset size (DS)", "ds"), ("Heterogeneity degree (HD)", "hd"), ("DS×HD", "ds_hd"))


def client_factors(run_dir: Path) -> pd.DataFrame | None:
    """Per client: aw (accumulated lambda), ds, hd, ds_hd; None when the run did not log client weights."""
    weights, part = RunDir(run_dir).client_weights_file, RunDir(run_dir).partition_file
    if not weights.is_file() or not part.is_file():
        return None
    counts = pd.read_csv(part, index_col="client")
    classes = counts.filter(regex=r"^class_").to_numpy(dtype=np.float64)
    ds = classes.sum(1)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = classes / ds[:, None]
        hd = 1.0 / q.var(axis=1)
    aw = pd.read_csv(weights).groupby("client")["lambda"].sum().reindex(counts.index, fill_value=0.0)
    return pd.DataFrame({"aw": aw.to_numpy(), "ds": ds, "hd": hd, "ds_hd": ds * hd}, index=counts.index)


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson's r over the pairs where both are finite (NaN with fewer than 3 pairs or a constant side)."""
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    if len(x) < 3 or x.std() == 0 or y.std() == 0:
        return float("nan")
    return float(np.corrcoef(x, y)[0, 1])


def correlations(clients: pd.DataFrame) -> dict[str, float]:
    """{factor key: r(AW, factor)} for a frame of clients (one run's, or several runs' pooled)."""
    return {key: pearson(clients["aw"].to_numpy(), clients[key].to_numpy()) for _, key in FACTORS}


def format_r(values: list[float]) -> str:
    """Mean ± std (ddof 1) of the finite r values, 3 decimals as the paper; one value alone; none: "-"."""
    v = np.array([x for x in values if np.isfinite(x)])
    if len(v) == 0:
        return "-"
    return f"{v.mean():.3f}" if len(v) == 1 else f"{v.mean():.3f} ± {v.std(ddof=1):.3f}"
