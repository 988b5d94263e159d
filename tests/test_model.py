"""Structure of the next model core (``specbayes.model``), without sampling.

Shapes, dims and coordinates; the prior predictive is finite; the graph's expected latency
equals :mod:`specbayes.laws` at a point; the anchored structure's derived coefficients give
back the sweep costs through :func:`specbayes.laws.effective_costs`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pymc as pm
import pytest

from specbayes import laws
from specbayes.data import validate_sweeps
from specbayes.model import build_design, build_model, merge_priors

REPO = Path(__file__).resolve().parents[1]
#: The sampled form of the sweeps (the structure tests below read its per-sweep axes; the
#: default integrates them out where it can, tests/test_marginal.py).
SAMPLED = {"sweeps": "sampled"}
sys.path.insert(0, str(REPO / "benchmarks"))

import small_sweeps  # noqa: E402


@pytest.fixture(scope="module")
def real_case():
    return small_sweeps.real_case("HumanEval", "dspark")


@pytest.fixture(scope="module")
def demo_subset():
    df = pd.read_parquet(REPO / "data/demo.parquet")
    df = df[(df["verifier"] == "Llama-3.1-8B") & df["cell"].isin(["256x256", "1024x1024"])]
    return validate_sweeps(df.reset_index(drop=True))


def _evaluate(model: pm.Model, names: list[str], seed: int) -> list[np.ndarray]:
    """Values of named variables at a few prior draws (draw axis first)."""
    prior = pm.sample_prior_predictive(3, model=model, var_names=names, random_seed=seed).prior
    return [prior[n].values[0] for n in names]


def test_anchored_design_dims(real_case):
    design = build_design(real_case.table)
    assert design.structure == "anchored"
    model = build_model(design)
    assert len(model.coords["sweep"]) == 2 and len(model.coords["obs"]) == 8
    assert model.named_vars_to_dims["mu"] == ("obs",)
    assert model.named_vars_to_dims["coefficients"] == ("sd_sweep", "coef")
    assert {v.name for v in model.free_RVs} == {
        "log_c1_dense",
        "log_c2_dense",
        "log_c1_ratio",
        "log_c2_ratio",
        "share_logit",
        "tokens_logit",
        "noise_growth",
    }


def test_scaled_softplus_axis_is_a_bijection_with_its_jacobian():
    """:class:`SoftplusTransform` at scale a: x = a softplus(u), log |dx/du| = log a + log
    sigmoid(u); forward inverts backward."""
    from specbayes.model.transforms import SoftplusTransform

    axis = SoftplusTransform(np.array([1e-3, 2e-3]))
    u = np.array([-8.0, 1.5])
    x = axis.backward(u).eval()
    np.testing.assert_allclose(x, [1e-3, 2e-3] * np.log1p(np.exp(u)), rtol=1e-12)
    np.testing.assert_allclose(axis.forward(x).eval(), u, rtol=1e-9)
    jac = np.log([1e-3, 2e-3]) - np.log1p(np.exp(-u))
    np.testing.assert_allclose(axis.log_jac_det(u).eval(), jac, rtol=1e-12)


def test_ratio_axis_is_a_bijection_above_its_floor_with_its_jacobian():
    """:class:`LowerSoftplus`: x = l + a softplus(u/a) above the floor l, about l + u a few a
    above it; forward inverts backward; log_jac_det = log dx/du."""
    import pytensor
    import pytensor.tensor as pt

    from specbayes.model.transforms import LowerSoftplus

    axis = LowerSoftplus(np.array([-0.9, -0.4, 0.0]), 1.0)
    u = np.array([-12.0, 0.3, 6.0])
    x = axis.backward(pt.as_tensor(u)).eval()
    np.testing.assert_allclose(x, np.array([-0.9, -0.4, 0.0]) + np.log1p(np.exp(u)), rtol=1e-12)
    assert x[0] > -0.9 and abs(x[2] - 6.0) < 0.01  # above the floor; linear far above it
    np.testing.assert_allclose(axis.forward(pt.as_tensor(x)).eval(), u, rtol=1e-6)
    v = pt.dscalar()
    one = LowerSoftplus(-0.4, 1.0)
    slope = pytensor.function([v], pytensor.grad(one.backward(v), v))
    expect = np.log([slope(value) for value in u])
    np.testing.assert_allclose(one.log_jac_det(pt.as_tensor(u)).eval(), expect, atol=1e-9)


def test_closed_loop_ratios_move_on_the_ratio_axis(real_case):
    """A closed-loop anchored model samples both SD/dense ratios on :class:`LowerSoftplus`'
    axis at the floor q/E_max (``graph.anchored_costs``): no bent ridge against the dense
    cost; the prior is PyMC's truncated Normal either way."""
    from specbayes.model.transforms import LowerSoftplus

    design = build_design(real_case.table)
    model = build_model(design)
    sd = design.sd
    dense = design.unit_dense[design.sweep_unit[sd]]
    floor = design.decode[sd] / design.decode[dense] / design.e_max[sd]
    for name in ("log_c1_ratio", "log_c2_ratio"):
        axis = model.rvs_to_transforms[model[name]]
        assert isinstance(axis, LowerSoftplus)
        np.testing.assert_allclose(axis.lower, np.log(floor))
    assert np.isfinite(model.compile_logp()(model.initial_point()))


