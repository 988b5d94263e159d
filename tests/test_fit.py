"""Short real fits with fixed seeds: health, recovery, prediction, persistence, CLI, bad input.

The default tier fits one small data set simulated from the model
(:func:`specbayes.model.simulate.simulate_sweeps`) once, at the one default sampler
configuration, and checks the health thresholds honestly; ``slow`` tests cover the dense
level, latent alpha, closed loop, several verifiers and GPUs, and recovery over seeds.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from tiny_fit import tiny_fit_run

from specbayes import laws
from specbayes.data import validate_sweeps
from specbayes.fit import THRESHOLDS, fit, load_fit
from specbayes.model.fitted import NextFit as Fit
from specbayes.model.simulate import simulate_sweeps

SEED = 1
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def sim():
    return simulate_sweeps(seed=SEED)


@pytest.fixture(scope="module")
def sd_fit(sim) -> Fit:
    """The default tier's one real sd fit (default sampler settings), with three rows
    flagged saturated so that the excluded-rows path is exercised by the same fit."""
    df, _ = sim
    df = df.assign(saturated=False)
    df.loc[df.index[:3], "saturated"] = True
    return fit(df, model="sd", sampler_config={"seed": SEED}, progress=False)


def _coverage(f: Fit, truth: pd.DataFrame, level: float = 0.9) -> pd.Series:
    """Share of true unit coefficients inside the central ``level`` interval, per coefficient."""
    rows = truth.assign(
        prefill=truth["cell"].str.split("x").str[0].astype(float),
        decode=truth["cell"].str.split("x").str[1].astype(float),
        k=1 if "c1d" in f.design.coords["coef"] else 0,
        alpha=0.8,
    )
    coefs = f.coefficients(rows)
    lo, hi = (1 - level) / 2, (1 + level) / 2
    out = {}
    # the six cycle coefficients and, pooled, the fixed cost per speculative cycle
    for c in [*f.design.coords["coef"], *(["c1c"] if "c1c" in coefs else [])]:
        q = coefs[c].quantile([lo, hi], dim="sample").values
        t = truth[c].to_numpy()
        out[c] = float(np.mean((q[0] <= t) & (t <= q[1])))
    return pd.Series(out)


def test_sd_fit_is_healthy(sd_fit):
    s = sd_fit.summary()
    assert s["divergences"] == THRESHOLDS["divergences"]
    assert s["max_r_hat"] <= THRESHOLDS["r_hat"]
    assert s["min_ess_bulk"] >= THRESHOLDS["ess_bulk"]
    assert sd_fit.healthy
    diag = sd_fit.diagnostics()
    assert {"variable", "r_hat", "ess_bulk", "ess_tail", "divergences"} <= set(diag.columns)
    assert {"coef_mu_rest", "cell_coef", "trend_logit", "noise_growth"} <= set(diag["variable"])


def test_sd_fit_recovers_coefficients(sd_fit, sim):
    _, truth = sim
    cov = _coverage(sd_fit, truth)
    # 90 % intervals: 4 units x 6 coefficients; allow sampling variation of the rate
    assert cov.mean() >= 0.75, cov
    # the well-identified verifier-pass coefficients are tight and on target
    rows = truth.assign(prefill=256.0, decode=256.0, k=0)
    rows = rows[rows["cell"] == "256x256"]
    med = sd_fit.coefficients(rows)["c2v"].median("sample").values
    assert med == pytest.approx(rows["c2v"].to_numpy(), rel=0.1)


def test_in_sample_checks_of_validate_read_the_fit(sd_fit):
    from specbayes.commands.validate import in_sample_checks

    checks = in_sample_checks(sd_fit)
    assert checks["n_obs"] == len(sd_fit.data) and np.isfinite(checks["elpd_loo"])
    assert 0.8 <= checks["ppc_cov90_in_sample"] <= 1.0


def test_idata_groups_and_attrs(sd_fit):
    groups = set(sd_fit.idata.groups())
    assert {
        "posterior",
        "posterior_predictive",
        "log_likelihood",
        "observed_data",
        "constant_data",
        "sample_stats",
    } <= groups
    assert sd_fit.idata.attrs["model"] == "sd"
    assert "sampler_config" in sd_fit.idata.attrs["config"]
    assert {"specbayes_version", "model_id"} <= set(sd_fit.idata.attrs)
    n = len(sd_fit.data)
    for group in ("log_likelihood", "posterior_predictive"):
        values = sd_fit.idata[group]["log_latency"]
        assert values.sizes["obs"] == n and np.isfinite(values.values).all()
    import arviz as az

    # six rows per sweep, each sweep's two costs its own: a few influential rows (the demo's
    # bar, k > 0.7 for <= 2 % of rows, is checked in benchmarks/model_core.py artefact)
    loo = az.loo(sd_fit.idata, pointwise=True)
    assert np.isfinite(loo.elpd_loo) and (loo.pareto_k.values > 0.7).mean() <= 0.05


def test_predictions_cover_the_data(sd_fit):
    y = sd_fit.data["latency"].to_numpy()
    mu = sd_fit.mean_latency(sd_fit.data)
    assert mu.dims == ("sample", "row")
    assert np.median(np.abs(np.log(mu.median("sample").values / y))) < 0.03
    pred = sd_fit.predict(sd_fit.data)
    lo, hi = np.quantile(pred.values, [0.05, 0.95], axis=0)
    assert 0.8 <= np.mean((y >= lo) & (y <= hi)) <= 1.0


def test_log_likelihood_of_rows_equals_the_stored_pointwise_group(sd_fit):
    ll = sd_fit.log_likelihood(sd_fit.data).values
    stored = sd_fit.idata.log_likelihood["log_latency"].stack(sample=("chain", "draw"))
    stored = stored.transpose("sample", ...).values
    assert ll.shape == stored.shape
    np.testing.assert_allclose(ll, stored, atol=1e-9)
    with pytest.raises(ValueError, match="observed 'latency'"):
        sd_fit.log_likelihood(sd_fit.data.drop(columns="latency"))


def test_unseen_cell_is_predicted_from_the_trend(sd_fit):
    rows = pd.DataFrame(
        dict(
            verifier="V8B",
            hardware="H100",
            drafter="D1B",
            prefill=768.0,
            decode=384.0,
            k=[0, 3],
            alpha=[np.nan, 0.8],
            rps=0.5,
        )
    )
    coefs = sd_fit.coefficients(rows)
    # the six cycle coefficients and the pooled structure's fixed cost per speculative cycle
    # (no cost per sequence of a cycle, c2c: the H100's attention packs the GQA group)
    assert set(coefs.data_vars) == {"c1p", "c1v", "c1d", "c2p", "c2v", "c2d", "c1c"}
    assert coefs.sizes["row"] == 2
    for name in ("c1d", "c1c"):  # drafter costs: none on the dense row
        assert (coefs[name].values[:, 0] == 0).all() and (coefs[name].values[:, 1] > 0).all()
    # one deviation draw per unseen cell, shared by its rows
    np.testing.assert_array_equal(coefs["c2v"].values[:, 0], coefs["c2v"].values[:, 1])
    # wider than a seen cell but finite and positive
    lat = sd_fit.mean_latency(rows)
    assert np.isfinite(lat.values).mean() > 0.99


def test_compare_takes_a_dense_arm_without_a_drafter(sd_fit, sim):
    """plan.compare of a dense arm (no drafter named) and an SD arm: their rows, asked for
    together, must not turn the dense arm's missing drafter into "none" on an SD row."""
    from specbayes import plan

    df, _ = sim
    row = df[(df["k"] > 0) & df["alpha"].notna()].iloc[0]
    where = dict(verifier=row["verifier"], hardware=row["hardware"])
    dense = plan.Arm(**where, prefill=row["prefill"], decode=row["decode"])
    sd = plan.Arm(
        **where, prefill=row["prefill"], decode=row["decode"], drafter=row["drafter"],
        alpha=float(row["alpha"]), k=int(row["k"]),
    )  # fmt: skip
    out = plan.compare(sd_fit, dense, sd, [float(row["rps"])])
    assert np.isfinite(out["speedup"]["median"]).all()


