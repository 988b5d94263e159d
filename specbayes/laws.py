r"""The formulas of the latency model — one definition each (docs/model.md §1–6).

Every function here is a plain, vectorised array function: arguments broadcast against each
other (posterior draws × grids), nothing is looped in Python, and no function warns on the
edges of its domain (``alpha = 1``, ``k = 0``, saturation). The PyMC models, the simulator
checks, the planner and the tests all call these.

The cheap closed forms (:func:`expected_tokens`, :func:`effective_costs`, :func:`latency`,
:func:`closed_loop_latency`, :func:`expert_coverage`, :func:`moe_latency_unrolled`,
:func:`moe_latency_implicit`) also accept PyTensor tensors, so the model graph uses the very same
code; with NumPy inputs PyTensor is never imported.

Notation
--------
``rps``  request rate λ (requests/s, achieved); ``L`` mean end-to-end latency (s);
``decode`` output tokens g; ``alpha`` per-token acceptance probability; ``k`` draft length
(``k = 0`` is dense decoding); ``c1*`` load-independent and ``c2*`` load-dependent costs with
suffix ``p`` (prefill, once per request), ``v`` (one verifier pass) and ``d`` (one drafter pass).
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any

import numpy as np

__all__ = [
    "alpha_from_acceptance_length",
    "alpha_from_marginal",
    "batch_curvature",
    "break_even",
    "break_even_concurrency",
    "break_even_rps",
    "closed_loop_latency",
    "closed_loop_speedup",
    "concurrency_at_latency",
    "cycle_cost",
    "effective_costs",
    "effective_curvature",
    "expected_tokens",
    "expert_coverage",
    "knee_costs",
    "knee_latency",
    "latency",
    "latency_sensitivities",
    "log_headroom",
    "marginal_acceptance",
    "moe_latency",
    "moe_latency_implicit",
    "moe_latency_unrolled",
    "optimal_k",
    "pass_cost",
    "routed_tokens",
    "rps_at_latency",
    "saturation_rps",
    "speedup",
    "speedup_from_ratios",
    "token_knee_curvature",
    "verifier_passes",
]


def _namespace(*args: Any) -> ModuleType:
    """Return ``pytensor.tensor`` if any argument is a PyTensor variable, else NumPy."""
    for a in args:
        if type(a).__module__.startswith("pytensor"):
            import pytensor.tensor as pt

            return pt
    return np


def _is_numpy(xp: ModuleType) -> bool:
    return xp is np


class _quiet:
    """``np.errstate`` for NumPy inputs, a no-op for PyTensor graphs."""

    def __init__(self, xp: ModuleType) -> None:
        self._ctx = np.errstate(all="ignore") if _is_numpy(xp) else None

    def __enter__(self) -> None:
        if self._ctx is not None:
            self._ctx.__enter__()

    def __exit__(self, *exc: object) -> None:
        if self._ctx is not None:
            self._ctx.__exit__(*exc)


def _as_float(x: Any, xp: ModuleType) -> Any:
    """Float64 array or tensor (PyTensor would make float32 constants of float32-exact scalars)."""
    if _is_numpy(xp):
        return np.asarray(x, dtype=float)
    if type(x).__module__.startswith("pytensor"):
        return x
    return xp.as_tensor_variable(np.asarray(x, dtype="float64"))


# ---------------------------------------------------------------------------------------------
# §1.2 acceptance
# ---------------------------------------------------------------------------------------------


def expected_tokens(alpha: Any, k: Any) -> Any:
    r"""Expected tokens committed per speculative-decoding cycle.

    .. math::  E(\alpha, k) = \sum_{j=0}^{k} \alpha^j = \frac{1 - \alpha^{k+1}}{1 - \alpha}

    with the limits :math:`E(1, k) = k + 1` (exact, no 0/0) and :math:`E(\alpha, 0) = 1`.
    The ``j = 0`` term is the verifier's own (bonus) token.

    Parameters
    ----------
    alpha : array_like
        Per-token acceptance probability, in ``[0, 1]``.
    k : array_like
        Draft length (non-negative; ``0`` = dense decoding).

    Returns
    -------
    ndarray
        ``E``, within ``[1, k + 1]``; broadcast shape of the inputs.
    """
    xp = _namespace(alpha, k)
    alpha = _as_float(alpha, xp)
    k = _as_float(k, xp)
    with _quiet(xp):
        at_one = xp.eq(alpha, 1.0) if not _is_numpy(xp) else alpha == 1.0
        one_minus = xp.where(at_one, 1.0, 1.0 - alpha)  # safe denominator, also for gradients
        safe_alpha = xp.where(at_one, 0.5, alpha)
        # 1 - alpha^(k+1) without cancellation near alpha = 1
        numerator = -xp.expm1((k + 1.0) * xp.log(safe_alpha))
        if _is_numpy(xp):
            numerator = np.where(safe_alpha == 0.0, 1.0, numerator)
        series = numerator / one_minus
        out = xp.where(at_one, k + 1.0, series)
        out = xp.where(xp.eq(k, 0.0) if not _is_numpy(xp) else k == 0.0, 1.0, out)
    return out


def marginal_acceptance(alpha: Any, k: Any) -> np.ndarray:
    r"""Marginal acceptance (accepted drafts / drafted tokens) under i.i.d. acceptance.

    .. math::

        \rho(\alpha, k) = \frac{\alpha (1 - \alpha^k)}{k (1 - \alpha)} = \frac{E(\alpha,k) - 1}{k}

    This is what engines such as vLLM report as "acceptance rate"; :math:`\rho(1, k) = 1`,
    :math:`\rho(\alpha, 1) = \alpha`, and :math:`\rho < \alpha` for :math:`k > 1`.

    Parameters
    ----------
    alpha : array_like
        Per-token acceptance probability in ``[0, 1]``.
    k : array_like
        Draft length, ``k >= 1`` (undefined without drafts).

    Returns
    -------
    ndarray
        ``rho`` in ``[0, 1]``.
    """
    k = np.asarray(k, dtype=float)
    if np.any(k < 1):
        raise ValueError("marginal_acceptance needs k >= 1: with no drafted tokens it is undefined")
    return (expected_tokens(alpha, k) - 1.0) / k


def alpha_from_marginal(rho: Any, k: Any, *, iterations: int = 64) -> np.ndarray:
    r"""Invert :func:`marginal_acceptance`: the per-token alpha with :math:`\rho(\alpha, k) = \rho`.

    :math:`\rho(\cdot, k)` is continuous and strictly increasing on ``[0, 1]`` from 0 to 1, so
    the inverse is found by vectorised bisection on alpha (``iterations`` halvings: the default
    64 resolves alpha to ~1e-19, far below the 1e-9 promised).

    Parameters
    ----------
    rho : array_like
        Marginal acceptance in ``(0, 1]``.
    k : array_like
        Draft length, ``k >= 1``.

    Returns
    -------
    ndarray
        ``alpha`` in ``(0, 1]``.

    Raises
    ------
    ValueError
        If any ``rho`` is outside ``(0, 1]`` or any ``k < 1``.
    """
    rho = np.asarray(rho, dtype=float)
    k = np.asarray(k, dtype=float)
    if np.any(~np.isfinite(rho)) or np.any((rho <= 0.0) | (rho > 1.0)):
        raise ValueError("marginal acceptance must lie in (0, 1]")
    if np.any(k < 1):
        raise ValueError("alpha_from_marginal needs k >= 1")
    rho, k = np.broadcast_arrays(rho, k)
    lo = np.zeros(rho.shape)
    hi = np.ones(rho.shape)
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        below = marginal_acceptance(mid, k) < rho
        lo = np.where(below, mid, lo)
        hi = np.where(below, hi, mid)
    alpha = 0.5 * (lo + hi)
    return np.where(rho == 1.0, 1.0, alpha)


def alpha_from_acceptance_length(length: Any, k: Any) -> np.ndarray:
    r"""Per-token alpha from the mean acceptance length (tokens committed per cycle).

    Engines report acceptance length :math:`\ell = 1 + \text{accepted}/\text{drafts}`, which
    under i.i.d. acceptance is :math:`E(\alpha, k)`; so
    :math:`\alpha = \rho^{-1}\big((\ell - 1)/k\big)` with :func:`alpha_from_marginal`.

    Parameters
    ----------
    length : array_like
        Mean acceptance length, in ``(1, k + 1]``.
    k : array_like
        Draft length, ``k >= 1``.

    Returns
    -------
    ndarray
        ``alpha`` in ``(0, 1]``.
    """
    length = np.asarray(length, dtype=float)
    k = np.asarray(k, dtype=float)
    if np.any(~np.isfinite(length)) or np.any((length <= 1.0) | (length > k + 1.0 + 1e-12)):
        raise ValueError("acceptance length must lie in (1, k + 1]")
    return alpha_from_marginal(np.minimum((length - 1.0) / k, 1.0), k)


# ---------------------------------------------------------------------------------------------
# §1.1 the latency law, §1.3 the cycle decomposition
# ---------------------------------------------------------------------------------------------


def latency(
    rps: Any,
    c1: Any,
    c2: Any,
    c3: Any = 0.0,
    *,
    knee: tuple[Any, Any] | None = None,
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
    wall_softness : float, default 0
        The curved wall as a smooth plateau (model graphs only; see :func:`log_headroom`).

    Returns
    -------
    ndarray
        ``L`` in seconds; ``inf`` where saturated (``rps >= saturation_rps``). Never negative.
    """
    if knee is not None:
        return knee_latency(rps, c1, c2, *knee)
    xp = _namespace(rps, c1, c2, c3)
    with _quiet(xp):
        head, feasible = _open_headroom(rps, c1, c2, c3, xp, wall_softness)
        return xp.where(feasible, c1 / head, np.inf)


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
    if not _is_numpy(xp) and _zero_constant(c3):  # no curvature: no quadratic in the graph
        return safe_free, free > 0
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