def test_share_axis_is_a_bijection_onto_the_unit_interval_with_its_jacobian():
    """:class:`ShareTransform`: w = eps softplus(v/eps) - eps softplus((v - 1)/eps) in (0, 1),
    about the identity a few eps inside the ends; forward inverts backward; log_jac_det =
    log dw/dv."""
    import pytensor
    import pytensor.tensor as pt

    from specbayes.model.transforms import ShareTransform

    axis = ShareTransform(0.01)
    v = np.array([-0.2, -0.01, 0.05, 0.5, 0.95, 1.01, 1.2])
    w = axis.backward(pt.as_tensor(v)).eval()
    assert np.all((w > 0) & (w < 1)) and np.all(np.diff(w) > 0)
    np.testing.assert_allclose(w[2:5], v[2:5], atol=1e-3)  # the identity inside
    np.testing.assert_allclose(axis.forward(pt.as_tensor(w)).eval(), v, atol=1e-9)
    x = pt.dscalar()
    slope = pytensor.function([x], pytensor.grad(axis.backward(x), x))
    expect = np.log([slope(value) for value in v])
    np.testing.assert_allclose(axis.log_jac_det(pt.as_tensor(v)).eval(), expect, atol=1e-9)


def test_share_axis_keeps_its_precision_far_below_the_lower_end():
    """Far outside (0, 1) on the sampled axis the share is tiny but exact: eps softplus(v/eps)
    - eps softplus((v - 1)/eps) to relative 1e-12 down to w ~ 1e-300 (written as v + eps
    softplus(-v/eps) - ... it cancelled to rounding noise below w ~ 1e-17, where a paper
    fold's L-BFGS start stalled; ``benchmarks/model_core.md``, 2026-12-06 23:45); and
    w(v) = 1 - w(1 - v)."""
    import pytensor.tensor as pt

    from specbayes.model.transforms import ShareTransform

    eps = 0.01
    axis = ShareTransform(eps)
    v = np.array([-6.9, -3.0, -0.38, -0.2, -0.05, 0.2, 0.45])

    def softplus(x):
        return np.log1p(np.exp(x))

    exact = eps * softplus(v / eps) - eps * softplus((v - 1.0) / eps)
    w = axis.backward(pt.as_tensor(v)).eval()
    np.testing.assert_allclose(w, exact, rtol=1e-12)
    mirror = axis.backward(pt.as_tensor(1.0 - v)).eval()
    np.testing.assert_allclose(mirror[v > -0.1], 1.0 - w[v > -0.1], rtol=1e-12)


def test_c1_deviations_have_their_scale_integrated_out(demo_subset):
    """Pooled, by default (``c1_dev``): each sweep's log C1 is its decomposition plus a
    deviation whose scale is integrated out, sampled centred (log C1 itself) by default or
    as the deviation (no sampled ``tau_c1``; sampled where ``c1_dev`` is
    None); the deviations' density is the collapsed one, and
    ``tau`` is drawn from its exact conditional IG(a + S/2, b + sum d^2 / 2) after sampling."""
    import arviz as az
    import xarray as xr

    from specbayes.model.likelihood import collapsed_logp
    from specbayes.model.sampling import add_collapsed

    pr = merge_priors(None)
    # centred by default: log C1 of each sweep is sampled, its deviation derived
    centred = build_model(build_design(demo_subset), SAMPLED)
    names = {v.name for v in centred.free_RVs}
    assert {"log_c1_sweep", "trend_logit", "trend_c2p"} <= names and "tau_c1" not in names
    assert "log_c1_dev" in centred.named_vars and "log_c1_dev" not in names
    point = centred.initial_point()
    (dev_of_values,) = centred.replace_rvs_by_values([centred["log_c1_dev"]])
    dev_c = centred.compile_fn(dev_of_values, inputs=centred.value_vars, on_unused_input="ignore")(
        point
    )
    a, b = pr["c1_dev"]["alpha"], pr["c1_dev"]["beta"]
    zeros = np.zeros(len(dev_c))
    logp_c = centred.compile_logp(vars=[centred["log_c1_sweep"]], sum=True)(point)
    expect_c = float(collapsed_logp(dev_c, zeros, zeros, a, b).eval())
    np.testing.assert_allclose(logp_c, expect_c, rtol=1e-7)

    model = build_model(build_design(demo_subset), {**SAMPLED, "centred_sweeps": {"C1": False}})
    assert "log_c1_dev" in {v.name for v in model.free_RVs}
    sampled = build_model(build_design(demo_subset), {**SAMPLED, "c1_dev": None, "share_axis": ()})
    assert {"tau_c1", "trend_logit"} <= {v.name for v in sampled.free_RVs}
    assert "trend_c2p" not in sampled.named_vars
    n = len(model.coords["sweep"])
    dev = np.random.default_rng(3).normal(0.0, 0.004, n)
    point = model.initial_point()
    point["log_c1_dev"] = dev
    logp = model.compile_logp(vars=[model["log_c1_dev"]], sum=True)(point)
    expect = float(collapsed_logp(dev, np.zeros(n), np.zeros(n), a, b).eval())
    np.testing.assert_allclose(logp, expect, rtol=1e-7)

    # tau from its conditional: E[tau^2] = (b + ss/2) / (a + S/2 - 1) for every draw
    draws = 4000
    post = pm.sample_prior_predictive(1, model=model, random_seed=1).prior.isel(draw=[0] * draws)
    post = post.assign(log_c1_dev=(("chain", "draw", "sweep"), np.tile(dev, (1, draws, 1))))
    idata = az.InferenceData(posterior=post.assign_coords(draw=np.arange(draws)))
    stats = xr.Dataset({"diverging": (("chain", "draw"), np.zeros((1, draws), bool))})
    idata.add_groups(sample_stats=stats)
    add_collapsed(idata, model, seed=2)
    tau = idata.posterior["tau"].values
    assert tau.shape == (1, draws, 2)
    np.testing.assert_allclose(tau[..., 1], pr["c2_jitter"])
    mean = (b + 0.5 * np.sum(dev**2)) / (a + 0.5 * n - 1.0)
    np.testing.assert_allclose(np.mean(tau[..., 0] ** 2), mean, rtol=0.05)


