"""The next core's fit object without sampling: a :class:`NextFit` built from prior draws.

Like pymc-marketing's ``mock_sample``: the plumbing (one density for the graph, the stored
groups and every method; prediction for unseen cells; the planner; save and load) is tested on
prior draws standing in for the posterior, in seconds. Real sampling is in the slow tier and
``benchmarks/model_core.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import arviz as az
import numpy as np
import pandas as pd
import pymc as pm
import pytest
import xarray as xr

from specbayes import laws, plan
from specbayes.data import SweepTable, validate_sweeps
from specbayes.fit import FitFileError, load_fit
from specbayes.model import build_design, build_model
from specbayes.model.fitted import _ANSWER_VARIABLES, NextFit, stored_priors
from specbayes.model.sampling import add_collapsed

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import small_sweeps  # noqa: E402

#: An SD arm of the demo subset the ``pooled`` fixture fits.
DEMO_ARM = plan.Arm(
    "Llama-3.1-8B", "H100-SXM", prefill=256, decode=256,
    drafter="EAGLE3-Llama-3.1-8B", alpha=0.7, k=5,
)  # fmt: skip


#: The sweeps sampled (:func:`mock_fit`).
SAMPLED = {"sweeps": "sampled"}


def mock_fit(table: SweepTable, draws: int = 40, seed: int = 5, level: str = "sd") -> NextFit:
    """A NextFit whose 'posterior' is prior draws (2 chains), with sigma drawn as after NUTS."""
    design = build_design(table, level)
    # the sweeps sampled: prior draws of the integrated form's hierarchy put some sweeps'
    # conditional costs past their rows' walls (a posterior keeps them below)
    model = build_model(design, SAMPLED)
    prior = pm.sample_prior_predictive(2 * draws, model=model, random_seed=seed).prior
    post = xr.Dataset(
        {
            name: (var.dims, var.values.reshape(2, draws, *var.shape[2:]))
            for name, var in prior.data_vars.items()
        },
        coords={c: prior.coords[c] for c in prior.coords if c not in ("chain", "draw")},
    )
    idata = az.InferenceData(posterior=post)
    idata.add_groups(
        sample_stats=xr.Dataset({"diverging": (("chain", "draw"), np.zeros((2, draws), bool))})
    )
    add_collapsed(idata, model, seed)
    config = {"level": level, "structure": design.structure, "priors": stored_priors(SAMPLED)}
    config["sampler_config"] = {"seed": seed}
    fit = NextFit(idata, design, excluded=table.excluded, config=config, model=model)
    fit._attach_groups()
    return fit


@pytest.fixture(scope="module")
def pooled():
    df = pd.read_parquet(REPO / "data/demo.parquet")
    df = df[(df["verifier"] == "Llama-3.1-8B") & df["cell"].isin(["256x256", "1024x1024"])]
    return mock_fit(validate_sweeps(df.reset_index(drop=True)))


@pytest.fixture(scope="module")
def anchored():
    return mock_fit(small_sweeps.real_case("HumanEval", "dspark").table)


@pytest.fixture(scope="module")
def two_drafters():
    """One verifier, an EAGLE-3-sized head and a 1B draft model, three k each, four cells,
    alpha unknown (simulated from the model): the pooled structure with draft units."""
    from specbayes.model.simulate import simulate_sweeps

    df, _ = simulate_sweeps(
        drafters=(("EAGLE3-8B", 0.25e9), ("Draft-1B", 1e9)), unknown_alpha=True, seed=2
    )
    return mock_fit(validate_sweeps(df, allow_unknown_alpha=True))


@pytest.fixture(scope="module")
def moe():
    """Two cells of an MoE verifier from the bundled paper set, on the ``moe`` level."""
    df = pd.read_parquet(REPO / "data/paper.parquet")
    keep = (
        (df["verifier"] == "Qwen3-30B-A3B")
        & (df["hardware"] == "H100-SXM")
        & df["cell"].isin(["256x256", "1024x1024"])
        & df["k"].isin([0, 3])
        & df["alpha"].fillna(0.8).round(2).isin([0.6, 0.8])
    )
    return mock_fit(validate_sweeps(df[keep].reset_index(drop=True)), level="moe")


@pytest.mark.parametrize("name", ["pooled", "anchored", "two_drafters", "moe"])
def test_one_density(name, request):
    """mean_latency and log_likelihood of the fitted rows are the graph's mu and the stored
    log_likelihood group, draw by draw; the predictive group is finite."""
    fit = request.getfixturevalue(name)
    stack = {"sample": ("chain", "draw")}
    mu = fit.idata.posterior["mu"].stack(stack).transpose("sample", ...).values
    np.testing.assert_allclose(np.log(fit.mean_latency(fit.data).values), mu, rtol=1e-9)
    ll = fit.idata.log_likelihood["log_latency"].stack(stack).transpose("sample", ...).values
    np.testing.assert_allclose(fit.log_likelihood(fit.data).values, ll, rtol=1e-9)
    assert np.isfinite(ll).all()
    assert np.isfinite(fit.idata.posterior_predictive["log_latency"].values).all()
    az.loo(fit.idata)  # the artefact carries what ArviZ needs


def test_moe_unseen_cell_reads_its_experts(moe):
    """An unseen cell of the moe fit gets the group's expert reads ``c1s``; its latency is the
    coverage law's, above the law without the experts and rising with load."""
    rows = (
        moe.data[(moe.data["k"] > 0) & moe.data["concurrency"].isna()]
        .drop(columns=["sweep"])
        .head(1)
        .assign(prefill=512, decode=512, cell="512x512")
    )
    rows = pd.concat([rows.assign(rps=r) for r in (0.01, 0.5, 1.0)], ignore_index=True)
    coefs = moe.coefficients(rows)
    np.testing.assert_allclose(coefs["c1s"].values[:, 0], moe.idata.posterior["expert_cost"]
                               .values.reshape(-1, 1)[:, 0])  # fmt: skip
    lat = moe.mean_latency(rows).values
    assert np.all(np.diff(np.where(np.isfinite(lat), lat, np.inf), axis=1) > 0)


