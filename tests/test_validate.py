"""Leave-n-out folds, held-out scores and degenerate folds."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from test_baseline import synthetic

from specbayes import validate


def test_folds_hold_out_n_cells_per_group_and_skip_small_groups():
    df = synthetic()
    folds, skipped = validate.make_folds(df, n=2, repeats=10, seed=0)
    assert len(folds) == 6  # C(4, 2) subsets, all of them since fewer than repeats
    for f in folds:
        held = df[f.mask(df)]
        assert held.cell.nunique() == 2
    assert len({f.held_out for f in folds}) == 6
    folds, skipped = validate.make_folds(df, n=4, repeats=3)
    assert folds == [] and "only 4 cell(s)" in skipped.reason.item()


def test_heldout_scores_calibrated_predictive():
    rng = np.random.default_rng(0)
    mu = np.exp(rng.normal(0, 1, 500))
    pred = mu[None, :] * np.exp(0.1 * rng.standard_normal((2000, 500)))
    y = mu * np.exp(0.1 * rng.standard_normal(500))
    ll = -0.5 * ((np.log(y) - np.log(mu)) / 0.1) ** 2 - np.log(0.1 * np.sqrt(2 * np.pi) * y)
    s = validate.heldout_scores(y, mu, pred, np.tile(ll, (4, 1)))
    assert s["cov90"] == pytest.approx(0.9, abs=0.04)
    assert s["cov50"] == pytest.approx(0.5, abs=0.06)
    assert s["r2_log"] > 0.95
    assert s["elpd"] == pytest.approx(ll.sum())
    assert np.histogram(s["pit"], bins=5, range=(0, 1))[0].min() > 60


def test_rows_near_capacity_are_scored_by_the_median_and_saturated_points_counted():
    # 100 draws per row; row 1 has a few draws past capacity (mu = inf), row 3 most of them
    rng = np.random.default_rng(1)
    y = np.array([1.0, 2.0, 3.0, 8.0, 5.0])
    mu = y[None, :] * np.exp(0.01 * rng.standard_normal((100, 5)))
    mu[:5, 1] = np.inf
    mu[:60, 3] = np.inf
    s = validate.heldout_scores(y, mu)
    point = validate.point_prediction(mu)
    assert np.isfinite(point[1]) and point[1] == pytest.approx(2.0, rel=0.03)
    assert np.isinf(point[3])
    assert s["scored_rows"] == 4 and s["saturated_rows"] == 1
    assert s["r2"] > 0.99  # the finite rows are predicted well; the saturated one is counted
    # a point prediction (the baseline's) is used as is
    assert validate.point_prediction(y).tolist() == y.tolist()


def test_baseline_leave_n_out_and_degenerate_groups():
    df = synthetic(noise=0.02)
    one_cell = df[df.cell == "256x256"].assign(verifier="Lonely")
    res = validate.leave_n_out(
        pd.concat([df, one_cell], ignore_index=True),
        n=(1, 2),
        repeats=2,
        methods=("baseline",),
        n_jobs=1,
    )
    assert set(res.overall.n) == {1, 2}
    assert (res.overall.r2_log > 0.95).all()
    assert (res.skipped.verifier == "Lonely").sum() == 2


def test_heldout_figure_places_open_intervals_and_counts_saturated_points(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from specbayes.plots import plot_heldout

    preds = pd.DataFrame(
        {
            "latency": [1.0, 2.0, 4.0, 6.0],
            "predicted": [1.1, 1.9, 4.2, np.inf],
            "lo90": [0.9, 1.5, 3.0, 5.0],
            "hi90": [1.3, 2.4, np.inf, np.inf],
            "method": "specbayes dense",
        }
    )
    fig = plot_heldout(preds)
    ax = fig.axes[0]
    low, high = ax.get_ylim()
    assert np.isfinite([low, high]).all() and high == pytest.approx(6.0 * 1.5)
    assert "1 rows predicted saturated" in ax.get_legend().get_texts()[0].get_text()
    fig.savefig(tmp_path / "heldout.png")


def test_leave_n_out_shows_fold_progress(capsys):
    from specbayes.model.simulate import simulate_sweeps

    df, _ = simulate_sweeps(seed=3)
    validate.leave_n_out(df, n=1, repeats=2, methods=("baseline",), n_jobs=1, progress=True)
    err = capsys.readouterr().err
    assert "folds" in err and "2/2" in err


# -- per-point metrics (issue 45) ---------------------------------------------------------------
def _metric_draws(n_rows: int, seed: int = 0):
    """Calibrated lognormal draws of a metric: expected (sample, row), predictive, measured."""
    rng = np.random.default_rng(seed)
    m = np.exp(rng.normal(-2, 1, n_rows))
    expected = m[None, :] * np.exp(0.01 * rng.standard_normal((1000, n_rows)))
    predictive = m[None, :] * np.exp(0.2 * rng.standard_normal((1000, n_rows)))
    y = m * np.exp(0.2 * rng.standard_normal(n_rows))
    return expected, predictive, y


def test_metric_scores_of_calibrated_draws_and_rows_without_the_metric_skipped():
    expected, predictive, y = _metric_draws(400)
    y[:3] = [np.nan, 0.0, -1.0]  # missing / not positive: skipped for this metric only
    test = pd.DataFrame({"ttft_p99": y, "itl_p50": np.full(400, 0.01)})
    preds = validate.metric_predictions(test, "ttft_p99", expected, predictive)
    assert preds["row"].tolist() == list(range(3, 400))
    assert {"observed", "predicted", "lo50", "hi50", "lo90", "hi90"} <= set(preds)
    s = validate.metric_scores(preds)
    assert s["rows"] == 397
    assert s["cov90"] == pytest.approx(0.9, abs=0.04)
    assert s["cov50"] == pytest.approx(0.5, abs=0.07)
    assert s["rel_err"] == pytest.approx(0.16, abs=0.03)  # E|exp(0.2 z) - 1|
    assert s["median_ratio"] == pytest.approx(1.0, abs=0.03)
    other = validate.metric_predictions(test, "itl_p50", expected, predictive)
    assert len(other) == 400


def test_metric_scores_of_a_metric_no_row_measures():
    expected, predictive, _ = _metric_draws(5)
    preds = validate.metric_predictions(pd.DataFrame({"k": range(5)}), "ttft_p99", expected,
                                        predictive)  # fmt: skip
    assert preds.empty
    s = validate.metric_scores(preds)
    assert s["rows"] == 0 and np.isnan(s["cov90"]) and np.isnan(s["rel_err"])


def test_metric_scores_count_a_saturated_prediction_as_a_miss_not_an_error():
    expected, predictive, y = _metric_draws(4, seed=2)
    expected[:, 0] = np.inf
    predictive[:, 0] = np.inf
    preds = validate.metric_predictions(pd.DataFrame({"itl_p50": y}), "itl_p50", expected,
                                        predictive)  # fmt: skip
    s = validate.metric_scores(preds)
    assert s["rows"] == 4 and s["cov90"] <= 0.75  # row 0 is outside its (infinite) interval
    assert np.isfinite(s["rel_err"])  # over the three finite medians


def test_leave_n_out_rejects_an_unknown_metric_before_any_fit():
    with pytest.raises(ValueError, match="unknown metric"):
        validate.leave_n_out(synthetic(), n=1, metrics=("ttft_p999",))


def test_validate_help_lists_metrics():
    import argparse

    from specbayes.commands import validate as cmd

    parser = argparse.ArgumentParser()
    cmd.register(parser.add_subparsers())
    args = parser.parse_args(["validate", "x.csv", "--out", "v", "--metrics", "ttft_p99,itl_p50"])
    assert args.metrics == ("ttft_p99", "itl_p50")
    assert parser.parse_args(["validate", "x.csv", "--out", "v"]).metrics is None


@pytest.mark.slow
def test_heldout_metric_scores_on_the_real_sweeps():
    """data/real, every other load point of each sweep held out (its two cells are one
    anchored workload each: no cell can be left out): every metric scored."""
    from pathlib import Path

    from specbayes.data import read_sweeps, validate_sweeps
    from specbayes.fit import fit

    real = Path(__file__).parent.parent / "data/real/speculators_qwen3.8-27b_b200_sweeps.csv"
    data = validate_sweeps(read_sweeps(real)).data.reset_index(drop=True)
    rank = data.groupby(["cell", "drafter"])["concurrency"].rank(method="first").to_numpy()
    held = rank % 2 == 0
    metrics = ("ttft_p50", "ttft_p99", "itl_p50")
    result = fit(data[~held], "sd", metrics=metrics, progress=False,
                 sampler_config=dict(draws=300, tune=300))  # fmt: skip
    test = data[held & ~data["saturated"].to_numpy(bool)].reset_index(drop=True)
    preds = validate.heldout_metrics(result, test)
    assert set(preds.metric) == set(metrics) and len(preds) == 3 * len(test)
    for name in metrics:
        s = validate.metric_scores(preds[preds.metric == name])
        assert s["rows"] == len(test) == 22
        assert 0.7 <= s["cov90"] <= 1.0, (name, s)
        assert 0.5 <= s["median_ratio"] <= 2.0, (name, s)


class _FakeMetricFit:
    """A fit stand-in (no sampling): draws around the measured values, for the fold plumbing."""

    metrics = ("ttft_p99",)

    def __init__(self, train, **kw):
        assert kw["metrics"] == self.metrics and kw["model"] == "sd"
        self.rng = np.random.default_rng(0)

    def _draws(self, rows, col, scale):
        y = np.nan_to_num(rows[col].to_numpy(float), nan=1.0)
        noise = np.exp(scale * self.rng.standard_normal((400, len(y))))
        return pd.DataFrame(y[None, :] * noise)

    def mean_latency(self, rows, **kw):
        return self._draws(rows, "latency", 0.01)

    predict = mean_latency

    def log_likelihood(self, rows, **kw):
        return pd.DataFrame(np.zeros((400, len(rows))))

    def metric(self, rows, name, predictive=False, **kw):
        return self._draws(rows, name, 0.2 if predictive else 0.01)

    def diagnostics(self):
        return pd.DataFrame({"r_hat": [1.0], "ess_bulk": [1000.0]})


def test_leave_n_out_scores_every_metric_per_fold_without_sampling(monkeypatch):
    import specbayes.fit

    monkeypatch.setattr(specbayes.fit, "fit", _FakeMetricFit)
    df = synthetic(noise=0.02)
    df["ttft_p99"] = 0.1 * df["latency"]
    df.loc[df.index[::5], "ttft_p99"] = np.nan  # not measured there: skipped for the metric
    res = validate.leave_n_out(df, model="sd", n=1, repeats=2, methods=("specbayes",),
                               metrics=("ttft_p99",))  # fmt: skip
    held = sum(len(res.predictions[res.predictions.fold == f]) for f in res.folds.fold)
    (row,) = res.metric_overall.to_dict(orient="records")
    assert row["metric"] == "ttft_p99" and row["folds"] == 2
    assert 0 < row["rows"] < held  # the unmeasured rows are not scored
    assert row["cov90"] > 0.9 and row["rel_err"] < 0.05
    assert len(res.metric_folds) == 2
    assert {"cell", "fold", "observed", "lo90", "hi90"} <= set(res.metric_predictions)