def test_pooled_design_dims(demo_subset):
    design = build_design(demo_subset)
    assert design.structure == "pooled"
    model = build_model(design)
    assert model.named_vars_to_dims["log_coef"] == ("unit", "coef_v")
    assert model.named_vars_to_dims["log_coef_draft"] == ("draft_unit", "coef_d")
    assert len(model.coords["unit"]) == 2 and len(model.coords["coef"]) == 6
    assert len(model.coords["draft_unit"]) == 2 and len(model.coords["draft_group"]) == 1
    # one fixed cost per speculative cycle per (verifier, GPU, drafter); off on request
    assert model.named_vars_to_dims["cycle_overhead"] == ("draft_group",)
    plain = build_model(design, priors={"cycle_overhead": None})
    assert "cycle_overhead" not in plain.named_vars
    # ... sampled on a softplus axis at the prior's median (linear above it), its prior kept
    axis = model.rvs_to_transforms[model["cycle_overhead"]]
    np.testing.assert_allclose(axis.scale, np.exp(merge_priors(None)["cycle_overhead"]["mu"]))
    assert "cycle_overhead_softplus__" in model.initial_point()
    # no cost per sequence of a cycle (c2c) where the GPU's attention packs the GQA group
    assert "spec_seq_overhead" not in model.named_vars
    # every configuration is one sweep: the synchronous point joins its open-loop rates
    assert (
        len(model.coords["sweep"])
        == demo_subset.data.groupby(["cell", "k", "alpha"], dropna=False).ngroups
    )


def test_prior_predictive_finite(real_case):
    model = build_model(build_design(real_case.table))
    pp = pm.sample_prior_predictive(200, model=model, random_seed=3)
    assert np.isfinite(pp.prior_predictive["log_latency"].values).all()
    assert np.isfinite(pp.prior["mu"].values).all()
    coefs = pp.prior["coefficients"].values
    assert (coefs > 0).all()


def test_prior_predictive_open_loop_finite(demo_subset):
    model = build_model(build_design(demo_subset), SAMPLED)
    pp = pm.sample_prior_predictive(100, model=model, random_seed=4)
    assert np.isfinite(pp.prior["mu"].values).mean() == 1.0


def test_graph_equals_laws_closed_loop(real_case):
    design = build_design(real_case.table)
    model = build_model(design)
    names = ["mu", "log_c1", "log_c2", "coefficients", "tokens_per_cycle"]
    mu, lc1, lc2, coefs, tokens = _evaluate(model, names, 1)
    c1, c2 = np.exp(lc1[:, design.obs_sweep]), np.exp(lc2[:, design.obs_sweep])
    expect = np.log(laws.closed_loop_latency(design.load, c1, c2))
    np.testing.assert_allclose(mu, expect, rtol=1e-10)
    # derived coefficients reproduce the SD sweep's costs through the cycle decomposition
    (s,) = design.sd
    k = design.k[s]
    alpha = laws.alpha_from_acceptance_length(tokens[:, 0], k)
    c1_eff, c2_eff = laws.effective_costs(*coefs[:, 0].T, design.decode[s], alpha, k)
    np.testing.assert_allclose(c1_eff, np.exp(lc1[:, s]), rtol=1e-8)
    np.testing.assert_allclose(c2_eff, np.exp(lc2[:, s]), rtol=1e-8)


def test_graph_equals_laws_pooled(demo_subset):
    design = build_design(demo_subset)
    model = build_model(design, SAMPLED)
    mu, lc1, lc2 = _evaluate(model, ["mu", "log_c1", "log_c2"], 2)
    c1, c2 = np.exp(lc1[:, design.obs_sweep]), np.exp(lc2[:, design.obs_sweep])
    expect = np.where(
        design.obs_closed,
        laws.closed_loop_latency(design.load, c1, c2),
        laws.latency(design.load, c1, c2),
    )
    np.testing.assert_allclose(mu, np.log(expect), rtol=1e-10)
    # every open-loop row is unsaturated at any draw: the wall is a prior bound
    assert np.isfinite(mu).all()