def test_moe_summary_and_cli_name_the_expert_reads(moe):
    """``specbayes fit --model moe`` prints each group's c1s beside the roofline's."""
    from specbayes.commands.fit import format_summary

    summary = moe.summary()
    ((group, (mid, lo, hi, roof)),) = summary["expert_reads"].items()
    assert group == "Qwen3-30B-A3B|H100-SXM"
    assert lo <= mid <= hi and roof == pytest.approx(0.02164, rel=0.01)
    text = format_summary(summary)
    assert f"expert reads c1s {group}: {1e3 * mid:.2f} ms" in text and "roofline 21.64" in text


def _moe_arm(moe) -> plan.Arm:
    row = moe.data[moe.data["k"] > 0].iloc[0]
    return plan.Arm(
        row.verifier, row.hardware, row.prefill, row.decode, row.drafter, row.cell, 0.8, 3
    )


def test_planner_plans_with_the_expert_reads(moe):
    """A moe fit is planned with the coverage law: each arm carries its expert reads
    ``X = (g/E) c1s`` (m/M from the fit) and every decision is the laws' with them."""
    arm = _moe_arm(moe)
    (coefs,) = plan.coefficient_draws(moe, arm)
    np.testing.assert_allclose(coefs["expert_ratio"], 8 / 128)  # Qwen3-30B-A3B: 8 of 128
    c1s, c2s, _, c1d, c2d, _, term_s, term_d = plan._sd_and_dense(moe, arm)
    assert isinstance(term_s, laws.Experts) and isinstance(term_d, laws.Experts)
    passes = laws.verifier_passes(arm.decode, 0.8, 3)
    np.testing.assert_allclose(term_s.share, passes * coefs["c1s"])
    np.testing.assert_allclose(term_d.share, arm.decode * coefs["c1s"])  # one pass per token

    rps = np.array([0.5, 2.0])
    draws = plan.speedup(moe, arm, rps=rps).attrs["draws"]
    col = [c[:, None] for c in (c1s, c2s, c1d, c2d)]
    expect = laws.latency(rps, col[2], col[3], experts=plan._column(term_d)) / laws.latency(
        rps, col[0], col[1], experts=plan._column(term_s)
    )
    np.testing.assert_allclose(draws, expect)
    assert not np.allclose(draws, laws.speedup(rps, *col))  # the reads change the answer

    # capacity: at the planned rate the coverage law meets the SLO with probability 0.9
    slo = float(np.quantile(c1s, 0.95) * 3)
    cap = plan.capacity(moe, arm, slo, ks=[arm.k])["capacity_rps"].item()
    c1, c2, _, term = plan.effective_cost_draws(moe, arm)
    assert cap > 0 and np.mean(laws.latency(cap, c1, c2, experts=term) <= slo) >= 0.9
    # the closed-loop break-even is where the two arms' coverage laws cross
    be = plan.break_even(moe, arm, closed_loop=True)
    star = be.attrs["n_star_draws"][:, 0]
    ok = np.isfinite(star)
    assert ok.any()

    def at_star(c1, c2, term):
        return laws.closed_loop_latency(
            star[ok], c1[ok], c2[ok], experts=laws.map_term(term, lambda x: x[ok])
        )

    np.testing.assert_allclose(at_star(c1s, c2s, term_s), at_star(c1d, c2d, term_d), rtol=1e-6)
    table = plan.optimal_k(moe, arm, alphas=[0.8], rps=[1.0], ks=(0, 1, 3))
    assert table["k_bayes"].isin([0, 1, 3]).all()


