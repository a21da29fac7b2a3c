"""Reports that look like the paper's (issue 23, point 6): one colour per method in every panel, titles that are
never clipped, captions that state the k the runs used, and the stand-in notice in every file a report writes."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_hex

from fedrun.cli.report import main as report_main
from fedrun.papers.captions import layout_caption, table_caption
from fedrun.report import curves, landscape
from fedrun.report.collect import collect_runs
from fedrun.report.latex import to_latex
from fedrun.report.partition import report_partition
from fedrun.report.provenance import csv_text, standin_note
from fedrun.storage import figures
from fedrun.storage.figures import method_styles, png_notice
from tests.report.fake_runs import fake_run

NOTICE = "stand-in data (dataset files not found): cifar10; 4 of 4 runs trained on seeded random data"


@pytest.fixture
def kept(monkeypatch: pytest.MonkeyPatch) -> list:
    """Figures that save_figure laid out, rendered and wrote, kept open (plt.close does nothing) to inspect."""
    figs: list = []
    monkeypatch.setattr(plt, "close", figs.append)
    return figs


def _colours(fig) -> dict[str, set[str]]:  # noqa: ANN001 - a matplotlib Figure
    """Line label (without its " (n=...)") -> the colours it has across the figure's panels."""
    out: dict[str, set[str]] = {}
    for ax in fig.axes:
        for line in ax.get_lines():
            out.setdefault(line.get_label().split(" (n=")[0], set()).add(to_hex(line.get_color()))
    return out


def _curve(n: int = 3) -> pd.DataFrame:
    return pd.DataFrame({"round": range(1, n + 1), "mean": np.linspace(10, 50, n), "std": 1.0, "n": 2})


def test_a_method_keeps_its_colour_in_every_panel(tmp_path: Path, kept: list) -> None:
    """Panels draw different subsets of the methods, in different orders: each keeps one colour."""
    groups = [("fedprox", 0.1), ("fedavg", 0.1), ("scaffold", 0.1), ("scaffold", 1.0), ("fedavg", 1.0)]
    curves.plot({g: _curve() for g in groups}, ["algorithm"], ["partition.alpha"], "test_acc", tmp_path / "c.png")
    colours = _colours(kept[0])
    assert len(kept[0].axes) == 2 and set(colours) == {f"algorithm={m}" for m in ("fedprox", "fedavg", "scaffold")}
    assert all(len(c) == 1 for c in colours.values()), colours  # the default cycle gave scaffold two colours
    assert len({next(iter(c)) for c in colours.values()}) == 3  # and no two methods share one
    # the same map for another figure of the report: fedavg keeps its colour though it is drawn alone there
    styles = method_styles(f"algorithm={m}" for m, _ in groups)
    curves.plot(
        {("fedavg", 1.0): _curve()}, ["algorithm"], ["partition.alpha"], "test_acc", tmp_path / "d.png", styles=styles
    )
    assert _colours(kept[1])["algorithm=fedavg"] == colours["algorithm=fedavg"]


def test_diagnostic_panels_keep_each_runs_colour(tmp_path: Path, kept: list) -> None:
    rounds = {"round": [1, 2, 3]}
    runs = {
        "FedProx": pd.DataFrame({**rounds, "global_grad_norm": [3.0, 2.0, 1.0]}),  # not in the first panel
        "FedAvg": pd.DataFrame({**rounds, "grad_coherence": [0.1, 0.2, 0.3], "global_grad_norm": [1.0, 1.0, 1.0]}),
    }
    assert landscape.plot_diagnostics(runs, tmp_path / "diag.png") == ["grad_coherence", "global_grad_norm"]
    colours = _colours(kept[0])
    assert all(len(c) == 1 for c in colours.values()) and colours["FedAvg"] != colours["FedProx"]
    legend = kept[0].axes[0].get_legend()
    assert sorted(t.get_text() for t in legend.get_texts()) == ["FedAvg", "FedProx"]  # both, though one is absent


def test_method_styles_are_stable_for_any_order_or_subset() -> None:
    names = ["scaffold", "fedavg", "fedprox"]
    assert method_styles(names) == method_styles(reversed(names))
    assert method_styles(names)["fedavg"] == method_styles(["fedavg", "fedprox", "scaffold", "fedavg"])["fedavg"]
    assert list(method_styles(names, order=["fedprox", "FedX"])) == ["fedprox", "fedavg", "scaffold"]  # paper first
    many = method_styles(f"m{i}" for i in range(45))
    assert len({(s["color"], s["linestyle"]) for s in many.values()}) == 45  # past the palette: a new line style
    assert list(many)[:3] == ["m0", "m1", "m2"] and list(many)[10] == "m10"  # numbers in natural order