def test_collapsed_noise_matches_normal_mixture():
    """The collapsed density equals the Normal likelihood integrated over sigma^2 ~ IG(a, b)."""
    from scipy import integrate, stats

    from specbayes.model.likelihood import collapsed_logp

    y, mu, a, b = np.array([0.01, -0.02, 0.015]), np.zeros(3), 1.5, 2e-4
    log_w = np.array([0.0, 0.3, 0.7])  # row scales sigma * w_i (noise growing with load)

    def integrand(var):
        sd = np.sqrt(var) * np.exp(log_w)
        return np.prod(stats.norm.pdf(y, mu, sd)) * stats.invgamma.pdf(var, a, scale=b)

    parts = [integrate.quad(integrand, lo, hi, limit=200)[0] for lo, hi in ((0, 1e-3), (1e-3, 1.0))]
    expect = np.log(sum(parts))
    got = float(collapsed_logp(y, mu, log_w, a, b).eval())
    np.testing.assert_allclose(got, expect, rtol=1e-6)


def test_log_counts_reference_and_missing():
    from specbayes.model.design import log_counts

    rows = pd.DataFrame({"n_requests": [16.0, 100.0, np.nan, 625.0]})
    log_count, ref = log_counts(rows)
    assert ref == pytest.approx(100.0)  # geometric mean of the known counts
    np.testing.assert_allclose(log_count, np.log([0.16, 1.0, 1.0, 6.25]), atol=1e-12)
    # a given reference (a fitted design's) and a table without counts
    np.testing.assert_allclose(log_counts(rows, 16.0)[0], np.log([1.0, 6.25, 1.0, 39.0625]))
    assert log_counts(pd.DataFrame({"latency": [1.0, 2.0]})) == (pytest.approx([0, 0]), 1.0)


def test_row_noise_shrinks_with_the_requests_averaged(demo_subset):
    """A row's noise scale is sigma (1 - x)^-gamma (n / n_ref)^-1/2 in the sampled density and
    in what the artefact stores (``posterior_log_row_scale``)."""
    import xarray as xr

    from specbayes.model.likelihood import (
        collapsed_logp,
        log_row_scale,
        posterior_log_row_scale,
    )

    design = build_design(demo_subset)
    assert np.ptp(design.log_count) > 0
    model = build_model(design, SAMPLED)
    point = model.initial_point()

    def at_point(out):
        (out,) = model.replace_rvs_by_values([out])  # the variables at ``point``, not draws
        return model.compile_fn(out, inputs=model.value_vars, on_unused_input="ignore")(point)

    logp = at_point(model.logp(vars=[model["log_latency"]], sum=True))
    mu, log_c1 = at_point(model["mu"]), at_point(model["log_c1"])[design.obs_sweep]
    growth = float(np.exp(point["noise_growth_log__"]))
    log_w = log_row_scale(mu, log_c1, growth, design.log_count)
    np.testing.assert_allclose(log_row_scale(0.0, 0.0, 0.0, np.log(4.0)), -np.log(2.0))
    pr = merge_priors(None)["noise"]
    expect = collapsed_logp(design.log_latency, mu, log_w, pr["alpha"], pr["beta"]).eval()
    np.testing.assert_allclose(logp, expect, rtol=1e-6)
    # the stored log likelihood's scale: the same function of one posterior draw
    post = xr.Dataset(
        {
            "mu": (("chain", "draw", "obs"), mu[None, None]),
            "log_c1": (("chain", "draw", "sweep"), at_point(model["log_c1"])[None, None]),
            "noise_growth": (("chain", "draw"), np.full((1, 1), growth)),
        }
    )
    stored = posterior_log_row_scale(post, design.obs_sweep, design.log_count)
    np.testing.assert_allclose(stored[0, 0], log_w, rtol=1e-12)
    # without request counts every row is the reference row
    without = validate_sweeps(demo_subset.data.drop(columns="n_requests").reset_index(drop=True))
    assert not build_design(without).log_count.any()


def test_a_cycle_costs_per_sequence_where_attention_runs_unpacked(demo_subset):
    """c2c: one per (verifier, GPU, drafter) on an FA2 GPU (A100), centred at the roofline's
    unpacked tiles, proportional to each sweep's context; off on request."""
    from specbayes.data import validate_sweeps
    from specbayes.model.physics import spec_seq_centre

    a100 = validate_sweeps(demo_subset.data.assign(hardware="A100-SXM-80GB"))
    design = build_design(a100)
    model = build_model(design)
    assert model.named_vars_to_dims["spec_seq_overhead"] == ("spec_seq_group",)
    assert list(model.coords["spec_seq_group"]) == list(model.coords["draft_group"])
    # the prior's median is the roofline centre at the trend's centre cell: the cells 256 x 256
    # and 1024 x 1024 give p* = e^mean(log p) = 512, s* = e^mean(log(p + g/2)) = 768, g* = 512
    # (k: the sweeps' median, 4 here; (64 - k - 1) moves it by < 2 % per k)
    centre = spec_seq_centre("Llama-3.1-8B", "A100-SXM-80GB", "EAGLE3-Llama-3.1-8B", 512, 512, k=4)
    mu = model["spec_seq_overhead"].owner.inputs[-2].eval()
    assert float(np.exp(mu[0])) == pytest.approx(centre, rel=0.05)
    assert "spec_seq_overhead" not in build_model(design, priors={"spec_seq_overhead": None})


