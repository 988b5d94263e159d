r"""§1.1 the latency law, §1.3 the cycle decomposition.

The open-loop law :func:`latency` (mean latency at request rate ``rps`` from a
load-independent cost ``c1``, a load-dependent ``c2`` and an optional batch curvature ``c3``)
with its headroom (:func:`log_headroom`), sensitivities and saturation rate; its closed-loop
form (:func:`closed_loop_latency`) and the inversions at a latency (:func:`rps_at_latency`,
:func:`concurrency_at_latency`); the knee variant (:func:`knee_latency`, :func:`knee_costs`,
:data:`KNEE_WIDTH`); and the cycle decomposition that builds a row's effective costs from the
per-pass costs (:func:`verifier_passes`, :func:`pass_cost`, :func:`cycle_cost`,
:func:`effective_costs`, :func:`effective_curvature`, :func:`batch_curvature`,
:func:`token_knee_curvature`).

:data:`KNEE_WIDTH` is read through the package (``specbayes.laws.KNEE_WIDTH``), so setting or
monkeypatching it there changes every knee formula.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

from specbayes import laws
from specbayes.laws._common import _is_numpy, _namespace, _quiet
from specbayes.laws.acceptance import expected_tokens
from specbayes.laws.coverage import moe_closed_loop_latency, moe_fixed_cost_latency


def latency(
    rps: Any,
    c1: Any,
    c2: Any,
    c3: Any = 0.0,
    *,
    knee: tuple[Any, Any] | None = None,
    experts: tuple[Any, Any, Any] | None = None,
    wall_softness: float = 0.0,
) -> Any:
    r"""Mean latency of an open-loop (fixed request rate) server.

    From :math:`L = C_1 + B C_2` and Little's law :math:`B = \lambda L`:

    .. math::  L(\lambda) = \frac{C_1}{1 - \lambda C_2}, \qquad \lambda C_2 < 1

    With a batch curvature :math:`C_3 \ge 0` (:func:`batch_curvature`: the step cost grows
    faster than linearly in the batch as decoding turns compute-bound),
    :math:`L = C_1 + B C_2 + B^2 C_3` and Little's law give the smaller root of a quadratic,
    written without cancellation:

    .. math::

        L = \frac{C_1}{h}, \qquad
        h = \tfrac12\Big((1 - x) + \sqrt{(1 - x)^2 - 4\lambda^2 C_1 C_3}\Big),
        \qquad x = \lambda C_2

    (:math:`h` is the headroom, :func:`log_headroom`). :math:`C_3 = 0` is the law above;
    the server saturates at :func:`saturation_rps`.

    Parameters
    ----------
    rps : array_like
        Achieved request rate λ (req/s), ``>= 0``.
    c1 : array_like
        Load-independent cost :math:`C_1` (s).
    c2 : array_like
        Load-dependent cost :math:`C_2` (s per concurrent request).
    c3 : array_like, default 0
        Batch curvature :math:`C_3` (s per concurrent request squared).
    knee : (batch, slope), optional
        A knee instead of a curvature: the per-request cost grows by ``slope`` past ``batch``
        requests (:func:`knee_latency`).
    experts : :class:`~specbayes.laws.Experts`, optional
        A mixture-of-experts verifier's expert reads (the ``moe`` level; not with ``c3`` or
        ``knee``): :math:`L = (C_1 + \varphi(\lambda L (k+1))\,X)/(1 - \lambda C_2)`, the
        least fixed point (:func:`moe_fixed_cost_latency`).
    wall_softness : float, default 0
        The curved wall as a smooth plateau (model graphs only; see :func:`log_headroom`).

    Returns
    -------
    ndarray
        ``L`` in seconds; ``inf`` where saturated (``rps >= saturation_rps``). Never negative.
    """
    if experts is not None:
        return _expert_law(rps, c1, c2, c3, experts, closed=False)
    if knee is not None:
        return knee_latency(rps, c1, c2, *knee)
    xp = _namespace(rps, c1, c2, c3)
    with _quiet(xp):
        head, feasible = _open_headroom(rps, c1, c2, c3, xp, wall_softness)
        return xp.where(feasible, c1 / head, np.inf)


def _expert_law(load: Any, c1: Any, c2: Any, c3: Any, experts: tuple, *, closed: bool) -> Any:
    """:func:`latency` (or, ``closed``, :func:`closed_loop_latency`) with expert reads."""
    if not _zero_constant(c3):
        raise ValueError("experts= and a batch curvature c3 exclude each other (the moe level)")
    share, ratio, k = experts
    law = moe_closed_loop_latency if closed else moe_fixed_cost_latency
    return law(load, c1, share, c2, ratio, 1.0, k)


def _open_headroom(
    rps: Any, c1: Any, c2: Any, c3: Any, xp: ModuleType, softness: float = 0.0
) -> tuple[Any, Any]:
    r"""Headroom ``h = C1 / L`` of open-loop rows and where it exists (see :func:`latency`).

    In relative form :math:`h = \tfrac12 (1 - x)(1 + \sqrt{\rho})`,
    :math:`\rho = 1 - 4\lambda^2 C_1 C_3/(1 - x)^2`. With ``softness`` :math:`w > 0` the
    square root is continued below :math:`\rho = w` by :math:`\sqrt w\,e^{(\rho - w)/2w}`
    (value and slope match at :math:`w`), so the curved wall becomes a smooth plateau
    (:func:`log_headroom`)."""
    free = 1.0 - rps * c2
    safe_free = xp.where(free > 0, free, 1.0)  # keeps the unused branch (and its gradient) finite
    if _zero_constant(c3):  # no curvature: h = 1 - λ C2, no quadratic
        if not _is_numpy(xp):
            return safe_free, free > 0
        # as the quadratic's root: infeasible where C1 is not finite (its rho is NaN there);
        # the quadratic's five passes took a third of the integrated fit's draws of mu
        feasible = (free > 0) & np.isfinite(c1)
        return np.broadcast_to(safe_free, feasible.shape), feasible
    rho = 1.0 - 4.0 * rps * rps * c1 * c3 / (safe_free * safe_free)
    if softness > 0:
        feasible = free > 0
        root, _ = _soft_root(rho, softness, xp)
    else:
        feasible = (free > 0) & (rho > 0)
        root = xp.sqrt(xp.where(feasible, rho, 1.0))
    return 0.5 * safe_free * (1.0 + root), feasible


def _soft_root(rho: Any, softness: float, xp: ModuleType) -> tuple[Any, Any]:
    r""":math:`r(\rho) = \sqrt\rho` for :math:`\rho \ge w`, continued below by
    :math:`\sqrt w\,e^{(\rho - w)/2w}` (value and slope match at :math:`w`), and
    :math:`r'(\rho)`."""
    root = xp.where(
        rho >= softness,
        xp.sqrt(xp.maximum(rho, softness)),
        np.sqrt(softness) * xp.exp((xp.minimum(rho, softness) - softness) / (2 * softness)),
    )
    slope = xp.where(rho >= softness, 0.5 / root, root / (2 * softness))
    return root, slope


def latency_sensitivities(
    rps: Any, c1: Any, c2: Any, c3: Any = 0.0, *, wall_softness: float = 0.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""Derivatives of :math:`\log L` of :func:`latency` in :math:`C_1, C_2, C_3` (NumPy).

    With :math:`L = C_1/h`, :math:`h = \tfrac12 f\,(1 + r(\rho))`, :math:`f = 1 - \lambda
    C_2`, :math:`\rho = 1 - 4\lambda^2 C_1 C_3 / f^2` and :math:`r = \sqrt\rho` (or its soft
    continuation, ``wall_softness``):

    .. math::

        \frac{\partial \log L}{\partial C_1} = \frac1{C_1} + \frac{2\lambda^2 C_3 r'}{f h},
        \quad
        \frac{\partial \log L}{\partial C_2} = \frac{\lambda\,(1 + r + 2 r'(1 - \rho))}{2h},
        \quad
        \frac{\partial \log L}{\partial C_3} = \frac{2\lambda^2 C_1 r'}{f h}.

    The exact law's derivatives grow without bound at its wall (:math:`r' = 1/2\sqrt\rho`);
    the soft continuation keeps them finite there and past it — the form the model's
    whitening needs at a least-squares point on the exact wall. ``nan`` where saturated
    (:math:`f \le 0`, or past the exact wall without softness).
    """
    rps, c1, c2, c3 = (np.asarray(a, dtype=float) for a in (rps, c1, c2, c3))
    with np.errstate(all="ignore"):
        free = 1.0 - rps * c2
        rho = 1.0 - 4.0 * rps * rps * c1 * c3 / (free * free)
        if wall_softness > 0:
            root, slope = _soft_root(rho, wall_softness, np)
        else:
            root = np.sqrt(rho)
            slope = 0.5 / root
        h = 0.5 * free * (1.0 + root)
        ok = (free > 0) & np.isfinite(slope)
        d1 = 1.0 / c1 + 2.0 * rps**2 * c3 * slope / (free * h)
        d2 = 0.5 * rps * (1.0 + root + 2.0 * slope * (1.0 - rho)) / h
        d3 = 2.0 * rps**2 * c1 * slope / (free * h)
    return tuple(np.where(ok, d, np.nan) for d in (d1, d2, d3))