def saturation_rps(c1: Any, c2: Any, c3: Any = 0.0, *, knee: tuple[Any, Any] | None = None) -> Any:
    r"""The request rate at which an open-loop server saturates (its throughput capacity).

    .. math::  \lambda_\mathrm{sat} = \frac{1}{C_2 + 2\sqrt{C_1 C_3}}

    (the rate where the discriminant of :func:`latency` vanishes; :math:`1/C_2` without
    curvature). At :math:`\lambda_\mathrm{sat}` the latency is :math:`2C_1/(1 - \lambda C_2)`
    with curvature and unbounded without. With a ``knee`` (:func:`knee_latency`) it is
    found by bisection (:func:`_knee_saturation`).
    """
    if knee is not None:
        return _knee_saturation(*_knee_arrays(c1, c2, knee))
    xp = _namespace(c1, c2, c3)
    with _quiet(xp):
        return 1.0 / (c2 + 2.0 * xp.sqrt(c1 * c3))


def _knee_arrays(c1: Any, c2: Any, knee: tuple[Any, Any]) -> list[np.ndarray]:
    """``c1, c2`` and the knee's ``batch, slope`` as broadcast float arrays."""
    return np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (c1, c2, *knee)))


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
    target: Any, c1: Any, c2: Any, c3: Any = 0.0, *, knee: tuple[Any, Any] | None = None
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
    """
    target = np.asarray(target, dtype=float)
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
    concurrency: Any, c1: Any, c2: Any, c3: Any = 0.0, *, knee: tuple[Any, Any] | None = None
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

    Returns
    -------
    ndarray
        ``L`` in seconds.
    """
    if knee is not None:
        batch, slope = knee
        xp = _namespace(concurrency, c1, c2, batch, slope)
        return c1 + concurrency * c2 + slope * _knee_past(concurrency, batch, xp)
    return c1 + concurrency * (c2 + concurrency * c3)


