"""Paper-format tables (``fedrun-report --layout``): each paper's cell format over runs grouped by config keys.

fedima          "acc (acc with IMA)": last-10 mean without / with ``ima.enabled``
fedgam          train and test accuracy per setting; sigma(E) / sigma(C) across local epochs / participation
fedcos          final accuracy "(gain)" over the same method without FedCos; fedcos_bestlast: Best and Last
fedlaw          last-10 mean +- std over seeds
fedlaw_gws      the same cells, the last --cols key across and the rest down (FedLAW Tables 1/9: gamma across)
fedlaw_corr     Pearson r of accumulated lambda with data size / heterogeneity per setting (FedLAW Table 11)
fedsam          Train, Validation "mean (std across clients)", Round (rounds to target, "-" = never)
rounds          rounds to reach ``eval.target`` (FedIMA Table II)
pfllib          the best round of local_acc_wmean (the clients' models on their own test splits, correct over
                samples), mean ± std over seeds (PFLlib's leaderboard)
fedprox         the last round's training loss (metrics.csv train_loss) and test accuracy, mean ± std over seeds
                (FedProx Figure 1 is a figure: fedrun-reproduce draws its curves beside the table)
Cells of runs that did not complete show their status instead of a number; missing summary keys show "-".

Each layout is one :class:`Layout` record (its function, caption, metric, best values), registered with
:func:`register_layout` beside its function; fedrun/papers/captions.py and fedrun/cli/report.py read the record.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from fedrun.papers.correlation import FACTORS, client_factors, correlations, format_r
from fedrun.storage.rundir import METRICS_FILE
from fedrun.storage.status import Status

S = "summary."
STD = "mean ± sample standard deviation (n-1 denominator)"  # the std convention every caption states
SIGMA = {"fl.local_epochs": "σ(E)", "fl.participation": "σ(C)"}
SHORT = {"fl.local_epochs": "E", "algorithm.gamma": "γ"}  # FedLAW's column names


Render = Callable[[pd.DataFrame, list[str], list[str]], pd.DataFrame]


def default_direction(column: str) -> str:
    """Which value of a column is best: ``min`` for rounds ("... Round"), losses ("loss", "... loss") and spreads
    across settings ("σ(E)"), ``max`` for the rest (accuracies)."""
    return "min" if column.endswith(("Round", " loss")) or column == "loss" or column.startswith("σ") else "max"


def lowest(column: str) -> str:
    """Every column's best value is its lowest (rounds to a target)."""
    return "min"


@dataclass(frozen=True)
class Layout:
    """A paper's table format, ``fedrun-report table --layout NAME``: one registration (:func:`register_layout`)
    holding how it tables runs and what the report says of it. A layout states its name, render function and
    caption, and of the rest only what differs from the defaults."""

    name: str
    render: Render  # (runs: one row per run, row keys, column keys) -> the table, string cells
    caption: str  # what a cell is, in words; "{last_k}" becomes the k the runs used (captions.last_k_text)
    metric: str = "test_acc_last_k"  # the summary field it tables: --select keeps the value with its best mean
    best: bool = True  # whether a column has a best value (bold in the .tex); FedLAW's r values have none
    direction: Callable[[str], str | None] = default_direction  # column -> "max" / "min" / None, when best
    split: tuple[str, ...] = ()  # config keys a cell shows side by side instead of pooling (FedIMA: ima.enabled)


LAYOUTS: dict[str, Layout] = {}  # every layout, the papers' own and those added by register_layout, by name


def register_layout(record: Layout) -> Layout:
    """Add a table layout (``fedrun-report table --layout NAME``; docs/extending.md). A name taken already is
    refused."""
    if record.name in LAYOUTS:
        raise ValueError(f"layout {record.name}: a layout of that name exists")
    LAYOUTS[record.name] = record
    return record