def _zero_constant(x: Any) -> bool:
    """Whether ``x`` is a plain number (or array) that is zero everywhere, not a graph value."""
    if type(x).__module__.startswith("pytensor"):
        return False
    return bool(np.all(np.asarray(x) == 0))


def saturation_rps(
    c1: Any,
    c2: Any,
    c3: Any = 0.0,
    *,
    knee: tuple[Any, Any] | None = None,
    experts: tuple[Any, Any, Any] | None = None,
) -> Any:
    r"""The request rate at which an open-loop server saturates (its throughput capacity).

    .. math::  \lambda_\mathrm{sat} = \frac{1}{C_2 + 2\sqrt{C_1 C_3}}

    (the rate where the discriminant of :func:`latency` vanishes; :math:`1/C_2` without
    curvature). At :math:`\lambda_\mathrm{sat}` the latency is :math:`2C_1/(1 - \lambda C_2)`
    with curvature and unbounded without. With a ``knee`` (:func:`knee_latency`) it is
    found by bisection (:func:`_knee_saturation`). Expert reads (``experts``) are at most
    one read of every expert per pass, bounded in the load, so the wall stays :math:`1/C_2`
    (the argument is taken so that every law here accepts the same terms).
    """
    if knee is not None:
        return _knee_saturation(*_knee_arrays(c1, c2, knee))
    xp = _namespace(c1, c2, c3)
    with _quiet(xp):
        return 1.0 / (c2 + 2.0 * xp.sqrt(c1 * c3))