def concurrency_at_latency(
    target: Any, c1: Any, c2: Any, c3: Any = 0.0, *, knee: tuple[Any, Any] | None = None
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
    answer lies in :math:`[0, (L - C_1)/C_2]` and is found there by bisection (60 halvings).
    """
    target = np.asarray(target, dtype=float)
    if knee is not None:
        c1, c2, batch, slope = _knee_arrays(c1, c2, knee)
        with np.errstate(all="ignore"):
            top = np.maximum(target - c1, 0.0) / c2
        return _bisect_below(
            lambda n: closed_loop_latency(n, c1, c2, knee=(batch, slope)), target, top
        )
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
    width = KNEE_WIDTH * xp.sqrt(batch)
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
    kernel runs unpacked, :func:`specbayes.model_next.physics.spec_seq_centre`). :math:`\rho`
    is the drafter's share of the prefill: the proposer runs over the prompt's tokens too
    (a draft model builds its KV cache, an EAGLE head its hidden states;
    :func:`specbayes.model_next.physics.drafter_prefill_share`), 0 in the paper's
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


# ---------------------------------------------------------------------------------------------
# §1.4 speedup, break-even, best k
# ---------------------------------------------------------------------------------------------


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

    Returns
    -------
    ndarray
        Speedup (> 1 means SD is faster).
    """
    l_dense = np.asarray(latency(rps, c1_dense, c2_dense, c3_dense, knee=knee_dense), dtype=float)
    l_sd = np.asarray(latency(rps, c1_sd, c2_sd, c3_sd, knee=knee_sd), dtype=float)
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
) -> np.ndarray:
    r"""Speedup of SD over dense with ``N`` streams in flight in *both* (closed loop).

    .. math::  S(N) = \frac{L_\mathrm{dense}(N)}{L_\mathrm{sd}(N)}
               = \frac{C_{1,\mathrm{dense}} + N C_{2,\mathrm{dense}} + N^2 C_{3,\mathrm{dense}}}
                      {C_{1,\mathrm{sd}} + N C_{2,\mathrm{sd}} + N^2 C_{3,\mathrm{sd}}}

    (:func:`closed_loop_latency`). The two arms are compared at the same number of streams,
    so by Little's law (throughput :math:`N/L`) this is also SD's throughput gain at ``N``.
    Unlike the open loop nothing saturates: the ratio is finite at every ``N``. With
    ``knee_sd`` / ``knee_dense`` = :math:`(B_K, \Delta)` an arm's :math:`N^2 C_3` is replaced
    by its smoothed knee :math:`\Delta\max(0, N - B_K)` (:func:`closed_loop_latency`).
    """
    l_dense = closed_loop_latency(concurrency, c1_dense, c2_dense, c3_dense, knee=knee_dense)
    l_sd = closed_loop_latency(concurrency, c1_sd, c2_sd, c3_sd, knee=knee_sd)
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
    crossing.

    Returns
    -------
    ndarray
        :math:`N^*` (streams, continuous); ``NaN`` where the curves never cross at
        :math:`N > 0` (SD wins at every concurrency, or at none) or only touch.
    """
    if knee_sd is not None or knee_dense is not None:
        return _knee_break_even_concurrency(
            c1_sd, c2_sd, c1_dense, c2_dense, c3_sd, c3_dense, knee_sd, knee_dense, iterations
        )
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


def _no_knee(knee: tuple[Any, Any] | None) -> tuple[Any, Any]:
    """``knee`` or a knee that adds nothing (slope 0), for arithmetic on both arms alike."""
    return (1.0, 0.0) if knee is None else knee


def _knee_break_even_concurrency(c1s, c2s, c1d, c2d, c3s, c3d, knee_s, knee_d, iterations):
    """:func:`break_even_concurrency` with a knee in one arm or both (grid and bisection)."""
    (bs, ds), (bd, dd) = _no_knee(knee_s), _no_knee(knee_d)
    args = np.broadcast_arrays(
        *(np.asarray(a, dtype=float) for a in (c1s, c2s, c1d, c2d, c3s, c3d, bs, ds, bd, dd))
    )
    c1s, c2s, c1d, c2d, c3s, c3d, bs, ds, bd, dd = args

    def gap(n):  # L_sd - L_dense at the same streams
        extra = n.ndim - c1s.ndim  # grid axes after the costs' own
        c = [x.reshape(x.shape + (1,) * extra) for x in args]
        # an arm without a knee keeps its curvature (a fit has one or the other)
        arm_s = dict(knee=(c[6], c[7])) if knee_s is not None else dict(c3=c[4])
        arm_d = dict(knee=(c[8], c[9])) if knee_d is not None else dict(c3=c[5])
        with np.errstate(all="ignore"):
            return closed_loop_latency(n, c[0], c[1], **arm_s) - closed_loop_latency(
                n, c[2], c[3], **arm_d
            )

    with np.errstate(all="ignore"):
        far = np.maximum(bs + 40.0 * KNEE_WIDTH * np.sqrt(bs), bd + 40.0 * KNEE_WIDTH * np.sqrt(bd))
        a0 = (c1s - ds * bs) - (c1d - dd * bd)
        a1 = (c2s + ds) - (c2d + dd)
        line = -a0 / a1
    line = np.where(np.isfinite(line) & (line > 0), line, 0.0)
    top = 2.0 * np.maximum(far, line)
    grid = top[..., None] * np.geomspace(1e-6, 1.0, BREAK_EVEN_GRID)
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

    Returns
    -------
    ndarray
        Break-even request rate (req/s); ``NaN`` where the curves never cross below the dense
        saturation rate (see :func:`break_even`).
    """
    c1_dense = np.asarray(c1_dense, dtype=float)
    c2_dense = np.asarray(c2_dense, dtype=float)
    knees = knee_sd is not None or knee_dense is not None
    if not (knees or np.any(np.asarray(c3_sd) > 0) or np.any(np.asarray(c3_dense) > 0)):
        r_star = break_even(np.asarray(c1_sd) / c1_dense, np.asarray(c2_sd) / c2_dense)
        return r_star / c2_dense
    (bs, ds), (bd, dd) = _no_knee(knee_sd), _no_knee(knee_dense)
    args = np.broadcast_arrays(
        *(
            np.asarray(a, dtype=float)
            for a in (c1_sd, c2_sd, c1_dense, c2_dense, c3_sd, c3_dense, bs, ds, bd, dd)
        )
    )
    c1s, c2s, c1d, c2d, c3s, c3d, bs, ds, bd, dd = args

    def gap(lam):  # L_sd - L_dense: inf - finite = inf where only SD is saturated
        extra = lam.ndim - c1s.ndim  # grid axes after the costs' own
        c = [x.reshape(x.shape + (1,) * extra) for x in (c1s, c2s, c3s, c1d, c2d, c3d)]
        k = [x.reshape(x.shape + (1,) * extra) for x in (bs, ds, bd, dd)]
        ks = (k[0], k[1]) if knee_sd is not None else None
        kd = (k[2], k[3]) if knee_dense is not None else None
        with np.errstate(all="ignore"):
            return latency(lam, c[0], c[1], c[2], knee=ks) - latency(lam, c[3], c[4], c[5], knee=kd)

    top = saturation_rps(c1d, c2d, c3d, knee=(bd, dd) if knee_dense is not None else None)
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