def _inside(fig) -> list[str]:  # noqa: ANN001 - a matplotlib Figure
    """The titles, suptitles and axis labels of ``fig`` that do not lie inside it."""
    fig.canvas.draw()
    box = fig.bbox
    texts = [fig._suptitle, fig._supxlabel] + [t for ax in fig.axes for t in (ax.title, ax.xaxis.label, ax.yaxis.label)]
    bad = []
    for t in texts:
        if t is None or not t.get_text():
            continue
        e = t.get_window_extent()
        if e.x0 < box.x0 - 0.5 or e.x1 > box.x1 + 0.5 or e.y0 < box.y0 - 0.5 or e.y1 > box.y1 + 0.5:
            bad.append(f"{t.get_text()!r}: {e} outside {box}")
    return bad


def test_partition_heatmap_titles_are_not_clipped(tmp_path: Path, kept: list) -> None:
    """The README's clipped heatmap title: a few classes make a narrow figure, the partition's parameters a
    long title; it is wrapped to fit, and the figure grows so that the heatmap keeps its height."""
    counts = np.array([[6000, 0, 3], [1, 500, 0], [0, 0, 2000], [10, 20, 30], [0, 1, 0]])
    params = {"alpha": 0.1, "min_size": 10, "max_tries": 1000, "resample": True}
    title = figures.partition_title("dirichlet", params, 5, 0)
    figures.write_partition(tmp_path, counts, plots=True, title=title)
    figures.plot_domains(counts, ["photo", "art_painting", "cartoon"], tmp_path / "d.png", notice=NOTICE * 2)
    for fig in kept:
        assert _inside(fig) == []
    assert kept[0].axes[0].get_title().replace("\n", " ").endswith(title)  # wrapped, every word kept
    assert kept[0].get_figheight() > 3  # grew for the wrapped lines


def test_long_panel_titles_neither_clip_nor_overlap(tmp_path: Path, kept: list) -> None:
    keys = [
        ("fedavg", "a much longer value of a setting that names a dataset, a model and a partition", s)
        for s in (1, 2, 3)
    ]
    curves.plot(
        {k: _curve() for k in keys}, ["algorithm"], ["data.name", "seed"], "test_acc", tmp_path / "c.png", notice=NOTICE
    )
    fig = kept[0]
    assert _inside(fig) == []
    boxes = sorted((ax.title.get_window_extent() for ax in fig.axes), key=lambda b: b.x0)
    assert all(a.x1 <= b.x0 for a, b in zip(boxes, boxes[1:], strict=False))  # each stays over its own panel


def _three_round_runs(root: Path, rounds: tuple[int, ...] = (3, 3)) -> None:
    for seed, n in enumerate(rounds):
        cfg = {"algorithm.name": "fedavg", "seed": seed, "fl.rounds": n, "eval.last_k": 10}
        fake_run(root / f"r{seed}", cfg, None, curve=list(np.linspace(0.2, 0.5 + seed / 10, n)))


def test_caption_states_the_k_the_runs_used(tmp_path: Path) -> None:
    """The README's "last 10 rounds" caption on a 3-round run: eval.last_k=10, but the mean is of 3 rounds."""
    _three_round_runs(tmp_path / "short")
    runs = collect_runs([tmp_path / "short"])[0]
    caption = table_caption("last_k", runs, [2], ["seed"])
    assert caption.startswith("test accuracy (%), mean of all 3 evaluated rounds (fewer than eval.last_k = 10);")
    assert "last 10" not in caption
    fedlaw = layout_caption("fedlaw", runs, [2], ["seed"])
    assert fedlaw.startswith("test accuracy (%), mean of all 3 evaluated rounds (fewer than eval.last_k = 10);")
    _three_round_runs(tmp_path / "mixed", rounds=(3, 12))
    mixed = collect_runs([tmp_path / "mixed"])[0]
    assert "mean of the last k evaluated rounds, k = 3 or 10 by run (eval.last_k = 10, or all the rounds" in (
        table_caption("last_k", mixed, [2], ["seed"])
    )
    _three_round_runs(tmp_path / "long", rounds=(12, 12))
    assert "mean of the last 10 evaluated rounds;" in table_caption(
        "last_k", collect_runs([tmp_path / "long"])[0], [2], ["seed"]
    )


