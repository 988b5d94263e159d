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
