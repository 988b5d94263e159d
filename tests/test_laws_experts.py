"""The latency laws with a mixture-of-experts verifier's expert reads (``experts=``, the ``moe``
level): every law the planner calls takes them, and each agrees with the MoE solvers and with
its own inverse."""

from __future__ import annotations

import numpy as np
import pytest

from specbayes import laws

#: A request's expert reads at full coverage X, m/M (8 of 128 experts) and k.
C1, C2 = 2.0, 0.02
SD = laws.Experts(share=1.5, ratio=8 / 128, k=3)
DENSE = laws.Experts(share=1.2, ratio=8 / 128, k=0)


def test_open_loop_is_the_moe_fixed_point_and_nothing_without_reads():
    rps = np.array([0.0, 1.0, 10.0, 40.0, 49.9, 50.0, 60.0])
    lat = laws.latency(rps, C1, C2, experts=SD)
    np.testing.assert_allclose(
        lat[:5], laws.moe_fixed_cost_latency(rps[:5], C1, SD.share, C2, SD.ratio, 1.0, SD.k)
    )
    # the iterated general solver agrees (c2s = 0: the reads are per pass)
    ref = laws.moe_latency(rps[1:4], C1, SD.share, C2, 0.0, SD.ratio, 1.0, SD.k)
    np.testing.assert_allclose(lat[1:4], ref, rtol=1e-9)
    assert lat[0] == C1 and np.all(np.isinf(lat[5:]))  # idle: no expert read; past 1/C2: inf
    none = laws.latency(rps, C1, C2, experts=laws.Experts(0.0, SD.ratio, SD.k))
    np.testing.assert_allclose(none, laws.latency(rps, C1, C2))


def test_closed_loop_adds_the_coverage_of_the_routed_tokens():
    n = np.array([0.0, 1.0, 16.0, 256.0])
    lat = laws.closed_loop_latency(n, C1, C2, experts=SD)
    phi = laws.expert_coverage(n * (SD.k + 1), 8, 128)
    np.testing.assert_allclose(lat, C1 + n * C2 + phi * SD.share)


def test_inverses_recover_the_load():
    rps = np.array([0.5, 5.0, 30.0, 49.0])
    back = laws.rps_at_latency(laws.latency(rps, C1, C2, experts=SD), C1, C2, experts=SD)
    np.testing.assert_allclose(back, rps, rtol=1e-9)
    n = np.array([0.5, 4.0, 64.0, 1000.0])
    target = laws.closed_loop_latency(n, C1, C2, experts=SD)
    np.testing.assert_allclose(
        laws.concurrency_at_latency(target, C1, C2, experts=SD), n, rtol=1e-9
    )
    # below the idle latency no load meets the target; the wall stays 1/C2
    assert laws.rps_at_latency(C1 / 2, C1, C2, experts=SD) == 0.0
    assert laws.saturation_rps(C1, C2, experts=SD) == pytest.approx(1 / C2)


def test_inverses_broadcast_over_draws_and_targets():
    share = np.array([[1.0], [2.0]])  # (draw, 1) against three targets
    reads = laws.Experts(share, SD.ratio, SD.k)
    targets = np.array([3.0, 5.0, 9.0])
    lam = laws.rps_at_latency(targets, C1, C2, experts=reads)
    assert lam.shape == (2, 3) and np.all(np.diff(lam, axis=1) > 0)
    assert np.all(lam[1] < lam[0])  # more reads per request: less rate at each target
    np.testing.assert_allclose(laws.latency(lam, C1, C2, experts=reads), targets[None, :] + 0 * lam)


def test_speedup_is_the_ratio_of_the_two_laws():
    rps = np.array([1.0, 10.0, 30.0])
    c1s, c2s, c1d, c2d = 1.4, 0.025, C1, C2
    s = laws.speedup(rps, c1s, c2s, c1d, c2d, experts_sd=SD, experts_dense=DENSE)
    expect = laws.latency(rps, c1d, c2d, experts=DENSE) / laws.latency(rps, c1s, c2s, experts=SD)
    np.testing.assert_allclose(s, expect)
    n = np.array([1.0, 16.0])
    s_closed = laws.closed_loop_speedup(n, c1s, c2s, c1d, c2d, experts_sd=SD, experts_dense=DENSE)
    np.testing.assert_allclose(
        s_closed,
        laws.closed_loop_latency(n, c1d, c2d, experts=DENSE)
        / laws.closed_loop_latency(n, c1s, c2s, experts=SD),
    )