def test_plan_and_report_commands_take_a_moe_fit(moe, tmp_path, capsys):
    """``specbayes plan`` and ``specbayes report`` on a saved moe fit (they refused it)."""
    from specbayes.cli import main

    path = moe.save(tmp_path / "moe.nc")
    assert main(["plan", str(path), "--rps", "0.5,1"]) == 0
    out = capsys.readouterr().out
    assert "speedup over dense" in out and "break-even" in out
    assert "model: moe — a verifier pass reads" in out and "1 − (1 − 0.0625)^T" in out
    assert main(["report", str(path), "--out", str(tmp_path / "report"), "--slo", "60"]) == 0
    summary = (tmp_path / "report" / "summary.md").read_text()
    assert "Model `moe`: C1 and C2 leave out the expert reads" in summary


def test_unseen_cell_from_the_hierarchy(pooled):
    rows = (
        pooled.data[pooled.data["k"] > 0]
        .head(3)
        .assign(prefill=512, decode=512, cell="512x512", sweep=np.nan)
    )
    rows = rows.drop(columns=["sweep"])
    coefs = pooled.coefficients(rows)
    assert all(np.isfinite(coefs[c].values).all() and (coefs[c].values > 0).all() for c in coefs)
    # the unseen cell's coefficients follow the trend: c2v grows with the KV size p + g/2
    small = pooled.coefficients(rows.assign(prefill=256, decode=256, cell="256x256"))
    assert np.median(coefs["c2v"].values) > np.median(small["c2v"].values)
    # measured rows keep their configuration's C2 below the wall of their fastest rate
    lat = pooled.mean_latency(rows, measured=True).values
    assert np.isfinite(lat).all()


