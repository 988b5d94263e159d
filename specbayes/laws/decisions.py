r"""§1.4 speedup, break-even, best k: the decisions the latency law answers.

The speedup of speculative decoding over dense decoding at a load (:func:`speedup`,
:func:`speedup_from_ratios`, :func:`closed_loop_speedup`), where it breaks even in the cost
ratios (:func:`break_even`), in concurrency (:func:`break_even_concurrency`) and in request
rate (:func:`break_even_rps`, on :data:`BREAK_EVEN_GRID` points), and the draft length with the
lowest latency (:func:`optimal_k`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from specbayes import laws
from specbayes.laws.latency_law import closed_loop_latency, effective_costs, latency, saturation_rps


def speedup(
    rps: Any,
    c1_sd: Any,
    c2_sd: Any,
    c1_dense: Any,
    c2_dense: Any,
    c3_sd: Any = 0.0,
    c3_dense: Any = 0.0,
    *,
    knee_sd: tuple[Any, Any] | None = None,
    knee_dense: tuple[Any, Any] | None = None,
    experts_sd: tuple[Any, Any, Any] | None = None,
    experts_dense: tuple[Any, Any, Any] | None = None,
) -> np.ndarray:
    r"""Speedup of speculative decoding over dense decoding at request rate λ.

    .. math::

        S(\lambda) = \frac{L_\mathrm{dense}}{L_\mathrm{sd}}
                   = \frac{1}{C_{1R}}\Big(1 + (1 - C_{2R})\,\frac{r}{1 - r}\Big),
        \quad C_{1R} = \frac{C_{1,\mathrm{sd}}}{C_{1,\mathrm{dense}}},\;
        C_{2R} = \frac{C_{2,\mathrm{sd}}}{C_{2,\mathrm{dense}}},\; r = \lambda C_{2,\mathrm{dense}}

    (the closed form is that of the law without batch curvature; with ``c3_sd``,
    ``c3_dense`` it is the ratio of the two :func:`latency` values).
    The ratio holds while both configurations are unsaturated. Beyond that the ratio
    is not a number: this function returns ``inf`` where only the dense server is saturated
    (SD still has a finite latency), ``0`` where only SD is saturated, and ``NaN`` where both
    are. Callers that report speedups should report saturation alongside.

    Parameters
    ----------
    rps : array_like
        Request rate (req/s).
    c1_sd, c2_sd, c1_dense, c2_dense : array_like
        Effective costs of the SD and dense configurations.
    c3_sd, c3_dense : array_like, default 0
        Their batch curvatures (:func:`effective_curvature`).
    knee_sd, knee_dense : (batch, slope), optional
        Knees instead of the curvatures (:func:`knee_costs`): the ratio of the two
        :func:`knee_latency` values.
    experts_sd, experts_dense : :class:`~specbayes.laws.Experts`, optional
        A mixture-of-experts verifier's expert reads in each arm (the ``moe`` level): the
        ratio of the two :func:`latency` values with them.

    Returns
    -------
    ndarray
        Speedup (> 1 means SD is faster).
    """
    l_dense = latency(rps, c1_dense, c2_dense, c3_dense, knee=knee_dense, experts=experts_dense)
    l_sd = latency(rps, c1_sd, c2_sd, c3_sd, knee=knee_sd, experts=experts_sd)
    l_dense, l_sd = np.asarray(l_dense, dtype=float), np.asarray(l_sd, dtype=float)
    with np.errstate(all="ignore"):
        out = l_dense / l_sd
    return np.where(np.isinf(l_dense) & np.isinf(l_sd), np.nan, out)


def speedup_from_ratios(r: Any, c1_ratio: Any, c2_ratio: Any) -> np.ndarray:
    r"""Speedup in normalised form, :math:`S = (1/C_{1R})\,(1 + (1 - C_{2R})\,r/(1 - r))`.

    Parameters
    ----------
    r : array_like
        Normalised dense load :math:`r = \lambda C_{2,\mathrm{dense}}`, in ``[0, 1)``.
    c1_ratio, c2_ratio : array_like
        :math:`C_{1R}` and :math:`C_{2R}`.

    Returns
    -------
    ndarray
        Speedup; ``NaN`` where ``r >= 1`` (dense saturated) or where SD is saturated
        (``r * C2R >= 1``).
    """
    r = np.asarray(r, dtype=float)
    c1_ratio = np.asarray(c1_ratio, dtype=float)
    c2_ratio = np.asarray(c2_ratio, dtype=float)
    with np.errstate(all="ignore"):
        out = (1.0 + (1.0 - c2_ratio) * r / (1.0 - r)) / c1_ratio
    return np.where((r < 1.0) & (r * c2_ratio < 1.0) & (r >= 0), out, np.nan)


def break_even(c1_ratio: Any, c2_ratio: Any) -> np.ndarray:
    r"""Normalised load at which SD and dense latencies cross.

    Setting :math:`S(r) = 1`:

    .. math::  r^* = \frac{C_{1R} - 1}{C_{1R} - C_{2R}}

    Typical SD (:math:`C_{1R} < 1 < C_{2R}`) wins below :math:`r^*` and loses above; the
    reverse case (:math:`C_{1R} > 1 > C_{2R}`) loses below and wins above.

    Parameters
    ----------
    c1_ratio, c2_ratio : array_like
        :math:`C_{1R}` and :math:`C_{2R}`.

    Returns
    -------
    ndarray
        :math:`r^*`, ``NaN`` where the curves never cross inside ``(0, 1)`` (SD always
        wins or always loses while the dense server is unsaturated).
    """
    c1_ratio = np.asarray(c1_ratio, dtype=float)
    c2_ratio = np.asarray(c2_ratio, dtype=float)
    with np.errstate(all="ignore"):
        r_star = (c1_ratio - 1.0) / (c1_ratio - c2_ratio)
    return np.where((r_star > 0.0) & (r_star < 1.0), r_star, np.nan)


def closed_loop_speedup(
    concurrency: Any,
    c1_sd: Any,
    c2_sd: Any,
    c1_dense: Any,
    c2_dense: Any,
    c3_sd: Any = 0.0,
    c3_dense: Any = 0.0,
    *,
    knee_sd: tuple[Any, Any] | None = None,
    knee_dense: tuple[Any, Any] | None = None,
    experts_sd: tuple[Any, Any, Any] | None = None,
    experts_dense: tuple[Any, Any, Any] | None = None,
) -> np.ndarray:
    r"""Speedup of SD over dense with ``N`` streams in flight in *both* (closed loop).

    .. math::  S(N) = \frac{L_\mathrm{dense}(N)}{L_\mathrm{sd}(N)}
               = \frac{C_{1,\mathrm{dense}} + N C_{2,\mathrm{dense}} + N^2 C_{3,\mathrm{dense}}}
                      {C_{1,\mathrm{sd}} + N C_{2,\mathrm{sd}} + N^2 C_{3,\mathrm{sd}}}

    (:func:`closed_loop_latency`). The two arms are compared at the same number of streams,
    so by Little's law (throughput :math:`N/L`) this is also SD's throughput gain at ``N``.
    Unlike the open loop nothing saturates: the ratio is finite at every ``N``. With
    ``knee_sd`` / ``knee_dense`` = :math:`(B_K, \Delta)` an arm's :math:`N^2 C_3` is replaced
    by its smoothed knee :math:`\Delta\max(0, N - B_K)` (:func:`closed_loop_latency`); with
    ``experts_sd`` / ``experts_dense`` (:class:`~specbayes.laws.Experts`) each arm adds its
    expert reads :math:`\varphi(N(k+1))\,X`.
    """
    l_dense = closed_loop_latency(
        concurrency, c1_dense, c2_dense, c3_dense, knee=knee_dense, experts=experts_dense
    )
    l_sd = closed_loop_latency(concurrency, c1_sd, c2_sd, c3_sd, knee=knee_sd, experts=experts_sd)
    with np.errstate(all="ignore"):
        return np.asarray(l_dense / l_sd, dtype=float)


def break_even_concurrency(
    c1_sd: Any,
    c2_sd: Any,
    c1_dense: Any,
    c2_dense: Any,
    c3_sd: Any = 0.0,
    c3_dense: Any = 0.0,
    *,
    knee_sd: tuple[Any, Any] | None = None,
    knee_dense: tuple[Any, Any] | None = None,
    experts_sd: tuple[Any, Any, Any] | None = None,
    experts_dense: tuple[Any, Any, Any] | None = None,
    iterations: int = 60,
) -> np.ndarray:
    r"""Concurrency :math:`N^*` at which SD and dense closed-loop latencies cross.

    Both arms run the same ``N`` streams (:func:`closed_loop_latency`); the gap
    :math:`L_\mathrm{sd} - L_\mathrm{dense} = a N^2 + b N + c` with
    :math:`a = C_{3,\mathrm{sd}} - C_{3,\mathrm{dense}}`, :math:`b = C_{2,\mathrm{sd}} -
    C_{2,\mathrm{dense}}`, :math:`c = C_{1,\mathrm{sd}} - C_{1,\mathrm{dense}}` changes sign at
    its smallest positive root. Without curvature

    .. math::  N^* = \frac{C_{1,\mathrm{dense}} - C_{1,\mathrm{sd}}}
                           {C_{2,\mathrm{sd}} - C_{2,\mathrm{dense}}}

    Typical SD (:math:`C_{1R} < 1 < C_{2R}`) wins below :math:`N^*` streams and loses above.

    With a knee in either arm (``knee_sd``, ``knee_dense`` = :math:`(B_K, \Delta)`, which
    replace that arm's curvature) the gap has no closed-form root: the first sign change is
    found on a geometric grid of :data:`BREAK_EVEN_GRID` stream counts from
    :math:`10^{-6} N_\mathrm{top}` to :math:`N_\mathrm{top}` and refined by bisection
    (``iterations`` halvings). The bound: past :math:`N_\mathrm{far} = \max(B_K + 40 s)`
    (:math:`s = \sqrt{B_K}`, the turn's width) each knee term is its asymptote
    :math:`\Delta (N - B_K)` to :math:`e^{-40}`, so the gap is the line
    :math:`a_0 + a_1 N`, :math:`a_0 = (C_{1,\mathrm{sd}} - \Delta_\mathrm{sd}
    B_{K,\mathrm{sd}}) - (C_{1,\mathrm{dense}} - \Delta_\mathrm{dense}
    B_{K,\mathrm{dense}})`, :math:`a_1 = (C_{2,\mathrm{sd}} + \Delta_\mathrm{sd}) -
    (C_{2,\mathrm{dense}} + \Delta_\mathrm{dense})`, which changes sign at most once, at
    :math:`-a_0/a_1`: :math:`N_\mathrm{top} = 2\max(N_\mathrm{far}, -a_0/a_1)` holds every
    crossing. With expert reads in either arm (``experts_sd``, ``experts_dense``,
    :class:`~specbayes.laws.Experts`) likewise: past :math:`N_\mathrm{far} = 40/(\kappa
    (k + 1))`, :math:`\kappa = -\log(1 - m/M)`, the coverage is 1 to :math:`e^{-40}` and
    the arm's line is :math:`(C_1 + X) + N C_2`; and the grid starts at one stream (the
    first crossing a closed loop can run: SD's :math:`k + 1` tokens a pass read more experts
    at a few streams, so MoE's SD often loses first and wins once the batch covers them).

    Returns
    -------
    ndarray
        :math:`N^*` (streams, continuous); ``NaN`` where the curves never cross at
        :math:`N > 0` (SD wins at every concurrency, or at none) or only touch.
    """
    if any(x is not None for x in (knee_sd, knee_dense, experts_sd, experts_dense)):
        sd, dense = _broadcast_arms(
            _arm(c1_sd, c2_sd, c3_sd, knee_sd, experts_sd),
            _arm(c1_dense, c2_dense, c3_dense, knee_dense, experts_dense),
        )
        return _numeric_break_even_concurrency(sd, dense, iterations)
    args = np.broadcast_arrays(
        *(np.asarray(x, dtype=float) for x in (c1_sd, c2_sd, c1_dense, c2_dense, c3_sd, c3_dense))
    )
    c1s, c2s, c1d, c2d, c3s, c3d = args
    a, b, c = c3s - c3d, c2s - c2d, c1s - c1d
    with np.errstate(all="ignore"):
        disc = b * b - 4.0 * a * c
        root = np.sqrt(np.maximum(disc, 0.0))
        # the stable pair of roots: q/a and c/q (no cancellation when b and root are close)
        q = -0.5 * (b + np.where(b >= 0, root, -root))
        r1 = np.where(a != 0, q / a, np.nan)
        r2 = np.where(q != 0, c / q, np.nan)
    roots = np.stack([r1, r2])
    roots = np.where(np.isfinite(roots) & (roots > 0), roots, np.inf)
    first = roots.min(axis=0)
    # a double root only touches (no sign change); a root at N = 0 (c = 0) is a tie at no
    # load, dropped with the negative ones above
    crosses = np.isfinite(first) & (disc > 0)
    return np.where(crosses, first, np.nan)


#: Rates on which :func:`break_even_rps` looks for the first crossing of curved latencies
#: (and stream counts for :func:`break_even_concurrency` with a knee).
BREAK_EVEN_GRID = 256


def _first_crossing(gap: Any, grid: np.ndarray, iterations: int) -> np.ndarray:
    """First sign change of ``gap`` on ``grid`` (load on the last axis), refined by bisection
    inside its grid cell; ``NaN`` where the sign never changes (or starts at zero)."""
    signs = np.sign(gap(grid))  # broadcasts the costs over the trailing grid axis
    sign_lo = signs[..., 0]
    changed = (signs != sign_lo[..., None]) & (signs != 0)
    crosses = (sign_lo != 0) & changed.any(axis=-1)
    first = np.argmax(changed, axis=-1)
    hi = np.take_along_axis(grid, first[..., None], axis=-1)[..., 0]
    lo = np.take_along_axis(grid, np.maximum(first - 1, 0)[..., None], axis=-1)[..., 0]
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        same = np.sign(gap(mid)) == sign_lo
        lo = np.where(same, mid, lo)
        hi = np.where(same, hi, mid)
    return np.where(crosses, 0.5 * (lo + hi), np.nan)


def _arm(c1: Any, c2: Any, c3: Any, knee: Any, experts: Any) -> dict[str, Any]:
    """One arm's law: its costs and its knee or expert reads (``None`` where it has none)."""
    return dict(c1=c1, c2=c2, c3=c3, knee=knee, experts=experts)


def _broadcast_arms(*arms: dict[str, Any]) -> list[dict[str, Any]]:
    """The arms with every array, and every part of a knee or expert reads, broadcast to one
    float shape (the costs' axes), for arithmetic on the arms alike."""
    parts = [
        x
        for arm in arms
        for v in arm.values()
        if v is not None
        for x in (v if isinstance(v, tuple | list) else (v,))
    ]
    shape = np.broadcast_shapes(*(np.shape(x) for x in parts))

    def cast(v: Any) -> Any:
        if v is None:
            return None
        if isinstance(v, tuple | list):
            return tuple(np.broadcast_to(np.asarray(x, dtype=float), shape) for x in v)
        return np.broadcast_to(np.asarray(v, dtype=float), shape)

    return [{name: cast(v) for name, v in arm.items()} for arm in arms]


def _at_load(law: Any, load: np.ndarray, arm: dict[str, Any]) -> np.ndarray:
    """``law`` (:func:`latency` or :func:`closed_loop_latency`) of a broadcast arm at
    ``load``, whose trailing axes (a grid) follow the costs' own."""
    extra = load.ndim - arm["c1"].ndim

    def grow(x: np.ndarray) -> np.ndarray:
        return x.reshape(x.shape + (1,) * extra)

    c1, c2, c3 = (grow(arm[name]) for name in ("c1", "c2", "c3"))
    terms = {
        name: tuple(grow(x) for x in arm[name])
        for name in ("knee", "experts")
        if arm[name] is not None
    }
    if terms:  # a knee or expert reads replace the curvature
        c3 = 0.0
    with np.errstate(all="ignore"):
        return law(load, c1, c2, c3, **terms)


def _closed_loop_asymptote(arm: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""Where a closed-loop arm's knee or expert reads reach their asymptote to :math:`e^{-40}`
    (:math:`N_\mathrm{far}`) and the line :math:`a_0 + a_1 N` it follows past that."""
    c1, c2 = arm["c1"], arm["c2"]
    with np.errstate(all="ignore"):
        if arm["knee"] is not None:
            batch, slope = arm["knee"]
            width = laws.KNEE_WIDTH  # the package's: specbayes.laws.KNEE_WIDTH = w
            return batch + 40.0 * width * np.sqrt(batch), c1 - slope * batch, c2 + slope
        if arm["experts"] is not None:
            share, ratio, k = arm["experts"]
            return 40.0 / (-np.log1p(-ratio) * (k + 1.0)), c1 + share, c2
    return np.zeros(c1.shape), c1, c2


def _numeric_break_even_concurrency(sd: dict, dense: dict, iterations: int) -> np.ndarray:
    """:func:`break_even_concurrency` with a knee or expert reads in one arm or both (grid
    and bisection), on arms broadcast by :func:`_broadcast_arms`."""

    def gap(n):  # L_sd - L_dense at the same streams
        return _at_load(closed_loop_latency, n, sd) - _at_load(closed_loop_latency, n, dense)

    far_s, a0_s, a1_s = _closed_loop_asymptote(sd)
    far_d, a0_d, a1_d = _closed_loop_asymptote(dense)
    with np.errstate(all="ignore"):
        line = -(a0_s - a0_d) / (a1_s - a1_d)
    line = np.where(np.isfinite(line) & (line > 0), line, 0.0)
    top = 2.0 * np.maximum(np.maximum(far_s, far_d), line)
    # with expert reads the grid starts at one stream: below it the coverage of a fractional
    # batch would cross where no closed loop runs (SD's k + 1 tokens a pass read more experts
    # than dense's one until the batch covers them; the sequence's own stream is its batch)
    start = 1.0 if sd["experts"] is not None or dense["experts"] is not None else 1e-6 * top
    grid = np.geomspace(np.minimum(start, top), top, BREAK_EVEN_GRID, axis=-1)
    return _first_crossing(gap, grid, iterations)


def break_even_rps(
    c1_sd: Any,
    c2_sd: Any,
    c1_dense: Any,
    c2_dense: Any,
    c3_sd: Any = 0.0,
    c3_dense: Any = 0.0,
    *,
    knee_sd: tuple[Any, Any] | None = None,
    knee_dense: tuple[Any, Any] | None = None,
    experts_sd: tuple[Any, Any, Any] | None = None,
    experts_dense: tuple[Any, Any, Any] | None = None,
    iterations: int = 60,
) -> np.ndarray:
    r"""Request rate at which SD stops (or starts) paying.

    .. math::  \mathrm{RPS}^* = r^* / C_{2,\mathrm{dense}}

    With batch curvature (any ``c3`` > 0) there is no closed form, and the curves may cross
    twice (SD faster, then saturating first): the *first* rate in
    :math:`(0, \lambda_\mathrm{sat,dense})` (:func:`saturation_rps`) where the sign of
    :math:`L_\mathrm{sd} - L_\mathrm{dense}` changes, located on a grid of
    :data:`BREAK_EVEN_GRID` rates and refined by bisection (``iterations`` halvings). A
    curved latency stays finite up to its wall and is ``inf`` past it, so where SD saturates
    before dense while still faster, the break-even is SD's saturation rate.

    With a knee in either arm (``knee_sd``, ``knee_dense`` = :math:`(B_K, \Delta)`,
    :func:`knee_latency`, in place of that arm's curvature) the same grid and bisection
    find the first crossing below the dense arm's saturation rate of its knee law; a knee
    latency grows without bound at its wall, so SD saturating first is a crossing too.

    Parameters
    ----------
    c1_sd, c2_sd, c1_dense, c2_dense : array_like
        Effective costs of the SD and dense configurations.
    c3_sd, c3_dense : array_like, default 0
        Their batch curvatures.
    knee_sd, knee_dense : (batch, slope), optional
        Their knees instead (:func:`knee_costs`).
    experts_sd, experts_dense : :class:`~specbayes.laws.Experts`, optional
        Their expert reads (the ``moe`` level): the same grid and bisection below the dense
        arm's wall :math:`1/C_{2,\mathrm{dense}}`.

    Returns
    -------
    ndarray
        Break-even request rate (req/s); ``NaN`` where the curves never cross below the dense
        saturation rate (see :func:`break_even`).
    """
    terms = (knee_sd, knee_dense, experts_sd, experts_dense)
    numeric = any(x is not None for x in terms)
    if not (numeric or np.any(np.asarray(c3_sd) > 0) or np.any(np.asarray(c3_dense) > 0)):
        c1_dense, c2_dense = np.asarray(c1_dense, dtype=float), np.asarray(c2_dense, dtype=float)
        r_star = break_even(np.asarray(c1_sd) / c1_dense, np.asarray(c2_sd) / c2_dense)
        return r_star / c2_dense
    sd, dense = _broadcast_arms(
        _arm(c1_sd, c2_sd, c3_sd, knee_sd, experts_sd),
        _arm(c1_dense, c2_dense, c3_dense, knee_dense, experts_dense),
    )

    def gap(lam):  # L_sd - L_dense: inf - finite = inf where only SD is saturated
        return _at_load(latency, lam, sd) - _at_load(latency, lam, dense)

    c3d = 0.0 if knee_dense is not None or experts_dense is not None else dense["c3"]
    top = saturation_rps(dense["c1"], dense["c2"], c3d, knee=dense["knee"])
    top = top * (1.0 - 1e-9)
    # with curvature the curves may cross more than once (SD can saturate first): the first
    # sign change on a grid from just above zero load (curves that tie there may still cross
    # later) to the dense wall, then bisection inside that grid cell
    grid = top[..., None] * np.linspace(1e-9, 1.0, BREAK_EVEN_GRID)
    return _first_crossing(gap, grid, iterations)


def optimal_k(
    rps: Any,
    alpha: Any,
    decode: Any,
    c1p: Any,
    c1v: Any,
    c1d: Any,
    c2p: Any,
    c2v: Any,
    c2d: Any,
    ks: Sequence[int] = tuple(range(0, 11)),
    c1c: Any = 0.0,
    c2c: Any = 0.0,
) -> tuple[np.ndarray, np.ndarray]:
    r"""The draft length in ``ks`` minimising mean latency at (alpha, rps).

    .. math::  k^*(\alpha, \lambda) = \arg\min_{k \in K} \frac{C_{1,\mathrm{eff}}(\alpha,k)}
                                               {1 - \lambda\, C_{2,\mathrm{eff}}(\alpha,k)}

    Dense decoding (``k = 0``) is a candidate whenever ``0`` is in ``ks`` (the default
    ``0..10``); minimising L_sd is the same as maximising the speedup over dense.

    Parameters
    ----------
    rps, alpha, decode : array_like
        Request rate, per-token acceptance, output tokens.
    c1p, c1v, c1d, c2p, c2v, c2d : array_like
        Cycle coefficients (broadcast with the above, e.g. posterior draws).
    ks : sequence of int
        Candidate draft lengths.
    c1c, c2c : array_like, default 0
        The costs per speculative cycle of :func:`effective_costs` (fixed, per sequence).

    Returns
    -------
    k_best : ndarray of int
        Best candidate; ``-1`` where every candidate is saturated.
    latency_best : ndarray
        Its latency (``inf`` where every candidate is saturated).
    """
    ks_arr = np.asarray(list(ks), dtype=float)
    if ks_arr.size == 0 or np.any(ks_arr < 0) or np.any(ks_arr != np.round(ks_arr)):
        raise ValueError("ks must be a non-empty set of non-negative integers")
    args = [np.asarray(a, dtype=float)[..., None] for a in (rps, alpha, decode)]
    coefs = [np.asarray(c, dtype=float)[..., None] for c in (c1p, c1v, c1d, c2p, c2v, c2d)]
    rps_, alpha_, decode_ = args
    cycle = [np.asarray(c, dtype=float)[..., None] for c in (c1c, c2c)]
    c1, c2 = effective_costs(*coefs, decode_, alpha_, ks_arr, c1c=cycle[0], c2c=cycle[1])
    lat = latency(rps_, c1, c2)
    best = np.argmin(lat, axis=-1)
    lat_best = np.take_along_axis(lat, best[..., None], axis=-1)[..., 0]
    k_best = np.where(np.isfinite(lat_best), ks_arr.astype(int)[best], -1)
    return k_best, lat_best
