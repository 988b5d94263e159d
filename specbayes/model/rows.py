r"""The rows' collapsed log density and its gradient in one compiled pass.

The observation model of :mod:`specbayes.model.likelihood` for the law without a batch
curvature or knee: row :math:`i` of sweep :math:`s` has the mean log latency
:math:`\mu_i = \log C_{1s} - \log h_i` (:func:`~specbayes.model.likelihood.log_mean_latency`;
open loop :math:`h = 1 - \lambda C_2`, closed loop :math:`h = C_1/(C_1 + N C_2)`), the log
noise scale :math:`\log w_i = -\gamma \log h_i - \tfrac12 \log(n_i/n_\mathrm{ref})`
(:func:`~specbayes.model.likelihood.log_row_scale`), and with
:math:`r_i = (y_i - \mu_i)/w_i` the rows' density with :math:`\sigma^2 \sim IG(a, b)`
integrated out is :func:`~specbayes.model.likelihood.collapsed_logp`:

.. math::

    \log p = \log\Gamma(a + n/2) - \log\Gamma(a) + a\log b
    - (a + n/2)\log\big(b + \tfrac12 \textstyle\sum_i r_i^2\big)
    - \textstyle\sum_i \log w_i - \tfrac n2 \log 2\pi .

Written with PyTensor, its gradient is a chain of gathers from the sweeps to the rows,
elementwise kernels and scatter-adds back, each a pass over every row. :class:`CollapsedRows`
(on the paper set's seven dense verifiers, 59,040 rows: 2.87 ms per log density and gradient
of the whole model against 4.27 ms; ``benchmarks/likelihood_speed.md``) computes the sum and
its gradient with respect to the sweeps' :math:`\log C_1, \log C_2` and :math:`\gamma` in
one loop over the rows (numba), accumulating :math:`\partial\sum r^2` and
:math:`\partial\sum\log w` per sweep and combining them at the end:

.. math::

    \frac{\partial \log p}{\partial\theta} = -\frac{a + n/2}{b + \frac12\sum r^2}\,
    \frac12\frac{\partial\sum r^2}{\partial\theta} - \frac{\partial\sum\log w}{\partial\theta},
    \qquad \frac{\partial r_i^2}{\partial\theta} = -2 r_i\Big(\frac{1}{w_i}
    \frac{\partial\mu_i}{\partial\theta} + r_i \frac{\partial\log w_i}{\partial\theta}\Big).

A compiled form of the same formulas, not a second definition: ``tests/test_rows.py`` checks
its value against :func:`~specbayes.model.likelihood.collapsed_logp` of the graph's
:math:`\mu, \log w` and its gradient against PyTensor's gradient of that graph, open and
closed loop.
"""

from __future__ import annotations

import math
from typing import Any

import numba
import numpy as np
import pytensor.tensor as pt
from pytensor.gradient import DisconnectedType
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op
from pytensor.link.numba.dispatch.basic import numba_njit, register_funcify_default_op_cache_key

from specbayes.model.likelihood import collapsed_random, log_mean_latency, log_row_scale

__all__ = ["CollapsedRows", "rows_logp", "rows_random"]

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
#: Cached compilation, IEEE division (every divisor is a positive cost or headroom), fused
#: multiply-adds and reassociation — not ``nnan``/``ninf``: a row past the wall returns
#: :math:`-\infty`.
_FLAGS = dict(cache=True, error_model="numpy", fastmath={"nsz", "arcp", "contract", "reassoc"})