def test_caption_k_of_a_summary_without_last_k_comes_from_metrics_csv(tmp_path: Path) -> None:
    _three_round_runs(tmp_path, rounds=(4,))
    s = json.loads((tmp_path / "r0" / "summary.json").read_text())
    del s["last_k"]  # a summary of before the field
    (tmp_path / "r0" / "summary.json").write_text(json.dumps(s))
    runs = collect_runs([tmp_path])[0]
    assert "mean of all 4 evaluated rounds (fewer than eval.last_k = 10)" in table_caption("last_k", runs, [1], [])


def test_report_files_of_a_three_round_run_say_three(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    _three_round_runs(tmp_path / "runs")
    assert report_main([str(tmp_path / "runs"), "--out", str(tmp_path / "t")]) == 0
    for text in (capsys.readouterr().out, (tmp_path / "t.md").read_text(), (tmp_path / "t.tex").read_text()):
        assert "mean of all 3 evaluated rounds (fewer than eval.last\\_k = 10)" in text.replace("last_k", "last\\_k")
        assert "last 10" not in text


def _standin_runs(root: Path) -> pd.DataFrame:
    for i, (alg, seed) in enumerate((a, s) for a in ("fedavg", "fedprox") for s in (0, 1)):
        cfg = {"algorithm.name": alg, "seed": seed, "data.name": "cifar10", "data.standin": True}
        fake_run(root / f"r{i}", cfg, None, curve=[0.1, 0.2 + seed / 10, 0.3], data="cifar10", data_standin=True)
    return collect_runs([root])[0]


def test_standin_notice_in_the_tex_comment_and_caption(tmp_path: Path) -> None:
    runs = _standin_runs(tmp_path / "runs")
    notice = standin_note(runs)
    assert notice.startswith(NOTICE)
    table = pd.DataFrame({"alpha=0.1": ["61.00 ± 1.41", "71.00 ± 1.41"]}, index=["fedavg", "fedprox"])
    tex = to_latex(table, table_caption("last_k", runs, [2], ["seed"]), notice=notice)
    assert tex.splitlines()[0] == f"% {notice}"
    caption = tex.split("\\caption{")[1].split("}\n")[0]
    assert caption.endswith(
        "Stand-in data (dataset files not found): cifar10; 4 of 4 runs trained on seeded random"
        " data of the dataset's shape, so their numbers are not results."
    )
    assert not to_latex(table, "c").startswith("%") and "Stand-in" not in to_latex(table, "c")
    if shutil.which("pdflatex"):  # the comment and the longer caption still compile
        (tmp_path / "t.tex").write_text(tex)
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


def test_standin_notice_leads_the_csv_and_pandas_still_reads_it(tmp_path: Path) -> None:
    frame = pd.DataFrame({"algorithm": ["fedavg", "fedprox"], "mean": [61.0, 71.0], "n": [2, 2]})
    (tmp_path / "t.csv").write_text(csv_text(frame, NOTICE))
    assert (tmp_path / "t.csv").read_text().splitlines()[0] == f"# {NOTICE}"
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "t.csv", comment="#"), frame)
    assert csv_text(frame) == frame.to_csv(index=False)  # real data: the plain CSV


def test_standin_notice_in_the_curves_png_csv_and_figure(tmp_path: Path, kept: list) -> None:
    runs = _standin_runs(tmp_path / "runs")
    out = tmp_path / "out" / "curves.png"
    assert curves.main([str(tmp_path / "runs"), "--out", str(out)]) == 0
    notice = standin_note(runs)
    assert png_notice(out) == notice
    assert kept[0].get_suptitle().replace("\n", " ") == notice  # drawn on the figure, wrapped to its width
    assert out.with_suffix(".csv").read_text().startswith(f"# {notice}\n")
    assert pd.read_csv(out.with_suffix(".csv"), comment="#")["group"].nunique() == 2


def test_standin_notice_in_the_partition_report(tmp_path: Path, kept: list) -> None:
    run = _standin_runs(tmp_path / "runs")["run_dir"].iloc[0]
    figures.write_partition(Path(run), np.array([[5, 0], [1, 9]]), plots=False)
    printed = report_partition(Path(run))
    notice = "stand-in data (dataset files not found): cifar10; 1 of 1 runs trained on seeded random data"
    assert notice in printed
    assert png_notice(Path(run) / "partition.png").startswith(notice)
    assert kept[0].get_suptitle().replace("\n", " ").startswith(notice) and _inside(kept[0]) == []