def test_engine_assumptions_are_the_simulators():
    """The roofline centres, the knee's decode ridge and the cycle overhead's prior restate
    the simulator's engine assumptions; they must not drift apart."""
    from specbayes.model import physics
    from specbayes.model.priors import CYCLE_OVERHEAD
    from specbayes.sim import EngineConfig

    e = EngineConfig()
    assert e.step_overhead_s == physics.STEP_S and e.seq_overhead_s == physics.SEQ_S
    assert e.draft_pass_overhead_s == physics.DRAFT_STEP_S
    assert e.draft_seq_overhead_s == physics.DRAFT_SEQ_S
    assert e.eager_layer_overhead_s == physics.EAGER_LAYER_S
    assert e.decode_compute_scale == physics.DECODE_COMPUTE_SCALE
    assert CYCLE_OVERHEAD["mu"] == pytest.approx(np.log(e.spec_step_overhead_s))


def test_merge_priors():
    pr = merge_priors({"noise": {"beta": 1e-4}, "coef_mu": {"c1v": {"sigma": 1.0}}})
    assert pr["noise"] == {"alpha": 1.0, "beta": 1e-4}
    assert pr["coef_mu"]["c1v"]["sigma"] == 1.0
    assert pr["coef_mu"]["c1v"]["mu"] == np.log(0.01)
    with pytest.raises(KeyError):
        merge_priors({"nope": {}})


def test_centred_cells_per_coefficient(demo_subset):
    """``centred_cells`` weights each cell coefficient's centring (True: all centred, False:
    none, a tuple: those centred, a dict: a weight each); one level may mix the forms."""
    design = build_design(demo_subset)
    partly = {"cell_coefs": ("c2v", "c2d"), "centred_cells": {"c2v": 1.0, "c2d": 0.75}}
    model = build_model(design, {**SAMPLED, **partly})  # c2v centred, c2d partly
    dims = model.named_vars_to_dims
    assert dims["cell_coef"] == ("unit", "coef_c_unit") and "cell_z" not in dims
    assert dims["cell_z_draft"] == ("draft_unit", "coef_z_draft")
    assert "cell_coef_draft" not in dims
    every = build_model(design, {**SAMPLED, **partly, "centred_cells": True}).named_vars_to_dims
    assert {"cell_coef", "cell_coef_draft"} <= set(every) and "cell_z_draft" not in every
    mixed = build_model(
        design, {**SAMPLED, "cell_coefs": ("c2p", "c2v"), "centred_cells": ("c2v",)}
    )
    assert mixed.coords["coef_c_unit"] == ("c2v",) and mixed.coords["coef_z_unit"] == ("c2p",)
    for m in (model, mixed):
        pp = pm.sample_prior_predictive(50, model=m, random_seed=2)
        assert np.isfinite(pp.prior_predictive["log_latency"].values).all()
    for bad in ("c2v", ("c9x",), {"c2d": 1.5}, None):
        with pytest.raises(ValueError, match="centred_cells"):
            build_model(design, {**SAMPLED, "centred_cells": bad})


def test_group_level_prior_from_the_roofline(demo_subset):
    """A catalog verifier's group level is centred at its roofline magnitudes (sd 1); an
    unknown verifier keeps the generic centre (sd 2)."""
    from specbayes.model.graph import _unit_workload
    from specbayes.model.hierarchy import trend_covariates
    from specbayes.model.physics import roofline_centres
    from specbayes.model.priors import group_level_prior

    pr = merge_priors()
    design = build_design(demo_subset)
    _, centre = trend_covariates(*_unit_workload(design), design.coords["coef"])
    prior = group_level_prior(design, pr, centre)
    (loc, scale), (loc_d, scale_d, relative, catalogued) = prior["verifier"], prior["drafter"]
    expect = roofline_centres("Llama-3.1-8B", "H100-SXM", "EAGLE3-Llama-3.1-8B", 506.0, 1024.0)
    assert loc[0, 1] == pytest.approx(np.log(expect["c1v"]), abs=0.05)
    assert loc_d[0, 0] == pytest.approx(np.log(expect["c1d"]), abs=0.05)
    assert (scale == pr["coef_mu_roofline_sigma"]).all()
    assert (scale_d == pr["coef_mu_roofline_sigma"]).all() and not relative.any()
    assert catalogued.all()
    # a catalogued drafter's level: its coefficient, on a softplus axis at the prior's median
    model = build_model(design, SAMPLED)
    axis = model.rvs_to_transforms[model["coef_draft_roofline"]]
    assert axis.name == "softplus" and np.allclose(axis.scale, np.exp(loc_d.ravel()))

    renamed = demo_subset.data.assign(verifier="my-own-8b")
    other = build_design(type(demo_subset)(renamed, demo_subset.excluded))
    prior = group_level_prior(other, pr, centre)
    (loc, scale), (loc_d, scale_d, relative, catalogued) = prior["verifier"], prior["drafter"]
    assert loc[0, 0] == pr["coef_mu"]["c1p"]["mu"] and (scale == 2.0).all()
    # an unknown drafter: the generic centre (on the log axis), or with drafter_ratio a ratio
    # of the verifier's
    assert not relative.any() and loc_d[0, 0] == pr["coef_mu"]["c1d"]["mu"]
    assert not catalogued.any()
    assert build_model(other, SAMPLED).named_vars_to_dims["coef_mu_draft_generic"] == (
        "drafter_generic",
    )
    ratio = merge_priors({"drafter_ratio": {"alpha": 2.0, "beta": 10.0}})
    assert group_level_prior(other, ratio, centre)["drafter"][2].all()
    model = build_model(other, {**SAMPLED, "drafter_ratio": {"alpha": 2.0, "beta": 10.0}})
    assert model.named_vars_to_dims["drafter_log_ratio"] == ("drafter_rel",)
    pp = pm.sample_prior_predictive(50, model=model, random_seed=1)
    assert np.isfinite(pp.prior_predictive["log_latency"].values).all()


