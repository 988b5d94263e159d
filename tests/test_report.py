"""Figures render under Agg and say what their titles say; the report is complete."""

from __future__ import annotations

import json
import re

import matplotlib.image as mpimg
import numpy as np
import pandas as pd
import pytest
from conftest import DrawsFit, law_rows

from specbayes import plan, plots, report


@pytest.fixture
def fit_with_data() -> DrawsFit:
    fit = DrawsFit()
    fit.data = law_rows(fit)
    fit.model_name = "stub"
    fit.excluded = pd.DataFrame({"reason": ["latency_growth", "preempted"]})
    return fit


def test_collapse_points_lie_on_the_law_for_law_data(fit_with_data):
    pts = report.collapse_points(fit_with_data)
    # data generated at the true coefficients; posterior means differ only by draw noise
    np.testing.assert_allclose(pts.y, 1.0 / (1.0 - pts.x), rtol=0.08)
    fig = plots.plot_collapse(pts)
    assert "collapse" in fig.axes[0].get_title().lower()


def test_each_figure_titles_and_axes(fit_with_data):
    arm = report.default_arm(fit_with_data)
    assert (arm.k, arm.alpha) in {(2, 0.6), (2, 0.8), (6, 0.6), (6, 0.8)}  # a measured sweep
    sp = {"k=2": plan.speedup(fit_with_data, arm, np.linspace(0, 10, 6))}
    fig = plots.plot_speedup(sp)
    assert "speedup" in fig.axes[0].get_ylabel().lower()
    ktab = plan.optimal_k(fit_with_data, arm, [0.6, 0.8], [1.0, 8.0])
    fig = plots.plot_k_map(ktab)
    assert "draft length" in fig.axes[0].get_title().lower()
    fig = plots.plot_cost_ratios(plan.cost_ratios(fit_with_data, arm))
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert any("C_{1R}" in t for t in labels) and any("red flag" in t for t in labels)


def test_write_report_writes_everything(fit_with_data, tmp_path):
    head = report.write_report(fit_with_data, tmp_path)
    for name in ("collapse.png", "speedup_vs_rps.png", "k_map.png", "cost_ratios.png",
                 "capacity_vs_slo.png"):  # fmt: skip
        img = mpimg.imread(tmp_path / name)
        assert img.shape[0] > 200 and img.std() > 0.01  # a real picture, not blank
    summary = (tmp_path / "summary.md").read_text()
    assert "Headline answers" in summary and "2 measured points were left out" in summary
    assert len(head.lines) == 3 and "Break-even" in head.lines[0]
    data = json.loads((tmp_path / "headline.json").read_text())
    assert data["break_even"]["rps_star_median"] == pytest.approx(head.break_even.rps_star_median)
    assert (tmp_path / "k_table.csv").exists() and (tmp_path / "capacity.csv").exists()
    # the headline's best k at the lightest and the heaviest load are the k-table's
    ktab = pd.read_csv(tmp_path / "k_table.csv")
    ktab = ktab[np.isclose(ktab.alpha, head.arm.alpha)]
    best = ktab.set_index("rps")["k_bayes"]
    assert (head.k_low, head.k_high) == (best.loc[ktab.rps.min()], best.loc[ktab.rps.max()])
    assert head.k_low != head.k_high  # C2R > 1 on these draws: the best k falls with load
    assert f"k = {head.k_high} at {head.rps_high:.2g} req/s" in head.lines[1]


def _strict(text: str):
    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_report_json_is_strict_and_excluded_points_are_grouped(fit_with_data, tmp_path):
    fit_with_data.excluded = pd.DataFrame(
        {
            "verifier": ["V8"] * 5,
            "cell": ["1024x1024"] * 5,
            "rps": [9.0, 9.5, 10.0, 10.5, 11.0],
            "rule": ["flagged", "flagged", "flagged", "preempted", "flagged+preempted"],
            "reason": ["saturated: throughput mode (all requests at once)"] * 3
            + ["preempted", "saturated; 463 preemptions; " + "preempted " * 20],
        }
    )
    report.write_report(fit_with_data, tmp_path)
    doc = _strict((tmp_path / "headline.json").read_text())
    assert "null_means" in doc and doc["workload"]["cell"] == "1024x1024"
    summary = (tmp_path / "summary.md").read_text()
    assert "| rule | rows | example point | reason |" in summary
    assert (
        "| flagged | 3 | V8, 1024x1024 at 9 req/s | saturated: throughput mode (all requests "
        "at once) |" in summary
    )
    long_reason = next(ln for ln in summary.splitlines() if ln.startswith("| flagged + pre"))
    assert long_reason.endswith("preempted … |")  # cut at a word, and marked
    # a browser-rendered view shows the figures inline, each with its caption
    for name in ("collapse.png", "k_map.png", "cost_ratios.png"):
        assert f"![{name}]({name})" in summary and (tmp_path / name).exists()
    ratio_rows = [ln for ln in summary.split("## Cost ratios")[1].splitlines() if ln[:3] == "| 1"]
    mean, interval = r"\d+\.\d{3}", r"\d+\.\d{3}–\d+\.\d{3}"  # one format for every ratio
    cells = [c.strip() for c in ratio_rows[0].split("|")[2:6]]
    assert all(re.fullmatch(f, c) for f, c in zip((mean, interval) * 2, cells, strict=True))
    assert "load_fit(path).excluded" in summary and "excluded_data" in summary
    assert max(len(line) for line in summary.splitlines() if not line.startswith("|")) < 400


def test_failed_report_leaves_nothing_behind(fit_with_data, tmp_path):
    out = tmp_path / "report"
    with pytest.raises(ValueError, match="zero-load latency"):
        report.write_report(fit_with_data, out, slo=1e-4)
    assert list(tmp_path.iterdir()) == []


def test_speedup_band_stops_where_it_is_undefined():
    t = pd.DataFrame(
        dict(
            rps=[0.0, 1.0, 2.0, 3.0],
            median=[2.0, 1.8, 1.5, np.inf],
            lo=[1.9, 1.6, 1.2, 1.0],
            hi=[2.1, 2.0, np.inf, np.inf],
        )
    )
    fig = plots.plot_speedup({"k=2": t})
    ax = fig.axes[0]
    line = ax.get_lines()[0]
    assert list(line.get_xdata()) == [0.0, 1.0]  # not into the undefined band
    assert any(ln.get_linestyle() == ":" for ln in ax.get_lines())  # saturation marked


def test_report_with_inferred_alpha_reads_the_k_table_at_its_posterior_median(tmp_path):
    class Inferred(DrawsFit):
        def alpha_draws(self, verifier, drafter, cell):
            return np.random.default_rng(1).beta(40, 12, self.n)

    fit = Inferred()
    fit.data = law_rows(fit, alphas=(0.77,)).assign(alpha=lambda d: d.alpha.where(d.k == 0, np.nan))
    head = report.write_report(fit, tmp_path)
    assert head.arm.alpha is None  # the plan itself uses the alpha draws
    median = round(float(np.median(fit.alpha_draws("V8", "eagle3", "1024x1024"))), 3)
    assert f"(alpha = {median:g}, the posterior median of the inferred alpha)" in head.lines[1]
    assert np.isclose(pd.read_csv(tmp_path / "k_table.csv").alpha, median).any()