def _knee_arrays(c1: Any, c2: Any, term: tuple) -> list[np.ndarray]:
    """``c1, c2`` and the parts of a knee ``(batch, slope)`` or of expert reads ``(share,
    ratio, k)`` as broadcast float arrays."""
    return np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (c1, c2, *term)))


def _knee_saturation(c1: np.ndarray, c2: np.ndarray, batch: np.ndarray, slope: np.ndarray):
    r"""Saturation rate of :func:`knee_latency` (broadcast arrays, :func:`_knee_arrays`): the
    headroom falls with the rate, from 1 at zero load to :math:`\le 0` at :math:`1/C_2`; the
    last rate where it is still a headroom is bisected there (:func:`_bisect_below`)."""

    def infeasible(lam):
        return np.where(_knee_headroom(lam, c1, c2, batch, slope, np)[1], 0.0, 1.0)

    return _bisect_below(infeasible, 0.0, 1.0 / c2)


def _bisect_below(fn: Any, target: Any, hi: Any, iterations: int = 60) -> np.ndarray:
    r"""Largest :math:`x \in [0, hi]` with :math:`fn(x) \le target` for an increasing ``fn``
    (vectorised bisection; ``0`` where already :math:`fn(0) > target`). ``fn`` takes the
    bracket midpoints, an array of the broadcast shape of ``target`` and ``hi``."""
    target, hi = np.broadcast_arrays(np.asarray(target, dtype=float), np.asarray(hi, dtype=float))
    lo, hi = np.zeros(target.shape), hi.copy()
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        with np.errstate(all="ignore"):
            ok = fn(mid) <= target
        lo, hi = np.where(ok, mid, lo), np.where(ok, hi, mid)
    return lo