def test_several_drafters_per_workload_pooled():
    """Two drafters on one verifier's cells: each has its own drafter coefficients (draft
    units and groups), a latent alpha per (cell, drafter), and the graph is the law."""
    from specbayes.model.simulate import simulate_sweeps

    df, truth = simulate_sweeps(
        drafters=(("EAGLE3-8B", 0.25e9), ("Draft-1B", 1e9)), unknown_alpha=True, seed=2
    )
    assert set(truth["drafter"]) == {"EAGLE3-8B", "Draft-1B"} and len(truth) == 8
    design = build_design(validate_sweeps(df, allow_unknown_alpha=True))
    assert design.structure == "pooled"
    assert design.coords["draft_group"] == ["V8B|H100|Draft-1B", "V8B|H100|EAGLE3-8B"]
    assert len(design.coords["draft_unit"]) == 8 == len(design.coords["draft_latent"])
    # every SD sweep points at the draft unit of its own cell and drafter
    sweeps = design.extra["sweeps"]
    labels = np.array(design.coords["draft_unit"])[design.sweep_draft[design.sd]]
    expect = (sweeps["unit"] + "|" + sweeps["drafter"]).to_numpy()[design.sd]
    assert (labels == expect).all() and (design.sweep_draft[design.k == 0] == -1).all()
    model = build_model(design, SAMPLED)
    assert model.named_vars_to_dims["alpha"] == ("draft_latent",)
    mu, lc1, lc2 = _evaluate(model, ["mu", "log_c1", "log_c2"], 2)
    c1, c2 = np.exp(lc1[:, design.obs_sweep]), np.exp(lc2[:, design.obs_sweep])
    np.testing.assert_allclose(mu, np.log(laws.latency(design.load, c1, c2)), rtol=1e-10)
    pp = pm.sample_prior_predictive(100, model=model, random_seed=3)
    assert np.isfinite(pp.prior_predictive["log_latency"].values).all()


# -- the optional batch curvature (priors ``inverse_knee``, issue 43) ---------------------------
KNEE = {"inverse_knee": {"mu": -1.9, "sigma": 1.5}}


def test_curvature_closed_loop_equals_laws(real_case):
    """With a knee every sweep's C3 is laws.token_knee_curvature of its coefficients: the
    dense sweep's is C2/K, the SD sweep's its verifier part (k + 1)/K plus the drafter's 1/K,
    and mu is the curved closed-loop law."""
    design = build_design(real_case.table)
    model = build_model(design, KNEE)
    assert model.named_vars_to_dims["knee_tokens"] == ("group",)
    names = ["mu", "log_c1", "log_c2", "c3", "knee_tokens", "coefficients", "tokens_per_cycle"]
    mu, lc1, lc2, c3, knee, coefs, tokens = _evaluate(model, names, 5)
    c1, c2, c3r = (np.exp(lc1), np.exp(lc2), c3)
    expect = laws.closed_loop_latency(
        design.load, c1[:, design.obs_sweep], c2[:, design.obs_sweep], c3r[:, design.obs_sweep]
    )
    np.testing.assert_allclose(mu, np.log(expect), rtol=1e-10)
    (dense,) = np.flatnonzero(design.k == 0)
    np.testing.assert_allclose(c3[:, dense], c2[:, dense] / knee[:, 0], rtol=1e-10)
    (s,) = design.sd
    k = design.k[s]
    alpha = laws.alpha_from_acceptance_length(tokens[:, 0], k)
    c2p, c2v, c2d = coefs[:, 0, 3], coefs[:, 0, 4], coefs[:, 0, 5]
    expect_sd = laws.token_knee_curvature(c2p, c2v, c2d, design.decode[s], alpha, k, knee[:, 0])
    np.testing.assert_allclose(c3[:, s], expect_sd, rtol=1e-8)
    passes = design.decode[s] / tokens[:, 0]
    by_hand = ((k + 1) * (c2p + passes * c2v) + passes * k * c2d) / knee[:, 0]
    np.testing.assert_allclose(c3[:, s], by_hand, rtol=1e-8)


def test_curvature_pooled_open_loop_finite(demo_subset):
    """The pooled structure with a knee: C3 from each sweep's coefficients, the open-loop rows'
    curved wall soft in the graph (finite mu at every prior draw)."""
    design = build_design(demo_subset)
    model = build_model(design, KNEE)
    mu, c3 = _evaluate(model, ["mu", "c3"], 6)
    assert np.isfinite(mu).all() and (c3 > 0).all()
    sd = design.k > 0
    # an SD sweep bends earlier than the dense sweep of its cell: (k + 1) / K against 1 / K
    lc2 = _evaluate(model, ["log_c2"], 6)[0]
    ratio = c3 / np.exp(lc2)
    assert np.median(ratio[:, sd]) > np.median(ratio[:, ~sd])