def test_round_trip_predicts_identically(sd_fit, tmp_path):
    path = sd_fit.save(tmp_path / "fit.nc")
    back = load_fit(path)
    assert back.model_name == "sd"
    rows = sd_fit.data.iloc[[0, 7, 50]].copy()
    unseen = rows.assign(prefill=640.0, decode=300.0, cell=np.nan)
    for r in (rows, unseen):
        np.testing.assert_array_equal(sd_fit.predict(r).values, back.predict(r).values)
        np.testing.assert_array_equal(sd_fit.mean_latency(r).values, back.mean_latency(r).values)
    pd.testing.assert_frame_equal(
        back.data[["verifier", "k", "rps", "latency"]].reset_index(drop=True),
        sd_fit.data[["verifier", "k", "rps", "latency"]].reset_index(drop=True),
        check_dtype=False,
    )
    assert np.isfinite(back.model.point_logps()["log_latency"])  # rebuilt from code


def test_unknown_verifier_is_one_clear_error(sd_fit):
    rows = pd.DataFrame(
        dict(verifier=["Nope-70B"], hardware="H100", prefill=256.0, decode=256.0, k=0, rps=0.1)
    )
    with pytest.raises(ValueError, match=r"unknown \(verifier\|hardware\) \['Nope-70B\|H100'\]"):
        sd_fit.predict(rows)


