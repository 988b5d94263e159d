r"""§1.5 the MoE latency as a fixed point.

A mixture-of-experts layer loads the experts its batch routes to: the coverage
:math:`\varphi(T) = 1 - (1 - m/M)^T` of ``T`` routed tokens (:func:`routed_tokens`;
``expert_coverage`` in :mod:`.coverage`), and the general MoE latency is the least fixed
point of the law with coverage-weighted costs: :func:`moe_latency` (NumPy, converged),
:func:`moe_latency_unrolled` (plain iterations, also PyTensor) and
:func:`moe_latency_implicit` (PyTensor graphs with the implicit-function gradient;
:data:`MOE_IMPLICIT_ITERATIONS`, :data:`MOE_IMPLICIT_NEWTON`, :data:`SLOPE_CAP`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from specbayes.laws._common import _as_float, _is_numpy, _namespace
from specbayes.laws.coverage import expert_coverage
from specbayes.laws.latency_law import _zero_constant, latency


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