@numba.njit(**_FLAGS)
def _collapsed_rows(log_c1, log_c2, gamma, log_count, a, b, sweep, load, closed, y):
    """Collapsed log density of the rows and its gradient (see the module docstring).

    Returns ``(logp, d/dlog_c1, d/dlog_c2, d/dgamma)``; ``-inf`` and zeros where an
    open-loop row is at or past its wall (:math:`\\lambda C_2 \\ge 1`)."""
    n_sweeps, n = log_c1.shape[0], y.shape[0]
    c1, c2 = np.exp(log_c1), np.exp(log_c2)
    # d(sum r^2) and d(sum log w) per sweep, and with respect to gamma
    ss1, ss2 = np.zeros(n_sweeps), np.zeros(n_sweeps)
    lw1, lw2 = np.zeros(n_sweeps), np.zeros(n_sweeps)
    ss_g = lw_g = ss = sum_lw = 0.0
    for i in range(n):
        s = sweep[i]
        if closed[i]:  # h = C1 / (C1 + N C2)
            busy = load[i] * c2[s]
            log_h = log_c1[s] - math.log(c1[s] + busy)
            dh2 = -busy / (c1[s] + busy)  # d log h / d log C2
            dh1 = -dh2  # d log h / d log C1
        else:  # h = 1 - lambda C2
            busy = load[i] * c2[s]
            if busy >= 1.0:
                return -np.inf, np.zeros(n_sweeps), np.zeros(n_sweeps), 0.0
            log_h = math.log1p(-busy)
            dh2 = -busy / (1.0 - busy)
            dh1 = 0.0
        mu = log_c1[s] - log_h
        lw = -gamma * log_h - 0.5 * log_count[i]
        inv_w = math.exp(-lw)
        r = (y[i] - mu) * inv_w
        ss += r * r
        sum_lw += lw
        q, p = -2.0 * r * inv_w, -2.0 * r * r  # d r^2 / d mu, d r^2 / d log w
        ss1[s] += q * (1.0 - dh1) - p * gamma * dh1
        ss2[s] += -q * dh2 - p * gamma * dh2
        ss_g -= p * log_h
        lw1[s] -= gamma * dh1
        lw2[s] -= gamma * dh2
        lw_g -= log_h
    half_n = 0.5 * n
    rest = b + 0.5 * ss
    logp = (
        math.lgamma(a + half_n) - math.lgamma(a) + a * math.log(b)
        - (a + half_n) * math.log(rest) - sum_lw - n * _HALF_LOG_2PI
    )  # fmt: skip
    k = -0.5 * (a + half_n) / rest
    return logp, k * ss1 - lw1, k * ss2 - lw2, k * ss_g - lw_g


class CollapsedRows(Op):
    """The rows' collapsed log density (output 0) and its gradient (outputs 1–3).

    Inputs: the sweeps' ``log_c1``, ``log_c2``, the noise growth ``gamma`` (the
    differentiable ones), then the rows' ``log_count``, the noise prior's ``a``, ``b`` and
    the rows' sweep index, load, closed flag and observed log latency. Only output 0 is meant
    to be differentiated (the others are its gradient, which ``L_op`` returns).
    """

    __props__ = ()

    def make_node(self, *inputs):
        if len(inputs) != 10:
            raise TypeError(f"CollapsedRows takes 10 inputs, got {len(inputs)}")
        ndims = (1, 1, 0, 1, 0, 0, 1, 1, 1, 1)
        dtypes = ("float64",) * 6 + ("int64", "float64", "bool", "float64")
        tensors = [pt.as_tensor_variable(x).astype(t) for x, t in zip(inputs, dtypes, strict=True)]
        for x, nd in zip(tensors, ndims, strict=True):
            if x.ndim != nd:
                raise TypeError(f"CollapsedRows: input {x} must have {nd} dimensions")
        outputs = [pt.dscalar(), pt.dvector(), pt.dvector(), pt.dscalar()]
        return Apply(self, tensors, [o.type() for o in outputs])

    def perform(self, node, inputs, output_storage):
        x = [np.asarray(v) for v in inputs]
        for j in (2, 4, 5):
            x[j] = float(x[j])
        values = _collapsed_rows(*x)
        for store, value in zip(output_storage, values, strict=True):
            store[0] = np.asarray(value, dtype=np.float64)

    def connection_pattern(self, node):
        return [[True] * 4] * 3 + [[False] * 4] * 7

    def L_op(self, inputs, outputs, output_grads):
        for og in output_grads[1:]:
            if not isinstance(og.type, DisconnectedType):
                raise NotImplementedError("CollapsedRows has no second derivatives")
        g = output_grads[0]
        return [g * out for out in outputs[1:]] + [DisconnectedType()() for _ in range(7)]