def test_standin_notice_in_the_diagnostics_png(tmp_path: Path) -> None:
    runs = _standin_runs(tmp_path / "runs")
    for d in runs["run_dir"]:
        (Path(d) / "metrics.csv").write_text("round,test_acc,grad_coherence\n1,0.1,0.5\n2,0.2,0.4\n3,0.3,0.3\n")
    out = tmp_path / "diag.png"
    assert landscape.main(["coherence", *runs["run_dir"], "--out", str(out)]) == 0
    assert png_notice(out) == standin_note(runs)


def test_real_data_figures_carry_no_notice(tmp_path: Path) -> None:
    _three_round_runs(tmp_path / "runs")
    assert curves.main([str(tmp_path / "runs"), "--out", str(tmp_path / "c.png")]) == 0
    assert png_notice(tmp_path / "c.png") == "" and not (tmp_path / "c.csv").read_text().startswith("#")


def test_plane_anchors_take_their_methods_colour_in_both_panels(tmp_path: Path, kept: list) -> None:
    x = np.linspace(-1.0, 2.0, 5)
    grid = np.add.outer(x, x) ** 2
    scan = {"x": x, "y": x, "loss": grid, "error": grid / grid.max()}
    names = ["FedProx", "FedAvg", "FedLAW"]
    landscape.plot_plane(scan, np.array([[0, 0], [1, 0], [0, 1]]), names, tmp_path / "p.png", "plane")
    styles = method_styles(names)
    for ax in kept[0].axes[:2]:  # loss, error (then their colorbars)
        got = {c.get_label(): to_hex(c.get_facecolor()[0]) for c in ax.collections if c.get_label() in names}
        assert got == {n: styles[n]["color"] for n in names}


def test_coinciding_methods_stay_visible_and_the_legend_is_sorted(tmp_path: Path, kept: list) -> None:
    """Issue 33, point 7: two methods with the same curve differ by line style and marker, not colour alone (the
    second drawn hid the first); the legend lists the lines in the styles' order, not the sweep's."""
    same = _curve(5)
    groups = {("scaffold",): _curve(5).assign(mean=5.0), ("fedprox",): same, ("fedavg",): same.copy()}
    curves.plot(groups, ["algorithm"], [], "test_acc", tmp_path / "c.png")
    (ax,) = kept[0].axes
    lines = {line.get_label().split(" (n=")[0]: line for line in ax.get_lines()}
    looks = {(line.get_linestyle(), line.get_marker()) for line in lines.values()}
    assert len(looks) == 3 and all(marker not in (None, "None", "") for _, marker in looks), looks
    legend = [t.get_text().split(" (n=")[0] for t in ax.get_legend().get_texts()]
    assert legend == ["algorithm=fedavg", "algorithm=fedprox", "algorithm=scaffold"]


def test_curves_of_single_runs_claim_no_std(tmp_path: Path, kept: list) -> None:
    """n = 1 per line: the title says one run per line, not "mean ± std over seeds"; n = 2: mean ± std."""
    curves.plot({("fedavg",): _curve().assign(n=1)}, ["algorithm"], [], "test_acc", tmp_path / "one.png")
    curves.plot({("fedavg",): _curve()}, ["algorithm"], [], "test_acc", tmp_path / "two.png")
    one, two = (fig.axes[0].get_title() for fig in kept)
    assert "±" not in one and "std" not in one and "1 run" in one, one
    assert "mean ± std" in two, two


def test_curves_split_takes_what_its_error_suggests(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Issue 33, point 5: a key varying inside a line is an error suggesting --split; that command, pasted, draws
    one line per value of the key (exit 0)."""
    curve = [0.2, 0.4, 0.5]
    fake_run(tmp_path / "runs" / "0", {"algorithm.name": "fedavg", "fl.lr": 0.1}, curve=curve)
    fake_run(tmp_path / "runs" / "1", {"algorithm.name": "fedavg", "fl.lr": 0.01}, curve=curve)
    out = tmp_path / "out" / "c.png"
    assert report_main(["curves", str(tmp_path / "runs"), "--out", str(out)]) == 2
    assert "--split" in capsys.readouterr().err
    assert report_main(["curves", str(tmp_path / "runs"), "--out", str(out), "--split"]) == 0
    groups = set(pd.read_csv(out.with_suffix(".csv"))["group"])
    assert groups == {"algorithm=fedavg, fl.lr=0.01", "algorithm=fedavg, fl.lr=0.1"}