def layout_names() -> list[str]:
    """The registered layouts' names, sorted: ``--layout``'s choices, read when a command runs."""
    return sorted(LAYOUTS)


def layout(name: str) -> Layout:
    """The layout registered as ``name``; ValueError naming the valid ones for another name."""
    if name not in LAYOUTS:
        raise ValueError(f"layout: unknown '{name}'; valid: {', '.join(LAYOUTS)}")
    return LAYOUTS[name]


def _values(grp: pd.DataFrame, key: str, scale: float = 100.0) -> np.ndarray:
    """The completed runs' values of a summary key (NaN-free), scaled; empty when the key is absent."""
    col = S + key
    if col not in grp:
        return np.array([])
    ok = grp[grp["status"] == Status.COMPLETED][col]
    return scale * pd.to_numeric(ok, errors="coerce").dropna().to_numpy(dtype=float)


def _bad(grp: pd.DataFrame) -> str | None:
    bad = grp[grp["status"] != Status.COMPLETED]["status"]
    return str(bad.iloc[0]) if len(bad) else None


def mean_std(v: np.ndarray) -> str:
    """ "m ± s" over seeds (one seed: just m; none: "-")."""
    if len(v) == 0:
        return "-"
    return f"{v.mean():.2f}" if len(v) == 1 else f"{v.mean():.2f} ± {v.std(ddof=1):.2f}"


def _mean(v: np.ndarray) -> str:
    return f"{v.mean():.2f}" if len(v) else "-"


def _order(runs: pd.DataFrame, keys: list[str]) -> list[tuple]:
    """Distinct key tuples in order of first appearance (runs are sorted by directory = registry order)."""
    if not keys:
        return [()]
    seen: dict[tuple, None] = {}
    for vals in runs[keys].itertuples(index=False, name=None):
        seen.setdefault(tuple(vals), None)
    return list(seen)


def _label(keys: list[str], vals: tuple) -> str:
    if not keys:
        return ""
    return ", ".join(
        str(v) if k in ("tags.preset", "tags.method") else f"{k.split('.')[-1]}={v}"
        for k, v in zip(keys, vals, strict=True)
    )


def _select(runs: pd.DataFrame, keys: list[str], vals: tuple) -> pd.DataFrame:
    mask = np.ones(len(runs), dtype=bool)
    for k, v in zip(keys, vals, strict=True):
        col = runs[k]
        mask &= col.isna().to_numpy() if pd.isna(v) else (col == v).to_numpy()
    return runs[mask]


def _grid(
    runs: pd.DataFrame, rows: list[str], cols: list[str], cell: Callable[[pd.DataFrame], dict[str, str]]
) -> pd.DataFrame:
    """Rows x settings; ``cell`` maps one group of runs to {sub-column: text}."""
    out: dict[str, dict[str, str]] = {}
    for r in _order(runs, rows):
        line: dict[str, str] = {}
        sub = _select(runs, rows, r)
        for c in _order(runs, cols):
            grp = _select(sub, cols, c)
            if grp.empty:
                continue
            for name, text in cell(grp).items():
                line[" ".join(x for x in (_label(cols, c), name) if x) or "acc"] = text
        out[_label(rows, r)] = line
    table = pd.DataFrame.from_dict(out, orient="index")
    table.index.name = " / ".join(rows)
    return table.fillna("-")


def fedima(runs: pd.DataFrame, rows: list[str], cols: list[str]) -> pd.DataFrame:
    """ "x (y)": last-10 mean without (x) and with (y) IMA."""

    def cell(grp: pd.DataFrame) -> dict[str, str]:
        flag = grp["ima.enabled"].astype(bool) if "ima.enabled" in grp else pd.Series(False, index=grp.index)
        parts = []
        for g in (grp[~flag], grp[flag]):
            parts.append("-" if g.empty else _bad(g) or _mean(_values(g, "test_acc_last_k")))
        return {"": f"{parts[0]} ({parts[1]})"}

    return _grid(runs, rows, cols, cell)