def rps_at_latency(
    target: Any,
    c1: Any,
    c2: Any,
    c3: Any = 0.0,
    *,
    knee: tuple[Any, Any] | None = None,
    experts: tuple[Any, Any, Any] | None = None,
) -> np.ndarray:
    r"""The request rate at which the mean latency reaches ``target`` (inverse of :func:`latency`).

    :math:`L = C_1 + \lambda L C_2 + (\lambda L)^2 C_3` solved for :math:`\lambda`:

    .. math::

        \lambda = \frac{2 (L - C_1)}{L\,\big(C_2 + \sqrt{C_2^2 + 4 C_3 (L - C_1)}\big)}

    (:math:`(1 - C_1/L)/C_2` without curvature); ``0`` where ``target <= C1``. With curvature
    the latency stays finite up to the wall, where it reaches
    :math:`L_\mathrm{sat} = 2 C_1/(1 - \lambda_\mathrm{sat} C_2)`; a target at or above
    :math:`L_\mathrm{sat}` is met at every sustainable rate: the answer is
    :func:`saturation_rps` (the root above would lie on the quadratic's unphysical branch).

    With a ``knee`` = :math:`(B_K, \Delta)` (:func:`knee_latency`, which replaces the
    curvature: ``c3`` is ignored) there is no closed form for the smoothed law: its latency
    rises with the rate from :math:`L(0) \approx C_1` to ``inf`` at its saturation rate
    (:func:`_knee_saturation`), so the rate is the largest :math:`\lambda` with
    :math:`L(\lambda) \le` ``target``, found by bisection on
    :math:`[0, \lambda_\mathrm{sat}]` (60 halvings); ``0`` where ``target`` is below
    :math:`L(0)`.

    With ``experts`` (:func:`latency`'s expert reads) the latency likewise rises from
    :math:`C_1` to ``inf`` at :math:`1/C_2`: bisection on :math:`[0, 1/C_2]`.
    """
    target = np.asarray(target, dtype=float)
    if experts is not None:
        c1, c2, *reads = _knee_arrays(c1, c2, experts)
        return _bisect_below(lambda lam: latency(lam, c1, c2, experts=reads), target, 1.0 / c2)
    if knee is not None:
        c1, c2, batch, slope = _knee_arrays(c1, c2, knee)
        top = _knee_saturation(c1, c2, batch, slope)
        return _bisect_below(lambda lam: knee_latency(lam, c1, c2, batch, slope), target, top)
    c1, c2, c3 = (np.asarray(a, dtype=float) for a in (c1, c2, c3))
    with np.errstate(all="ignore"):
        excess = np.maximum(target - c1, 0.0)
        lam = 2.0 * excess / (target * (c2 + np.sqrt(c2 * c2 + 4.0 * c3 * excess)))
        sat = saturation_rps(c1, c2, c3)
        at_wall = 2.0 * c1 / (1.0 - sat * c2)  # inf without curvature
        return np.where(target >= at_wall, sat, np.minimum(lam, sat))


def closed_loop_latency(
    concurrency: Any,
    c1: Any,
    c2: Any,
    c3: Any = 0.0,
    *,
    knee: tuple[Any, Any] | None = None,
    experts: tuple[Any, Any, Any] | None = None,
) -> Any:
    r"""Mean latency of a closed-loop server with ``N`` requests always in flight.

    .. math::  L(N) = C_1 + N C_2 + N^2 C_3

    The same :math:`C_1, C_2` (and batch curvature :math:`C_3`) as :func:`latency`: with a
    fixed concurrency the batch is :math:`B = N` directly (docs/model.md §1).

    Parameters
    ----------
    concurrency : array_like
        Mean number of requests in the system ``N``.
    c1, c2 : array_like
        Load-independent and load-dependent costs (s, s per request).
    c3 : array_like, default 0
        Batch curvature (s per request squared).
    knee : (batch, slope), optional
        A knee instead: :math:`+\ \Delta\max(0, N - B_K)`, smoothed as in
        :func:`knee_latency`.
    experts : :class:`~specbayes.laws.Experts`, optional
        Expert reads instead (the ``moe`` level): :math:`+\ \varphi(N(k+1))\,X`
        (:func:`moe_closed_loop_latency`).

    Returns
    -------
    ndarray
        ``L`` in seconds.
    """
    if experts is not None:
        return _expert_law(concurrency, c1, c2, c3, experts, closed=True)
    if knee is not None:
        batch, slope = knee
        xp = _namespace(concurrency, c1, c2, batch, slope)
        return c1 + concurrency * c2 + slope * _knee_past(concurrency, batch, xp)
    return c1 + concurrency * (c2 + concurrency * c3)


