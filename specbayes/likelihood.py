r"""The rows' likelihood of the ``dense`` and ``sd`` levels as one compiled pass.

Per row :math:`i` of coefficient group :math:`j = j(i)` (one unit, drafter unit and k), with
prefill ratio :math:`a_i`, verifier passes :math:`P_i` and group costs
:math:`c_{1p}, \pi_1 = c_{1v} + k c_{1d}, c_{2p}, c_{2v}, \kappa = k c_{2d}` and inverse knees
:math:`\iota_v = 1/K_v, \iota_d = 1/K_d`:

.. math::

    C_1 = a_i c_{1p} + P_i \pi_1, \quad C_{2,v} = a_i c_{2p} + P_i c_{2v}, \quad
    C_{2,d} = P_i \kappa, \quad C_2 = C_{2,v} + C_{2,d}, \quad
    C_3 = C_{2,v}\iota_v + C_{2,d}\iota_d

(:func:`laws.cycle_cost`, :func:`laws.pass_cost`, :func:`laws.batch_curvature`), the
latency :math:`L_i` of the curved law — open loop with the soft wall, closed loop
:math:`C_1 + N C_2 + N^2 C_3` (:func:`laws.log_headroom`, :func:`laws.closed_loop_latency`),
headroom :math:`h_i = C_1 / L_i`, and the log-normal density with noise growing toward
saturation,

.. math::

    \log p = \sum_i \Big[-\log y_i - \log s_i - \tfrac12\log 2\pi
             - \frac{(\log y_i - \log L_i)^2}{2 s_i^2}\Big],
    \qquad \log s_i = \log\sigma_0 - \gamma \log h_i .

The model graph writes this with the functions of :mod:`specbayes.laws`; PyTensor's
gradient of it is a chain of gathers, elementwise kernels and scatter-adds over every row.
:class:`RowLogLikelihood` computes the sum and its gradient in one loop over the rows
(numba), accumulating the gradient of each group's costs as it goes. The derivatives of
:math:`\log L` are those of :func:`laws.latency_sensitivities`; the chain rule through the
noise adds

.. math::

    \frac{\partial \log p_i}{\partial \log L_i} = \frac{u}{s^2} + \gamma\Big(\frac{u^2}{s^2}
    - 1\Big), \qquad \frac{\partial \log p_i}{\partial \log C_1}\Big|_{L} =
    -\gamma\Big(\frac{u^2}{s^2} - 1\Big), \qquad u = \log y_i - \log L_i .

This is a compiled form of the laws, not a second definition: ``tests/test_likelihood.py``
checks its value against the graph built from :mod:`specbayes.laws` and its gradient against
PyTensor's automatic gradient of that graph, at points that reach the soft wall, closed-loop
rows and rows without a drafter. The ``moe`` level (a fixed point per row) keeps the graph.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import pytensor.tensor as pt
from pytensor.gradient import DisconnectedType
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op
from pytensor.link.numba.dispatch.basic import numba_njit, register_funcify_default_op_cache_key

__all__ = ["RowLogLikelihood", "row_loglik"]

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
#: Names of the per-group inputs, in order.
GROUP_INPUTS = ("c1p", "pass_c1", "c2p", "c2v", "pass_c2d", "inv_knee_v", "inv_knee_d")


@numba.njit(cache=True)
def _loglik_and_grad(
    c1p, pc1, c2p, c2v, kc2d, ikv, ikd, passes, sigma0, gamma,
    grp, a_p, rps, conc, closed, log_y, softness,
):  # fmt: skip
    """Sum of the rows' log densities and its gradient (see the module docstring)."""
    n_groups, n = c1p.shape[0], grp.shape[0]
    g_group = np.zeros((7, n_groups))
    g_passes = np.zeros(n)
    g_log_sigma0 = 0.0
    g_gamma = 0.0
    total = 0.0
    log_sigma0 = math.log(sigma0)
    sqrt_w = math.sqrt(softness) if softness > 0 else 0.0
    for i in range(n):
        j = grp[i]
        a, p = a_p[i], passes[i]
        c1 = a * c1p[j] + p * pc1[j]
        c2v_row = a * c2p[j] + p * c2v[j]
        c2d_row = p * kc2d[j]
        c2 = c2v_row + c2d_row
        c3 = c2v_row * ikv[j] + c2d_row * ikd[j]
        if closed[i] > 0:  # L = C1 + N C2 + N^2 C3
            nc = conc[i]
            inv_lat = 1.0 / (c1 + nc * (c2 + nc * c3))
            log_head = math.log(c1 * inv_lat)
            d1, d2, d3 = inv_lat, nc * inv_lat, nc * nc * inv_lat
        else:  # L = C1 / h, h = f (1 + r(rho)) / 2 (laws.latency, laws.latency_sensitivities)
            lam = rps[i]
            free = 1.0 - lam * c2
            if free <= 0.0:
                return -np.inf, np.zeros((7, n_groups)), np.zeros(n), 0.0, 0.0
            rho = 1.0 - 4.0 * lam * lam * c1 * c3 / (free * free)
            if softness > 0.0 and rho < softness:  # laws._soft_root
                root = sqrt_w * math.exp((rho - softness) / (2.0 * softness))
                slope = root / (2.0 * softness)
            elif rho > 0.0:
                root = math.sqrt(rho)
                slope = 0.5 / root
            else:  # past the exact wall
                return -np.inf, np.zeros((7, n_groups)), np.zeros(n), 0.0, 0.0
            head = 0.5 * free * (1.0 + root)
            log_head = math.log(head)
            inv_head = 1.0 / head
            curve = 2.0 * lam * lam * slope * inv_head / free
            d1 = 1.0 / c1 + c3 * curve
            d2 = 0.5 * lam * (1.0 + root + 2.0 * slope * (1.0 - rho)) * inv_head
            d3 = c1 * curve
        log_l = math.log(c1) - log_head
        log_s = log_sigma0 - gamma * log_head
        inv_s2 = math.exp(-2.0 * log_s)
        u = log_y[i] - log_l
        total += -log_y[i] - log_s - _HALF_LOG_2PI - 0.5 * u * u * inv_s2
        a_mu = u * inv_s2  # d log p / d log L at fixed s
        a_s = u * u * inv_s2 - 1.0  # d log p / d log s
        g_log_sigma0 += a_s
        g_gamma -= a_s * log_head
        w = a_mu + gamma * a_s  # d log p / d log L, through the mean and the noise
        dc1 = w * d1 - gamma * a_s / c1
        dc2 = w * d2
        dc3 = w * d3
        dcv = dc2 + dc3 * ikv[j]
        dcd = dc2 + dc3 * ikd[j]
        g_group[0, j] += a * dc1
        g_group[1, j] += p * dc1
        g_group[2, j] += a * dcv
        g_group[3, j] += p * dcv
        g_group[4, j] += p * dcd
        g_group[5, j] += dc3 * c2v_row
        g_group[6, j] += dc3 * c2d_row
        g_passes[i] = dc1 * pc1[j] + dcv * c2v[j] + dcd * kc2d[j]
    return total, g_group, g_passes, g_log_sigma0 / sigma0, g_gamma


