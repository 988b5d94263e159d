r"""PyMC's ``TruncatedNormal`` with a normaliser whose gradient is finite under JAX too.

The log density is PyMC's (:class:`pymc.TruncatedNormal`): the normaliser
:math:`\log(\Phi(b) - \Phi(a))` is evaluated by the same piecewise formulas
(:func:`pymc.distributions.dist_math.normal_lcdf`, ``normal_lccdf``,
``log_diff_normal_cdf``) — bit for bit with one bound (the next core's log density on the
demo is PyMC's to the last bit, its PyTensor gradient to rounding), within an ulp with two
(rewrites may round the two-bound form differently). What differs is that each piece only
ever sees inputs inside its own region. PyMC writes
``switch(z < -1, log(erfcx(-z/√2)/2) - z²/2, log1p(-erfc(z/√2)/2))``, which JAX
lowers to ``jnp.where`` and differentiates through *both* branches. At a bound far
from the location (the next model core's non-centred sweep costs are truncated at
:math:`(\text{wall} - \text{loc})/\tau` with :math:`\tau` = 0.005, so :math:`|z|` in the
hundreds) the unselected branch is infinite — :math:`\operatorname{erfcx}(-z/\sqrt2)`
overflows for :math:`z > 37.7`, :math:`\operatorname{log1p}(-1)` for :math:`z < -8.3` — and
its zero cotangent times an infinite local derivative is NaN, which ``where`` adds into the
gradient (the classic "NaN through the unselected branch of where"). PyTensor's symbolic
gradient does not form that product, so nutpie never saw it; NumPyro's did, at every
sweep whose bound was far out, and every draw diverged.

The fix is the "double where": each branch's input is replaced, where the branch is not
selected, by a harmless point of its own region, so both branches and their derivatives are
finite everywhere, and each selected value is the same formula on the same input.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pymc.distributions.continuous import TruncatedNormalRV
from pymc.distributions.dist_math import check_parameters
from pymc.logprob.abstract import _logprob_helper
from pytensor.tensor.variable import TensorConstant

__all__ = ["TruncatedNormal", "log_diff_normal_cdf", "normal_lccdf", "normal_lcdf"]


def normal_lcdf(mu, sigma, x):
    r""":math:`\log\Phi((x - \mu)/\sigma)`: PyMC's ``normal_lcdf``, each branch on its own side."""
    z = (x - mu) / sigma
    left = pt.lt(z, -1.0)
    z_left = pt.switch(left, z, -1.0)  # the erfcx branch: z < -1 (else -1)
    z_right = pt.switch(left, -1.0, z)  # the erfc branch: z >= -1 (else -1)
    return pt.switch(
        left,
        pt.log(pt.erfcx(-z_left / pt.sqrt(2.0)) / 2.0) - pt.sqr(z_left) / 2.0,
        pt.log1p(-pt.erfc(z_right / pt.sqrt(2.0)) / 2.0),
    )


def normal_lccdf(mu, sigma, x):
    r""":math:`\log(1 - \Phi((x - \mu)/\sigma))`: PyMC's ``normal_lccdf``, each branch on its
    own side."""
    z = (x - mu) / sigma
    right = pt.gt(z, 1.0)
    z_right = pt.switch(right, z, 1.0)
    z_left = pt.switch(right, 1.0, z)
    return pt.switch(
        right,
        pt.log(pt.erfcx(z_right / pt.sqrt(2.0)) / 2.0) - pt.sqr(z_right) / 2.0,
        pt.log1p(-pt.erfc(-z_left / pt.sqrt(2.0)) / 2.0),
    )


def log_diff_normal_cdf(mu, sigma, x, y):
    r""":math:`\log(\Phi(x') - \Phi(y'))` for :math:`x > y`: PyMC's ``log_diff_normal_cdf``
    (three regions by the signs of the standardised bounds), each region's formula fed only
    bounds of its own region."""
    x = (x - mu) / sigma / pt.sqrt(2.0)
    y = (y - mu) / sigma / pt.sqrt(2.0)
    both_pos = pt.gt(y, 0)
    both_neg = pt.and_(~both_pos, pt.lt(x, 0))
    straddle = pt.and_(~both_pos, ~both_neg)
    x1, y1 = pt.switch(both_pos, x, 2.0), pt.switch(both_pos, y, 1.0)
    x2, y2 = pt.switch(both_neg, x, -1.0), pt.switch(both_neg, y, -2.0)
    x3, y3 = pt.switch(straddle, x, 1.0), pt.switch(straddle, y, -1.0)
    return pt.log(0.5) + pt.switch(
        both_pos,
        -pt.square(y1)
        + pt.log(pt.erfcx(y1) - pt.exp(pt.square(y1) - pt.square(x1)) * pt.erfcx(x1)),
        pt.switch(
            both_neg,
            -pt.square(x2)
            + pt.log(pt.erfcx(-x2) - pt.exp(pt.square(x2) - pt.square(y2)) * pt.erfcx(-y2)),
            pt.log(pt.erf(x3) - pt.erf(y3)),
        ),
    )


class _TruncatedNormalRV(TruncatedNormalRV):
    """PyMC's truncated normal draws, under its own op type (so its own log density)."""


_truncated_normal = _TruncatedNormalRV()


class TruncatedNormal(pm.TruncatedNormal):
    """:class:`pymc.TruncatedNormal` (same parameters, draws, transform, initial point and log
    density) with the normaliser of this module: gradients finite on every backend. Its op
    subclasses PyMC's, so everything but the log density (draws, support point, log CDF) is
    PyMC's own dispatch."""

    rv_op = _truncated_normal

    def logp(value, mu, sigma, lower, upper):
        is_lower_bounded = not (
            isinstance(lower, TensorConstant) and np.all(np.isneginf(lower.value))
        )
        is_upper_bounded = not (isinstance(upper, TensorConstant) and np.all(np.isinf(upper.value)))
        if is_lower_bounded and is_upper_bounded:
            norm = log_diff_normal_cdf(mu, sigma, upper, lower)
        elif is_lower_bounded:
            norm = normal_lccdf(mu, sigma, lower)
        elif is_upper_bounded:
            norm = normal_lcdf(mu, sigma, upper)
        else:
            norm = 0.0
        logp = _logprob_helper(pm.Normal.dist(mu, sigma), value) - norm
        if is_lower_bounded:
            logp = pt.switch(value < lower, -np.inf, logp)
        if is_upper_bounded:
            logp = pt.switch(value > upper, -np.inf, logp)
        if is_lower_bounded and is_upper_bounded:
            logp = check_parameters(logp, pt.le(lower, upper), msg="lower_bound <= upper_bound")
        return logp