# ---------------------------------------------------------------------------------------------
# §1.5 MoE expert coverage
# ---------------------------------------------------------------------------------------------


def expert_coverage(tokens: Any, m: Any, M: Any) -> Any:
    r"""Expected fraction of a layer's experts touched by ``tokens`` routed tokens.

    Each token picks m of M experts; an expert is missed by one token with probability
    :math:`1 - m/M`, so (treating tokens as independent)

    .. math::  \varphi(T) = 1 - (1 - m/M)^T

    Parameters
    ----------
    tokens : array_like
        Routed tokens per step T (``>= 0``; need not be an integer).
    m : array_like
        Experts per token.
    M : array_like
        Experts per layer.

    Returns
    -------
    ndarray
        :math:`\varphi \in [0, 1]`.
    """
    xp = _namespace(tokens, m, M)
    ratio = _as_float(m, xp) / _as_float(M, xp)
    with _quiet(xp):
        return -xp.expm1(tokens * xp.log1p(-ratio))


def routed_tokens(rps: Any, latency_s: Any, k: Any) -> Any:
    r"""Routed tokens per step of a batch at load λ: :math:`T = \lambda L\,(k + 1)`.

    :math:`\lambda L` is the mean batch (Little's law); each running sequence sends one token
    through the experts per dense step and ``k + 1`` per verification step. docs/model.md §5
    writes :math:`T \approx \lambda L k` for SD; ``k + 1`` is the exact token count of a
    verifier pass and makes one formula serve dense (``k = 0`` → ``T = λL``) and SD.

    Parameters
    ----------
    rps, latency_s, k : array_like
        Request rate, mean latency (s), draft length.

    Returns
    -------
    ndarray
        ``T``.
    """
    return rps * latency_s * (k + 1.0)


