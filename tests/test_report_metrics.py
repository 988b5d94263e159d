"""The report's figure of each modelled metric vs load, its summary lines and its SLO spec."""

from __future__ import annotations

from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pandas as pd
import pytest
import xarray as xr
from conftest import DrawsFit, law_rows

from specbayes import laws, plan, report
from specbayes.report_metrics import (
    METRIC_FIGURE,
    metric_curves,
    metric_points,
    metric_title,
    plot_metrics,
    seconds_text,
    split_slo,
)

REPO = Path(__file__).resolve().parents[1]
REAL = REPO / "data" / "real" / "speculators_qwen3.8-27b_b200_sweeps.csv"
ARM = plan.Arm(
    verifier="V8", hardware="A100", prefill=1024, decode=1024, drafter="eagle3", alpha=0.8, k=6
)
#: the stub's metric = share × the law's C1 + C2 B, per request (TTFT) or per token (ITL)
SHARES = {"ttft_p99": (0.1, 1.0), "itl_p50": (1.0, 1.0)}


class MetricsFit(DrawsFit):
    """:class:`DrawsFit` with two modelled metrics: the law's costs rescaled by fixed shares."""

    metrics = tuple(SHARES)
    model_name = "stub"

    def metric_shares(self, rows, name, seed=None):
        a, b = np.log(SHARES[name])
        out = np.empty((self.n, 2, len(rows)))
        out[:, 0], out[:, 1] = a, b
        return out

    def metric(self, rows, name, *, predictive=False, measured=False, seed=None):
        c1, c2, c3, _ = plan.effective_cost_draws(self, ARM, k=rows["k"])  # no knee here
        load = rows["concurrency" if "concurrency" in rows else "rps"].to_numpy(float)
        closed = "concurrency" in rows
        batch = load if closed else load * laws.latency(load, c1, c2, c3)
        a, b = SHARES[name]
        unit = 1023.0 if name.startswith("itl") else 1.0
        m = (a * c1 + b * c2 * batch) / unit
        if predictive:
            m = m * np.exp(0.2 * np.random.default_rng(0).standard_normal(m.shape))
        return xr.DataArray(m, dims=("sample", "row"))


@pytest.fixture
def metrics_fit() -> MetricsFit:
    fit = MetricsFit()
    d = law_rows(fit)
    d["ttft_p99"] = 0.1 * d["latency"]
    d["itl_p50"] = d["latency"] / 1023
    fit.data = d
    return fit


def test_split_slo_keeps_the_mean_latency_apart_and_refuses_unmodelled_metrics(metrics_fit):
    assert split_slo(metrics_fit, None) == (None, {})
    assert split_slo(metrics_fit, 5.0) == (5.0, {"latency": 5.0})
    both = {"latency": 4.0, "ttft_p99": 1.0}
    assert split_slo(metrics_fit, both) == (4.0, both)
    with pytest.raises(ValueError, match=r"SLO on \['ttft_p50'\].*--metrics ttft_p50"):
        split_slo(metrics_fit, {"ttft_p50": 1.0})


def test_curves_band_the_median_and_the_predictive_band_is_wider(metrics_fit):
    curves = metric_curves(metrics_fit, ARM, np.linspace(0, 5, 6), closed=False)
    assert set(curves.metric) == set(SHARES) and set(curves.k) == {0, 6}
    assert curves.attrs["load"] == "rps"
    assert (curves.lo <= curves["median"]).all() and (curves["median"] <= curves.hi).all()
    assert (curves.pred_hi - curves.pred_lo >= curves.hi - curves.lo).all()
    for _, t in curves.groupby(["metric", "k"]):  # every metric rises with load
        assert np.all(np.diff(t["median"]) > 0)


def test_points_are_the_arms_workload_rows(metrics_fit):
    pts = metric_points(metrics_fit, ARM, closed=False)
    assert set(pts.k) == {0, 6} and {"load", "ttft_p99", "itl_p50"} <= set(pts)
    d = metrics_fit.data
    sweep = (d.k == 6) & (d.alpha == 0.8)  # the arm's sweep, not k = 6 at alpha 0.6
    assert len(pts) == (d.k == 0).sum() + sweep.sum()


def test_units_and_titles_read_as_people_write_them():
    assert metric_title("ttft_p99") == "TTFT p99"
    assert metric_title("itl").startswith("ITL") and metric_title("itl").endswith("mean")
    assert seconds_text(0.0123) == "12.3 ms" and seconds_text(2.5) == "2.5 s"
    assert "saturated" in seconds_text(np.inf)