def test_each_drafter_has_its_own_coefficients_and_alpha(two_drafters):
    """Rows of one cell with two drafters share the verifier's draws and take each drafter's
    own c1d, c2d and latent alpha; an unseen cell does the same from the group levels."""
    fit = two_drafters
    post = fit.idata.posterior.stack(sample=("chain", "draw"))
    rows = pd.DataFrame(
        dict(verifier="V8B", hardware="H100", prefill=512.0, decode=512.0, k=3, rps=0.1,
             drafter=["EAGLE3-8B", "Draft-1B"])
    )  # fmt: skip
    for cell in ("512x512", "768x384"):  # fitted, unseen
        coefs = fit.coefficients(rows.assign(cell=cell))
        for c in ("c1p", "c1v", "c2p", "c2v"):
            np.testing.assert_array_equal(coefs[c].values[:, 0], coefs[c].values[:, 1])
        assert (coefs["c1d"].values[:, 0] != coefs["c1d"].values[:, 1]).all()
    j = fit.design.coords["draft_unit"].index("V8B|H100|512x512|Draft-1B")
    coefs = fit.coefficients(rows.assign(cell="512x512"))
    np.testing.assert_allclose(
        np.log(coefs["c2d"].values[:, 1]), post["log_coef_draft"].values[j, 1], rtol=1e-12
    )
    a = fit.alpha_draws("V8B", "Draft-1B", "512x512")
    np.testing.assert_array_equal(
        a, post["alpha"].sel(draft_latent=fit.design.coords["draft_unit"][j]).values
    )
    assert fit.alpha_from_prior() == [] and fit.summary()["alpha_from_prior"] == []
    with pytest.raises(ValueError, match="fitted with drafters"):
        fit.coefficients(rows.assign(cell="512x512", drafter=""))


def test_planner_compares_drafters(two_drafters):
    """plan.compare of two drafters' arms on one workload and plan.optimal_k per drafter."""
    eagle = plan.Arm("V8B", "H100", 512, 512, drafter="EAGLE3-8B", cell="512x512", k=3)
    draft = plan.Arm("V8B", "H100", 512, 512, drafter="Draft-1B", cell="512x512", k=3)
    out = plan.compare(two_drafters, eagle, draft, rps=[0.01, 0.05])
    assert out["speedup"]["median"].notna().all() and len(out["saturation"]) == 2
    for arm in (eagle, draft):
        table = plan.optimal_k(two_drafters, arm, alphas=[0.7], rps=[0.01], ks=(0, 1, 3, 5))
        assert table["k_bayes"].isin([0, 1, 3, 5]).all()
        # at the drafter's own inferred acceptance: one row per load, every draw its alpha
        own = plan.optimal_k(two_drafters, arm, alphas=None, rps=[0.01, 0.02], ks=(1, 3, 5))
        draws = two_drafters.alpha_draws("V8B", arm.drafter, "512x512")
        assert len(own) == 2 and own["alpha_inferred"].all()
        assert own["alpha"].iloc[0] == pytest.approx(np.median(draws))
        assert own["k_bayes"].isin([1, 3, 5]).all()


def test_one_k_leaves_alpha_to_the_prior():
    """A drafter swept at one k on a workload: its alpha rests on the prior, and the summary
    says which (workload, drafter)."""
    from specbayes.model.simulate import simulate_sweeps

    df, _ = simulate_sweeps(ks=(3,), unknown_alpha=True, cells=((256, 256), (512, 512)), seed=1)
    fit = mock_fit(validate_sweeps(df, allow_unknown_alpha=True), draws=5)
    assert fit.alpha_from_prior() == ["V8B|H100|256x256|D1B", "V8B|H100|512x512|D1B"]
    from specbayes.commands.fit import format_summary

    assert "alpha rests on its prior for 2" in format_summary(fit.summary())


def test_anchored_refuses_unseen_cells(anchored):
    rows = anchored.data.head(2).assign(prefill=5000, cell="5000x300")
    with pytest.raises(ValueError, match="never saw"):
        anchored.coefficients(rows)