def _moe_step(rps, c1u, c1s, c2u, c2s, m, M, k, c3u, c3s, current, xp, softness=0.0):
    phi = expert_coverage(routed_tokens(rps, current, k), m, M)
    c3 = 0.0 if _zero_constant(c3u) and _zero_constant(c3s) else c3u + phi * c3s
    return latency(rps, c1u + phi * c1s, c2u + phi * c2s, c3, wall_softness=softness)


def moe_latency(
    rps: Any,
    c1u: Any,
    c1s: Any,
    c2u: Any,
    c2s: Any,
    m: Any,
    M: Any,
    k: Any = 0,
    *,
    c3u: Any = 0.0,
    c3s: Any = 0.0,
    rtol: float = 1e-12,
    max_iter: int = 100_000,
) -> np.ndarray:
    r"""Mean latency of an MoE server: the least fixed point of the coverage-corrected law.

    .. math::

        L = \frac{C_{1u} + \varphi(T)\, C_{1s}}{1 - \lambda\,(C_{2u} + \varphi(T)\, C_{2s})},
        \qquad T = \lambda L (k + 1)

    The right-hand side is increasing in L (more latency → more tokens in flight → more
    experts touched), so iterating it from :math:`\varphi = 0` rises monotonically to the
    least fixed point. Where the iteration reaches the saturation wall (the denominator
    hits 0) no finite fixed point exists and the latency is ``inf``.

    Parameters
    ----------
    rps : array_like
        Request rate (req/s).
    c1u, c1s, c2u, c2s : array_like
        Costs at zero coverage (``u``) and the increment at full coverage (``s``).
    m, M : array_like
        Experts per token and per layer.
    k : array_like, default 0
        Draft length (tokens per verifier pass = k + 1).
    c3u, c3s : array_like, default 0
        Batch curvature (:func:`latency`) at zero coverage and its increment at full coverage.
    rtol : float
        Relative convergence tolerance.
    max_iter : int
        Iteration cap; an entry still moving after it raises ``RuntimeError`` (it would
        mean a fixed point tangent to the map, at the edge of saturation).

    Returns
    -------
    ndarray
        ``L`` (s), ``inf`` where saturated.
    """
    arrays = np.broadcast_arrays(
        *(np.asarray(a, dtype=float) for a in (rps, c1u, c1s, c2u, c2s, m, M, k, c3u, c3s))
    )
    rps, c1u, c1s, c2u, c2s, m, M, k, c3u, c3s = (a.ravel() for a in arrays)
    shape = arrays[0].shape
    with np.errstate(all="ignore"):
        current = latency(rps, c1u, c2u, c3u)  # phi = 0 lower bound
        active = np.isfinite(current)
        for _ in range(max_iter):
            if not active.any():
                break
            idx = np.flatnonzero(active)
            new = _moe_step(
                rps[idx],
                c1u[idx],
                c1s[idx],
                c2u[idx],
                c2s[idx],
                m[idx],
                M[idx],
                k[idx],
                c3u[idx],
                c3s[idx],
                current[idx],
                np,
            )
            done = ~np.isfinite(new) | (np.abs(new - current[idx]) <= rtol * np.abs(new))
            current[idx] = new
            active[idx[done]] = False
    if active.any():
        raise RuntimeError(
            f"moe_latency: {int(active.sum())} entries did not converge in {max_iter} iterations"
        )
    return current.reshape(shape)