def test_figure_has_a_panel_per_metric_with_slo_line_units_and_log_axis(metrics_fit):
    curves = metric_curves(metrics_fit, ARM, np.geomspace(1, 256, 12), closed=True)
    pts = metric_points(metrics_fit, ARM, closed=False).assign(load=lambda d: d.load + 1)
    fig = plot_metrics(curves, pts, slo={"ttft_p99": 1.5}, k=6, measured=64, title="t")
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in axes] == ["TTFT p99", "ITL (time per output token) p50"]
    assert axes[0].get_ylabel().endswith("(s)") and axes[1].get_ylabel().endswith("(ms)")
    assert axes[0].get_xscale() == "log" and "streams" in axes[0].get_xlabel()
    slo_lines = [ln for ln in axes[0].get_lines() if ln.get_label() == "SLO on that metric"]
    assert len(slo_lines) == 1 and slo_lines[0].get_ydata()[0] == pytest.approx(1.5)
    assert not [ln for ln in axes[1].get_lines() if ln.get_label() == "SLO on that metric"]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "dense: measured" in legend and any("predictive" in t for t in legend)


def test_report_with_metric_slos_draws_the_figure_and_writes_the_summary(metrics_fit, tmp_path):
    slo = {"latency": 3.0, "ttft_p99": 1.0, "itl_p50": 0.004}
    head = report.write_report(metrics_fit, tmp_path, arm=ARM, slo=slo)
    assert head.slo == 3.0  # the headline keeps the mean-latency SLO
    img = mpimg.imread(tmp_path / METRIC_FIGURE)
    assert img.shape[1] > 1000 and img.std() > 0.01
    summary = (tmp_path / "summary.md").read_text()
    assert f"![{METRIC_FIGURE}]({METRIC_FIGURE})" in summary and "## Modelled metrics" in summary
    assert "TTFT p99 (`ttft_p99`): dense at" in summary and "measured" in summary
    assert "Capacity under all these SLOs at once (latency ≤ 3 s, ttft_p99 ≤ 1 s" in summary
    assert (tmp_path / "metrics.csv").exists()


def test_report_without_metrics_has_no_metric_figure(tmp_path):
    fit = DrawsFit()
    fit.data, fit.model_name = law_rows(fit), "stub"
    report.write_report(fit, tmp_path, slo={"latency": 3.0})
    assert not (tmp_path / METRIC_FIGURE).exists()
    assert "Modelled metrics" not in (tmp_path / "summary.md").read_text()
    with pytest.raises(ValueError, match="models the mean latency only"):
        report.write_report(fit, tmp_path / "x", slo={"ttft_p99": 1.0})


@pytest.mark.slow
def test_report_of_a_real_fit_with_metrics(tmp_path):
    from specbayes.cli import main

    fit = tmp_path / "fit.nc"
    assert main(["fit", str(REAL), "--metrics", "ttft_p50,ttft_p99,itl_p50", "--out", str(fit),
                 "--quiet"]) == 0  # fmt: skip
    out = tmp_path / "report"
    assert main(["report", str(fit), "--out", str(out), "--slo", "ttft_p99=1,itl_p50=0.012"]) == 0
    assert mpimg.imread(out / METRIC_FIGURE).std() > 0.01
    summary = (out / "summary.md").read_text()
    for name in ("ttft_p50", "ttft_p99", "itl_p50"):
        assert f"(`{name}`): dense at N = " in summary
    assert "Capacity under all these SLOs at once (ttft_p99 ≤ 1 s, itl_p50 ≤ 12 ms" in summary


def test_the_measured_sd_sweep_keeps_its_synchronous_point_and_every_rate():
    """A GuideLLM sweep's closed-loop N = 1 point and its open-loop rates are one
    configuration: all its rows are the arm's points (their alpha means differ in the last
    bit: 0.7 vs 0.7000000000000001)."""
    from specbayes.report_metrics import _nearest_sweep

    base = "v|d|h|c|k=5|alpha=0.7"
    sd = pd.DataFrame(
        {
            "alpha": [0.7] * 9 + [0.8],
            "sweep": [f"{base}|closed"] + [f"{base}|open"] * 8 + ["v|d|h|c|k=5|alpha=0.8|open"],
        }
    )
    assert _nearest_sweep(sd, 0.7).tolist() == [True] * 9 + [False]