register_layout(
    Layout(
        "fedima",
        fedima,
        "test accuracy (%), {last_k} without (with) IMA; mean over seeds",
        split=("ima.enabled",),
    )
)


def fedgam(runs: pd.DataFrame, rows: list[str], cols: list[str]) -> pd.DataFrame:
    """Train and test (final round) per setting; sigma over the settings when the column is E or C."""
    sigma = SIGMA.get(cols[0]) if len(cols) == 1 else None

    def cell(grp: pd.DataFrame) -> dict[str, str]:
        bad = _bad(grp)
        return {
            "train": bad or _mean(_values(grp, "train_acc_final")),
            "test": bad or _mean(_values(grp, "test_acc_final")),
        }

    table = _grid(runs, rows, cols, cell)
    if sigma:
        tests = table[[c for c in table.columns if c.endswith(" test")]]
        nums = tests.apply(pd.to_numeric, errors="coerce")
        table[sigma] = [f"{v:.2f}" if not np.isnan(v) else "-" for v in nums.std(axis=1, ddof=0)]
    return table


register_layout(
    Layout(
        "fedgam",
        fedgam,
        "train / test accuracy (%) after the last round, mean over seeds; σ: population standard deviation"
        " (n denominator) of the test accuracy across the settings",
        metric="test_acc_final",
    )
)


def base_method(label: str) -> str | None:
    """The same method without FedCos: "FedProx(0.1)+FedCos(0.02)" -> "FedProx(0.1)", "FedCos(0.02)" -> "FedAvg"."""
    if "FedCos" not in label:
        return None
    base = re.sub(r"\+?FedCos(\([^)]*\))?", "", label).strip("+ ")
    return base or "FedAvg"


def fedcos(runs: pd.DataFrame, rows: list[str], cols: list[str], best_last: bool = False) -> pd.DataFrame:
    """Final accuracy with "(+gain)" over the base method in the same setting; best_last adds Best/Last."""
    means: dict[tuple[str, str, str], float] = {}
    metrics = (("Best", "test_acc_best"), ("Last", "test_acc_final")) if best_last else (("", "test_acc_final"),)
    for r in _order(runs, rows):
        sub = _select(runs, rows, r)
        for c in _order(runs, cols):
            for name, key in metrics:
                v = _values(_select(sub, cols, c), key)
                if len(v):
                    means[(_label(rows, r), _label(cols, c), name)] = float(v.mean())

    def cell(grp: pd.DataFrame) -> dict[str, str]:
        r_label = _label(rows, tuple(grp[rows].iloc[0]))
        c_label = _label(cols, tuple(grp[cols].iloc[0])) if cols else ""
        out = {}
        for name, _ in metrics:
            mine = means.get((r_label, c_label, name))
            base = means.get((base_method(r_label) or "", c_label, name))
            text = _bad(grp) or ("-" if mine is None else f"{mine:.2f}")
            if mine is not None and base is not None and base_method(r_label):
                text += f" ({mine - base:+.2f})"
            out[name] = text
        return out

    return _grid(runs, rows, cols, cell)


def fedcos_bestlast(runs: pd.DataFrame, rows: list[str], cols: list[str]) -> pd.DataFrame:
    """FedCos with Best and Last columns."""
    return fedcos(runs, rows, cols, best_last=True)


register_layout(
    Layout(
        "fedcos",
        fedcos,
        "test accuracy (%) after the last round, mean over seeds; (gain) over the same method without FedCos",
        metric="test_acc_final",
    )
)
register_layout(
    Layout(
        "fedcos_bestlast",
        fedcos_bestlast,
        "best and last-round test accuracy (%), mean over seeds; (gain) over the same method without FedCos",
        metric="test_acc_final",
    )
)


