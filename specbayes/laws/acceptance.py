r"""§1.2 acceptance: accepted tokens per cycle and the per-token acceptance probability.

With per-token acceptance probability ``alpha`` and draft length ``k``,
:func:`expected_tokens` is the mean number of tokens one cycle emits and
:func:`marginal_acceptance` the mean accepted fraction of the ``k`` drafted tokens;
:func:`alpha_from_marginal` and :func:`alpha_from_acceptance_length` invert them (what serving
engines report) back to ``alpha``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from specbayes.laws._common import _as_float, _is_numpy, _namespace, _quiet


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