def moe_latency_unrolled(
    rps: Any,
    c1u: Any,
    c1s: Any,
    c2u: Any,
    c2s: Any,
    m: Any,
    M: Any,
    k: Any = 0,
    *,
    c3u: Any = 0.0,
    c3s: Any = 0.0,
    iterations: int = 30,
    wall_softness: float = 0.0,
) -> Any:
    r"""A fixed number of iterations of the map of :func:`moe_latency` (differentiable).

    For model graphs (PyTensor inputs) that need a gradient through the fixed point: starts
    at :math:`\varphi = 0` and applies the same update ``iterations`` times. Saturated
    iterates are ``inf``. With NumPy inputs it equals :func:`moe_latency` once converged.
    ``wall_softness``: each step's curved wall as in :func:`latency`.
    """
    xp = _namespace(rps, c1u, c1s, c2u, c2s, m, M, k, c3u, c3s)
    current = latency(rps, c1u, c2u, c3u, wall_softness=wall_softness)
    for _ in range(iterations):
        current = _moe_step(rps, c1u, c1s, c2u, c2s, m, M, k, c3u, c3s, current, xp, wall_softness)
    return current


def _moe_iterate_scan(args: list, iterations: int, xp: Any, softness: float = 0.0) -> Any:
    r"""``iterations`` plain steps of the MoE map from :math:`\varphi = 0` in one scan."""
    import pytensor

    start = _moe_step(*args, xp.zeros_like(args[0]), xp, softness)  # phi = 0
    tensors = [a for a in args if not isinstance(a, float)]

    def step(current, *inputs):
        values = iter(inputs)
        full = [a if isinstance(a, float) else next(values) for a in args]
        return _moe_step(*full, current, xp, softness)

    path = pytensor.scan(
        step,
        outputs_info=[start],
        non_sequences=tensors,
        n_steps=iterations,
        strict=True,
        return_updates=False,
    )
    return path[-1]


