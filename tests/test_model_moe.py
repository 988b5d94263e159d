"""The ``moe`` level of the default core (``specbayes.model.experts``), without sampling.

The expert coverage's mean latency is one function for graph and prediction and equals
:mod:`specbayes.laws`' fixed point; the design refuses what the level cannot fit, in one line;
the model samples from a proper prior around the roofline's expert reads.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest

from specbayes import laws
from specbayes.data import validate_sweeps
from specbayes.model import build_design, build_model
from specbayes.model.experts import expert_counts, expert_ratios
from specbayes.model.likelihood import log_mean_latency
from specbayes.model.physics import roofline_centres

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def moe_rows() -> pd.DataFrame:
    """Two cells of one MoE verifier on one GPU from the bundled paper set (both loops)."""
    df = pd.read_parquet(REPO / "data/paper.parquet")
    keep = (
        (df["verifier"] == "Qwen3-30B-A3B")
        & (df["hardware"] == "H100-SXM")
        & df["cell"].isin(["256x256", "1024x1024"])
        & df["k"].isin([0, 2, 4])
    )
    return df[keep].reset_index(drop=True)


def _law_inputs(n: int = 40, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    c2 = rng.uniform(1e-3, 5e-3, n)
    closed = rng.random(n) < 0.3
    rps = rng.uniform(0.05, 0.95, n) / c2  # below the wall 1/C2
    load = np.where(closed, rng.integers(1, 128, n), rps).astype(float)
    return dict(
        log_c1=np.log(rng.uniform(0.5, 5.0, n)),
        log_c2=np.log(c2),
        load=load,
        closed=closed,
        c1s=rng.uniform(0.1, 3.0, n),
        ratio=rng.choice([8 / 128, 4 / 32, 8 / 160], n),
        k=rng.integers(0, 6, n).astype(float),
    )


def test_moe_mean_latency_is_the_laws_fixed_point():
    x = _law_inputs()
    experts = (x["c1s"], x["ratio"], x["k"])
    mu = log_mean_latency(x["log_c1"], x["log_c2"], x["load"], x["closed"], experts=experts)
    c1, c2 = np.exp(x["log_c1"]), np.exp(x["log_c2"])
    o = ~x["closed"]
    open_loop = laws.moe_latency(x["load"][o], c1[o], x["c1s"][o], c2[o], 0.0, x["ratio"][o], 1.0,
                                 x["k"][o])  # fmt: skip
    np.testing.assert_allclose(mu[o], np.log(open_loop), rtol=1e-10)
    # the fixed point: L = (C1 + phi(lambda L (k + 1)) C1s) / (1 - lambda C2)
    lat = np.exp(mu[o])
    phi = laws.expert_coverage(x["load"][o] * lat * (x["k"][o] + 1), x["ratio"][o], 1.0)
    np.testing.assert_allclose(lat, (c1[o] + phi * x["c1s"][o]) / (1 - x["load"][o] * c2[o]),
                               rtol=1e-9)  # fmt: skip
    c = x["closed"]
    n = x["load"][c]
    phi_c = laws.expert_coverage(n * (x["k"][c] + 1), x["ratio"][c], 1.0)
    np.testing.assert_allclose(np.exp(mu[c]), c1[c] + n * c2[c] + phi_c * x["c1s"][c], rtol=1e-12)
    # more expert reads, a longer latency; none, the law alone
    bare = log_mean_latency(x["log_c1"], x["log_c2"], x["load"], x["closed"])
    assert np.all(mu > bare)
    zero = (np.zeros_like(x["c1s"]), x["ratio"], x["k"])
    np.testing.assert_allclose(
        log_mean_latency(x["log_c1"], x["log_c2"], x["load"], x["closed"], experts=zero), bare,
        rtol=1e-12,
    )  # fmt: skip


def test_moe_mean_latency_graph_equals_numpy_with_the_implicit_gradient():
    x = _law_inputs(seed=1)
    log_c1 = pt.dvector("log_c1")
    c1s = pt.dvector("c1s")
    mu = log_mean_latency(log_c1, pt.as_tensor(x["log_c2"]), x["load"], x["closed"],
                          experts=(c1s, x["ratio"], x["k"]))  # fmt: skip
    f = pytensor.function([log_c1, c1s], [mu, pytensor.grad(mu.sum(), c1s)])
    value, grad = f(x["log_c1"], x["c1s"])
    experts = (x["c1s"], x["ratio"], x["k"])
    want = log_mean_latency(x["log_c1"], x["log_c2"], x["load"], x["closed"], experts=experts)
    np.testing.assert_allclose(value, want, rtol=1e-9)
    step = 1e-6 * x["c1s"]
    up = log_mean_latency(x["log_c1"], x["log_c2"], x["load"], x["closed"],
                          experts=(x["c1s"] + step, x["ratio"], x["k"]))  # fmt: skip
    np.testing.assert_allclose(grad, (up - want) / step, rtol=1e-4, atol=1e-8)


def test_expert_counts_come_from_the_rows_then_the_catalog():
    assert expert_counts("Qwen3-30B-A3B", pd.DataFrame()) == (8.0, 128.0)
    given = pd.DataFrame({"experts_per_token": [2], "num_experts": [8]})
    assert expert_counts("my-moe", given) == (2.0, 8.0)
    assert expert_counts("Qwen3-8B", pd.DataFrame()) is None
    with pytest.raises(ValueError, match=r"mixture-of-experts verifiers only: Qwen3-8B has"):
        expert_ratios(pd.DataFrame({"verifier": ["Qwen3-8B"]}), np.array(["Qwen3-8B"]))


def test_moe_design_is_pooled_with_expert_ratios(moe_rows):
    design = build_design(validate_sweeps(moe_rows), "moe")
    assert design.level == "moe" and design.structure == "pooled"
    np.testing.assert_allclose(design.extra["expert_ratio"], 8 / 128)
    assert len(design.extra["expert_ratio"]) == len(design.coords["sweep"])
    with pytest.raises(ValueError, match="moe level is pooled"):
        build_design(validate_sweeps(moe_rows), "moe", structure="anchored")
    dense = pd.read_parquet(REPO / "data/demo.parquet").head(40)
    with pytest.raises(ValueError, match="mixture-of-experts verifiers only"):
        build_design(validate_sweeps(dense), "moe")


def test_moe_roofline_centres_move_the_expert_tangent_to_c1s():
    sd = roofline_centres("Qwen3-30B-A3B", "H100-SXM", None, 512, 256)
    moe = roofline_centres("Qwen3-30B-A3B", "H100-SXM", None, 512, 256, coverage=True)
    assert "c1s" not in sd
    # every expert of 48 layers, bf16, over the H100's sustained bandwidth: ~20 ms
    assert 0.01 < moe["c1s"] < 0.04
    assert moe["c1v"] < sd["c1v"] and moe["c2v"] < sd["c2v"]
    assert moe["c1p"] == sd["c1p"] and moe["c2p"] == sd["c2p"]
    dense = roofline_centres("Qwen3-8B", "H100-SXM", None, 512, 256, coverage=True)
    assert dense["c1s"] == 0.0


@pytest.mark.parametrize("sweeps", [None, "sampled"], ids=["integrated", "sampled"])
def test_moe_model_has_a_proper_prior_and_a_finite_density(moe_rows, sweeps):
    """By default the sweeps' costs are integrated out (linearised in the expert reads too,
    model/marginal.py); sampled, the noise grows with the law without expert reads."""
    design = build_design(validate_sweeps(moe_rows), "moe")
    model = build_model(design, {"sweeps": sweeps})
    assert "expert_cost" in model.named_vars
    assert ("lin_x0" in model.named_vars) == (sweeps is None)
    assert ("noise_mu" in model.named_vars) == (sweeps == "sampled")
    assert model.named_vars_to_dims["expert_c1"] == ("sweep",)
    point = model.initial_point()
    assert np.isfinite(model.compile_logp()(point))
    assert np.all(np.isfinite(model.compile_dlogp()(point)))
    prior = pm.sample_prior_predictive(20, model=model, random_seed=3)
    finite = np.isfinite(prior.prior_predictive["log_latency"].values)
    # integrated out, a sweep's C2 is not truncated at its wall (model/marginal.py): an
    # open-loop row of a prior draw past it is not finite, a closed-loop row always is
    assert np.all(finite | ((sweeps is None) & ~design.obs_closed))
    # the expert read's prior sits at the roofline's full-coverage read
    c1s = roofline_centres("Qwen3-30B-A3B", "H100-SXM", None, 512, 256, coverage=True)["c1s"]
    draws = prior.prior["expert_cost"].values.ravel()
    assert abs(np.median(np.log(draws)) - np.log(c1s)) < 0.8
    with pytest.raises(ValueError, match="no batch curvature or knee"):
        build_model(design, {"inverse_knee": {"mu": 0.0, "sigma": 1.0}})


def test_building_and_finishing_a_fit_compiles_no_c_function(moe_rows, monkeypatch):
    """The moe level's start reads (``marginal.integrate_sweeps``) and a sampled fit's prior
    constants (``sampling._constants``) are evaluated without PyTensor's C linker, whose
    module cache takes 1.3–1.6 s to load in a fresh process and serves nothing else in a fit
    (nutpie compiles with numba)."""
    from pytensor.link.c.basic import CLinker

    from specbayes.model.sampling import _constants

    def refuse(*args, **kwargs):
        raise AssertionError("a function was compiled with the C linker")

    monkeypatch.setattr(CLinker, "make_thunk", refuse)
    x = pt.dvector("x")  # first, that the refusal bites in this process
    try:
        pytensor.function([x], pt.exp(x) * 2.0)(np.ones(3))
    except AssertionError:
        pass
    else:  # seen in make test-all's workers after other tests: no CLinker.make_thunk call
        pytest.skip("this process compiles PyTensor's C functions another way")
    design = build_design(validate_sweeps(moe_rows), "moe")
    assert "lin_x0" in build_model(design).named_vars
    sampled = build_model(design, {"sweeps": "sampled"})
    a, b = _constants(sampled["log_latency"].owner.inputs[-2:])
    assert a > 0 and b > 0


def test_an_integrated_fits_noise_grows_with_the_sampled_fits_noise_location(moe_rows):
    """The integrated fit does not store ``noise_mu``; the stored groups evaluate it per block
    of draws (``marginal.noise_location``) — the sampled graph's ``noise_mu`` (the law
    without expert reads) at the same sweep costs, and not the law with them."""
    import xarray as xr

    from specbayes.model.marginal import noise_location, row_view

    design = build_design(validate_sweeps(moe_rows), "moe")
    model = build_model(design, {"sweeps": "sampled"})
    point = model.initial_point()

    def at_point(name):
        (out,) = model.replace_rvs_by_values([model[name]])
        return model.compile_fn(out, inputs=model.value_vars, on_unused_input="ignore")(point)

    post = xr.Dataset(
        {n: (("chain", "draw", "sweep"), at_point(n)[None, None]) for n in ("log_c1", "log_c2")}
    )
    block = (0, slice(0, 1))  # a draw_blocks block: (chain, draws)
    location = noise_location(row_view(design), post, block)
    assert location.shape == (1, len(design.log_latency))
    np.testing.assert_allclose(location[0], at_point("noise_mu"), rtol=1e-9, atol=1e-12)
    assert not np.allclose(location[0], at_point("mu"))


def test_fixed_cost_moe_latency_closed_form_and_graph_agree_over_a_wide_range():
    """Lambert's W (NumPy) and the graph's Halley steps give the least fixed point of
    :func:`laws.moe_latency` with ``c2s = 0``, from idle to 99.9 % of the wall."""
    rng = np.random.default_rng(7)
    n = 5000
    c2 = rng.uniform(1e-4, 1e-2, n)
    rps = rng.uniform(0.0, 0.999, n) / c2
    c1, c1s = 10 ** rng.uniform(-3, 1, n), 10 ** rng.uniform(-3, 1.5, n)
    ratio, k = rng.choice([8 / 128, 4 / 32, 2 / 8], n), rng.integers(0, 11, n)
    want = laws.moe_latency(rps, c1, c1s, c2, 0.0, ratio, 1.0, k)
    closed_form = laws.moe_fixed_cost_latency(rps, c1, c1s, c2, ratio, 1.0, k)
    np.testing.assert_allclose(closed_form, want, rtol=1e-9)
    x = pt.dvector("c1")
    graph = pytensor.function([x], laws.moe_fixed_cost_latency(rps, x, c1s, c2, ratio, 1.0, k))
    np.testing.assert_allclose(graph(c1), want, rtol=1e-9)
    assert np.isinf(laws.moe_fixed_cost_latency(2.0, 0.1, 0.1, 0.5, 0.1, 1.0, 1))


def test_moe_model_lowers_to_jax_with_pymcs_gradient(moe_rows):
    """NumPyro samples the moe level too: its JAX density and gradient at the initial point
    are PyTensor's (the Halley steps' ``disconnected_grad`` and the implicit step lower)."""
    pytest.importorskip("numpyro")
    from jax_gradient import assert_jax_gradient_is_pymcs

    from specbayes import parallel

    assert parallel.jax_chain_method(2) in ("parallel", "sequential", "vectorized")
    assert_jax_gradient_is_pymcs(build_model(build_design(validate_sweeps(moe_rows), "moe")))


@pytest.fixture(scope="module")
def moe_sim_rows():
    """A simulated MoE verifier (Qwen3-30B-A3B, H100), dense and EAGLE-3 k = 3, closed loop
    at four stream counts: eight rows with TTFT and ITL percentiles, built in a second."""
    from specbayes.sim import simulate_point

    rows = [
        simulate_point("Qwen3-30B-A3B", hardware="H100-SXM", prefill=512, decode=256,
                       concurrency=n, n_requests=100, seed=i, **arm)
        for arm in ({"k": 0}, {"drafter": "EAGLE3-Qwen3-30B-A3B", "alpha": 0.7, "k": 3})
        for i, n in enumerate((1, 4, 16, 64))
    ]  # fmt: skip
    return validate_sweeps(pd.DataFrame(rows))


def test_moe_metric_zero_load_part_carries_the_expert_reads_at_the_batchs_coverage():
    from specbayes.model.metrics import log_fixed_cost

    x = _law_inputs(seed=2)
    batch = np.log(x["load"])
    got = log_fixed_cost(x["log_c1"], batch, (x["c1s"], x["ratio"], x["k"]))
    phi = laws.expert_coverage(x["load"] * (x["k"] + 1), x["ratio"], 1.0)
    np.testing.assert_allclose(np.exp(got), np.exp(x["log_c1"]) + phi * x["c1s"], rtol=1e-12)
    assert log_fixed_cost(x["log_c1"], batch) is x["log_c1"]  # no experts: C1 itself
    # the graph's formula is NumPy's
    v = pt.dvector()
    f = pytensor.function([v], log_fixed_cost(v, batch, (x["c1s"], x["ratio"], x["k"]), pt))
    np.testing.assert_allclose(f(x["log_c1"]), got, rtol=1e-12)


def test_moe_metrics_are_one_density_in_the_graph_and_the_stored_groups(moe_sim_rows):
    """The metric model on the moe level: the stored log likelihood (what ``az.loo`` reads)
    is the graph's density at the same point, the expert reads included."""
    import xarray as xr

    from specbayes.model.metrics import stored_groups
    from specbayes.model.priors import merge_priors

    metrics = ("ttft_p99", "itl_p99")
    design = build_design(moe_sim_rows, "moe")
    model = build_model(design, metrics=metrics)
    assert {v.name for v in model.observed_RVs} == {"log_latency", "log_metric"}
    point = model.initial_point()
    kw = dict(inputs=model.value_vars, on_unused_input="ignore")
    rv = model["log_metric"]
    graph = np.asarray(model.compile_fn(model.logp(vars=[rv], sum=False), **kw)(point)).ravel()
    names = ["log_c1", "log_c2", "mu", "expert_c1", "metric_log_share", "metric_sigma"]
    at_point = model.replace_rvs_by_values([model[n] for n in names])
    values = model.compile_fn(at_point, **kw)(point)
    post = xr.Dataset(
        {n: (("chain", "draw", *[f"{n}_{i}" for i in range(np.ndim(v))]), np.asarray(v)[None, None])
         for n, v in zip(names, values, strict=True)}
    )  # fmt: skip
    pr = merge_priors(None)
    stored = stored_groups(design, metrics, post, pr, np.random.default_rng(0))
    np.testing.assert_allclose(stored["log_likelihood"][0, 0], graph, rtol=1e-9, atol=1e-9)
    # and the reads matter: without them the metric mean is another one
    bare = stored_groups(design, metrics, post.drop_vars("expert_c1"), pr,
                         np.random.default_rng(0))  # fmt: skip
    assert not np.allclose(bare["log_likelihood"], stored["log_likelihood"])
    assert np.all(np.isfinite(graph))
    prior = pm.sample_prior_predictive(20, model=model, random_seed=1)
    assert np.mean(np.isfinite(prior.prior_predictive["log_metric"].values)) > 0.95


def test_the_graph_holds_no_strided_constant():
    """numba freezes a constant array into the compiled graph only if it is C- or
    F-contiguous; a strided view (a column of the roofline centres of several groups) is a
    dynamic global, and a graph with one is compiled afresh at every fit (paper MoE
    verifiers: 20 s, 12 s cached)."""
    from pytensor.graph.basic import Constant
    from pytensor.graph.traversal import ancestors

    df = pd.read_parquet(REPO / "data/paper.parquet")
    keep = (df["verifier"] == "Qwen3-30B-A3B") & (df["cell"] == "256x256") & df["k"].isin([0, 2])
    model = build_model(build_design(validate_sweeps(df[keep].reset_index(drop=True)), "moe"))
    assert len(model.coords["group"]) == 2  # H100 and A100
    strided = [
        v.data.shape
        for v in ancestors([model.logp()])
        if isinstance(v, Constant) and isinstance(v.data, np.ndarray) and v.data.ndim > 0
        and not (v.data.flags["C_CONTIGUOUS"] or v.data.flags["F_CONTIGUOUS"])
    ]  # fmt: skip
    assert not strided, strided