# -- the optional knee (priors ``knee``, issue 43) ---------------------------------------------
def _knee_priors():
    from specbayes.model.priors import KNEE as KNEE_TOKENS

    return {"knee": KNEE_TOKENS}


def test_knee_closed_loop_equals_laws(real_case):
    """With the knee every sweep's (B_K, Delta) is laws.knee_costs of its group's knee and its
    own verifier cost and passes, and mu is the closed-loop knee law; the noise grows with the
    utilisation of the law without the knee (``noise_mu``)."""
    design = build_design(real_case.table)
    model = build_model(design, _knee_priors())
    assert model.named_vars_to_dims["knee_at"] == ("group",)
    names = ["mu", "noise_mu", "log_c1", "log_c2", "knee_batch", "knee_slope", "knee_at"]
    names += ["knee_excess", "knee_c2v", "unit_coef"]
    mu, noise_mu, lc1, lc2, batch, slope, knee_at, excess, c2v, unit = _evaluate(model, names, 5)
    c1, c2 = np.exp(lc1)[:, design.obs_sweep], np.exp(lc2)[:, design.obs_sweep]
    knee = (batch[:, design.obs_sweep], slope[:, design.obs_sweep])
    expect = laws.closed_loop_latency(design.load, c1, c2, knee=knee)
    np.testing.assert_allclose(mu, np.log(expect), rtol=1e-10)
    np.testing.assert_allclose(noise_mu, np.log(laws.closed_loop_latency(design.load, c1, c2)))
    # an SD verify pass holds k + 1 tokens per sequence: its batch knee is k + 1 times sooner
    (dense,) = np.flatnonzero(design.k == 0)
    (s,) = design.sd
    np.testing.assert_allclose(batch[:, dense], knee_at[:, 0], rtol=1e-10)
    np.testing.assert_allclose(batch[:, s], knee_at[:, 0] / (design.k[s] + 1), rtol=1e-10)
    assert (slope > 0).all()
    # the extra is the group's verifier cost per request and pass (its one unit's here) times
    # the excess, on each of the dense sweep's g passes
    np.testing.assert_allclose(c2v[:, 0], unit[:, 0, 3], rtol=1e-10)
    expect_dense = excess[:, 0] * design.decode[dense] * c2v[:, 0]
    np.testing.assert_allclose(slope[:, dense], expect_dense, rtol=1e-10)


def test_knee_pooled_open_loop_finite(demo_subset):
    """The pooled structure with the knee: open-loop rows past the knee's wall are finite in
    the graph (the soft floor), and the prior predictive runs."""
    design = build_design(demo_subset)
    model = build_model(design, _knee_priors())
    prior = pm.sample_prior_predictive(3, model=model, random_seed=6)
    assert np.isfinite(prior.prior["mu"].values).all()
    assert np.isfinite(prior.prior_predictive["log_latency"].values).all()
    assert np.isfinite(model.compile_logp()(model.initial_point()))


def test_drafter_prefill_share_is_one_per_known_draft_group(demo_subset):
    """rho, the drafter's prefill over the verifier's: by default one log-normal per
    (verifier, GPU, drafter) the catalog knows, centred at the roofline's ratio; a drafter
    it does not know gets none (or one around ``generic``, when set); ``None`` turns it off."""
    from specbayes.model.physics import drafter_prefill_share
    from specbayes.model.priors import DRAFTER_PREFILL

    df = demo_subset.data.copy()
    df["drafter"] = df["drafter"].replace({"EAGLE3-Llama-3.1-8B": "my-drafter"})
    unknown = build_design(validate_sweeps(df))
    assert "drafter_prefill" not in build_model(unknown).named_vars
    assert (
        "drafter_prefill"
        not in build_model(build_design(demo_subset), {"drafter_prefill": None}).named_vars
    )
    generic = {"drafter_prefill": {**DRAFTER_PREFILL, "generic": 0.1}}
    for model, known in ((build_model(build_design(demo_subset)), True),
                         (build_model(unknown, generic), False)):  # fmt: skip
        assert model.named_vars_to_dims["drafter_prefill"] == ("prefill_group",)
        groups = model.coords["prefill_group"]
        assert len(groups) == 1 and groups[0].endswith(
            "EAGLE3-Llama-3.1-8B" if known else "my-drafter"
        )
        prior = pm.sample_prior_predictive(
            2000, model=model, random_seed=1, var_names=["drafter_prefill"]
        )
        median = float(prior.prior["drafter_prefill"].median())
        verifier, hardware, drafter = groups[0].split("|")
        expect = drafter_prefill_share(verifier, hardware, drafter, 512) if known else 0.1
        assert median == pytest.approx(expect, rel=0.1), (groups[0], median, expect)