def test_inferred_alpha_reproduces_the_sweep(anchored):
    """Planner arithmetic at the measured k: the derived coefficients with the inferred alpha
    give back the SD sweep's sampled costs (laws.effective_costs)."""
    d = anchored.design
    (s,) = d.sd
    row = anchored.data[anchored.data["k"] > 0].head(1)
    coefs = anchored.coefficients(row)
    alpha = anchored.alpha_draws(row.verifier.iloc[0], row.drafter.iloc[0], row.cell.iloc[0])
    c1, c2 = laws.effective_costs(
        *(coefs[c].values[:, 0] for c in coefs), d.decode[s], alpha, d.k[s]
    )
    post = anchored.idata.posterior.stack(sample=("chain", "draw"))
    np.testing.assert_allclose(np.log(c1), post["log_c1"].values[s], rtol=1e-8)
    np.testing.assert_allclose(np.log(c2), post["log_c2"].values[s], rtol=1e-8)


def test_planner_on_a_next_fit(pooled):
    arm = DEMO_ARM
    table = plan.speedup(pooled, arm, rps=[0.0, 1.0])
    assert table["median"].notna().all()
    with pytest.raises(ValueError, match="drafter"):
        other = plan.Arm("Llama-3.1-8B", "H100-SXM", 256, 256, drafter="other", alpha=0.7, k=3)
        plan.speedup(pooled, other, rps=[0.0])


def test_save_and_load(pooled, tmp_path, monkeypatch):
    from specbayes.model.priors import DEFAULT_PRIORS

    path = pooled.save(tmp_path / "fit.nc")
    # the defaults move after the fit was saved (here: C1's sweeps back to non-centred) - the
    # saved fit still rebuilds the model it was sampled with, whose variables its posterior has
    monkeypatch.setitem(DEFAULT_PRIORS["centred_sweeps"], "C1", False)
    again = load_fit(path)
    assert isinstance(again, NextFit)
    names = {v.name for v in again.model.free_RVs}
    assert names == {v.name for v in pooled.model.free_RVs} and "log_c1_sweep" in names
    assert again.summary()["min_ess_bulk"] == pooled.summary()["min_ess_bulk"]
    # the variables the answers read are stored exactly: a method reading a float32 one fails
    np.testing.assert_array_equal(
        again.mean_latency(pooled.data).values, pooled.mean_latency(pooled.data).values
    )
    # ... and the drafter's coefficients of a fitted and an unseen cell
    rows = pooled.data[pooled.data["k"] > 0].head(1).drop(columns=["sweep"])
    rows = pd.concat([rows, rows.assign(prefill=512.0, decode=512.0, cell="512x512")])
    for c in ("c1d", "c2d", "c2v"):
        np.testing.assert_array_equal(
            again.coefficients(rows)[c].values, pooled.coefficients(rows)[c].values
        )
    ds = az.from_netcdf(str(path))
    ds.attrs["specbayes_version"] = "0.0.0"
    ds.to_netcdf(str(tmp_path / "old.nc"))
    with pytest.raises(FitFileError, match=r"0\.0\.0"):
        load_fit(tmp_path / "old.nc")


def test_an_artefact_of_the_removed_old_core_is_one_clear_error(pooled, tmp_path):
    """A file the old model core wrote (its ``model_id``, e.g. ``specbayes.sd``, not the
    default core's): one line saying so and how to refit, not a failure deep in the load."""
    path = pooled.save(tmp_path / "fit.nc")
    ds = az.from_netcdf(str(path))
    ds.attrs["model_id"] = "specbayes.sd"
    ds.to_netcdf(str(tmp_path / "old_core.nc"))
    with pytest.raises(FitFileError, match="old model core, which was removed") as err:
        load_fit(tmp_path / "old_core.nc")
    assert "specbayes fit" in str(err.value) and "\n" not in str(err.value)