def concurrency_at_latency(
    target: Any,
    c1: Any,
    c2: Any,
    c3: Any = 0.0,
    *,
    knee: tuple[Any, Any] | None = None,
    experts: tuple[Any, Any, Any] | None = None,
) -> np.ndarray:
    r"""Streams at which the closed-loop latency reaches ``target`` (inverse of
    :func:`closed_loop_latency`).

    :math:`C_1 + N C_2 + N^2 C_3 = L` solved for :math:`N \ge 0`:

    .. math::  N = \frac{2 (L - C_1)}{C_2 + \sqrt{C_2^2 + 4 C_3 (L - C_1)}}

    (:math:`(L - C_1)/C_2` without curvature; the rationalised root stays exact as
    :math:`C_3 \to 0`); ``0`` where ``target <= C1``. A closed loop never saturates — its
    latency grows without bound but stays finite — so every target has an answer.

    With a ``knee`` = :math:`(B_K, \Delta)`, :math:`L(N) = C_1 + N C_2 + \Delta\,
    s\,\mathrm{softplus}((N - B_K)/s)` (:func:`closed_loop_latency`; ``c3`` ignored) has no
    closed-form inverse; it rises with :math:`N` and :math:`L(N) \ge C_1 + N C_2`, so the
    answer lies in :math:`[0, (L - C_1)/C_2]` and is found there by bisection (60 halvings);
    so with ``experts`` (:math:`+\ \varphi(N(k+1))\,X \ge 0`, also rising with :math:`N`).
    """
    target = np.asarray(target, dtype=float)
    if knee is not None or experts is not None:
        c1, c2, *term = _knee_arrays(c1, c2, knee if experts is None else experts)
        law = dict(knee=term) if experts is None else dict(experts=term)
        with np.errstate(all="ignore"):
            top = np.maximum(target - c1, 0.0) / c2
        return _bisect_below(lambda n: closed_loop_latency(n, c1, c2, **law), target, top)
    c1, c2, c3 = (np.asarray(a, dtype=float) for a in (c1, c2, c3))
    excess = np.maximum(target - c1, 0.0)
    with np.errstate(all="ignore"):
        return 2.0 * excess / (c2 + np.sqrt(c2 * c2 + 4.0 * c3 * excess))


def knee_latency(rps: Any, c1: Any, c2: Any, batch: Any, slope: Any) -> Any:
    r"""Mean open-loop latency of the law with a knee in the batch.

    Past a batch of :math:`B_K` requests each further request costs :math:`\Delta` more
    (a pass turning compute-bound, :func:`knee_costs`). With a sharp knee,
    :math:`L = C_1 + B C_2 + \Delta\max(0, B - B_K)` and :math:`B = \lambda L` give the law's
    own solution below the knee and the law of the steeper line past it,

    .. math::

        h = \frac{C_1}{L} = f - \frac{\Delta f\,\max(0, B_f - B_K)}{C_1 - \Delta B_K},
        \qquad f = 1 - \lambda C_2, \quad B_f = \frac{\lambda C_1}{f}

    (:math:`B_f` is the batch of the law without the knee; below the knee :math:`h = f`,
    past it :math:`h = (f - \lambda\Delta)/(1 - \Delta B_K/C_1)`). A server's batch is not
    fixed: it fluctuates about its mean by about :math:`\sqrt B` requests (Poisson
    arrivals), so its mean cost turns over that width. The knee here is smoothed so:
    :math:`\max(0, x)` becomes :math:`s\,\mathrm{softplus}(x/s)`,
    :math:`s = \sqrt{B_K}` (:data:`KNEE_WIDTH` times it) — the same smoothing in both loops
    (:func:`closed_loop_latency`), and fewer of the local optima a sharp knee has as it moves
    between the measured batches (not none: ``benchmarks/knee.md``). ``inf`` where
    :math:`h \le 0` (saturated, :func:`saturation_rps`).

    Parameters
    ----------
    rps, c1, c2 : array_like or tensor
        As :func:`latency`.
    batch, slope : array_like or tensor
        Knee batch :math:`B_K` (requests, finite) and extra cost per request past it
        :math:`\Delta` (s per request).
    """
    xp = _namespace(rps, c1, c2, batch, slope)
    with _quiet(xp):
        head, feasible = _knee_headroom(rps, c1, c2, batch, slope, xp)
        return xp.where(feasible, c1 / xp.where(feasible, head, 1.0), np.inf)


#: Width of the knee's turn in units of :math:`\sqrt{B_K}` (:func:`knee_latency`).
KNEE_WIDTH = 1.0


def _knee_past(load: Any, batch: Any, xp: ModuleType) -> Any:
    r"""The smoothed :math:`\max(0, B - B_K)`: :math:`s\,\mathrm{softplus}((B - B_K)/s)`,
    :math:`s = \sqrt{B_K}` (:func:`knee_latency`)."""
    width = laws.KNEE_WIDTH * xp.sqrt(batch)  # the package's: specbayes.laws.KNEE_WIDTH = w
    u = (load - batch) / width
    soft = xp.softplus(u) if not _is_numpy(xp) else np.logaddexp(0.0, u)
    return width * soft