class RowLogLikelihood(Op):
    """Sum of the rows' log densities (output 0) and its gradient (outputs 1–10).

    Inputs: the seven per-group arrays of :data:`GROUP_INPUTS`, the rows' verifier passes,
    ``sigma0``, ``gamma`` (the differentiable ones), then the rows' data: group index,
    prefill ratio, rate, concurrency, closed flag and log latency. Only output 0 is meant to
    be differentiated (the others are its gradient, which ``L_op`` returns).
    """

    __props__ = ("softness",)

    def __init__(self, softness: float):
        self.softness = float(softness)

    def make_node(self, *inputs):
        if len(inputs) != 16:
            raise TypeError(f"RowLogLikelihood takes 16 inputs, got {len(inputs)}")
        fl = [pt.as_tensor_variable(x).astype("float64") for x in inputs[:10]]
        grp = pt.as_tensor_variable(inputs[10]).astype("int64")
        data = [pt.as_tensor_variable(x).astype("float64") for x in inputs[11:]]
        for x, nd in zip([*fl, grp, *data], [1] * 8 + [0, 0] + [1] * 6, strict=True):
            if x.ndim != nd:
                raise TypeError(f"RowLogLikelihood: input {x} must have {nd} dimensions")
        outputs = [pt.dscalar()] + [pt.dvector() for _ in range(8)] + [pt.dscalar()] * 2
        return Apply(self, [*fl, grp, *data], [o.type() for o in outputs])

    def perform(self, node, inputs, output_storage):
        arrays = [np.asarray(x) for x in inputs]
        arrays[8:10] = [float(x) for x in arrays[8:10]]  # sigma0, gamma
        total, g_group, g_passes, g_s0, g_gamma = _loglik_and_grad(*arrays, self.softness)
        values = [total, *g_group, g_passes, g_s0, g_gamma]
        for store, value in zip(output_storage, values, strict=True):
            store[0] = np.array(value, dtype=np.float64)

    def connection_pattern(self, node):
        n_out = len(node.outputs)
        return [[True] * n_out] * 10 + [[False] * n_out] * 6

    def L_op(self, inputs, outputs, output_grads):
        for og in output_grads[1:]:
            if not isinstance(og.type, DisconnectedType):
                raise NotImplementedError("RowLogLikelihood has no second derivatives")
        g = output_grads[0]
        return [g * out for out in outputs[1:]] + [DisconnectedType()() for _ in range(6)]


