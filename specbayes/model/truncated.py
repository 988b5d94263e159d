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

The default transform has the same flaw, and the same fix (:class:`Interval`). A bound that is
a graph, not a constant — the SD sweeps' ``log_c2_ratio`` is bounded above by
:math:`\log(\text{wall}) - \log c_2`, infinite on a closed-loop sweep — gets PyMC's two-bound
interval transform, which chooses per element, by a ``where``, the logit-scaled form
:math:`a + (b - a)\,\operatorname{sigmoid}(x)` or the one-bound ``exp`` form. At
:math:`b = \infty` the unselected logit-scaled form has an infinite derivative in :math:`x`,
and JAX's gradient of that variable was NaN on every closed-loop SD sweep
(``small_sweeps.real_case("HumanEval", "dspark")``; the demo is open loop).
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pymc.distributions.continuous import TruncatedNormalRV, truncated_normal_default_transform
from pymc.distributions.dist_math import check_parameters
from pymc.distributions.transforms import Interval as _PyMCInterval
from pymc.distributions.transforms import _default_transform
from pymc.logprob.abstract import _logprob_helper
from pytensor.tensor.variable import TensorConstant

__all__ = ["Interval", "TruncatedNormal", "log_diff_normal_cdf", "normal_lccdf", "normal_lcdf"]


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


class Interval(_PyMCInterval):
    """PyMC's interval transform (same values, same log Jacobian) whose every form only ever
    sees finite bounds.

    Where both bounds are graphs, PyMC selects per element between the two-bound form (both
    finite), the one-bound forms and the identity; here each form's bounds are replaced, where
    the form is not selected, by finite ones (the interval [-1, 1]), so its derivatives are
    finite there (JAX differentiates every branch of a ``where``). Where a form is selected its
    formula and inputs are PyMC's. With a constant infinite bound PyMC builds a one-bound
    transform, no ``where``: that case is PyMC's own.

    The stand-ins are not 0: PyTensor sinks a product into a switch with a zero branch
    (``switch(c, a, 0) * y`` becomes ``switch(c, a * y, 0)``), which would put the infinite
    bound back into the product JAX differentiates.
    """

    def _graph_bounds(self, inputs):
        """``(a, b, has_a, has_b, both, a2, b2)`` where both bounds are graphs (``None``
        otherwise: PyMC's own transform): which bounds are finite, and the bounds of the
        two-bound form with their finite stand-ins where it is not selected."""
        a, b, lower_bounded, upper_bounded = self.get_a_and_b(inputs)
        if not (lower_bounded and upper_bounded):
            return None
        has_a, has_b = pt.neq(a, -pt.inf), pt.neq(b, pt.inf)
        both = pt.and_(has_a, has_b)
        return a, b, has_a, has_b, both, pt.switch(both, a, -1.0), pt.switch(both, b, 1.0)

    def backward(self, value, *inputs):
        bounds = self._graph_bounds(inputs)
        if bounds is None:
            return super().backward(value, *inputs)
        a, b, has_a, has_b, both, a2, b2 = bounds
        sigmoid_x = pt.sigmoid(value)
        exp_value = pt.exp(value)
        return pt.where(
            both,
            sigmoid_x * b2 + (1 - sigmoid_x) * a2,
            pt.where(
                has_a,
                exp_value + pt.switch(has_a, a, -1.0),
                pt.where(has_b, pt.switch(has_b, b, 1.0) - exp_value, value),
            ),
        )

    def log_jac_det(self, value, *inputs):
        bounds = self._graph_bounds(inputs)
        if bounds is None:
            return super().log_jac_det(value, *inputs)
        _, _, has_a, has_b, both, a2, b2 = bounds
        return pt.where(
            both,
            pt.log(b2 - a2) - 2 * pt.softplus(-value) - value,
            pt.where(pt.or_(has_a, has_b), value, pt.zeros_like(value)),
        )


class _TruncatedNormalRV(TruncatedNormalRV):
    """PyMC's truncated normal draws, under its own op type (so its own log density and
    default transform)."""


_truncated_normal = _TruncatedNormalRV()


@_default_transform.register(_TruncatedNormalRV)
def _truncated_normal_transform(op, rv):
    """PyMC's bounds (an infinite constant bound is no bound), in :class:`Interval`."""
    return Interval(bounds_fn=truncated_normal_default_transform(op, rv).args_fn)


class TruncatedNormal(pm.TruncatedNormal):
    """:class:`pymc.TruncatedNormal` (same parameters, draws, initial point, transformed values
    and log density) with the normaliser and the default transform (:class:`Interval`) of this
    module: gradients finite on every backend. Its op subclasses PyMC's, so everything but the
    log density and the transform (draws, support point, log CDF) is PyMC's own dispatch."""

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