def _knee_headroom(
    rps: Any, c1: Any, c2: Any, batch: Any, slope: Any, xp: ModuleType
) -> tuple[Any, Any]:
    r"""Headroom :math:`h = C_1/L` of :func:`knee_latency` and where it exists
    (:math:`f > 0` and :math:`h > 0`). The raw value is returned everywhere (negative past
    the wall) for :func:`_log_soft_floor`. Where :math:`\Delta B_K \ge C_1` the steeper
    line is saturated as soon as the batch passes the knee; its denominator is floored at a
    small positive value so that :math:`h` turns negative there, continuously."""
    free = 1.0 - rps * c2
    safe = xp.where(free > 0, free, 1.0)
    shrink = xp.maximum(1.0 - slope * batch / c1, 1e-3)
    past = _knee_past(rps * c1 / safe, batch, xp)
    head = xp.where(free > 0, free - slope * safe * past / (c1 * shrink), free)
    return head, (free > 0) & (head > 0)


def _log_soft_floor(head: Any, softness: float, xp: ModuleType) -> Any:
    r""":math:`\log h` for :math:`h \ge w`, continued below by :math:`\log w + (h - w)/w`
    (the log of :math:`w\,e^{(h - w)/w}`: value and slope match at :math:`w`): a row past a
    wall gets a finite, steep log density (model graphs only)."""
    return xp.where(
        head >= softness,
        xp.log(xp.maximum(head, softness)),
        np.log(softness) + (xp.minimum(head, softness) - softness) / softness,
    )


def knee_costs(knee_tokens: Any, excess: Any, c2v: Any, passes: Any, k: Any) -> tuple[Any, Any]:
    r"""A configuration's knee :math:`(B_K, \Delta)` from a knee in tokens per pass.

    A verifier pass turns compute-bound at about :math:`K` tokens; it holds :math:`k + 1`
    tokens of each sequence, so the batch knee is :math:`B_K = K/(k + 1)` — speculation
    reaches it :math:`k + 1` times sooner. Past it each request adds the compute of its
    :math:`k + 1` tokens again, a multiple :math:`\kappa` (``excess``) of a verifier cost per
    request and pass (the model passes its (verifier, GPU) group's, ``knee_c2v``), on each of
    the request's :math:`w` passes:

    .. math::  \Delta = \kappa\,(k + 1)\,w\,c_{2v}

    The drafter's passes (one token per sequence) would reach the same knee at
    :math:`K` requests, beyond the batches served; they are left out.

    Parameters
    ----------
    knee_tokens : array_like
        :math:`K`, tokens per verifier pass.
    excess : array_like
        :math:`\kappa \ge 0`.
    c2v, passes, k : array_like
        The verifier's cost per request and pass the excess is relative to, the passes per
        request (:func:`verifier_passes`) and the draft length.
    """
    return knee_tokens / (k + 1.0), excess * (k + 1.0) * passes * c2v


def log_headroom(
    c1: Any,
    c2: Any,
    rps: Any,
    concurrency: Any,
    closed: Any,
    c3: Any = 0.0,
    *,
    knee: tuple[Any, Any] | None = None,
    wall_softness: float = 0.0,
) -> Any:
    r"""Log headroom :math:`\log h = \log(C_1 / L)` of a row, open or closed loop.

    Both loops satisfy :math:`L = C_1 / h`: open loop :math:`h = 1 - \lambda C_2` (with a batch
    curvature, the root of :func:`latency`); closed loop
    :math:`h = C_1 / (C_1 + N C_2 + N^2 C_3)` (:func:`closed_loop_latency`). Hence
    :math:`\log L = \log C_1 - \log h` in both — the form the model's likelihood uses (one
    log per row, no division). :math:`x = 1 - h` is the row's utilisation: the share of its
    latency spent waiting on the batch.

    Parameters
    ----------
    c1, c2 : array_like
        Costs (s, s per request).
    rps, concurrency : array_like
        Open-loop rate λ and closed-loop N (the one not used by a row is ignored).
    closed : array_like of bool or {0, 1}
        Which rows are closed loop.
    c3 : array_like, default 0
        Batch curvature (:func:`batch_curvature`).
    knee : (batch, slope), optional
        A knee instead of the curvature (:func:`knee_latency`); with ``wall_softness`` the
        log headroom past its wall is continued by :func:`_log_soft_floor`.
    wall_softness : float, default 0
        With curvature the exact law has a *finite* latency at its wall
        (:func:`saturation_rps`) and none past it: a cliff in any likelihood built on it,
        which a gradient sampler cannot cross (divergences). A softness :math:`w > 0`
        replaces the cliff by a smooth plateau for rows within :math:`w` of the wall or
        past it (see ``_open_headroom``); rows further from the wall are exact. Model graphs
        only; the planner and predictions use the exact law.

    Returns
    -------
    array
        :math:`\log h`; ``-inf`` where an open-loop row is saturated.
    """
    xp = _namespace(c1, c2, rps, concurrency, closed, c3)
    # a closed mask given as data (not a graph variable) prunes the branch no row uses
    fixed = isinstance(closed, np.ndarray | bool | int | float)
    any_closed = bool(np.any(closed)) if fixed else True
    all_closed = bool(np.all(closed)) if fixed else False
    with _quiet(xp):
        if any_closed:
            closed_ = xp.log(c1) - xp.log(closed_loop_latency(concurrency, c1, c2, c3, knee=knee))
            if all_closed:
                return closed_
        if knee is None:
            head, feasible = _open_headroom(rps, c1, c2, c3, xp, wall_softness)
            open_ = xp.where(feasible, xp.log(head), -np.inf)
        elif wall_softness > 0:
            open_ = _log_soft_floor(_knee_headroom(rps, c1, c2, *knee, xp)[0], wall_softness, xp)
        else:
            head, feasible = _knee_headroom(rps, c1, c2, *knee, xp)
            open_ = xp.where(feasible, xp.log(head), -np.inf)
        if not any_closed:
            return open_
        return xp.where(closed > 0, closed_, open_)


