r"""The observation model: one function of the sweep costs, for every evaluation.

Each row's expected log latency follows from its sweep's :math:`C_1, C_2` through the latency
law (:func:`specbayes.laws.log_headroom`): open loop :math:`L = C_1/(1 - \lambda C_2)`, closed
loop :math:`L = C_1 + N C_2`, so :math:`\log L = \log C_1 - \log h`. Observed log latencies are
Normal around it with scale :math:`\sigma` (multiplicative error). The prior keeps every
open-loop sweep's :math:`C_2` below :math:`1/\lambda_\max` of its observed rows, so no draw
places an observed row past saturation: :math:`\mu` is finite for every draw.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from specbayes import laws


def log_mean_latency(log_c1: Any, log_c2: Any, load: Any, closed: Any) -> Any:
    r""":math:`\mu = \log C_1 - \log h(C_1, C_2; \lambda \text{ or } N)` per row.

    Parameters
    ----------
    log_c1, log_c2 : array or tensor
        The row's sweep costs (already indexed per row), natural log.
    load : array or tensor
        Request rate (open loop) or concurrency N (closed loop).
    closed : array or tensor of bool
        Which rows are closed loop.
    """
    xp_exp = np.exp if isinstance(log_c1, np.ndarray) else _pt_exp
    c1, c2 = xp_exp(log_c1), xp_exp(log_c2)
    return log_c1 - laws.log_headroom(c1, c2, load, load, closed)


def _pt_exp(x: Any) -> Any:
    import pytensor.tensor as pt

    return pt.exp(x)


def log_density(y: Any, mu: Any, sigma: Any) -> Any:
    r"""Pointwise log density :math:`\log\mathcal N(\log L \mid \mu, \sigma)` (NumPy)."""
    z = (np.asarray(y) - mu) / sigma
    return -0.5 * z * z - np.log(sigma) - 0.5 * np.log(2.0 * np.pi)