def test_alpha_draws_refused_when_alpha_was_given(sd_fit):
    with pytest.raises(ValueError, match="not inferred"):
        sd_fit.alpha_draws("V8B", "D1B", "256x256")


def test_bad_input_errors():
    with pytest.raises(ValueError, match="empty"):
        fit(pd.DataFrame(), model="sd")
    df, _ = simulate_sweeps(seed=5, loads=(0.3,))
    with pytest.raises(ValueError, match="single load level"):
        fit(df, model="sd")
    df, _ = simulate_sweeps(seed=5)
    with pytest.raises(ValueError, match=r"all .* rows were excluded"):
        fit(df.assign(saturated=True), model="sd")
    with pytest.raises(ValueError, match="sampler"):
        fit(df, model="sd", sampler_config={"sampler": "gibbs"})
    with pytest.raises(ValueError, match="unknown model"):
        fit(df, model="quantum")


def test_excluded_rows_are_kept_with_reasons(sd_fit, tmp_path):
    assert len(sd_fit.excluded) == 3 and sd_fit.excluded["reason"].str.contains("saturated").all()
    back = load_fit(sd_fit.save(tmp_path / "f.nc"))
    assert len(back.excluded) == 3 and (back.excluded["reason"] != "").all()


def test_cli_fit_prints_table_and_strict_fails_on_unhealthy():
    """``specbayes fit --strict`` on 2 chains x 20 draws (the session's tiny fit, made by the
    command): the health table is printed, the fit is saved, and the exit code is 1."""
    out, code, text = tiny_fit_run()
    assert code == 1  # 20 draws cannot reach bulk ESS 400
    for word in ("divergences", "max R-hat", "min bulk ESS", "min tail ESS", "wall time"):
        assert word in text
    assert "sampler nutpie: 2 chains x 20 draws (20 tune), target_accept 0.9" in text
    assert out.exists()  # written before the health verdict


@pytest.mark.slow
def test_real_b200_sd_fit_is_healthy_and_covers_the_unsaturated_points():
    """The real B200 sweeps (closed loop; dense, MTP k = 2 and DSpark k = 7 with measured
    acceptance lengths) at the defaults: healthy, and the 90 % posterior-predictive band
    holds the unsaturated latencies."""
    from specbayes.ingest import ingest_files

    table = validate_sweeps(
        ingest_files([REPO / "data/real/speculators_qwen3.8-27b_b200_sweeps.csv"])
    )
    f = fit(table, model="sd", progress=False)
    s = f.summary()
    assert s["divergences"] == 0, s
    assert s["max_r_hat"] <= THRESHOLDS["r_hat"], s
    assert s["min_ess_bulk"] >= THRESHOLDS["ess_bulk"], s
    # the two saturated DSpark N = 128 points are listed, not fitted
    assert len(f.excluded) == 2 and f.excluded["reason"].str.contains("saturated").all()
    y = np.log(f.data["latency"].to_numpy())
    draws = f.idata.posterior_predictive["log_latency"].stack(s=("chain", "draw")).values
    lo, hi = np.quantile(draws, [0.05, 0.95], axis=-1)
    inside = (y >= lo) & (y <= hi)
    assert len(y) == 46 and inside.mean() >= 0.85, f.data.loc[~inside]


# ---------------------------------------------------------------------------------------------
# slow tier
# ---------------------------------------------------------------------------------------------


#: The pooled structure with a latent alpha on these small sets (96 rows; issue 42): not
#: healthy at the defaults (2026-12-07, C1 sweep costs centred: open loop bulk ESS 368,
#: closed loop R-hat 1.02; benchmarks/model_core.md) — strict, so a fix turns these into
#: failures to unmark.
LATENT_POOLED = pytest.mark.xfail(
    reason="issue 42: the pooled structure's latent alpha is not healthy yet", strict=True
)

#: The open-loop set of the same (seed 21) sits at the bar: bulk ESS 362 in a process of its
#: own at 2026-12-07 21:52, above 400 (XPASS) inside the slow tier's worker that had fitted
#: other models first — the draws follow the compiled code's floating-point order. Not
#: strict: a result either side of the bar says nothing about a fix
#: (``benchmarks/two_drafters.py`` and ``alpha_hidden.py`` judge the latent alpha).
LATENT_POOLED_AT_BAR = pytest.mark.xfail(
    reason="issue 42: the pooled structure's latent alpha is at the bar (bulk ESS ~360-400)",
    strict=False,
)