#: :func:`effective_costs`' speculative costs beside the six coefficients: per cycle fixed
#: and per sequence, and the drafter's prefill share.
SPECULATIVE_COSTS = ("c1c", "c2c", "prefill_share")


def effective_costs(
    c1p: Any,
    c1v: Any,
    c1d: Any,
    c2p: Any,
    c2v: Any,
    c2d: Any,
    decode: Any,
    alpha: Any,
    k: Any,
    passes: Any = None,
    c1c: Any = 0.0,
    c2c: Any = 0.0,
    prefill_share: Any = 0.0,
) -> tuple[Any, Any]:
    r"""Effective :math:`(C_1, C_2)` of a speculative configuration (cycle decomposition).

    A request of ``decode`` = g output tokens runs :math:`g / E(\alpha, k)` cycles, each one
    verifier pass and k drafter passes; prefill is paid once:

    .. math::

        C_{1,\mathrm{eff}} = c_{1p}(1 + \rho) + \frac{g}{E}\,(c_{1v} + c_{1c} + k\,c_{1d}),
        \qquad
        C_{2,\mathrm{eff}} = c_{2p}(1 + \rho) + \frac{g}{E}\,(c_{2v} + c_{2c} + k\,c_{2d})

    Dense decoding is ``k = 0`` (E = 1): :math:`C = c_p + g\,c_v`. :math:`c_{1c}` is a fixed
    cost of every speculative cycle that is neither the verifier's pass nor a drafter pass
    (rejection sampling, the proposer's bookkeeping, a synchronisation per cycle; 0 in the
    paper's decomposition, where a cycle at k = 0 costs a dense step); :math:`c_{2c}` the
    same per concurrent sequence (a verification's multi-token queries that an attention
    kernel runs unpacked, :func:`specbayes.model.physics.spec_seq_centre`). :math:`\rho`
    is the drafter's share of the prefill: the proposer runs over the prompt's tokens too
    (a draft model builds its KV cache, an EAGLE head its hidden states;
    :func:`specbayes.model.physics.drafter_prefill_share`), 0 in the paper's
    decomposition. All three are paid only where ``k > 0``.

    Parameters
    ----------
    c1p, c1v, c1d, c2p, c2v, c2d : array_like
        Cycle coefficients (s; the ``c2`` ones per concurrent request).
    decode : array_like
        Output tokens per request g.
    alpha : array_like
        Per-token acceptance probability (ignored where ``k = 0``).
    k : array_like
        Draft length.
    passes : array_like, optional
        :func:`verifier_passes` of ``decode``, ``alpha``, ``k`` where the caller has them
        already (computed here if not given).
    c1c : array_like, default 0
        Fixed C1 cost of a speculative cycle (s), see above.
    c2c : array_like, default 0
        Its C2 counterpart (s per concurrent request), see above.
    prefill_share : array_like, default 0
        :math:`\rho`, the drafter's prefill over the verifier's, see above.

    Returns
    -------
    (C1, C2) : tuple of ndarray
    """
    if passes is None:
        passes = verifier_passes(decode, alpha, k)
    prefill = 1.0 + prefill_share * (k > 0)
    c1 = cycle_cost(c1p * prefill, passes, pass_cost(c1v, c1d, k, c1c))
    c2 = cycle_cost(c2p * prefill, passes, pass_cost(c2v, c2d, k, c2c))
    return c1, c2