def test_optimised_start_restarts_until_a_run_gains_nothing(monkeypatch):
    """:func:`optimised_start` on an ill-conditioned Gaussian (curvatures 1e-3 to 1e3): the
    start is its maximum, found in at least two L-BFGS runs (the last gains < 1 nat), and is
    reported converged; with too small an evaluation budget it is reported unconverged."""
    from specbayes.model import sampling

    curv = np.logspace(-3, 3, 400)
    centre = np.linspace(-1.0, 1.0, 400)

    def logp_and_grad(x):
        r = x - centre
        return -0.5 * float(np.sum(curv * r * r)), -curv * r

    x, search = sampling.optimised_start(logp_and_grad, np.full(400, 50.0))
    assert search["start_converged"] and search["start_runs"] >= 2, search
    assert search["start_logp"] > -1.0 and np.abs(x - centre)[curv > 1].max() < 1e-2, search
    monkeypatch.setattr(sampling, "START_MAXITER", 5)
    _, search = sampling.optimised_start(logp_and_grad, np.full(400, 50.0))
    assert not search["start_converged"] and search["start_logp"] < -1.0, search


def test_the_start_search_calls_the_samplers_own_compiled_density():
    """:func:`compiled_density` (nutpie's C callback through ctypes) is the density and
    gradient of ``compiled.logp_func``, and raises outside the domain (a row past its wall)."""
    import nutpie

    from specbayes.model import sampling

    with pm.Model() as model:
        scale = pm.HalfNormal("scale", 1.0)
        pm.Normal("y", 0.0, scale, observed=[0.3, -1.2, 0.8])
    compiled = nutpie.compile_pymc_model(model)
    density = sampling.compiled_density(compiled)
    for x in ([0.1], [-2.0], [1.5]):
        lp, grad = density(np.array(x))
        want_lp, want_grad = compiled.logp_func(np.array(x))
        assert lp == pytest.approx(float(want_lp), rel=1e-12)
        np.testing.assert_allclose(grad, want_grad, rtol=1e-12)
    with pytest.raises(FloatingPointError):
        density(np.array([np.nan]))


def test_scouting_restarts_only_trapped_chains_from_the_best_ones_late_positions():
    """:func:`choose_starts`: a chain whose last-quarter log density lies more than
    ``SCOUT_TRAP_SD`` sqrt(d/2) below the best chain's starts at the best chain's position,
    ten iterations apart per trapped chain; a chain that ends comparably keeps its own last
    position (so R-hat still compares chains that found the bulk apart)."""
    from specbayes.model import sampling

    rng = np.random.default_rng(0)
    chains, iterations, dim = 4, 200, 50
    position = rng.normal(size=(chains, iterations, dim))
    floor = sampling.SCOUT_TRAP_SD * np.sqrt(dim / 2.0)
    logp = rng.normal(0.0, 1.0, (chains, iterations))
    logp[1] -= 0.5 * floor  # comparable: keeps its own
    logp[2] -= 10.0 * floor  # trapped
    logp[3, -20:] -= 10.0 * floor  # trapped at the end (its last quarter)
    points, trapped = sampling.choose_starts(logp, position)
    assert trapped == 2
    np.testing.assert_array_equal(points[0], position[0, -1])
    np.testing.assert_array_equal(points[1], position[1, -1])
    np.testing.assert_array_equal(points[2], position[0, -11])
    np.testing.assert_array_equal(points[3], position[0, -21])
    starts = sampling._in_turn(points)
    handed = [starts(seed) for seed in range(5)]
    np.testing.assert_array_equal(handed[3], points[3])
    np.testing.assert_array_equal(handed[4], points[0])  # in turn, then round again


def test_scouting_keeps_the_start_when_no_chain_is_trapped():
    """:func:`scouted_starts` on a unimodal posterior: no chain trapped, so the fit keeps the
    compiled model's own starts — the fit it would be without the check."""
    import nutpie

    from specbayes.model import sampling

    with pm.Model() as model:
        scale = pm.HalfNormal("scale", 1.0)
        pm.Normal("x", 0.0, scale, shape=3)
    compiled = nutpie.compile_pymc_model(model)
    config = {**sampling.SAMPLER_CONFIG, "chains": 2, "cores": 1}
    starts, info = sampling.scouted_starts(compiled, 1, config)
    assert info["scout_restarted"] == 0 and info["scout_s"] > 0
    assert starts is compiled.initial_point_func


def test_single_load_level_per_configuration_is_one_clear_error(demo_subset):
    """Without two loads per configuration C1 and C2 cannot be separated: one clear error
    (ported from the old core's tests)."""
    data = demo_subset.data
    one = data.groupby(["verifier", "hardware", "cell", "drafter", "k"], dropna=False).head(1)
    with pytest.raises(ValueError, match="single load level"):
        build_design(validate_sweeps(one.reset_index(drop=True)))


def test_rows_taken_from_a_matrix_tensor_are_numpys_with_its_gradient():
    """hierarchy.take_rows: a matrix tensor's rows gathered from its flat values are NumPy's
    ``take`` of them, and the gradient scatters back to each row as often as it is taken."""
    import pytensor
    import pytensor.tensor as pt

    from specbayes.model.hierarchy import take_rows

    rng = np.random.default_rng(3)
    x, index = rng.normal(size=(5, 3)), np.array([4, 0, 0, 2, 4, 4])
    weights = rng.normal(size=(6, 3))
    tensor = pt.dmatrix("x")
    taken = take_rows(tensor, index, 3)
    grad = pytensor.grad((taken * weights).sum(), tensor)
    values, gradient = pytensor.function([tensor], [taken, grad])(x)
    np.testing.assert_array_equal(values, take_rows(x, index))
    want = np.zeros_like(x)
    np.add.at(want, index, weights)
    np.testing.assert_allclose(gradient, want)
