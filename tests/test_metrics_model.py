"""The per-point metric model (``specbayes.model.metrics``), without sampling: names
checked, the long table, the one formula in graph and NumPy, the prior predictive, and the
shares of configurations a fit never saw."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pymc as pm
import pytest
import xarray as xr

from specbayes.model import build_design, build_model
from specbayes.model.metrics import (
    METRIC_COLUMNS,
    check_metrics,
    excess_scale,
    exgauss_draws,
    log_batch,
    log_exgauss,
    log_metric_density,
    log_metric_mean,
    log_width,
    long_table,
    share_draws,
)

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import small_sweeps  # noqa: E402

METRICS = ("ttft_p50", "ttft_p99", "itl_p50")


@pytest.fixture(scope="module")
def real_case():
    return small_sweeps.real_case("HumanEval", "dspark")


def test_metric_names_checked():
    assert check_metrics("ttft_p99") == ("ttft_p99",)
    assert check_metrics(["ttft_p99", "itl", "ttft_p99"]) == ("ttft_p99", "itl")
    assert "latency" not in METRIC_COLUMNS and "latency_p95" in METRIC_COLUMNS
    with pytest.raises(ValueError, match=r"unknown metric.*tpot_p99"):
        check_metrics(["tpot_p99"])


def test_long_table_keeps_observed_rows_only():
    data = pd.DataFrame(
        {"ttft_p99": [0.1, np.nan, 0.3], "itl_p50": [0.01, 0.02, 0.03], "decode": [1, 5, 9]}
    )
    table = long_table(data, ("ttft_p99", "itl_p50"))
    # ttft: rows 0 and 2; itl: not the one-token output of row 0
    assert table[["metric", "obs"]].values.tolist() == [[0, 0], [0, 2], [1, 1], [1, 2]]
    # per token: TTFT's g (a step's share), ITL's g - 1 after the first
    np.testing.assert_allclose(table["log_s"], [0, np.log(9), np.log(4), np.log(8)])
    assert long_table(data.assign(latency_p95=1.0), ("latency_p95",))["log_s"].eq(0).all()


def test_a_percentile_of_few_requests_is_noisier():
    n = np.array([50.0, 1000.0, np.nan])
    p99, p50 = np.exp(log_width("ttft_p99", n)), np.exp(log_width("ttft_p50", n))
    np.testing.assert_allclose(p99, np.sqrt(1 + 1 / np.array([0.5, 10.0, np.inf])))
    assert p50[0] < 1.02 and p99[0] > 1.7  # the median barely moves; the p99 of 50 does
    assert log_width("itl", None) == 0.0  # no request counts: the metric's own scale


def test_the_excess_of_a_percentile_shrinks_with_the_requests_beyond_it():
    n = np.array([72.0, 926.0, np.nan])
    np.testing.assert_allclose(excess_scale("ttft_p99", n), 1 / (1 + np.array([0.72, 9.26, 0])))
    assert excess_scale("ttft_p95", 100.0) == pytest.approx(1 / 6)
    assert excess_scale("ttft_p99", None) == 1.0  # no count: a statistic of one request
    # a median or a mean has hundreds of requests on either side: no excess
    np.testing.assert_array_equal(excess_scale("itl_p50", n), 0.0)
    assert excess_scale("ttft", None) == 0.0


def test_excess_density_is_the_exponentially_modified_gaussian():
    import pytensor
    import pytensor.tensor as pt
    from scipy import stats

    y, mu, sigma = np.linspace(-1.0, 3.0, 41), 0.2, 0.1
    for nu in (1e-4, 0.01, 0.3, 2.0):  # no switch to the Normal at small nu
        want = stats.exponnorm.logpdf(y, K=nu / sigma, loc=mu, scale=sigma)
        np.testing.assert_allclose(log_exgauss(y, mu, sigma, nu), want, rtol=1e-9, atol=1e-9)
        v = pt.dvector()
        graph = pytensor.function([v], log_exgauss(v, mu, sigma, nu, xp=pt))
        np.testing.assert_allclose(graph(y), want, rtol=1e-7, atol=1e-7)
    draws = exgauss_draws(np.full(200_000, mu), sigma, 0.3, np.random.default_rng(0))
    assert np.mean(draws) == pytest.approx(mu + 0.3, abs=0.01)
    assert np.var(draws) == pytest.approx(sigma**2 + 0.3**2, rel=0.03)


def test_excess_form_is_one_density_in_the_graph_and_the_stored_groups(real_case):
    design = build_design(real_case.table)
    model = build_model(design, metrics=METRICS, priors={"metric_excess": 1.0})
    assert "metric_excess" in model.named_vars
    prior = pm.sample_prior_predictive(20, model=model, random_seed=1)
    y = prior.prior_predictive["log_metric"].values
    assert np.mean(np.isfinite(y).all(axis=-1)) >= 0.9
    # the model's pointwise log density of the observed metrics is log_exgauss at the
    # same parameters
    point = model.initial_point()
    rv = model["log_metric"]
    kw = dict(inputs=model.value_vars, on_unused_input="ignore")
    got = np.asarray(model.compile_fn(model.logp(vars=[rv], sum=False), **kw)(point)).ravel()
    # the CustomDist's inputs: size, then (loc, scale, excess), then its generators
    params = model.replace_rvs_by_values(list(rv.owner.inputs[1:4]))
    loc, sd, excess = model.compile_fn(params, **kw)(point)
    obs = model.rvs_to_values[rv].data
    share = long_table(design.data, METRICS)["excess"].to_numpy()
    assert (share == 0).sum() == 2 * len(design.data) and (share > 0).any()  # p50s: Normal
    want = log_metric_density(obs, loc, sd, excess, share)
    np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-7)


def test_formula_is_linear_in_the_batch():
    c1, c2, n = 2.0, 0.05, np.array([1.0, 8.0, 64.0])
    got = np.exp(
        log_metric_mean(np.log(c1), np.log(c2), log_batch(0.0, n, True), np.log(0.1),
                        np.log(0.4), np.log(3.0))
    )  # fmt: skip
    np.testing.assert_allclose(got, (0.1 * c1 + 0.4 * c2 * n) / 3.0)
    # open loop: the batch is Little's law with the law's mean latency e^mu
    mu = np.log(4.0)
    np.testing.assert_allclose(log_batch(mu, 2.0, False), np.log(8.0))


def test_model_with_metrics_has_their_likelihood_and_prior_predictive(real_case):
    design = build_design(real_case.table)
    model = build_model(design, metrics=METRICS)
    assert {v.name for v in model.observed_RVs} == {"log_latency", "log_metric"}
    assert model.named_vars_to_dims["metric_log_share"] == ("metric_name", "metric_term", "sweep")
    rows = real_case.table.data
    assert len(model.coords["metric_obs"]) == sum(rows[m].notna().sum() for m in METRICS)
    prior = pm.sample_prior_predictive(20, model=model, random_seed=1)
    y = prior.prior_predictive["log_metric"].values
    assert np.mean(np.isfinite(y).all(axis=-1)) >= 0.9
    # the metrics share the latency model's costs: nothing of it is duplicated
    assert "log_c1" in model.named_vars and model.named_vars_to_dims["log_c1"] == ("sweep",)


@pytest.mark.slow  # lowering the metric model to JAX: ~20 s
def test_jax_gradient_of_the_metric_model_is_pytensors_at_the_initial_point(real_case):
    """What NumPyro differentiates (``fit(..., metrics=, sampler_config={"sampler":
    "numpyro"})``) is finite and PyTensor's symbolic gradient at the initial point, on a
    closed-loop real case with metrics: the metric likelihood's own terms, and the SD ratio
    ``log_c2_ratio`` whose upper bound is infinite there — PyMC's interval transform made its
    JAX gradient NaN (:class:`specbayes.model.truncated.Interval`). ``test_parallel.py``
    checks the same on the simulated open-loop graph without metrics."""
    pytest.importorskip("numpyro")
    from jax_gradient import assert_jax_gradient_is_pymcs

    from specbayes import parallel

    parallel.jax_chain_method(1)  # registers the erfcx lowering of the sweep truncation
    assert_jax_gradient_is_pymcs(build_model(build_design(real_case.table), metrics=METRICS))


def test_model_refuses_a_metric_the_rows_lack(real_case):
    design = build_design(real_case.table)
    with pytest.raises(ValueError, match=r"no fitted row reports \['latency_p99'\]"):
        build_model(design, metrics=("latency_p99",))


def test_shares_of_an_unseen_configuration_come_from_its_arm_level():
    n = 4000
    post = xr.Dataset(
        {
            "metric_log_share": (("sample", "m", "t", "s"), np.full((n, 1, 2, 2), -1.0)),
            "metric_share_mu": (
                ("sample", "m", "arm", "t"),
                np.array([[[[0.0, 0.0], [2.0, 3.0]]]]).repeat(n, 0),
            ),
        }
    )
    rng = np.random.default_rng(0)
    out = share_draws(
        post, ("ttft_p99",), "ttft_p99", [1, -1, -1], [0, 1, 1], ["a", "b", "b"], rng, 0.5
    )
    assert out.shape == (n, 2, 3)
    np.testing.assert_array_equal(out[:, :, 0], -1.0)  # a fitted sweep: its own shares
    np.testing.assert_array_equal(out[:, :, 1], out[:, :, 2])  # one configuration, one draw
    np.testing.assert_allclose(out[:, :, 1].mean(0), [2.0, 3.0], atol=0.05)  # the SD level
    np.testing.assert_allclose(out[:, :, 1].std(0), [0.5, 0.5], atol=0.05)


@pytest.mark.slow
@pytest.mark.parametrize("priors", [None, {"metric_excess": 10.0}], ids=["student", "excess"])
def test_metric_fit_on_the_real_sweeps_is_healthy_and_consistent(tmp_path, priors):
    """The B200 sweeps with their median/p99 TTFT and median ITL: healthy at the defaults
    (and with the tail excess), the stored predictive group is the method's density, and a
    loaded fit answers alike."""
    import arviz as az

    from specbayes.data import read_sweeps
    from specbayes.fit import fit, load_fit

    table = read_sweeps(REPO / "data/real/speculators_qwen3.8-27b_b200_sweeps.csv")
    result = fit(table, "sd", metrics=METRICS, priors=priors, progress=False)
    summary = result.summary()
    assert summary["healthy"], summary
    loaded = load_fit(result.save(tmp_path / "fit.nc"))
    assert loaded.metrics == METRICS
    rows = result.data
    for name in METRICS:
        a = result.metric(rows, name).values
        np.testing.assert_allclose(loaded.metric(rows, name).values, a, rtol=1e-6)
        pred = loaded.metric(rows, name, predictive=True).values
        lo, hi = np.quantile(pred, [0.05, 0.95], axis=0)
        y = rows[name].to_numpy(float)
        assert 0.8 <= np.mean((y >= lo) & (y <= hi)) <= 1.0, name
    loo = az.loo(loaded.idata, var_name="log_metric")
    assert np.isfinite(loo.elpd_loo)
    stored = loaded.idata.posterior_predictive["log_metric"].values
    assert np.isfinite(stored).all()


def test_a_row_takes_its_sweep_or_the_nearest_alpha_of_its_workload_drafter_and_k():
    from specbayes.model.metrics import nearest_sweep

    sweeps = ["v|d|h|c|k=3|alpha=0.6", "v|d|h|c|k=3|alpha=0.8", "v|none|h|c|k=0|alpha=-"]
    configs = ["v|d|h|c|k=3|alpha=0.8", "v|d|h|c|k=3|alpha=0.65", "v|d|h|c|k=5|alpha=0.8",
               "v|none|h|c|k=0|alpha=-"]  # fmt: skip
    got = nearest_sweep(sweeps, np.array([0.6, 0.8, np.nan]), configs, [0.8, 0.65, 0.8, np.nan])
    assert got.tolist() == [1, 0, -1, 2]