#: Plain (monotone) fixed-point iterations that start :func:`moe_latency_implicit` in a graph.
#: Each is a lower bound of the least fixed point; 5 + 3 Newton steps (faster) missed
#: near-tangent fixed points by 3x and overshot with more Newton steps, so the graph iterates
#: plainly, like :func:`moe_latency_unrolled`, and only the final step is a Newton step.
MOE_IMPLICIT_ITERATIONS = 30
#: Largest dF/dL used in a Newton step's division (bounds the overshoot of unconverged rows).
SLOPE_CAP = 0.9
#: Newton steps that follow them (gradient-free), before the implicit-gradient step.
MOE_IMPLICIT_NEWTON = 0


def _moe_newton(args, current, xp, softness: float = 0.0):
    """One Newton step on ``F(L) - L`` from ``current`` (plain step where ``F' >= 1``).

    The slope ``F'`` is a constant of the graph (``disconnected_grad``); ``inf`` stays ``inf``.
    """
    import pytensor
    from pytensor.gradient import disconnected_grad

    finite = current < np.inf  # saturated iterates are +inf
    anchor = xp.where(finite, current, 0.0)  # finite everywhere: no inf/NaN in any gradient
    step = _moe_step(*args, anchor, xp, softness)
    slope = disconnected_grad(pytensor.grad(step.sum(), anchor))  # elementwise dF/dL
    ok = (step < np.inf) & (slope < 1.0)
    # the slope is capped for the division: at a resolved fixed point s <= 0.65 on the
    # paper data (unaffected); near a tangent, unconverged rows would otherwise overshoot
    newton = anchor + (step - anchor) / (1.0 - xp.minimum(xp.where(ok, slope, 0.0), SLOPE_CAP))
    return xp.where(finite, xp.where(ok, newton, step), np.inf)


