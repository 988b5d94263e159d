"""The latency law with a knee in the batch (``laws.knee_latency`` and its loops)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import brentq

from specbayes import laws

C1, C2, BATCH, SLOPE = 1.1, 0.03, 80.0, 0.004


def _sharp_root(rps, c1, c2, batch, slope):
    """Smallest L > 0 of L = C1 + lam L C2 + slope max(0, lam L - batch), by bracketing."""
    f = lambda x: c1 + rps * x * c2 + slope * max(0.0, rps * x - batch) - x  # noqa: E731
    grid = np.geomspace(c1 * 0.999, 1e7, 4000)
    values = np.array([f(x) for x in grid])
    below = np.flatnonzero(values < 0)
    if len(below) == 0:
        return np.inf
    return brentq(f, grid[below[0] - 1], grid[below[0]])


def test_sharp_knee_solves_the_hinged_law(monkeypatch):
    """With a vanishing turn the knee law is the root of L = C1 + B C2 + D max(0, B - B_K)."""
    monkeypatch.setattr(laws, "KNEE_WIDTH", 1e-6)
    rng = np.random.default_rng(0)
    for _ in range(300):
        c1, c2 = rng.uniform(0.5, 5), rng.uniform(0.005, 0.1)
        batch, slope = rng.uniform(5, 200), rng.uniform(0, 0.2)
        rps = rng.uniform(0, 1.2) / c2
        got = laws.knee_latency(rps, c1, c2, batch, slope)
        want = _sharp_root(rps, c1, c2, batch, slope)
        if np.isfinite(want) and want < 1e6:
            assert got == pytest.approx(want, rel=1e-5)
        else:
            assert np.isinf(got)


def test_below_the_knee_is_the_law_and_past_it_the_steeper_line():
    lam = np.array([1.0, 5.0, 10.0])  # batches of ~1-16 requests, far below 80
    # equal but for the smooth turn's tail, sqrt(80) softplus(-7) ~ 1e-2 requests' worth
    np.testing.assert_allclose(
        laws.knee_latency(lam, C1, C2, BATCH, SLOPE), laws.latency(lam, C1, C2), rtol=1e-4
    )
    # closed loop: the slope in N is C2 below the knee and C2 + slope well past it
    n = np.array([10.0, 11.0, 300.0, 301.0])
    lat = laws.closed_loop_latency(n, C1, C2, knee=(BATCH, SLOPE))
    assert lat[1] - lat[0] == pytest.approx(C2, rel=1e-4)
    assert lat[3] - lat[2] == pytest.approx(C2 + SLOPE, rel=1e-6)


def test_knee_latency_rises_to_its_saturation_rate():
    sat = laws.saturation_rps(C1, C2, knee=(BATCH, SLOPE))
    assert 1 / (C2 + SLOPE) * 0.99 < sat < 1 / C2  # the steeper line's wall, about
    lam = np.linspace(0, sat * (1 - 1e-6), 400)
    lat = laws.knee_latency(lam, C1, C2, BATCH, SLOPE)
    assert np.all(np.isfinite(lat)) and np.all(np.diff(lat) > 0)
    assert laws.latency(sat * 1.001, C1, C2, knee=(BATCH, SLOPE)) == np.inf


def test_log_headroom_with_knee_in_a_graph_matches_numpy_and_stays_finite():
    import pytensor.tensor as pt

    lam = np.array([1.0, 20.0, 29.0, 40.0])  # the last is past every wall
    closed = np.array([False, False, False, False])
    exact = laws.log_headroom(C1, C2, lam, lam, closed, knee=(BATCH, SLOPE))
    c1 = pt.as_tensor(np.full(4, C1))
    soft = laws.log_headroom(
        c1, C2, lam, lam, closed, knee=(BATCH, SLOPE), wall_softness=0.01
    ).eval()
    np.testing.assert_allclose(soft[:2], exact[:2], rtol=1e-9)  # far from the wall: exact
    assert np.isneginf(exact[3]) and np.isfinite(soft).all()
    assert soft[3] < soft[2] < soft[1]


# ---------------------------------------------------------------------------------------------
# the planner's laws with a knee: each against a brute-force numeric answer
# ---------------------------------------------------------------------------------------------

#: Two arms as the planner sees them: SD (lower C1, higher C2, an earlier knee) and dense.
SD = dict(c1=0.8, c2=0.045, batch=30.0, slope=0.01)
DENSE = dict(c1=1.2, c2=0.03, batch=200.0, slope=0.004)


def _knee(arm):
    return arm["batch"], arm["slope"]


def test_rps_at_latency_inverts_the_knee_law():
    targets = np.array([0.5, C1 * 1.01, 2.0, 5.0, 40.0, 1e4])
    lam = laws.rps_at_latency(targets, C1, C2, knee=(BATCH, SLOPE))
    back = laws.knee_latency(lam, C1, C2, BATCH, SLOPE)
    zero = laws.knee_latency(0.0, C1, C2, BATCH, SLOPE)
    assert lam[0] == 0.0  # below the zero-load latency no rate meets it
    np.testing.assert_allclose(back[1:], targets[1:], rtol=1e-9)
    assert np.all(np.diff(lam) > 0) and zero < targets[1]
    assert lam[-1] < laws.saturation_rps(C1, C2, knee=(BATCH, SLOPE))
    # and the knee only lowers the rate the plain law would give
    assert np.all(lam <= laws.rps_at_latency(targets, C1, C2) + 1e-12)


def test_concurrency_at_latency_inverts_the_closed_knee_law():
    targets = np.array([0.5, 2.0, 5.0, 40.0])
    n = laws.concurrency_at_latency(targets, C1, C2, knee=(BATCH, SLOPE))
    assert n[0] == 0.0
    back = laws.closed_loop_latency(n[1:], C1, C2, knee=(BATCH, SLOPE))
    np.testing.assert_allclose(back, targets[1:], rtol=1e-9)
    # broadcasting: draws x targets
    c1 = np.array([[1.0], [1.5]])
    grid = laws.concurrency_at_latency(targets[None, 1:], c1, C2, knee=(BATCH, SLOPE))
    assert grid.shape == (2, 3) and np.all(grid[0] > grid[1])


def test_speedups_with_knees_are_the_ratio_of_the_knee_latencies():
    lam = np.linspace(0.0, 30.0, 7)
    got = laws.speedup(
        lam,
        SD["c1"],
        SD["c2"],
        DENSE["c1"],
        DENSE["c2"],
        knee_sd=_knee(SD),
        knee_dense=_knee(DENSE),
    )
    l_sd = laws.knee_latency(lam, SD["c1"], SD["c2"], *_knee(SD))
    l_dense = laws.knee_latency(lam, DENSE["c1"], DENSE["c2"], *_knee(DENSE))
    with np.errstate(all="ignore"):
        want = np.where(np.isinf(l_sd) & np.isinf(l_dense), np.nan, l_dense / l_sd)
    np.testing.assert_array_equal(got, want)
    n = np.array([1.0, 10.0, 100.0, 1000.0])
    closed = laws.closed_loop_speedup(
        n, SD["c1"], SD["c2"], DENSE["c1"], DENSE["c2"], knee_sd=_knee(SD), knee_dense=_knee(DENSE)
    )
    plain = laws.closed_loop_speedup(n, SD["c1"], SD["c2"], DENSE["c1"], DENSE["c2"])
    assert closed[0] == pytest.approx(plain[0], rel=1e-3)  # far below both knees
    assert closed[-1] < plain[-1]  # SD's earlier knee costs it at high concurrency


def _brute_first_crossing(gap, top, points=400_000):
    """First sign change of ``gap`` on a dense grid in (0, top], refined by brentq."""
    x = np.linspace(top * 1e-9, top, points)
    with np.errstate(all="ignore"):
        g = gap(x)
    sign = np.sign(g)
    change = np.flatnonzero((sign != sign[0]) & (sign != 0))
    if sign[0] == 0 or len(change) == 0:
        return np.nan
    i = change[0]
    if not np.isfinite(g[i]):  # SD's wall: the crossing is its saturation rate
        return x[i - 1], x[i]
    return brentq(gap, x[i - 1], x[i], xtol=1e-12)


def _knee_arms(rng):
    c1d, c2d = rng.uniform(0.8, 2.0), rng.uniform(0.01, 0.05)
    sd = dict(
        c1=c1d * rng.uniform(0.4, 1.2),
        c2=c2d * rng.uniform(0.7, 2.0),
        batch=rng.uniform(5, 80),
        slope=c2d * rng.uniform(0, 1.5),
    )
    dense = dict(c1=c1d, c2=c2d, batch=rng.uniform(50, 400), slope=c2d * rng.uniform(0, 0.5))
    return sd, dense


def test_break_even_concurrency_with_knees_is_the_first_crossing():
    rng = np.random.default_rng(1)
    crossed = 0
    for _ in range(60):
        sd, dense = _knee_arms(rng)
        got = laws.break_even_concurrency(
            sd["c1"], sd["c2"], dense["c1"], dense["c2"], knee_sd=_knee(sd), knee_dense=_knee(dense)
        )

        def gap(n, sd=sd, dense=dense):
            return laws.closed_loop_latency(
                n, sd["c1"], sd["c2"], knee=_knee(sd)
            ) - laws.closed_loop_latency(n, dense["c1"], dense["c2"], knee=_knee(dense))

        want = _brute_first_crossing(gap, 20_000.0)
        if np.isnan(want):
            assert np.isnan(got)
        else:
            crossed += 1
            assert got == pytest.approx(want, rel=1e-6)
    assert crossed > 20  # the draws exercise both outcomes
    # vectorised: the same answers as one call over all arms
    arms = [_knee_arms(np.random.default_rng(s)) for s in range(5)]
    sd_cols = {key: np.array([a[0][key] for a in arms]) for key in SD}
    dn_cols = {key: np.array([a[1][key] for a in arms]) for key in SD}
    one = laws.break_even_concurrency(
        sd_cols["c1"],
        sd_cols["c2"],
        dn_cols["c1"],
        dn_cols["c2"],
        knee_sd=_knee(sd_cols),
        knee_dense=_knee(dn_cols),
    )
    each = [
        laws.break_even_concurrency(
            s["c1"], s["c2"], d["c1"], d["c2"], knee_sd=_knee(s), knee_dense=_knee(d)
        )
        for s, d in arms
    ]
    np.testing.assert_allclose(one, np.array(each, dtype=float), rtol=1e-12)


def test_break_even_rps_with_knees_is_the_first_crossing():
    rng = np.random.default_rng(2)
    crossed = 0
    for _ in range(60):
        sd, dense = _knee_arms(rng)
        got = laws.break_even_rps(
            sd["c1"], sd["c2"], dense["c1"], dense["c2"], knee_sd=_knee(sd), knee_dense=_knee(dense)
        )

        def gap(lam, sd=sd, dense=dense):
            return laws.knee_latency(lam, sd["c1"], sd["c2"], *_knee(sd)) - laws.knee_latency(
                lam, dense["c1"], dense["c2"], *_knee(dense)
            )

        top = laws.saturation_rps(dense["c1"], dense["c2"], knee=_knee(dense)) * (1 - 1e-9)
        want = _brute_first_crossing(gap, float(top))
        if isinstance(want, tuple):  # SD saturates first: the crossing is its wall
            crossed += 1
            assert want[0] - 1e-9 <= got <= want[1] + 1e-9
        elif np.isnan(want):
            assert np.isnan(got)
        else:
            crossed += 1
            assert got == pytest.approx(want, rel=1e-6)
    assert crossed > 20


def test_knee_none_leaves_the_laws_unchanged():
    """``knee=None`` given explicitly is the default: the closed forms and the curvature grid,
    bit for bit (their values are checked in tests/test_laws.py)."""
    rng = np.random.default_rng(3)
    c1, c2, c3 = rng.uniform(0.5, 2, 50), rng.uniform(0.01, 0.05, 50), rng.uniform(0, 1e-4, 50)
    lam = rng.uniform(0, 20, 50)
    for fn, args in [
        (laws.rps_at_latency, (3.0, c1, c2, c3)),
        (laws.concurrency_at_latency, (3.0, c1, c2, c3)),
        (laws.speedup, (lam, c1, c2, c1 * 1.3, c2 * 0.8, c3, c3 / 2)),
        (laws.closed_loop_speedup, (lam, c1, c2, c1 * 1.3, c2 * 0.8, c3, c3 / 2)),
        (laws.break_even_rps, (c1, c2, c1 * 1.3, c2 * 0.8, c3, c3 / 2)),
        (laws.break_even_rps, (c1, c2, c1 * 1.3, c2 * 0.8)),
        (laws.break_even_concurrency, (c1, c2, c1 * 1.3, c2 * 0.8, c3, c3 / 2)),
    ]:
        knees = (
            dict(knee=None)
            if fn in (laws.rps_at_latency, laws.concurrency_at_latency)
            else dict(knee_sd=None, knee_dense=None)
        )
        np.testing.assert_array_equal(fn(*args, **knees), fn(*args))