def fedlaw(runs: pd.DataFrame, rows: list[str], cols: list[str]) -> pd.DataFrame:
    """Last-10 mean ± std over seeds (FedLAW: seeds 8, 9, 10)."""
    return _grid(runs, rows, cols, lambda g: {"": _bad(g) or mean_std(_values(g, "test_acc_last_k"))})


register_layout(Layout("fedlaw", fedlaw, "test accuracy (%), {last_k}; " + STD + " over seeds"))


def pfllib(runs: pd.DataFrame, rows: list[str], cols: list[str]) -> pd.DataFrame:
    """The best round of local_acc_wmean, mean ± std over seeds (PFLlib's leaderboard: "the best average
    performance", the mean and std of three trials)."""
    return _grid(runs, rows, cols, lambda g: {"": _bad(g) or mean_std(_values(g, "local_acc_wmean_best"))})


register_layout(
    Layout(
        "pfllib",
        pfllib,
        "accuracy (%) of the clients' models on their own test splits (correct over samples), best round; "
        + STD
        + " over seeds",
        metric="local_acc_wmean_best",
    )
)


def fedlaw_gws(runs: pd.DataFrame, rows: list[str], cols: list[str]) -> pd.DataFrame:
    """FedLAW Tables 1/9: the ``fedlaw`` cells with the last column key (gamma) across; the other column keys
    (alpha, model) and the row keys that take more than one value go down."""
    if not cols:
        return fedlaw(runs, rows, cols)
    down = [k for k in rows if runs[k].nunique(dropna=False) > 1] + cols[:-1]
    table = fedlaw(runs, down, cols[-1:])
    key = cols[-1]
    table.columns = [c.replace(f"{key.split('.')[-1]}=", f"{SHORT.get(key, key)}=") for c in table.columns]
    return table


register_layout(Layout("fedlaw_gws", fedlaw_gws, "test accuracy (%), {last_k}; " + STD + " over seeds"))


def fedlaw_corr(runs: pd.DataFrame, rows: list[str], cols: list[str]) -> pd.DataFrame:
    """FedLAW Table 11: factors (DS, HD, DS×HD) down, each column setting across plus all of them pooled
    (the paper's "E=1&E=5"); cells: Pearson r of accumulated lambda with the factor, mean ± std over seeds."""
    row_groups = _order(runs, rows)
    table: dict[str, dict[str, str]] = {}
    for r in row_groups:
        sub = _select(runs, rows, r)
        rs: dict[str, dict[str, list[float]]] = {}
        pooled: dict[object, list[pd.DataFrame]] = {}
        bad: dict[str, str] = {}
        for c in _order(sub, cols):
            grp = _select(sub, cols, c)
            label = ", ".join(f"{SHORT.get(k, k.split('.')[-1])}={v}" for k, v in zip(cols, c, strict=True)) or "r"
            rs[label] = {key: [] for _, key in FACTORS}
            bad[label] = _bad(grp) or ""
            for _, run in grp[grp["status"] == Status.COMPLETED].iterrows():
                clients = client_factors(Path(run["run_dir"]))
                if clients is not None:
                    for key, value in correlations(clients).items():
                        rs[label][key].append(value)
                    pooled.setdefault(run.get("seed", 0), []).append(clients)
        if len(rs) > 1:
            both = rs[" & ".join(rs)] = {key: [] for _, key in FACTORS}
            for frames in pooled.values():
                for key, value in correlations(pd.concat(frames)).items():
                    both[key].append(value)
        for title, key in FACTORS:
            name = title if len(row_groups) == 1 else f"{_label(rows, r)}: {title}"
            table[name] = {label: bad.get(label) or format_r(v[key]) for label, v in rs.items()}
    out = pd.DataFrame.from_dict(table, orient="index")
    out.index.name = "factor"
    return out.fillna("-")


register_layout(
    Layout(
        "fedlaw_corr",
        fedlaw_corr,
        f"Pearson r of the accumulated aggregation weights lambda with each client factor; {STD} over seeds",
        best=False,
    )
)


