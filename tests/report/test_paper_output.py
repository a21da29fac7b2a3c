"""Paper-ready output: a .tex that compiles, the paper's row/column order, accuracy curves, partition heatmaps."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import LogNorm

from fedrun.cli.report import main as report_main
from fedrun.report.latex import escape, to_latex
from fedrun.storage import figures as outputs
from tests.report.fake_runs import fake_run


def _two_methods(root: Path) -> None:
    for seed in (0, 1):
        fake_run(
            root / f"a{seed}", {"algorithm.name": "fed_avg", "seed": seed, "partition.alpha": 0.1}, 0.60 + seed / 50
        )
        fake_run(
            root / f"b{seed}", {"algorithm.name": "fed_prox", "seed": seed, "partition.alpha": 0.1}, 0.70 + seed / 50
        )
        fake_run(
            root / f"c{seed}", {"algorithm.name": "fed_avg", "seed": seed, "partition.alpha": 1.0}, 0.80 + seed / 50
        )
        fake_run(
            root / f"d{seed}", {"algorithm.name": "fed_prox", "seed": seed, "partition.alpha": 1.0}, 0.75 + seed / 50
        )


def test_tex_escapes_bolds_the_best_and_captions_metric_n_and_std(tmp_path: Path) -> None:
    _two_methods(tmp_path)
    assert report_main([str(tmp_path), "--rows", "algorithm", "--cols", "partition.alpha"]) == 0
    tex = (tmp_path / "reports" / "report_last_k.tex").read_text()
    assert "fed\\_avg" in tex and "fed_avg" not in tex  # "_" escaped (the old .tex did not compile)
    caption = tex.split("\\caption{")[1].split("}\n")[0]
    assert "test accuracy (\\%), mean of the last 10 evaluated rounds" in caption
    assert "sample standard deviation (n-1 denominator)" in caption and "n = 2 runs (seed) per cell" in caption
    lines = {ln.split(" & ")[0]: ln for ln in tex.splitlines() if ln.startswith("algorithm=")}
    # alpha=0.1: fed_prox is best (71 > 61); alpha=1.0: fed_avg (81 > 76); 2 decimals, ± as math
    assert lines["algorithm=fed\\_prox"].split(" & ")[1] == "\\textbf{71.00 $\\pm$ 1.41}"
    assert lines["algorithm=fed\\_avg"].split(" & ")[2] == "\\textbf{81.00 $\\pm$ 1.41} \\\\"
    assert "\\textbf" not in lines["algorithm=fed\\_avg"].split(" & ")[1]
    assert "highest value of each column in bold" in caption
    md = (
        tmp_path / "reports" / "report_last_k.md"
    ).read_text()  # Markdown has no bold cells, so its caption claims none
    assert "**" not in md and "bold" not in md and "n = 2 runs (seed) per cell." in md


def test_rounds_to_target_bolds_the_lowest() -> None:
    table = pd.DataFrame({"x": ["40", "25", "never"]}, index=["a", "b", "c"])
    tex = to_latex(table, "rounds", "min")
    assert "b & \\textbf{25}" in tex and "a & 40" in tex


def test_escape_handles_every_special_character() -> None:
    assert escape("a_b & 50% $x #1 {y} ~ ^ \\ σ(E) ±") == (
        "a\\_b \\& 50\\% \\$x \\#1 \\{y\\} \\textasciitilde{} \\textasciicircum{} \\textbackslash{} $\\sigma$(E) $\\pm$"
    )


def _gam_runs(root: Path) -> None:
    """FedGAM Table 4 shape: sigma(E) across local epochs (a Greek letter in a column name)."""
    for i, (meth, e) in enumerate((m, e) for m in ("FedAvg", "FedGAM_CV") for e in (5, 10)):
        cfg = {"tags.method": meth, "fl.local_epochs": e, "algorithm.name": meth.lower()}
        fake_run(root / f"{i}", cfg, 0.5 + i / 100, train_acc_final=0.9)


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="no LaTeX installed (apt-get install texlive-latex-base)")
@pytest.mark.parametrize("kind", ["table", "fedgam layout"])
def test_tex_compiles_with_pdflatex(tmp_path: Path, kind: str) -> None:
    if kind == "table":
        _two_methods(tmp_path / "runs")
        args = ["--cols", "partition.alpha"]
    else:
        _gam_runs(tmp_path / "runs")
        args = ["--layout", "fedgam", "--rows", "tags.method", "--cols", "fl.local_epochs"]
    assert report_main([str(tmp_path / "runs"), *args, "--out", str(tmp_path / "t")]) == 0
    assert kind == "table" or "$\\sigma$(E)" in (tmp_path / "t.tex").read_text()
    doc = tmp_path / "doc.tex"
    doc.write_text("\\documentclass{article}\n\\begin{document}\n\\input{t.tex}\n\\end{document}\n")
    r = subprocess.run(
        ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", doc.name],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout[-2000:]
    assert (tmp_path / "doc.pdf").stat().st_size > 0


def test_layouts_keep_the_papers_row_and_column_order(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """FedSAM App. F: presets EMNIST then CIFAR-100, alpha 1e6 (IID), 0.6, 0.3; methods in the paper's order,
    whatever order the job directories sort in (reversed here, as content-keyed names may be)."""
    combos = [
        (p, meth, a)
        for p in ("fedsam_appf_emnist", "fedsam_appf_cifar100")
        for meth in ("FedAvg", "FedSAM")
        for a in (1e6, 0.6, 0.3)
    ]
    for i, (preset, meth, alpha) in enumerate(combos):
        cfg = {"tags.preset": preset, "tags.method": meth, "partition.alpha": alpha, "algorithm.name": meth.lower()}
        fake_run(tmp_path / f"job{len(combos) - i:02d}", cfg, 0.5, train_acc_final=0.6)
    args = [str(tmp_path), "--layout", "fedsam", "--rows", "tags.method", "--cols", "tags.preset,partition.alpha"]
    assert report_main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    header = [c.strip() for c in lines[0].split("|")[2:-1]]
    trains = [c for c in header if c.endswith("Train")]
    assert trains == [
        f"{p}, alpha={a} Train" for p in ("fedsam_appf_emnist", "fedsam_appf_cifar100") for a in (1000000.0, 0.6, 0.3)
    ]
    assert [ln.split("|")[1].strip() for ln in lines[2:4]] == ["FedAvg", "FedSAM"]


def _curve_runs(root: Path) -> dict[str, np.ndarray]:
    curves = {
        "fedavg": np.array([[0.1, 0.3, 0.5], [0.2, 0.4, 0.4]]),
        "fedprox": np.array([[0.2, 0.5, 0.6], [0.3, 0.5, 0.7]]),
    }
    for alg, rows in curves.items():
        for seed, row in enumerate(rows):
            fake_run(root / f"{alg}{seed}", {"algorithm.name": alg, "seed": seed}, float(row[-1]), curve=list(row))
    return curves


def test_curves_are_mean_and_std_over_seeds_per_group(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    curves = _curve_runs(tmp_path)
    assert report_main(["curves", str(tmp_path), "--rows", "algorithm"]) == 0
    assert (tmp_path / "reports" / "curves_test_acc.png").stat().st_size > 0
    got = pd.read_csv(tmp_path / "reports" / "curves_test_acc.csv")
    for alg, rows in curves.items():
        g = got[got["group"] == f"algorithm={alg}"].sort_values("round")
        assert g["round"].tolist() == [1, 2, 3] and (g["n"] == 2).all()
        np.testing.assert_allclose(g["mean"], 100 * rows.mean(0))
        np.testing.assert_allclose(g["std"], 100 * rows.std(0, ddof=1))


def test_curves_refuse_to_pool_other_keys(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    for seed, lr in ((0, 0.1), (1, 0.01)):
        fake_run(tmp_path / f"r{seed}", {"algorithm.name": "fedavg", "seed": seed, "fl.lr": lr}, 0.5, curve=[0.5])
    assert report_main(["curves", str(tmp_path)]) == 2
    assert "fl.lr varies inside a cell" in capsys.readouterr().err


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> list:
    """Figures passed to save_figure, kept open for inspection."""
    figs: list = []
    monkeypatch.setattr(outputs, "save_figure", lambda fig, path, **kw: figs.append(fig))
    return figs


def test_partition_heatmap_integer_ticks_title_and_a_scale_that_shows_few_samples(tmp_path: Path, drawn: list) -> None:
    counts = np.array([[6000, 0, 3], [1, 500, 0], [0, 0, 2000], [10, 20, 30], [0, 1, 0]])
    title = outputs.partition_title("dirichlet", {"alpha": 0.1, "min_size": 10}, 5, 0)
    outputs.write_partition(tmp_path, counts, plots=True, title=title)
    ax = drawn[0].axes[0]
    assert "dirichlet(alpha=0.1, min_size=10), 5 clients, seed 0" in ax.get_title()
    for ticks in (ax.get_xticks(), ax.get_yticks()):
        assert np.allclose(ticks, np.round(ticks))
    im = ax.get_images()[0]
    assert isinstance(im.norm, LogNorm)
    # one sample is a visible colour (a linear scale puts it at 1/6000 of the range, i.e. as none)
    assert im.norm(1) == 0.0 and im.norm(3) > 0.1
    assert np.ma.is_masked(im.get_array()[0, 1])  # empty cells drawn white, not as the lowest colour


def test_markdown_keeps_two_decimals(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    fake_run(tmp_path / "a", {"algorithm.name": "fedavg"}, 0.12)  # one seed: "12.00", not tabulate's "12"
    assert report_main([str(tmp_path)]) == 0
    assert "| algorithm=fedavg | 12.00    |" in capsys.readouterr().out
