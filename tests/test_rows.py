"""The compiled row density (specbayes.model.rows) against the graph's formulas."""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

from specbayes.model.likelihood import collapsed_logp, log_mean_latency, log_row_scale
from specbayes.model.rows import CollapsedRows, rows_random


def _rows(seed: int, closed_share: float):
    """Six sweeps, 60 rows, loads up to 90 % of each open-loop sweep's wall."""
    rng = np.random.default_rng(seed)
    n_sweeps, n = 6, 60
    log_c1 = np.log(rng.uniform(1.0, 5.0, n_sweeps))
    log_c2 = np.log(rng.uniform(0.01, 0.1, n_sweeps))
    sweep = rng.integers(0, n_sweeps, n)
    closed = rng.uniform(size=n) < closed_share
    wall = np.exp(-log_c2[sweep])
    load = np.where(closed, rng.integers(1, 64, n), rng.uniform(0.05, 0.9, n) * wall)
    log_count = rng.normal(0.0, 0.5, n)
    mu = log_mean_latency(log_c1[sweep], log_c2[sweep], load, closed)
    y = mu + 0.02 * rng.standard_normal(n)
    return log_c1, log_c2, sweep, load, closed, log_count, y


@pytest.mark.parametrize("closed_share", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("mode", ["FAST_COMPILE", "NUMBA"])
def test_value_and_gradient_match_the_graph(closed_share, mode):
    log_c1, log_c2, sweep, load, closed, log_count, y = _rows(45, closed_share)
    a, b, gamma = np.float64(1.0), np.float64(5e-5), 0.3  # float64: as the model passes them
    lc1, lc2, g = pt.dvector("lc1"), pt.dvector("lc2"), pt.dscalar("g")
    mu = log_mean_latency(lc1[sweep], lc2[sweep], load, closed)
    ref = collapsed_logp(y, mu, log_row_scale(mu, lc1[sweep], g, log_count), a, b)
    op = CollapsedRows()(lc1, lc2, g, log_count, a, b, sweep, load, closed, y)[0]
    outs = [ref, op, *pytensor.grad(ref, [lc1, lc2, g]), *pytensor.grad(op, [lc1, lc2, g])]
    f = pytensor.function([lc1, lc2, g], outs, mode=mode)
    # away from the point the rows were drawn at, so every gradient is far from 0
    v_ref, v_op, *grads = f(log_c1 + 0.01, log_c2 - 0.05, gamma)
    assert np.isfinite(v_ref) and v_op == pytest.approx(v_ref, rel=1e-10)
    for want, got in zip(grads[:3], grads[3:], strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-6 * np.abs(want).max())


def test_a_row_past_its_wall_has_no_density():
    log_c1, log_c2, sweep, load, closed, log_count, y = _rows(46, 0.0)
    load = load.copy()
    load[0] = 1.01 * np.exp(-log_c2[sweep[0]])
    out = CollapsedRows()(log_c1, log_c2, 0.3, log_count, 1.0, 5e-5, sweep, load, closed, y)
    assert out[0].eval() == -np.inf


def test_draws_centre_on_the_law():
    log_c1, log_c2, sweep, load, closed, log_count, _ = _rows(47, 0.5)
    rng = np.random.default_rng(0)
    draws = rows_random(log_c1[None], log_c2[None], np.array([0.0]), log_count, 2000.0, 0.002,
                        rng=rng, size=(4000,), sweep=sweep, load=load, closed=closed)  # fmt: skip
    mu = log_mean_latency(log_c1[sweep], log_c2[sweep], load, closed)
    # sigma^2 ~ IG(2000, 0.002): sigma ~ 0.001, scaled per row by its count
    assert draws.shape == (4000, len(mu))
    np.testing.assert_allclose(draws.mean(axis=0), mu, atol=2e-4)