def batch_curvature(
    c2_verifier: Any, c2_drafter: Any, knee_verifier: Any, knee_drafter: Any
) -> Any:
    r"""Batch curvature :math:`C_3` of a configuration from the knees of its passes.

    A pass's per-request cost grows with the batch as it turns compute-bound: the verifier
    part of :math:`C_2` (prefill and verifier passes) doubles at a batch of
    :math:`K_v` requests, the drafter part at :math:`K_d` (drafter passes are small and
    reach their compute limit at a smaller batch):

    .. math::  C_3 = \frac{C_{2,v}}{K_v} + \frac{C_{2,d}}{K_d}, \qquad
               L = C_1 + B\,C_2 + B^2 C_3 \quad(:func:`latency`)

    Parameters
    ----------
    c2_verifier, c2_drafter : array_like
        The verifier part :math:`c_{2p} + w\,c_{2v}` and the drafter part
        :math:`w\,k\,c_{2d}` of :math:`C_2` (:func:`effective_curvature` splits them).
    knee_verifier, knee_drafter : array_like
        Knee batches :math:`K_v, K_d` (requests; ``inf`` = no curvature).

    Returns
    -------
    array
        :math:`C_3` (s per request squared).
    """
    return c2_verifier / knee_verifier + c2_drafter / knee_drafter


def effective_curvature(
    c2p: Any,
    c2v: Any,
    c2d: Any,
    decode: Any,
    alpha: Any,
    k: Any,
    knee_verifier: Any,
    knee_drafter: Any,
    passes: Any = None,
) -> Any:
    r""":func:`batch_curvature` of a configuration, with :math:`C_2` split as in
    :func:`effective_costs`: :math:`C_{2,v} = c_{2p} + w\,c_{2v}`,
    :math:`C_{2,d} = w\,k\,c_{2d}`, :math:`w = g/E(\alpha, k)` (``passes``, computed
    here if not given)."""
    if passes is None:
        passes = verifier_passes(decode, alpha, k)
    return batch_curvature(
        cycle_cost(c2p, passes, c2v), passes * k * c2d, knee_verifier, knee_drafter
    )


def token_knee_curvature(
    c2p: Any,
    c2v: Any,
    c2d: Any,
    decode: Any,
    alpha: Any,
    k: Any,
    knee_tokens: Any,
    passes: Any = None,
) -> Any:
    r""":func:`effective_curvature` with both knees from one knee in tokens per pass.

    A pass turns compute-bound at about :math:`K` tokens, whatever carries them: a verifier
    pass holds :math:`k + 1` tokens of each of its :math:`B` sequences, a drafter pass one, so
    the verifier part of :math:`C_2` doubles at a batch of :math:`K/(k + 1)` requests and the
    drafter part at :math:`K`:

    .. math::  C_3 = \frac{(k + 1)\,C_{2,v}}{K} + \frac{C_{2,d}}{K}

    Speculation moves the verifier's knee to a batch :math:`k + 1` times smaller — why a
    speculative arm's latency bends upward at loads where the dense arm's is still linear
    (the real B200 sweeps of ``data/real``, ``benchmarks/load_extrapolation.md``).

    Parameters
    ----------
    c2p, c2v, c2d, decode, alpha, k, passes
        As :func:`effective_curvature`.
    knee_tokens : array_like
        :math:`K`, tokens per pass (``inf`` = no curvature).
    """
    return effective_curvature(
        c2p, c2v, c2d, decode, alpha, k, knee_tokens / (k + 1.0), knee_tokens, passes
    )


def verifier_passes(decode: Any, alpha: Any, k: Any) -> Any:
    r"""Verifier passes (SD cycles) per request: :math:`w = g / E(\alpha, k)`.

    Dense decoding (``k = 0``) is one pass per output token, :math:`w = g`.
    """
    return decode / expected_tokens(alpha, k)


def pass_cost(c_v: Any, c_d: Any, k: Any, c_c: Any = 0.0) -> Any:
    r"""Cost of one SD cycle: one verifier pass, k drafter passes and, where k > 0, the
    cycle's fixed speculative cost, :math:`c_v + c_c\,[k > 0] + k\,c_d`."""
    return c_v + k * c_d + c_c * (k > 0)


def cycle_cost(c_p: Any, passes: Any, per_pass: Any) -> Any:
    r"""A request's cost from its parts: :math:`c_p + w \cdot (c_v + k\,c_d)`.

    ``c_p`` is paid once (prefill), ``per_pass`` (:func:`pass_cost`) once per verifier pass,
    ``passes`` = :func:`verifier_passes`. :func:`effective_costs` is this for C1 and C2.
    """
    return c_p + passes * per_pass