def moe_latency_implicit(
    rps: Any,
    c1u: Any,
    c1s: Any,
    c2u: Any,
    c2s: Any,
    m: Any,
    M: Any,
    k: Any = 0,
    *,
    c3u: Any = 0.0,
    c3s: Any = 0.0,
    iterations: int = MOE_IMPLICIT_ITERATIONS,
    newton: int = MOE_IMPLICIT_NEWTON,
    scan: bool | None = None,
    wall_softness: float = 0.0,
) -> Any:
    r"""The least fixed point of :func:`moe_latency`, with its implicit-function gradient.

    With :math:`\theta = (\lambda, C_{1u}, C_{1s}, C_{2u}, C_{2s}, m, M, k)` the latency is the
    least fixed point :math:`L^*` of

    .. math::

        F(L, \theta) = \frac{C_{1u} + \varphi(T)\, C_{1s}}
                            {1 - \lambda\,(C_{2u} + \varphi(T)\, C_{2s})},
        \qquad T = \lambda L (k + 1),

    and differentiating :math:`L^* = F(L^*, \theta)` gives, with
    :math:`s = \partial F / \partial L` (:math:`s \le 1` at the least fixed point),

    .. math::  \frac{dL^*}{d\theta} = \frac{\partial F / \partial \theta}{1 - s}.

    **Graphs** (PyTensor inputs). The fixed point is found with no gradient
    (``disconnected_grad``): ``iterations`` monotone steps :math:`L \leftarrow F(L)` from
    :math:`\varphi = 0` (each a lower bound of :math:`L^*`), then ``newton`` Newton steps on
    :math:`G(L) = F(L) - L` (a plain step where :math:`s \ge 1`) → :math:`L_0`. Then one
    step with :math:`L_0` and :math:`s_0 = \partial F/\partial L\,(L_0)` held constant,

    .. math::  L = L_0 + \frac{F(L_0, \theta) - L_0}{1 - s_0},

    is one more Newton step: its value is :math:`L^*` up to :math:`O((L^* - L_0)^2)` and its
    gradient is exactly :math:`(\partial F/\partial\theta)/(1 - s_0)`, the implicit-function
    gradient (error of order :math:`L^* - L_0`). Back-propagation costs one step of the map,
    not every iteration (:func:`moe_latency_unrolled`).

    *Why Newton stays on the least fixed point.* In :math:`u = \kappa\lambda(k+1)L`,
    :math:`\kappa = -\log(1 - m/M)`, :math:`F` is :math:`h(1 - e^{-u})` with
    :math:`h(\varphi) = (C_{1u} + \varphi C_{1s}) / (A + e\,(1 - \varphi))`,
    :math:`A = 1 - \lambda(C_{2u} + C_{2s})`, :math:`e = \lambda C_{2s}`, and
    :math:`d^2F/du^2 \propto e\,(1 - \varphi) - A`: :math:`G` is convex for
    :math:`e(1 - \varphi) > A` (small L) and concave after (one inflection
    :math:`L_i`, possibly at 0 or never). From a lower bound :math:`x < L_i` with
    :math:`s(x) < 1` the tangent lies below the convex :math:`G`, so the Newton point is
    either again a lower bound (below :math:`L_i`) or lies past :math:`L_i` with
    :math:`G > 0` on the way, so :math:`L^* \ge L_i`. On :math:`[L_i, \infty)` the concave
    :math:`G` has a single root (:math:`G(L_i) > 0`) — :math:`L^*` — and Newton converges to it
    from either side (overshooting by :math:`O(\delta^2)` from below, monotone from above).
    No step can reach a larger fixed point. Rows with no finite fixed point need
    :math:`A \le 0` (else :math:`F` is bounded and :math:`G \to -\infty`), have no concave
    part, and their lower bounds reach the saturation wall: ``inf``.

    **NumPy inputs**: this is :func:`moe_latency` (converged to ``rtol = 1e-12``;
    ``iterations`` and ``newton`` are ignored).

    Parameters
    ----------
    rps, c1u, c1s, c2u, c2s, m, M, k : array_like or TensorVariable
        As :func:`moe_latency`.
    iterations : int
        Plain iterations first (graphs only): a Newton step from :math:`\varphi = 0` can
        overshoot far on the concave side, so a few plain steps come first.
    newton : int
        Gradient-free Newton steps after them (graphs only). On the paper dataset's 17.6k
        open-loop MoE rows at the least-squares reference, 5 + 3 leave :math:`L_0` within
        1.2e-8 (relative) of :math:`L^*` and the returned value within 2e-12; 30 plain
        iterations (:func:`moe_latency_unrolled`) leave 3e-6, and 30 plain + the final step
        4e-12. Default 0: hypothesis found a near-tangent case (λ = 13, k = 3) where 5 + 3
        returned 0.43 s for L* = 1.34 s and 5 + 10 overshot to 1.90 s; plain steps only
        approach from below. Far from converged the final step's overshoot is bounded by the
        slope cap :data:`SLOPE_CAP`.
    scan : bool, optional
        Iterate the plain steps in one ``pytensor.scan`` (one compiled step) instead of
        unrolling them (graphs only; no gradient flows through them either way). Default:
        scan when the batch curvature is not a zero constant — 30 unrolled curved steps
        made the compiled graph of the ``moe`` model grow past 24 GB; the plain law stays
        unrolled (its graph compiles in ~0.3 GB).
    wall_softness : float, default 0
        With curvature, every step's curved wall as a smooth plateau (graphs only; see
        :func:`log_headroom`): the fixed point of the softened map.

    Returns
    -------
    ndarray or TensorVariable
        ``L`` (s); ``inf`` where there is no finite fixed point, with a finite (zero)
        gradient there.
    """
    xp = _namespace(rps, c1u, c1s, c2u, c2s, m, M, k, c3u, c3s)
    if _is_numpy(xp):
        return moe_latency(rps, c1u, c1s, c2u, c2s, m, M, k, c3u=c3u, c3s=c3s)
    from pytensor.gradient import disconnected_grad

    # one shape for every input, so the elementwise slope is a plain gradient of a sum
    args = xp.broadcast_arrays(*(_as_float(a, xp) for a in (rps, c1u, c1s, c2u, c2s, m, M, k)))
    plain = _zero_constant(c3u) and _zero_constant(c3s)
    if plain:
        args += [0.0, 0.0]  # the plain law: no quadratic in the iterated graph
    else:
        args += [xp.broadcast_to(_as_float(c, xp), args[0].shape) for c in (c3u, c3s)]
    if scan is None:
        scan = not plain
    if scan:
        current = _moe_iterate_scan(args, iterations, xp, wall_softness)
    elif wall_softness > 0 and not plain:
        raise ValueError("wall_softness needs the scan (scan=True)")
    else:
        current = moe_latency_unrolled(*args[:8], c3u=args[8], c3s=args[9], iterations=iterations)
    for _ in range(newton):
        current = _moe_newton(args, current, xp, wall_softness)
    return _moe_newton(args, disconnected_grad(current), xp, wall_softness)
