r"""The hierarchical location of the log coefficients — one function for graph and prediction.

.. math::

    \log c_{u j} = \mu_{g(u) j} + \log\big(1 - w_j + w_j\, e^{t_{u j}}\big) + s_j\, z_{u j},
    \qquad z_{u j} \sim \mathcal N(0, 1)

for unit (cell) :math:`u` of group :math:`g(u)` = (verifier, hardware) and coefficient
:math:`j`: a group level :math:`\mu` (the coefficient at the centre of the group's cells), an
affine cell trend — :math:`c = c^*\,(1 - w + w\,z/z^*)` in the covariate :math:`z` (prefill
tokens or the time-averaged KV size, :func:`trend_covariates`: :math:`t = \log(z/z^*)`), a share
:math:`w \in (0, 1)` of the coefficient that grows with :math:`z` and a part that does not (a
step's per-request compute beside its KV reads) — and a cell deviation of scale :math:`s_j`.
Untrended coefficients have :math:`t = 0`. The graph evaluates it on PyTensor variables; a
held-out cell is predicted by the same function with :math:`z` drawn from its prior.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from specbayes.model.priors import TRENDED


def log_coefficients(
    mu: Any, share: Any, cell_sd: Any, z: Any, group: np.ndarray, trend: np.ndarray
) -> Any:
    r"""Log coefficients of units: :math:`\mu_{g(u)} + \log(1 - w + w e^{t_u}) + s \odot z_u`.

    Parameters
    ----------
    mu : (..., n_group, n_coef) array or tensor
        Group levels (leading axes: posterior draws, if any).
    share : (..., n_coef) array or tensor
        Trend shares :math:`w \in (0, 1]` (entries of coefficients without a trend meet
        :math:`t = 0` and add nothing).
    cell_sd : (..., n_coef) array or tensor
        Cell deviation scales.
    z : (..., n_unit, n_coef) array or tensor
        Standardised cell deviations.
    group : (n_unit,) int array
        Group of each unit.
    trend : (n_unit, n_coef) array
        Centred log covariates (:func:`trend_covariates`).

    Returns
    -------
    (..., n_unit, n_coef) array or tensor
    """
    return (
        take_rows(mu, group, np.shape(trend)[-1])
        + affine_trend(_row(share), trend)
        + _row(cell_sd) * z
    )


def take_rows(x: Any, index: np.ndarray, width: int | None = None) -> Any:
    """``x``'s rows ``index`` (second-last axis). Of a matrix tensor with ``width`` columns,
    as one gather from its flat values: PyTensor's numba backend gathers and scatters (the
    gradient) a matrix's rows several times slower than a vector's elements (0.16 ms for
    6,560 rows of 4 against 0.014 ms; ``benchmarks/fit_speed.md``)."""
    if isinstance(x, np.ndarray):
        return x.take(index, axis=-2)
    if width is None or x.ndim != 2:
        return x[..., index, :]
    flat = (np.asarray(index)[:, None] * width + np.arange(width)).ravel()
    return x.reshape((-1,))[flat].reshape((len(index), width))


def affine_trend(share: Any, trend: np.ndarray) -> Any:
    r""":math:`\log(1 - w + w e^{t}) = \operatorname{log1p}(w\,\operatorname{expm1}(t))`:
    the log of an affine function of the covariate, relative to its value at the centre."""
    x = share * np.expm1(trend)
    if isinstance(x, np.ndarray):
        return np.log1p(x)
    import pytensor.tensor as pt

    return pt.log1p(x)


def _row(x: Any) -> Any:
    """A per-coefficient vector (with any leading draw axes) as a row over units."""
    return x if np.ndim(x) == 0 else x[..., None, :]


def trend_covariates(
    prefill: np.ndarray, decode: np.ndarray, coefs: list[str], centre: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    r"""Centred log covariates :math:`t_{uj}` of units with ``prefill`` p and ``decode`` g.

    ``prefill`` coefficients use :math:`\log p`, ``kv`` ones :math:`\log(p + g/2)`, the others
    0. ``centre`` (per coefficient) defaults to the mean over the given units; pass the
    fitted one when predicting new cells. Returns ``(trend, centre)``.
    """
    p = np.maximum(np.asarray(prefill, float), 1.0)
    kv = p + 0.5 * np.asarray(decode, float)
    raw = np.zeros((len(p), len(coefs)))
    for j, c in enumerate(coefs):
        kind = TRENDED.get(c)
        if kind is not None:
            raw[:, j] = np.log(p if kind == "prefill" else kv)
    if centre is None:
        centre = raw.mean(axis=0)
    return raw - centre, centre
