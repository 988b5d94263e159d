r"""§1.5 MoE expert coverage and the latency law with a configuration's expert reads.

:func:`expert_coverage` is the expected fraction :math:`\varphi(T) = 1 - (1 - m/M)^T` of a
layer's experts that ``T`` routed tokens touch. With the expert reads a per-pass cost (the
``moe`` model level, docs/model.md §5) the law has a closed form in Lambert's W
(:func:`moe_fixed_cost_latency`; closed loop :func:`moe_closed_loop_latency`); a
configuration's reads travel as :class:`Experts` through every law's ``experts=``
(:func:`term_keywords`, :func:`map_term`). This module imports no other law, so
:mod:`.latency_law` builds on it and :mod:`.moe` (the general fixed point) on both.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numba

from specbayes.laws._common import _as_float, _is_numpy, _namespace, _quiet


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


class Experts(NamedTuple):
    r"""A configuration's expert reads, for the laws' ``experts=`` (the ``moe`` level).

    With them the open-loop law is :math:`L = (C_1 + \varphi(\lambda L(k+1))\,X)/(1 -
    \lambda C_2)` (:func:`moe_fixed_cost_latency`) and the closed-loop one :math:`L = C_1 +
    N C_2 + \varphi(N(k+1))\,X` (:func:`moe_closed_loop_latency`), :math:`\varphi` the
    expected share of experts the pass's routed tokens touch (:func:`expert_coverage`).

    Attributes
    ----------
    share : array_like
        :math:`X = (g/E)\,c_{1s}`: a request's expert reads at full coverage (s), its verifier
        passes times one pass's read of every expert.
    ratio : array_like
        :math:`m/M`, experts per token over experts per layer.
    k : array_like
        Draft length (each running sequence routes :math:`k + 1` tokens per pass).
    """

    share: Any
    ratio: Any
    k: Any


def term_keywords(term: Any, suffix: str = "") -> dict[str, Any]:
    """The laws' keyword for a configuration's term beyond :math:`C_1, C_2, C_3`: ``{"experts"
    + suffix: term}`` for :class:`Experts`, ``{"knee" + suffix: term}`` for a knee ``(batch,
    slope)``, ``{}`` for ``None`` — so a caller that carries either passes it on alike
    (``suffix="_sd"`` / ``"_dense"`` for the two arms of :func:`speedup` and the break-evens).
    """
    if term is None:
        return {}
    return {("experts" if isinstance(term, Experts) else "knee") + suffix: term}


def map_term(term: Any, fn: Any) -> Any:
    """``fn`` applied to every part of a knee or :class:`Experts` (``None`` stays ``None``),
    keeping its kind."""
    if term is None:
        return None
    parts = (fn(x) for x in term)
    return Experts(*parts) if isinstance(term, Experts) else tuple(parts)


def moe_closed_loop_latency(
    concurrency: Any, c1: Any, c1s: Any, c2: Any, m: Any, M: Any, k: Any = 0
) -> Any:
    r"""Closed-loop MoE latency when the coverage weighs the fixed cost only
    (:math:`C_{2s} = 0`, as :func:`moe_fixed_cost_latency`).

    .. math::  L(N) = C_1 + N C_2 + \varphi(N (k + 1))\, C_{1s}

    With ``N`` requests always in flight the batch is ``N`` (:func:`closed_loop_latency`), so
    the routed tokens are known and there is no fixed point.
    """
    xp = _namespace(concurrency, c1, c1s, c2, m, M, k)
    tokens = concurrency * (_as_float(k, xp) + 1.0)
    return c1 + concurrency * c2 + expert_coverage(tokens, m, M) * c1s


#: Halley steps of :func:`moe_fixed_cost_latency` in a graph, from the upper bound.
MOE_FIXED_STEPS = 5


def moe_fixed_cost_latency(
    rps: Any, c1: Any, c1s: Any, c2: Any, m: Any, M: Any, k: Any = 0, *,
    steps: int = MOE_FIXED_STEPS,
) -> Any:  # fmt: skip
    r"""The MoE latency when the coverage weighs the fixed cost only (:math:`C_{2s} = 0`).

    .. math::

        L = \frac{C_1 + \varphi(\lambda L (k + 1))\, C_{1s}}{1 - \lambda C_2}

    — :func:`moe_latency` with ``c2s = 0``. The map is then bounded, increasing and concave
    in :math:`L`, so it has exactly one fixed point wherever :math:`\lambda C_2 < 1`, and in
    :math:`u = \kappa\lambda(k+1)L`, :math:`\kappa = -\log(1 - m/M)`, it is
    :math:`u = A - B e^{-u}` with :math:`A = a(C_1 + C_{1s})`, :math:`B = a C_{1s}`,
    :math:`a = \kappa\lambda(k+1)/(1 - \lambda C_2)`: in closed form

    .. math::  u = A + W_0(-B e^{-A}),

    the principal branch of Lambert's W (its argument lies in :math:`(-1/e, 0]`:
    :math:`B e^{-A} \le C_{1s}/(e\,(C_1 + C_{1s}))`). NumPy inputs use it, in one compiled
    pass per value (:func:`_lambert_w0`: within 1e-12 of ``scipy.special.lambertw`` away from
    the branch point, ~3× faster — a fit's sweep draws evaluate it at every (draw, row)).
    **Graphs** take ``steps`` Halley steps on
    :math:`G(L) = F(L) - L` from the upper bound :math:`(C_1 + C_{1s})/(1 - \lambda C_2)`
    (cubic convergence, one exponential a step; no gradient flows through them) and then one
    Newton step with the slope
    :math:`s_0 = F'(L_0) = a\,C_{1s}\,e^{-u_0}` held constant, whose gradient is the
    implicit function's, :math:`(\partial F/\partial\theta)/(1 - s_0)`
    (:func:`moe_latency_implicit`'s device, without its general map's second derivatives:
    the ``moe`` model's gradient compiles in seconds instead of minutes).

    Parameters
    ----------
    rps, c1, c1s, c2, m, M, k : array_like or TensorVariable
        Request rate, the costs without coverage, the fixed expert reads at full coverage,
        experts per token and per layer, draft length.
    steps : int
        Halley steps before the implicit step (graphs only). 5 leave the value within
        3e-12 (relative) of the closed form over 200,000 random costs and loads up to
        99.9 % of the wall, 4 within 2e-4 (``benchmarks/moe.md``); they cost a third of
        the 8 Newton steps (two exponentials each) they replace.

    Returns
    -------
    ndarray or TensorVariable
        ``L`` (s); ``inf`` where :math:`\lambda C_2 \ge 1`.
    """
    xp = _namespace(rps, c1, c1s, c2, m, M, k)
    rps, c1, c1s, c2, m, M, k = (_as_float(a, xp) for a in (rps, c1, c1s, c2, m, M, k))
    if _is_numpy(xp):
        with _quiet(xp):
            return _fixed_cost_latency(rps, c1, c1s, c2, m / M, k)
    with _quiet(xp):
        headroom = 1.0 - rps * c2
        a = -xp.log1p(-m / M) * rps * (k + 1.0)  # du/dL: phi = 1 - exp(-a L)
        from pytensor.gradient import disconnected_grad

        # Halley on constants of the graph; the last step carries the implicit gradient
        fixed = [disconnected_grad(x) for x in (c1, c1s, headroom, a)]
        base, reads = fixed[0] / fixed[2], fixed[1] / fixed[2]  # C1/h, C1s/h: no division a step
        current = base + reads
        for _ in range(steps):
            current = _halley_step(current, base, reads, fixed[3])
        current = disconnected_grad(current)
        s0 = disconnected_grad(_fixed_slope(current, c1s, headroom, a))
        return current + (_fixed_map(current, c1, c1s, headroom, a) - current) / (1.0 - s0)


@numba.njit(inline="always")
def _lambert_w0(x):  # pragma: no cover - compiled
    """The principal branch of Lambert's W on :math:`[-1/e, 0]`: three Halley steps from the
    branch point's series in :math:`p = \\sqrt{2(ex + 1)}` (below -1/4) or the Taylor series
    at 0 (above)."""
    if x < -0.25:
        p = math.sqrt(max(2.0 * (math.e * x + 1.0), 0.0))
        w = -1.0 + p * (1.0 + p * (-1.0 / 3.0 + p * 11.0 / 72.0))
    else:
        w = x * (1.0 + x * (-1.0 + x * (1.5 - x * 8.0 / 3.0)))
    for _ in range(3):
        ew = math.exp(w)
        f = w * ew - x
        if f == 0.0:
            break
        w -= f / (ew * (w + 1.0) - (w + 2.0) * f / (2.0 * w + 2.0))
    return w


@numba.vectorize(cache=True)  # compiled for its argument types on first call
def _fixed_cost_latency(rps, c1, c1s, c2, ratio, k):  # pragma: no cover - compiled
    """:func:`moe_fixed_cost_latency` of NumPy inputs, per value: ``inf`` past the wall,
    :math:`C_1/(1 - \\lambda C_2)` at no load (:math:`\\varphi = 0`), else
    :math:`(A + W_0(-B e^{-A}))/a`."""
    headroom = 1.0 - rps * c2
    if not headroom > 0.0:
        return math.inf
    a = -math.log1p(-ratio) * rps * (k + 1.0)
    if not a > 0.0:
        return c1 / headroom
    big_a, big_b = a * (c1 + c1s) / headroom, a * c1s / headroom
    return (big_a + _lambert_w0(-big_b * math.exp(-big_a))) / a


def _halley_step(lat: Any, base: Any, reads: Any, a: Any) -> Any:
    r"""One Halley step on :math:`G(L) = F(L) - L` (:func:`_fixed_map`), with
    ``base`` :math:`= C_1/h` and ``reads`` :math:`= C_{1s}/h`: :math:`L - 2GG'/(2G'^2 -
    GG'')`, :math:`G' = a\,r - 1`, :math:`G'' = -a^2 r`, :math:`r = (C_{1s}/h) e^{-aL}` —
    one exponential and one division for all three."""
    import pytensor.tensor as pt

    decay = pt.expm1(-a * lat)  # e^{-aL} - 1, exact at small aL
    r = reads * (decay + 1.0)
    g = base - reads * decay - lat
    g1 = a * r - 1.0
    return lat - 2.0 * g * g1 / (2.0 * g1 * g1 + a * a * r * g)


def _fixed_map(lat: Any, c1: Any, c1s: Any, headroom: Any, a: Any) -> Any:
    r""":math:`F(L) = (C_1 + \varphi C_{1s})/(1 - \lambda C_2)`, :math:`\varphi = 1 - e^{-aL}`."""
    import pytensor.tensor as pt

    return (c1 - c1s * pt.expm1(-a * lat)) / headroom


def _fixed_slope(lat: Any, c1s: Any, headroom: Any, a: Any) -> Any:
    r""":math:`F'(L) = a\,C_{1s} e^{-aL}/(1 - \lambda C_2)`."""
    import pytensor.tensor as pt

    return a * c1s * pt.exp(-a * lat) / headroom