def test_saved_artefact_is_slim_and_answers(pooled, tmp_path):
    """The file keeps what the answers read exact, the rest float32, no per-row ``mu`` and a
    thinned predictive group; ArviZ's LOO and PPC, the health summary and the planner work on
    what is read back, and ``mu`` is recomputed from it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from specbayes.artefacts import PREDICTIVE_DRAWS, add_natural_scale

    again = load_fit(pooled.save(tmp_path / "fit.nc"))
    idata = again.idata
    assert "unconstrained_posterior" not in idata.groups()
    natural = ["coef_unit", "coef_draft_unit"]
    assert "mu" not in idata.posterior and not set(natural) & set(idata.posterior)
    add_natural_scale(idata)  # coef_unit (and the drafter's) back, as save's docstring says
    for name in natural:
        np.testing.assert_array_equal(idata.posterior[name], pooled.idata.posterior[name])
    idata.posterior = idata.posterior.drop_vars(natural)
    for group in ("log_likelihood", "posterior_predictive"):
        assert idata[group]["log_latency"].dtype == np.float32, group
    for name, var in idata.posterior.data_vars.items():
        exact = name in _ANSWER_VARIABLES
        assert var.dtype == (np.float64 if exact else np.float32), name
        stored = pooled.idata.posterior[name].values
        np.testing.assert_allclose(var.values, stored, rtol=0 if exact else 1e-6)
    n_ll = idata.log_likelihood.sizes["chain"] * idata.log_likelihood.sizes["draw"]
    n_pp = idata.posterior_predictive.sizes["chain"] * idata.posterior_predictive.sizes["draw"]
    assert n_ll == pooled._n() and n_pp <= PREDICTIVE_DRAWS
    stack = {"sample": ("chain", "draw")}
    mu = pooled.idata.posterior["mu"].stack(stack).transpose("sample", ...).values
    np.testing.assert_allclose(np.log(again.mean_latency(again.data).values), mu, rtol=1e-9)

    loo = az.loo(idata, pointwise=True)
    assert np.isfinite(loo.elpd_loo) and loo.pareto_k.size == len(pooled.data)
    az.plot_ppc(idata, num_pp_samples=20)
    plt.close("all")
    assert again.summary()["divergences"] == 0
    arm = DEMO_ARM
    table = plan.speedup(again, arm, rps=[0.0, 1.0])
    assert table["median"].notna().all()
    pd.testing.assert_frame_equal(table, plan.speedup(pooled, arm, rps=[0.0, 1.0]))


@pytest.mark.slow
def test_demo_fit_next_core():
    """The next core on the demo at the defaults: healthy, LOO finite with few influential
    rows, every stored group finite (benchmarks/model_core.md has the seed study)."""
    from specbayes.fit import fit

    table = validate_sweeps(pd.read_parquet(REPO / "data/demo.parquet"))
    result = fit(table, "sd", progress=False)
    s = result.summary()
    assert s["healthy"], s
    loo = az.loo(result.idata, pointwise=True)
    assert np.isfinite(loo.elpd_loo)
    assert np.mean(np.asarray(loo.pareto_k) > 0.7) <= 0.02
    for group in ("log_likelihood", "posterior_predictive"):
        assert np.isfinite(result.idata[group]["log_latency"].values).all()


@pytest.mark.slow
@pytest.mark.parametrize("case", small_sweeps.all_case_names())
def test_small_sweep_fit_next_core(case):
    """A user's small sweep (dense + one SD arm, alpha unknown) fits healthy at the defaults."""
    from specbayes.model.fitted import fit_next

    result = fit_next(small_sweeps.case(case).table, seed=1)
    assert result.summary()["healthy"], result.summary()


def test_summary_names_measured_alpha_and_uncatalogued_groups():
    """A per-point alpha given without ``alpha_source`` is one measured sweep, fitted at its
    mean; the summary lists its spread, and a verifier/GPU the catalog does not know."""
    case = small_sweeps.case("real-alpha:HumanEval:dspark")
    fit = mock_fit(case.table, draws=5)
    measured = fit.measured_alpha()
    assert len(measured) == 1
    sd = case.table.data[case.table.data["k"] > 0]
    row = measured.iloc[0]
    assert row["rows"] == len(sd) and row["alpha"] == pytest.approx(sd["alpha"].mean())
    assert row["alpha_min"] < row["alpha"] < row["alpha_max"]
    summary = fit.summary()
    assert list(summary["alpha_measured"]) == list(measured.index)
    assert summary["uncatalogued"] == []
    renamed = mock_fit(small_sweeps.case("uncatalogued:HumanEval:alpha").table, draws=5)
    assert renamed.summary()["uncatalogued"] == ["Acme-30B-Instruct|XPU-9"]