@register_funcify_default_op_cache_key(CollapsedRows)
def _numba_collapsed_rows(op, node, **kwargs):
    """The Op inside numba-compiled graphs (nutpie's default backend)."""

    @numba_njit
    def collapsed_rows_numba(log_c1, log_c2, gamma, log_count, a, b, sweep, load, closed, y):
        logp, g1, g2, gg = _collapsed_rows(
            log_c1, log_c2, gamma.item(), log_count, a.item(), b.item(), sweep, load, closed, y
        )
        return np.array(logp), g1, g2, np.array(gg)

    return collapsed_rows_numba, 1


def rows_logp(value, log_c1, log_c2, gamma, log_count, a, b, *, sweep, load, closed) -> Any:
    """``log_latency``'s log density for :func:`pymc.CustomDist`: output 0 of
    :class:`CollapsedRows` (``sweep``, ``load``, ``closed``: the rows' data tensors)."""
    return CollapsedRows()(log_c1, log_c2, gamma, log_count, a, b, sweep, load, closed, value)[0]


def rows_random(log_c1, log_c2, gamma, log_count, a, b, rng=None, size=None, *, sweep, load,
                closed):  # fmt: skip
    """Draws of the rows (:func:`~specbayes.model.likelihood.collapsed_random`) at the
    law's mean and the rows' noise scales, from the sweeps' costs."""
    lc1 = np.asarray(log_c1)[..., sweep]
    mu = log_mean_latency(lc1, np.asarray(log_c2)[..., sweep], load, closed)
    log_w = log_row_scale(mu, lc1, np.asarray(gamma)[..., None], log_count)
    return collapsed_random(mu, log_w, a, b, rng=rng, size=size)


def register_jax() -> None:
    """Lower :class:`CollapsedRows` to JAX (``sampler="numpyro"``): the same density written
    with ``jax.numpy``, its gradient by JAX's autodiff (NumPyro differentiates the lowered
    output 0 itself). Called where the JAX backend is set up
    (:func:`specbayes.parallel.jax_chain_method`)."""
    import jax
    import jax.numpy as jnp
    from jax.scipy.special import gammaln
    from pytensor.link.jax.dispatch import jax_funcify

    def logp(log_c1, log_c2, gamma, log_count, a, b, sweep, load, closed, y):
        lc1, lc2 = log_c1[sweep], log_c2[sweep]
        busy = load * jnp.exp(lc2)
        wall = ~closed & (busy >= 1.0)
        # each branch on inputs that keep the other's value and gradient finite
        free = jnp.where(closed | wall, 0.0, busy)
        log_h = jnp.where(closed, lc1 - jnp.logaddexp(lc1, jnp.log(load) + lc2), jnp.log1p(-free))
        mu = lc1 - log_h
        log_w = -gamma * log_h - 0.5 * log_count
        r = (y - mu) * jnp.exp(-log_w)
        half_n = 0.5 * y.shape[0]
        value = (
            gammaln(a + half_n) - gammaln(a) + a * jnp.log(b)
            - (a + half_n) * jnp.log(b + 0.5 * jnp.sum(r * r)) - jnp.sum(log_w)
            - 2.0 * half_n * _HALF_LOG_2PI
        )  # fmt: skip
        return jnp.where(jnp.any(wall), -jnp.inf, value)

    value_and_grad = jax.value_and_grad(logp, argnums=(0, 1, 2))

    def lowered(*inputs):
        value, (g1, g2, gg) = value_and_grad(*inputs)
        return value, g1, g2, gg

    jax_funcify.register(CollapsedRows)(lambda op, **kwargs: lowered)