@pytest.mark.slow
@pytest.mark.parametrize(
    "kind",
    [
        "dense",
        pytest.param("latent_alpha", marks=LATENT_POOLED_AT_BAR),
        "closed_loop",
        pytest.param("closed_loop_latent_alpha", marks=LATENT_POOLED),
        "multi",
    ],
)
def test_other_settings_sample_healthily(kind):
    """The default core on data simulated from it: the dense level, a latent alpha per
    workload (open and closed loop), closed loop, three verifiers on two GPUs. The names are
    not in the catalog: the group levels take their generic priors."""
    kw: dict = dict(seed=21)
    model = "dense" if kind == "dense" else "sd"
    if kind == "dense":
        kw["level"] = "dense"
    if "latent_alpha" in kind:
        kw["unknown_alpha"] = True
    if kind.startswith("closed_loop"):
        kw["closed_loop"] = True
    if kind == "multi":
        kw.update(verifiers={"A": 8e9, "B": 14e9, "C": 32e9}, hardware=("H100", "B200"))
    df, truth = simulate_sweeps(**kw)
    f = fit(df, model=model, progress=False)
    s = f.summary()
    assert s["divergences"] == 0, s
    assert s["max_r_hat"] <= 1.01, s
    assert s["min_ess_bulk"] >= 400, s
    if "latent_alpha" in kind:
        # one acceptance rate per workload, inferred from the k pattern alone
        for cell, true_alpha in truth.set_index("cell")["alpha"].items():
            a = f.alpha_draws("V8B", "D1B", cell)
            lo, hi = np.quantile(a, [0.01, 0.99])
            assert lo < true_alpha < hi, (cell, true_alpha, lo, hi)


@pytest.mark.slow
def test_recovery_coverage_over_seeds():
    rates = []
    for seed in (31, 32, 33, 34):
        df, truth = simulate_sweeps(seed=seed)
        f = fit(df, model="sd", sampler_config={"seed": seed}, progress=False)
        rates.append(_coverage(f, truth))
    cov = pd.concat(rates, axis=1).mean(axis=1)
    # 90 % intervals over 4 seeds x 4 units per coefficient: near nominal
    assert (cov >= 0.75).all(), cov
    assert cov.mean() >= 0.82, cov


@pytest.mark.slow
def test_unseen_cell_beyond_the_measured_kv_range_follows_the_trend():
    """A held-out cell with the largest KV cache, in every (verifier, GPU) group, is
    extrapolated along the cell trends of the pooled sd fit: its dense rows' mean latency's
    90 % band holds the true mean. (A dense-only table with one sweep per cell takes the
    anchored structure, which has no cell trend: it refuses unseen cells, README.)

    The unit of coverage is a group's held-out cell: its own c2v deviation (N(0, 0.05) in the
    simulation) is drawn once and is unpredictable by construction, so its four loads are
    covered or missed together. Three simulated sets, four groups each: 12 held-out cells, of
    which a calibrated 90 % band misses 8 or more with probability 2.6 %. (One set alone was
    a coin flip: at seed 5 one cell's truth sat at the band's 4.5 % quantile, inside or out by
    Monte Carlo error.)"""
    cells = ((256, 256), (512, 512), (1024, 256), (256, 1024), (512, 128), (1024, 1024))
    covered, errors = [], []
    for seed in (5, 6, 7):
        df, truth = simulate_sweeps(
            verifiers={"A": 8e9, "B": 14e9}, hardware=("H100", "A100"), cells=cells, seed=seed
        )
        held = df["cell"] == "1024x1024"
        f = fit(df[~held], model="sd", sampler_config={"seed": seed}, progress=False)
        s = f.summary()
        assert s["structure"] == "pooled", s
        assert s["divergences"] == 0 and s["max_r_hat"] <= 1.01 and s["min_ess_bulk"] >= 400, s
        # loads up to half of saturation: past that a 1 % error in the extrapolated C2 is a
        # large one in latency, for any model
        test = df[held & (df["k"] == 0)]
        test = test[test.groupby(["verifier", "hardware"])["rps"].rank() <= 4]
        mu = f.mean_latency(test).values
        lo, hi = np.quantile(mu, [0.05, 0.95], axis=0)
        tr = truth.set_index(["verifier", "hardware", "cell"]).loc[
            list(zip(test["verifier"], test["hardware"], test["cell"], strict=True))
        ]
        c1 = (tr["c1p"] + 1024.0 * tr["c1v"]).to_numpy()
        c2 = (tr["c2p"] + 1024.0 * tr["c2v"]).to_numpy()
        true_mu = laws.latency(test["rps"].to_numpy(), c1, c2)
        inside = pd.Series((lo <= true_mu) & (true_mu <= hi), index=test.index)
        covered += inside.groupby([test["verifier"], test["hardware"]]).all().tolist()
        # at half of saturation one sd of the cell's deviation moves the mean latency ~5 %
        errors.append(np.abs(np.log(np.median(mu, axis=0) / true_mu)).max())
    assert np.sum(covered) >= 9, covered
    assert max(errors) < 0.15, errors
