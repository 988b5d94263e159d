"""The planner: every number equals laws on the same draws; intervals come from draws."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import DrawsFit

from specbayes import laws, plan
from specbayes.intervals import INTERVAL_PROB, interval_bounds

ARM = plan.Arm("V8", "A100", prefill=1024, decode=1024, drafter="eagle3", alpha=0.75, k=6)
RPS = np.array([0.0, 2.0, 5.0, 8.0, 11.0])


def costs(fit, alpha, k, decode=1024):
    """Effective costs per draw; the draws broadcast along a leading axis."""
    extra = max(np.ndim(alpha), np.ndim(k))
    d = [fit.draws[name].reshape((-1,) + (1,) * extra) for name in plan.COEFFICIENTS]
    return laws.effective_costs(*d, decode, alpha, k)


def test_speedup_equals_laws_per_draw(draws_fit):
    table = plan.speedup(draws_fit, ARM, RPS)
    c1s, c2s = costs(draws_fit, 0.75, 6)
    c1d, c2d = costs(draws_fit, 0.75, 0)
    s = laws.speedup(RPS[None, :], c1s[:, None], c2s[:, None], c1d[:, None], c2d[:, None])
    lo, hi = interval_bounds(INTERVAL_PROB)
    np.testing.assert_allclose(table["mean"], s.mean(axis=0))
    np.testing.assert_allclose(table["lo"], np.quantile(s, lo, axis=0, method="inverted_cdf"))
    np.testing.assert_allclose(table["hi"], np.quantile(s, hi, axis=0, method="inverted_cdf"))
    np.testing.assert_allclose(table["p_faster"], (s > 1).mean(axis=0))
    # the posterior-mean speedup is not the speedup of posterior-mean coefficients
    plug_in = laws.speedup(RPS, c1s.mean(), c2s.mean(), c1d.mean(), c2d.mean())
    assert np.max(np.abs(table["mean"].to_numpy() - plug_in)) > 1e-3
    assert table["p_dense_saturated"].iloc[0] == 0.0


def test_speedup_falls_with_load_like_the_paper(draws_fit):
    table = plan.speedup(draws_fit, ARM, RPS)
    assert table["median"].iloc[0] > 1.4
    assert np.all(np.diff(table["median"].to_numpy()) < 0)


def test_break_even_draws_and_probabilities(draws_fit):
    table = plan.break_even(draws_fit, ARM, ks=[2, 6])
    c1s, c2s = costs(draws_fit, 0.75, np.array([2, 6]))
    c1d, c2d = costs(draws_fit, 0.75, 0)
    star = laws.break_even_rps(c1s, c2s, c1d[:, None], c2d[:, None])
    np.testing.assert_allclose(table.attrs["rps_star_draws"], star)
    np.testing.assert_allclose(
        table["rps_star_median"], np.nanquantile(star, 0.5, axis=0, method="inverted_cdf")
    )
    # the crossing in units of the dense load, r* = RPS* C2,dense, draw by draw
    r_star = star * c2d[:, None]
    np.testing.assert_allclose(
        table["r_star_median"], np.nanquantile(r_star, 0.5, axis=0, method="inverted_cdf")
    )
    probs = table[["p_wins_then_loses", "p_loses_then_wins", "p_always_wins", "p_never_wins"]]
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-12)
    # speedup is exactly 1 at each draw's break-even rate
    k6 = star[:, 1]
    ok = np.isfinite(k6)
    s = laws.speedup(k6[ok], c1s[ok, 1], c2s[ok, 1], c1d[ok], c2d[ok])
    np.testing.assert_allclose(s, 1.0, rtol=1e-9)


def test_cost_ratios_and_red_flag(draws_fit):
    table = plan.cost_ratios(draws_fit, ARM, ks=range(1, 11))
    assert (table["c1r_hi"] < 1).all()  # SD always lowers the fixed cost here
    assert table.loc[table.k == 10, "red_flag"].item()
    # the k minimising C1R is larger than the k minimising C2R (the paper's tension)
    assert table.k[table.c1r_mean.idxmin()] > table.k[table.c2r_mean.idxmin()]


def test_optimal_k_table_consistent_with_laws(draws_fit):
    alphas, rps = np.array([0.6, 0.9]), np.array([0.5, 9.0])
    table = plan.optimal_k(draws_fit, ARM, alphas, rps)
    p_cols = [c for c in table if c.startswith("p_best_k")]
    np.testing.assert_allclose(table[p_cols].sum(axis=1) + table["p_all_saturated"], 1.0)
    for _, row in table.iterrows():
        c1, c2 = costs(draws_fit, row.alpha, np.arange(11))
        lat = laws.latency(row.rps, c1, c2)
        assert row.k_bayes == int(np.argmin(lat.mean(axis=0)))
        best = lat.min(axis=1)
        assert row.regret == pytest.approx(np.mean(lat[:, int(row.k_bayes)] / best) - 1)
        assert row.regret >= 0
    low, high = table[table.rps == 0.5], table[table.rps == 9.0]
    assert (low.k_bayes.to_numpy() >= high.k_bayes.to_numpy()).all()


def test_capacity_meets_slo_with_stated_probability(draws_fit):
    slo, prob = 3.0, 0.9
    table = plan.capacity(draws_fit, ARM, slo, prob=prob, ks=[0, 2, 6])
    for _, row in table.iterrows():
        c1, c2 = costs(draws_fit, 0.75, row.k)
        p_ok = np.mean(laws.latency(row.capacity_rps, c1, c2) <= slo)
        assert p_ok >= prob
        assert np.mean(laws.latency(row.capacity_rps * 1.02, c1, c2) <= slo) < prob
    reps = plan.replicas(draws_fit, ARM, 100.0, slo, prob=prob, ks=[0, 2, 6])
    np.testing.assert_array_equal(reps["replicas"], np.ceil(100.0 / table["capacity_rps"]))


def test_compare_two_arms_matches_speedup(draws_fit):
    dense = plan.Arm("V8", "A100", prefill=1024, decode=1024)
    out = plan.compare(draws_fit, dense, ARM, RPS)
    np.testing.assert_allclose(out["speedup"]["mean"], plan.speedup(draws_fit, ARM, RPS)["mean"])
    assert 0 < out["crossover"]["p_cross"].item() <= 1
    assert out["saturation"]["median"].iloc[0] > out["saturation"]["median"].iloc[1]


def test_bad_inputs_get_clear_messages(draws_fit):
    with pytest.raises(ValueError, match=r"alpha must lie in \(0, 1\]"):
        plan.optimal_k(draws_fit, ARM, [1.5], [1.0])
    with pytest.raises(ValueError, match="request rates must be finite and >= 0"):
        plan.speedup(draws_fit, ARM, [-1.0])
    with pytest.raises(ValueError, match="below the zero-load latency"):
        plan.capacity(draws_fit, ARM, 0.2)
    with pytest.raises(ValueError, match="unknown verifier"):
        plan.speedup(draws_fit, plan.Arm("nope", "A100", 1024, 1024, alpha=0.7, k=2), RPS)
    with pytest.raises(ValueError, match="no acceptance rate"):
        plan.speedup(draws_fit, plan.Arm("V8", "A100", 1024, 1024, k=2), RPS)
    past = plan.speedup(draws_fit, ARM, [30.0])  # past both saturation points
    assert past["p_dense_saturated"].item() == 1.0 and past["p_sd_saturated"].item() == 1.0
    assert np.isnan(past["median"].item())


def test_arm_rejects_impossible_configurations():
    with pytest.raises(ValueError, match=r"alpha must lie in \(0, 1\]"):
        plan.Arm("V8", "A100", 1024, 1024, alpha=0.0, k=2)
    with pytest.raises(ValueError, match="k must be a non-negative integer"):
        plan.Arm("V8", "A100", 1024, 1024, alpha=0.5, k=-1)
    with pytest.raises(ValueError, match="decode >= 1"):
        plan.Arm("V8", "A100", 1024, 0)


def test_default_rate_grid_is_round():
    from specbayes.commands.plan import rate_grid

    assert rate_grid(5.86) == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert rate_grid(44.1) == [0.0, 10.0, 20.0, 30.0, 40.0]
    assert rate_grid(0.37) == [0.0, 0.1, 0.2, 0.3]


def test_resolve_arm_takes_the_cells_tokens_and_refuses_unmeasured_pairs():
    from conftest import law_rows

    from specbayes.report import resolve_arm

    fit = DrawsFit()
    fit.data = pd.concat([law_rows(fit), law_rows(fit, decode=256)], ignore_index=True)
    arm = resolve_arm(fit, cell="1024x256")
    assert (arm.prefill, arm.decode, arm.cell) == (1024.0, 256.0, "1024x256")
    arm = resolve_arm(fit, cell="300x700")  # not fitted, but its label gives the tokens
    assert (arm.prefill, arm.decode) == (300.0, 700.0)
    with pytest.raises(ValueError, match="never measured with verifier V8"):
        resolve_arm(fit, drafter="medusa")
    with pytest.raises(ValueError, match="--verifier X: not in this fit"):
        resolve_arm(fit, verifier="X")
    with pytest.raises(ValueError, match="--cell chat"):
        resolve_arm(fit, cell="chat")
    with pytest.raises(ValueError, match="give one or the other"):
        resolve_arm(fit, cell="1024x256", decode=512)


# --- closed loop (concurrency): the same N streams in both arms ------------------------------

STREAMS = np.array([1.0, 4.0, 16.0, 64.0])


def test_speedup_in_concurrency_equals_closed_loop_law(draws_fit):
    table = plan.speedup(draws_fit, ARM, concurrency=STREAMS)
    c1s, c2s = costs(draws_fit, 0.75, 6)
    c1d, c2d = costs(draws_fit, 0.75, 0)
    lat_d = laws.closed_loop_latency(STREAMS[None, :], c1d[:, None], c2d[:, None])
    s = lat_d / laws.closed_loop_latency(STREAMS[None, :], c1s[:, None], c2s[:, None])
    assert list(table.columns[:1]) == ["concurrency"] and "p_sd_saturated" not in table
    assert table.shape[0] == STREAMS.size
    np.testing.assert_allclose(table["mean"], s.mean(axis=0))
    np.testing.assert_allclose(table["p_faster"], (s > 1).mean(axis=0))
    assert (table["lo"] <= table["median"]).all() and (table["median"] <= table["hi"]).all()


def test_break_even_concurrency_is_the_closed_loop_crossing(draws_fit):
    table = plan.break_even(draws_fit, ARM, ks=[2, 6], closed_loop=True)
    c1s, c2s = costs(draws_fit, 0.75, np.array([2, 6]))
    c1d, c2d = costs(draws_fit, 0.75, 0)
    n_star = table.attrs["n_star_draws"]
    # no curvature here: N* = (C1 dense - C1 sd) / (C2 sd - C2 dense), draw by draw
    expected = (c1d[:, None] - c1s) / (c2s - c2d[:, None])
    np.testing.assert_allclose(n_star, np.where(expected > 0, expected, np.nan))
    np.testing.assert_allclose(
        table["n_star_median"], np.nanquantile(n_star, 0.5, axis=0, method="inverted_cdf")
    )
    assert (table["n_star_lo"] <= table["n_star_median"]).all()
    assert (table["n_star_median"] <= table["n_star_hi"]).all()
    probs = table[["p_wins_then_loses", "p_loses_then_wins", "p_always_wins", "p_never_wins"]]
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-12)
    assert "rps_star_median" not in table
    # the speedup is exactly 1 at each draw's N*
    ok = np.isfinite(n_star[:, 1])
    s = laws.closed_loop_speedup(n_star[ok, 1], c1s[ok, 1], c2s[ok, 1], c1d[ok], c2d[ok])
    np.testing.assert_allclose(s, 1.0, rtol=1e-9)


def test_break_even_concurrency_law_with_curvature():
    # SD cheaper at zero load, flatter per stream, but more curved: it loses past the root
    # of 0.01 N^2 - 0.5 = 0 only
    n = laws.break_even_concurrency(1.0, 0.1, 1.5, 0.1, 0.01, 0.0)
    assert n == pytest.approx(np.sqrt(50.0))
    assert np.isnan(laws.break_even_concurrency(1.0, 0.05, 1.5, 0.1))  # always wins
    assert np.isnan(laws.break_even_concurrency(2.0, 0.2, 1.5, 0.1))  # never wins
    assert laws.break_even_concurrency(2.0, 0.05, 1.5, 0.1) == pytest.approx(10.0)


def test_capacity_in_streams_meets_slo(draws_fit):
    slo, prob = 10.0, 0.9
    table = plan.capacity(draws_fit, ARM, slo, prob=prob, ks=[0, 6], closed_loop=True)
    for _, row in table.iterrows():
        c1, c2 = costs(draws_fit, 0.75, row.k)
        n = row.capacity_streams
        assert n >= 1 and n == int(n)
        assert np.mean(laws.closed_loop_latency(n, c1, c2) <= slo) >= prob
        assert np.mean(laws.closed_loop_latency(n + 1, c1, c2) <= slo) < prob
        tput = n / laws.closed_loop_latency(n, c1, c2)
        assert row.throughput_rps == pytest.approx(
            np.quantile(tput, 1 - prob, method="inverted_cdf")
        )
    assert "capacity_rps" not in table


def test_optimal_k_in_concurrency(draws_fit):
    table = plan.optimal_k(draws_fit, ARM, [0.75], concurrency=[1, 64])
    assert list(table["concurrency"]) == [1, 64]
    for _, row in table.iterrows():
        c1, c2 = costs(draws_fit, 0.75, np.arange(11))
        lat = laws.closed_loop_latency(row.concurrency, c1, c2)
        assert row.k_bayes == int(np.argmin(lat.mean(axis=0)))
    assert table.k_bayes.iloc[0] >= table.k_bayes.iloc[1]


def test_concurrency_bad_inputs_get_clear_messages(draws_fit):
    with pytest.raises(ValueError, match=r"exactly one of rps .* or concurrency"):
        plan.speedup(draws_fit, ARM, [1.0], concurrency=[4])
    with pytest.raises(ValueError, match="exactly one of rps"):
        plan.speedup(draws_fit, ARM)
    with pytest.raises(
        ValueError, match=r"concurrency \(streams in flight\) must be finite and > 0"
    ):
        plan.speedup(draws_fit, ARM, concurrency=[4, -1])
    with pytest.raises(ValueError, match=r"~0 streams .* no stream count meets it"):
        plan.capacity(draws_fit, ARM, 0.2, closed_loop=True)


def test_replicas_in_streams_hold_the_total_under_the_slo(draws_fit):
    slo, prob, total = 10.0, 0.9, 1000
    reps = plan.replicas(draws_fit, ARM, slo_latency=slo, prob=prob, ks=[0, 6], total_streams=total)
    assert reps.attrs["total_streams"] == total and "total_rps" not in reps.attrs
    np.testing.assert_array_equal(reps["replicas"], np.ceil(total / reps["capacity_streams"]))
    for _, row in reps.iterrows():
        c1, c2 = costs(draws_fit, 0.75, row.k)
        n = int(row.replicas)
        assert n > 1  # the fixture must need more than one server

        # the busiest of n servers holds ceil(N / n) streams: enough, and no fewer would do
        met = [
            np.mean(laws.closed_loop_latency(np.ceil(total / m), c1, c2) <= slo) for m in (n, n - 1)
        ]
        assert met[0] >= prob and met[1] < prob
    # these draws have C2R > 1: at this SLO a k = 6 server holds fewer streams than a dense
    # one (99 vs 114), so it takes more of them
    by_k = reps.set_index("k")
    assert by_k.capacity_streams[6] < by_k.capacity_streams[0]
    assert by_k.replicas[6] > by_k.replicas[0]
    with pytest.raises(ValueError, match=r"total_streams must be finite and > 0"):
        plan.replicas(draws_fit, ARM, slo_latency=slo, total_streams=0)
    with pytest.raises(ValueError, match=r"exactly one of total_rps .* or total_streams"):
        plan.replicas(draws_fit, ARM, 100.0, slo, total_streams=total)


def test_measured_stream_range_is_where_both_arms_were_measured(draws_fit):
    rows = [
        dict(verifier="V8", hardware="A100", cell="1024x1024", k=k, drafter=d, concurrency=n)
        for k, d, streams in ((0, "none", (1, 2, 64)), (6, "eagle3", (2, 8, 32)), (2, "x", (128,)))
        for n in streams
    ]
    draws_fit.data = pd.DataFrame(rows)
    assert plan.measured_stream_range(draws_fit, ARM) == (2.0, 32.0)
    assert plan.measured_streams(draws_fit, ARM) == 64.0
    no_sd = plan.Arm("V8", "A100", prefill=1024, decode=1024, drafter="eagle3", alpha=0.75, k=3)
    assert np.isnan(plan.measured_stream_range(draws_fit, no_sd)).all()  # k = 3 never measured


def test_curvature_of_the_knee_in_tokens():
    """plan.curvature: no knee, no curvature; a knee in tokens per pass (issue 43)."""
    c = {"c2p": np.array([0.004]), "c2v": np.array([2e-5]), "c2d": np.array([1e-6])}
    assert plan.curvature(c, 256.0, 0.7, 3) == pytest.approx(0.0)
    tokens = plan.curvature({**c, "knee_tokens": np.array([150.0])}, 256.0, 0.7, 3)
    expect = laws.token_knee_curvature(c["c2p"], c["c2v"], c["c2d"], 256.0, 0.7, 3, 150.0)
    np.testing.assert_allclose(tokens, expect)