@pytest.mark.slow
def test_curvature_covers_the_real_sd_arms_beyond_the_measured_loads():
    """With ``--curvature`` (the knee prior), fits of the lower half of each real B200 pair's
    stream counts hold the held-out upper half's speedups and SD latencies in their 90 %
    intervals, where the law alone holds 4–5 of 14 SD latencies (issue 43,
    ``benchmarks/load_extrapolation.md``); every fit healthy."""
    import load_extrapolation as bench

    from specbayes.model.priors import KNEE_PRIOR

    scores, healthy = [], []
    for name, rows in bench.table_pairs(bench.REAL, "real").items():
        s, info = bench.run_pair(name, rows, False, None, {"inverse_knee": KNEE_PRIOR})
        scores.append(s)
        healthy.append(
            info["divergences"] == 0 and info["max R-hat"] <= 1.01 and info["min ESS"] >= 400
        )
    scores = pd.concat(scores)
    assert all(healthy)
    held = scores.dropna(subset=["obs_speedup"])
    assert len(held) == 14
    assert held.speedup_in90.mean() >= 12 / 14
    assert scores.sd_in90.dropna().mean() >= 12 / 14


def test_fit_summary_says_when_the_start_search_did_not_converge():
    """``specbayes fit``'s summary names an unconverged start (the chains' warmup then had to
    find the bulk) and is silent when it converged or was not searched (numpyro)."""
    from specbayes.commands.fit import format_summary

    health = {"divergences": 0, "max_r_hat": 1.0, "min_ess_bulk": 900.0, "min_ess_tail": 900.0}
    base = {"model": "sd", "structure": "pooled", "rows": 10, "excluded": 0, "healthy": True,
            "wall_s": 1.0, **health}  # fmt: skip
    line = "stopped unconverged after 50000 iterations"
    unconverged = {**base, "start_converged": False, "start_iterations": 50000}
    assert line in format_summary(unconverged)
    assert "unconverged" not in format_summary({**base, "start_converged": True})
    assert "unconverged" not in format_summary(base)
    assert "1 chain(s) began at the best scouting chain's position" in format_summary(
        {**base, "scout_restarted": 1}
    )
    assert "scouting" not in format_summary({**base, "scout_restarted": 0})


@pytest.mark.slow
def test_moe_fit_on_paper_rows_is_healthy_and_finds_the_expert_reads():
    """The moe level on four cells of an MoE verifier (both prompt and output lengths vary):
    healthy at the defaults, the expert reads within 5 % of the roofline the simulator costs
    them with, and the planner on a cell the fit never saw: its speedup within a few per cent
    of the measured one, on the measured side of 1 (``benchmarks/moe.md``, ``moe_plan.py``)."""
    from moe_level import CELLS, rows
    from moe_plan import held_out_pairs, planned

    from specbayes.fit import fit

    result = fit(rows("Qwen3-30B-A3B", "H100-SXM", CELLS), model="moe", progress=False)
    s = result.summary()
    assert s["healthy"], s
    ((mid, lo, hi, roof),) = s["expert_reads"].values()
    assert abs(mid / roof - 1) < 0.05 and lo < mid < hi
    pairs = held_out_pairs(rows("Qwen3-30B-A3B", "H100-SXM", "512x512"))
    scored = planned(result, pairs[pairs["k"].isin([1, 3, 6])], "Qwen3-30B-A3B", "H100-SXM")
    err = np.abs(np.log(scored["median"] / scored["measured"]))
    assert len(scored) > 20 and np.median(err) < 0.02 and err.max() < 0.1, err.describe()
    clear = (scored["measured"] - 1).abs() > 0.1
    assert ((scored["p_faster"] > 0.5) == (scored["measured"] > 1))[clear].all()