@register_funcify_default_op_cache_key(RowLogLikelihood)
def _numba_row_loglik(op, node, **kwargs):
    """The Op inside numba-compiled graphs (nutpie's default backend)."""
    softness = op.softness

    @numba_njit
    def row_loglik_numba(
        c1p, pc1, c2p, c2v, kc2d, ikv, ikd, passes, sigma0, gamma,
        grp, a_p, rps, conc, closed, log_y,
    ):  # fmt: skip
        total, g, g_passes, g_s0, g_gamma = _loglik_and_grad(
            c1p, pc1, c2p, c2v, kc2d, ikv, ikd, passes, sigma0.item(), gamma.item(),
            grp, a_p, rps, conc, closed, log_y, softness,
        )  # fmt: skip
        return (
            np.array(total), g[0].copy(), g[1].copy(), g[2].copy(), g[3].copy(),
            g[4].copy(), g[5].copy(), g[6].copy(), g_passes, np.array(g_s0),
            np.array(g_gamma),
        )  # fmt: skip

    return row_loglik_numba, 1


def row_loglik(group_costs, passes, sigma0, gamma, grp, a_p, rps, conc, closed, log_y,
               softness: float):  # fmt: skip
    """The rows' total log density as a graph variable (output 0 of :class:`RowLogLikelihood`).

    Parameters
    ----------
    group_costs : sequence of 7 tensors
        Per-group arrays in the order of :data:`GROUP_INPUTS` (inverse knees ``0`` for no
        curvature or no drafter).
    passes : tensor
        The rows' verifier passes :math:`P_i = g / E(\\alpha, k)`.
    sigma0, gamma : tensor
        Noise scale and its growth toward saturation.
    grp : int array
        Each row's coefficient group.
    a_p, rps, conc, closed, log_y : array or tensor
        Prefill ratio, open-loop rate, closed-loop concurrency, closed flag and log latency.
    softness : float
        The open-loop wall's softness (:func:`laws.log_headroom`).
    """
    if len(group_costs) != len(GROUP_INPUTS):
        raise ValueError(f"group_costs needs {len(GROUP_INPUTS)} arrays: {GROUP_INPUTS}")
    return RowLogLikelihood(softness)(
        *group_costs, passes, sigma0, gamma, grp, a_p, rps, conc, closed, log_y
    )[0]
