"""The sampler's coordinates for bounded and positive quantities of the model.

A transform changes only the axis NUTS moves on, never the prior: each one here replaced an
axis on which a posterior of the model was a wall or a bent ridge (the measurements are in
``benchmarks/model_core.md``).
"""

from __future__ import annotations

import numpy as np
import pytensor.tensor as pt
from pymc.logprob.transforms import Transform


class SoftplusTransform(Transform):
    r"""Positive values through :math:`x = a \log(1 + e^u)` (scale :math:`a`, 1 unless
    given): an unconstrained axis that is logarithmic below :math:`a` and linear above it.
    The prior is unchanged; only the sampler's coordinate is.

    ``noise_growth`` (:math:`a = 1`): with few rows :math:`\gamma`'s posterior reaches its
    prior's edge at 0 and also has a steep upper side (the prior and the
    :math:`-\gamma\sum\log h` of the rows' scales). Under the log transform that side is a
    super-exponential wall in :math:`u = \log\gamma` (curvature :math:`\propto e^{2u}`)
    behind a long left tail that sets the step size: NUTS' trajectories that reached it
    diverged (the rare single divergences of the simulator small sweeps). Softplus keeps the
    left tail (:math:`x \approx e^u`) and is linear on the right, where the posterior is then
    as Gaussian as in :math:`\gamma`.

    ``cycle_overhead`` and a catalogued drafter's levels (:math:`a` = the prior median): see
    :func:`specbayes.model.graph._cycle_overhead` and
    :func:`specbayes.model.graph._drafter_levels`."""

    name = "softplus"

    def __init__(self, scale: float | np.ndarray = 1.0):
        self.scale = scale

    def forward(self, value, *inputs):
        x = value / self.scale
        return x + pt.log(-pt.expm1(-x))

    def backward(self, value, *inputs):
        return self.scale * pt.softplus(value)

    def log_jac_det(self, value, *inputs):
        return np.log(self.scale) - pt.softplus(-value)


SOFTPLUS = SoftplusTransform()


class ShareTransform(Transform):
    r"""Shares :math:`w \in (0, 1)` through a smooth clamp of an unconstrained :math:`v`,
    :math:`w = \varepsilon\,\mathrm{softplus}(v/\varepsilon)
    - \varepsilon\,\mathrm{softplus}((v - 1)/\varepsilon)`: about the identity a few
    :math:`\varepsilon` inside the ends and logarithmic within :math:`\varepsilon` of either
    (the logit's axis, :math:`\log w` and :math:`-\log(1 - w)` there). The prior is
    unchanged; only the sampler's coordinate is.

    A trend share (``trend``) whose rows pin a coefficient at a cell where it is a small part of
    the cost pins :math:`w` linearly there (the cell's coefficient is affine in :math:`w`), so
    its posterior is near-Gaussian in :math:`w`; on the logit axis the same posterior is skewed
    towards :math:`w \to 1`, with a correlation to the cells' coefficients that fades as the
    logit grows — a bent ridge (``trend[c2p]`` of the two-drafter set, ``benchmarks/
    model_core.md``)."""

    name = "share"

    def __init__(self, eps: float = 0.01):
        self.eps = eps

    def forward(self, value, *inputs):
        e = self.eps
        return e * pt.log(pt.expm1(value / e)) - e * pt.log(-pt.expm1((value - 1.0) / e))

    def backward(self, value, *inputs):
        # the clamp as written, not v + eps softplus(-v/eps) - ... (equal in exact
        # arithmetic), which cancels to rounding noise once w is below ~1e-16 |v|: a share
        # whose coordinate strayed there (an L-BFGS step from the support point) had a
        # density that jumped by ~60 nats within 1e-8 and was -inf a little further - a start
        # no chain left (benchmarks/model_core.md, 2026-12-06 23:45). Below 1/2 the lower
        # end's form, above it the mirror w(v) = 1 - w(1 - v): each end keeps its precision.
        e = self.eps
        low = pt.lt(value, 0.5)
        v_low = pt.switch(low, value, 0.0)
        v_high = pt.switch(low, 1.0, value)
        w_low = e * pt.softplus(v_low / e) - e * pt.softplus((v_low - 1.0) / e)
        w_high = 1.0 - e * pt.softplus((1.0 - v_high) / e) + e * pt.softplus(-v_high / e)
        return pt.switch(low, w_low, w_high)

    def log_jac_det(self, value, *inputs):
        e = self.eps
        # log(sigmoid(a) - sigmoid(b)), a - b = 1/eps
        const = np.log(-np.expm1(-1.0 / e))
        return -pt.softplus(-value / e) - pt.softplus((value - 1.0) / e) + const


SHARE_AXIS = ShareTransform()


class LowerSoftplus(Transform):
    r"""Values above a lower bound :math:`l` through :math:`x = l + a\,\mathrm{softplus}(u/a)`:
    logarithmic in :math:`x - l` within :math:`a` of the bound, linear beyond. The prior is
    unchanged; only the sampler's coordinate is.

    The anchored structure's SD/dense cost ratios
    (:func:`specbayes.model.graph.anchored_costs`): with a dense sweep whose :math:`C_2`
    its rows barely pin, the SD sweep's cost :math:`\log C_{2u} + \log C_{2R}` is pinned while
    each part is not, and on PyMC's log axis above the floor that is a bent ridge; linear
    beyond :math:`a` it is straight."""

    name = "lower_softplus"

    def __init__(self, lower, scale: float = 1.0):
        self.lower = np.asarray(lower, dtype=float)
        self.scale = scale

    def forward(self, value, *inputs):
        x = (value - self.lower) / self.scale
        return self.scale * (x + pt.log(-pt.expm1(-x)))

    def backward(self, value, *inputs):
        return self.lower + self.scale * pt.softplus(value / self.scale)

    def log_jac_det(self, value, *inputs):
        return -pt.softplus(-value / self.scale)