def _rounds(grp: pd.DataFrame) -> str:
    col = S + "round_to_target"
    if col not in grp:
        return "-"
    r = pd.to_numeric(grp[col], errors="coerce")
    return "-" if r.isna().any() or r.empty else f"{r.mean():.0f}"


def fedsam(runs: pd.DataFrame, rows: list[str], cols: list[str]) -> pd.DataFrame:
    """Train, Validation "mean (std across clients)" and Round (rounds to target; "-" = never reached)."""

    def cell(grp: pd.DataFrame) -> dict[str, str]:
        bad = _bad(grp)
        # summary.json's spread of the final round (runner.summarize; eval.client_acc=true runs only)
        cm, cs = _values(grp, "client_acc_mean_final"), _values(grp, "client_acc_std_final")
        val = f"{cm.mean():.2f} ({cs.mean():.2f})" if len(cm) and len(cs) else "-"
        return {
            "Train": bad or _mean(_values(grp, "train_acc_final")),
            "Validation": bad or val,
            "Round": bad or _rounds(grp),
        }

    return _grid(runs, rows, cols, cell)


register_layout(
    Layout(
        "fedsam",
        fedsam,
        "Train: training accuracy (%); Validation: mean (standard deviation across clients) of the clients'"
        " test accuracy (%); Round: first round reaching eval.target (- = never); mean over seeds",
        metric="test_acc_final",
    )
)


def rounds(runs: pd.DataFrame, rows: list[str], cols: list[str]) -> pd.DataFrame:
    """Rounds to reach ``eval.target`` (mean over seeds; "-" = not reached by every seed)."""
    return _grid(runs, rows, cols, lambda g: {"": _bad(g) or _rounds(g)})


register_layout(
    Layout(
        "rounds",
        rounds,
        "first round reaching eval.target, mean over seeds (- = not reached by every seed)",
        direction=lowest,
    )
)


def _last_train_loss(grp: pd.DataFrame) -> np.ndarray:
    """The completed runs' training loss of their last evaluated round (metrics.csv ``train_loss``; a run without
    the column, ``eval.train_acc=false``, gives none)."""
    out = []
    for d in grp[grp["status"] == Status.COMPLETED]["run_dir"]:
        path = Path(d) / METRICS_FILE
        if path.is_file():
            m = pd.read_csv(path)
            if "train_loss" in m and len(m):
                out.append(float(m["train_loss"].iloc[-1]))
    return np.array(out)


def fedprox(runs: pd.DataFrame, rows: list[str], cols: list[str]) -> pd.DataFrame:
    """FedProx Figure 1's end points: per setting, the last round's training loss (3 decimals) and test accuracy
    (%), each "mean ± std" over seeds."""

    def cell(grp: pd.DataFrame) -> dict[str, str]:
        bad = _bad(grp)
        loss = _last_train_loss(grp)
        text = "-" if len(loss) == 0 else f"{loss.mean():.3f}" + (f" ± {loss.std(ddof=1):.3f}" if len(loss) > 1 else "")
        return {"loss": bad or text, "acc": bad or mean_std(_values(grp, "test_acc_final"))}

    return _grid(runs, rows, cols, cell)


register_layout(
    Layout(
        "fedprox",
        fedprox,
        "loss: training loss over every client's training data, acc: test accuracy (%), both after the last"
        " round; " + STD + " over seeds (the curves: fedrun-report curves --metric train_loss / test_acc)",
        metric="test_acc_final",
    )
)


def render(name: str, runs: pd.DataFrame, rows: list[str], cols: list[str]) -> pd.DataFrame:
    """The table of layout ``name``; raises ValueError for an unknown layout or config key."""
    chosen = layout(name)
    for key in rows + cols:
        if key not in runs:
            raise ValueError(f"no config key '{key}' in these runs")
    return chosen.render(runs, rows, cols)