def test_break_evens_find_where_the_two_laws_cross():
    # SD: cheaper idle, dearer per request -> wins, then loses
    c1s, c2s, c1d, c2d = 1.2, 0.03, C1, C2
    terms = dict(experts_sd=SD, experts_dense=DENSE)
    lam = laws.break_even_rps(c1s, c2s, c1d, c2d, **terms)
    assert 0 < lam < 1 / c2d
    gap = laws.latency(lam, c1s, c2s, experts=SD) - laws.latency(lam, c1d, c2d, experts=DENSE)
    assert abs(gap) < 1e-6
    n = laws.break_even_concurrency(c1s, c2s, c1d, c2d, **terms)
    gap = laws.closed_loop_latency(n, c1s, c2s, experts=SD) - laws.closed_loop_latency(
        n, c1d, c2d, experts=DENSE
    )
    assert n > 0 and abs(gap) < 1e-6
    # draws broadcast: a second draw where SD is dearer everywhere never crosses
    c1_draws = np.array([c1s, 5.0])
    both = laws.break_even_concurrency(c1_draws, c2s, c1d, c2d, **terms)
    assert both[0] == pytest.approx(n) and np.isnan(both[1])
    assert np.isnan(laws.break_even_rps(c1_draws, c2s, c1d, c2d, **terms)[1])


def test_the_coverage_moves_the_crossing():
    """The expert reads are not a constant: SD's k + 1 routed tokens per sequence cover the
    experts at a lower load, so the crossing differs from the law with the reads at full
    coverage folded into C1."""
    c1s, c2s, c1d, c2d = 1.2, 0.03, C1, C2
    n = laws.break_even_concurrency(c1s, c2s, c1d, c2d, experts_sd=SD, experts_dense=DENSE)
    folded = laws.break_even_concurrency(c1s + SD.share, c2s, c1d + DENSE.share, c2d)
    assert abs(n - folded) / folded > 0.05


def test_terms_pass_on_by_kind():
    knee = (np.array([8.0]), np.array([0.01]))
    assert laws.term_keywords(None) == {}
    assert laws.term_keywords(knee) == {"knee": knee}
    assert laws.term_keywords(SD, "_sd") == {"experts_sd": SD}
    moved = laws.map_term(SD, lambda x: np.asarray(x)[None])
    assert isinstance(moved, laws.Experts) and moved.share.shape == (1,)
    assert laws.map_term(None, np.abs) is None
    with pytest.raises(ValueError, match="exclude each other"):
        laws.latency(1.0, C1, C2, 1e-4, experts=SD)


def test_closed_loop_break_even_of_moe_starts_at_one_stream():
    """MoE's SD routes k + 1 tokens a pass: at one stream it reads more experts than dense and
    loses, and wins once the batch covers them. Below one stream the mean-field coverage
    crosses too (SD cheaper idle), where no closed loop runs: N* is the crossing past 1."""
    sd, dense = laws.Experts(2.03, 1 / 16, 4), laws.Experts(5.6, 1 / 16, 0)
    c1s, c1d, c2 = 0.567, 0.6, 0.05

    def gap(n):
        return laws.closed_loop_latency(n, c1s, c2, experts=sd) - laws.closed_loop_latency(
            n, c1d, c2, experts=dense
        )

    assert gap(1e-3) < 0 < gap(1.0) and gap(8.0) < 0  # wins idle, loses at 1, wins at 8
    n = laws.break_even_concurrency(c1s, c2, c1d, c2, experts_sd=sd, experts_dense=dense)
    assert 1.0 < n < 8.0 and abs(gap(n)) < 1e-9


def test_the_compiled_lambert_w_is_scipys():
    """NumPy inputs take the closed form through a compiled principal branch of Lambert's W
    (laws/coverage.py): SciPy's to 1e-12 on [-1/e, 0] away from the branch point; nearer,
    where W's slope 1/(x(1 + 1/W)) grows without bound, both carry the rounding of x."""
    from scipy.special import lambertw

    rng = np.random.default_rng(3)
    away = np.concatenate([-rng.uniform(0, 1 / np.e - 1e-3, 200_000), [0.0, -0.25],
                           -(10 ** rng.uniform(-300, -1, 10_000))])  # fmt: skip
    np.testing.assert_allclose(_vector_w0(away), lambertw(away, 0).real, rtol=1e-12, atol=1e-300)
    near = -1 / np.e + 10 ** rng.uniform(-16, -3, 10_000)
    np.testing.assert_allclose(_vector_w0(near), lambertw(near, 0).real, rtol=1e-7)


def _vector_w0(x):
    import numba

    from specbayes.laws.coverage import _lambert_w0

    return numba.vectorize(["float64(float64)"])(lambda v: _lambert_w0(v))(x)
