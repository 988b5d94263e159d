r"""The rows' likelihood of the ``dense``, ``sd`` and ``moe`` levels as one compiled pass.

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
rows and rows without a drafter.

The ``moe`` level's open-loop latency is a least fixed point per row (the coverage of the
experts grows with the latency); :class:`MoeRowLogLikelihood` iterates it to convergence
and differentiates it by the implicit function theorem (:func:`moe_row_loglik`), where the
graph takes a fixed number of iterations in a ``pytensor.scan`` and one Newton step
(:func:`laws.moe_latency_implicit`).
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

__all__ = ["MoeRowLogLikelihood", "RowLogLikelihood", "moe_row_loglik", "row_loglik"]

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
#: Compilation of the row kernels: cached; IEEE division (no zero-division checks: every
#: divisor is a positive cost, headroom or rate); fused multiply-adds, reassociation and
#: reciprocals allowed — but not ``nnan``/``ninf``, since a row past a wall returns
#: :math:`-\infty`. The paper's dense verifiers' log density and gradient: 2.84 ms at
#: ``cache=True`` alone, 2.37 ms with runs of one configuration's rows (below), 1.92 ms with
#: these flags (58,701 rows; ``benchmarks/fit_speed.md``, 2026-12-02 18:11); value within
#: 1e-13 relative.
_KERNEL_FLAGS = dict(
    cache=True, error_model="numpy", fastmath={"nsz", "arcp", "contract", "afn", "reassoc"}
)
#: Names of the per-group inputs, in order.
GROUP_INPUTS = ("c1p", "pass_c1", "c2p", "c2v", "pass_c2d", "inv_knee_v", "inv_knee_d")


@numba.njit(**_KERNEL_FLAGS)
def _open_head(lam, c1, c2, c3, softness, sqrt_w):
    """Headroom :math:`h = C_1/L` of the open-loop law (``laws._open_headroom``); 0 where
    saturated (:math:`1 - \\lambda C_2 \\le 0`, or past the exact wall without softness)."""
    free = 1.0 - lam * c2
    if free <= 0.0:
        return 0.0
    rho = 1.0 - 4.0 * lam * lam * c1 * c3 / (free * free)
    if softness > 0.0 and rho < softness:  # laws._soft_root
        root = sqrt_w * math.exp((rho - softness) / (2.0 * softness))
    elif rho > 0.0:
        root = math.sqrt(rho)
    else:
        return 0.0
    return 0.5 * free * (1.0 + root)


@numba.njit(**_KERNEL_FLAGS)
def _open_sensitivities(lam, c1, c2, c3, softness, sqrt_w):
    """Headroom and :math:`\\partial\\log L/\\partial(C_1, C_2, C_3)` of the open-loop law
    (:func:`laws.latency_sensitivities`, as in :func:`_loglik_and_grad`); headroom 0 where
    saturated."""
    free = 1.0 - lam * c2
    if free <= 0.0:
        return 0.0, 0.0, 0.0, 0.0
    rho = 1.0 - 4.0 * lam * lam * c1 * c3 / (free * free)
    if softness > 0.0 and rho < softness:
        root = sqrt_w * math.exp((rho - softness) / (2.0 * softness))
        slope = root / (2.0 * softness)
    elif rho > 0.0:
        root = math.sqrt(rho)
        slope = 0.5 / root
    else:
        return 0.0, 0.0, 0.0, 0.0
    head = 0.5 * free * (1.0 + root)
    inv_head = 1.0 / head
    curve = 2.0 * lam * lam * slope * inv_head / free
    d1 = 1.0 / c1 + c3 * curve
    d2 = 0.5 * lam * (1.0 + root + 2.0 * slope * (1.0 - rho)) * inv_head
    d3 = c1 * curve
    return head, d1, d2, d3


@numba.njit(**_KERNEL_FLAGS)
def _loglik_and_grad(
    c1p, pc1, c2p, c2v, kc2d, ikv, ikd, passes, sigma0, gamma,
    grp, a_p, rps, conc, closed, log_y, softness,
):  # fmt: skip
    """Sum of the rows' log densities and its gradient (see the module docstring).

    Consecutive rows of one configuration (same group, prefill ratio and passes: the load
    points of one sweep) share :math:`C_1, C_2, C_3` and :math:`\\log C_1`; they are
    computed once per such run, and the run's cost gradients are summed before they are
    added to its group (on the paper's dense verifiers ~9 rows a run).
    """
    n_groups, n = c1p.shape[0], grp.shape[0]
    g_group = np.zeros((7, n_groups))
    g_passes = np.zeros(n)
    g_log_sigma0 = 0.0
    g_gamma = 0.0
    total = 0.0
    log_sigma0 = math.log(sigma0)
    sqrt_w = math.sqrt(softness) if softness > 0 else 0.0
    i = 0
    while i < n:
        j = grp[i]
        a, p = a_p[i], passes[i]
        c1 = a * c1p[j] + p * pc1[j]
        c2v_row = a * c2p[j] + p * c2v[j]
        c2d_row = p * kc2d[j]
        c2 = c2v_row + c2d_row
        c3 = c2v_row * ikv[j] + c2d_row * ikd[j]
        log_c1, inv_c1 = math.log(c1), 1.0 / c1
        sum_c1 = sum_cv = sum_cd = sum_c3 = 0.0  # the run's d log p / d (C1, C2v, C2d, C3)
        while True:
            if closed[i] > 0:  # L = C1 + N C2 + N^2 C3
                nc = conc[i]
                inv_lat = 1.0 / (c1 + nc * (c2 + nc * c3))
                log_head = math.log(c1 * inv_lat)
                d1, d2, d3 = inv_lat, nc * inv_lat, nc * nc * inv_lat
            else:  # L = C1 / h, h = f (1 + r(rho)) / 2 (laws.latency, .latency_sensitivities)
                head, d1, d2, d3 = _open_sensitivities(rps[i], c1, c2, c3, softness, sqrt_w)
                if head <= 0.0:  # saturated, or past the exact wall
                    return -np.inf, np.zeros((7, n_groups)), np.zeros(n), 0.0, 0.0
                log_head = math.log(head)
            log_s = log_sigma0 - gamma * log_head
            inv_s2 = math.exp(-2.0 * log_s)
            u = log_y[i] - log_c1 + log_head
            total += -log_y[i] - log_s - _HALF_LOG_2PI - 0.5 * u * u * inv_s2
            a_mu = u * inv_s2  # d log p / d log L at fixed s
            a_s = u * u * inv_s2 - 1.0  # d log p / d log s
            g_log_sigma0 += a_s
            g_gamma -= a_s * log_head
            w = a_mu + gamma * a_s  # d log p / d log L, through the mean and the noise
            dc1 = w * d1 - gamma * a_s * inv_c1
            dc2 = w * d2
            dc3 = w * d3
            dcv = dc2 + dc3 * ikv[j]
            dcd = dc2 + dc3 * ikd[j]
            sum_c1 += dc1
            sum_cv += dcv
            sum_cd += dcd
            sum_c3 += dc3
            g_passes[i] = dc1 * pc1[j] + dcv * c2v[j] + dcd * kc2d[j]
            i += 1
            if i == n or grp[i] != j or a_p[i] != a or passes[i] != p:
                break
        g_group[0, j] += a * sum_c1
        g_group[1, j] += p * sum_c1
        g_group[2, j] += a * sum_cv
        g_group[3, j] += p * sum_cv
        g_group[4, j] += p * sum_cd
        g_group[5, j] += sum_c3 * c2v_row
        g_group[6, j] += sum_c3 * c2d_row
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


# ---------------------------------------------------------------------------------------------
# the moe level: the least fixed point of the coverage-corrected law per row
# ---------------------------------------------------------------------------------------------

#: Names of the ``moe`` level's per-group inputs, in order: :data:`GROUP_INPUTS` and the
#: per-verifier-pass costs at full expert coverage.
MOE_GROUP_INPUTS = (*GROUP_INPUTS, "c1s", "c2s")
#: Relative change of the open-loop fixed-point iteration at which it has converged.
MOE_RTOL = 1e-12
#: Iteration cap of the fixed point; a row still moving after it is treated as saturated
#: (its slope :math:`s` at the fixed point is then above ~0.997: the fixed point is about
#: to vanish, see :func:`_moe_loglik_and_grad`).
MOE_MAX_ITER = 10_000


@numba.njit(**_KERNEL_FLAGS)
def _moe_loglik_and_grad(
    c1p, pc1, c2p, c2v, kc2d, ikv, ikd, c1s, c2s, passes, sigma0, gamma,
    grp, a_p, rps, conc, closed, k, m_ratio, log_y, softness, rtol, max_iter,
):  # fmt: skip
    r"""Sum of the ``moe`` rows' log densities and its gradient (see :func:`moe_row_loglik`).

    Returns ``(total, g_group (9, groups), g_passes, d/dsigma0, d/dgamma)``; ``-inf`` and
    zeros where an open-loop row is saturated (its iterate reaches the wall, it has not
    converged in ``max_iter`` iterations, or :math:`s \ge 1` there).
    """
    n_groups, n = c1p.shape[0], grp.shape[0]
    g_group = np.zeros((9, n_groups))
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
        s1 = p * c1s[j]  # the expert part at full coverage
        s2 = p * c2s[j]
        s3 = s2 * ikv[j]
        kappa = -math.log1p(-m_ratio[i])  # phi(T) = 1 - exp(-kappa T)
        if closed[i] > 0:  # T = N (k + 1): no fixed point; L = C1 + N C2 + N^2 C3
            nc = conc[i]
            phi = -math.expm1(-kappa * nc * (k[i] + 1.0))
            cc1 = c1 + phi * s1
            inv_lat = 1.0 / (cc1 + nc * (c2 + phi * s2 + nc * (c3 + phi * s3)))
            log_mu = -math.log(inv_lat)
            d1, d2, d3 = inv_lat, nc * inv_lat, nc * nc * inv_lat
            beta, q = 0.0, 1.0
        else:  # the least fixed point of F(L) = law(C(phi(lambda L (k + 1))))
            lam = rps[i]
            rate = kappa * lam * (k[i] + 1.0)  # phi = 1 - exp(-rate L)
            head = _open_head(lam, c1, c2, c3, softness, sqrt_w)  # phi = 0: a lower bound
            if head <= 0.0:
                return -np.inf, np.zeros((9, n_groups)), np.zeros(n), 0.0, 0.0
            cur = c1 / head
            converged = False
            for _ in range(max_iter):
                phi = -math.expm1(-rate * cur)
                cc1 = c1 + phi * s1
                head = _open_head(lam, cc1, c2 + phi * s2, c3 + phi * s3, softness, sqrt_w)
                if head <= 0.0:  # the iterate reached the wall: no finite fixed point
                    return -np.inf, np.zeros((9, n_groups)), np.zeros(n), 0.0, 0.0
                new = cc1 / head
                done = abs(new - cur) <= rtol * abs(new)
                cur = new
                if done:
                    converged = True
                    break
            if not converged:
                return -np.inf, np.zeros((9, n_groups)), np.zeros(n), 0.0, 0.0
            phi = -math.expm1(-rate * cur)
            cc1 = c1 + phi * s1
            head, d1, d2, d3 = _open_sensitivities(
                lam, cc1, c2 + phi * s2, c3 + phi * s3, softness, sqrt_w
            )
            if head <= 0.0:
                return -np.inf, np.zeros((9, n_groups)), np.zeros(n), 0.0, 0.0
            log_mu = math.log(cc1 / head)
            beta = rate * (1.0 - phi) * cur  # d phi / d log L
            slope = beta * (d1 * s1 + d2 * s2 + d3 * s3)  # s = dF/dL at L*
            if slope >= 1.0:
                return -np.inf, np.zeros((9, n_groups)), np.zeros(n), 0.0, 0.0
            q = 1.0 / (1.0 - slope)
        raw_head = math.log(cc1) - log_mu
        clipped = raw_head > 0.0  # log h = min(log C1 - log L, 0)
        log_head = 0.0 if clipped else raw_head
        log_s = log_sigma0 - gamma * log_head
        inv_s2 = math.exp(-2.0 * log_s)
        u = log_y[i] - log_mu
        total += -log_y[i] - log_s - _HALF_LOG_2PI - 0.5 * u * u * inv_s2
        a_mu = u * inv_s2  # d log p / d log L at fixed s
        a_s = u * u * inv_s2 - 1.0  # d log p / d log s
        g_log_sigma0 += a_s
        g_gamma -= a_s * log_head
        if clipped:
            w, e1 = a_mu, 0.0
        else:  # log h moves with log L directly and through phi in C1
            w = a_mu + gamma * a_s * (1.0 - s1 * beta / cc1)
            e1 = gamma * a_s / cc1
        wq = w * q  # d log p / d log F at fixed phi: the fixed point amplifies by q
        dc1 = wq * d1 - e1  # d log p / d C1, C1 = c1 + phi s1, at fixed phi
        dc2 = wq * d2
        dc3 = wq * d3
        dcv = dc2 + dc3 * ikv[j]
        dcd = dc2 + dc3 * ikd[j]
        g_group[0, j] += a * dc1
        g_group[1, j] += p * dc1
        g_group[2, j] += a * dcv
        g_group[3, j] += p * dcv
        g_group[4, j] += p * dcd
        g_group[5, j] += dc3 * (c2v_row + phi * s2)
        g_group[6, j] += dc3 * c2d_row
        g_group[7, j] += p * phi * dc1
        g_group[8, j] += p * phi * dcv
        g_passes[i] = dc1 * (pc1[j] + phi * c1s[j]) + dcv * (c2v[j] + phi * c2s[j]) + dcd * kc2d[j]
    return total, g_group, g_passes, g_log_sigma0 / sigma0, g_gamma


class MoeRowLogLikelihood(Op):
    """Sum of the ``moe`` rows' log densities (output 0) and its gradient (outputs 1–12).

    Inputs: the nine per-group arrays of :data:`MOE_GROUP_INPUTS`, the rows' verifier passes,
    ``sigma0``, ``gamma`` (the differentiable ones), then the rows' data: group index,
    prefill ratio, rate, concurrency, closed flag, draft length ``k``, expert ratio ``m/M``
    and log latency. Only output 0 is meant to be differentiated (the others are its
    gradient, which ``L_op`` returns).
    """

    __props__ = ("softness",)
    n_diff = 12
    n_data = 8

    def __init__(self, softness: float):
        self.softness = float(softness)

    def make_node(self, *inputs):
        n_in = self.n_diff + self.n_data
        if len(inputs) != n_in:
            raise TypeError(f"MoeRowLogLikelihood takes {n_in} inputs, got {len(inputs)}")
        fl = [pt.as_tensor_variable(x).astype("float64") for x in inputs[: self.n_diff]]
        grp = pt.as_tensor_variable(inputs[self.n_diff]).astype("int64")
        data = [pt.as_tensor_variable(x).astype("float64") for x in inputs[self.n_diff + 1 :]]
        dims = [1] * 10 + [0, 0] + [1] * 8
        for x, nd in zip([*fl, grp, *data], dims, strict=True):
            if x.ndim != nd:
                raise TypeError(f"MoeRowLogLikelihood: input {x} must have {nd} dimensions")
        outputs = [pt.dscalar()] + [pt.dvector() for _ in range(10)] + [pt.dscalar()] * 2
        return Apply(self, [*fl, grp, *data], [o.type() for o in outputs])

    def perform(self, node, inputs, output_storage):
        arrays = [np.asarray(x) for x in inputs]
        arrays[10:12] = [float(x) for x in arrays[10:12]]  # sigma0, gamma
        total, g_group, g_passes, g_s0, g_gamma = _moe_loglik_and_grad(
            *arrays, self.softness, MOE_RTOL, MOE_MAX_ITER
        )
        values = [total, *g_group, g_passes, g_s0, g_gamma]
        for store, value in zip(output_storage, values, strict=True):
            store[0] = np.array(value, dtype=np.float64)

    def connection_pattern(self, node):
        n_out = len(node.outputs)
        return [[True] * n_out] * self.n_diff + [[False] * n_out] * self.n_data

    def L_op(self, inputs, outputs, output_grads):
        for og in output_grads[1:]:
            if not isinstance(og.type, DisconnectedType):
                raise NotImplementedError("MoeRowLogLikelihood has no second derivatives")
        g = output_grads[0]
        return [g * out for out in outputs[1:]] + [DisconnectedType()() for _ in range(8)]


@register_funcify_default_op_cache_key(MoeRowLogLikelihood)
def _numba_moe_row_loglik(op, node, **kwargs):
    """The Op inside numba-compiled graphs (nutpie's default backend)."""
    softness = op.softness
    rtol, max_iter = MOE_RTOL, MOE_MAX_ITER

    @numba_njit
    def moe_row_loglik_numba(
        c1p, pc1, c2p, c2v, kc2d, ikv, ikd, c1s, c2s, passes, sigma0, gamma,
        grp, a_p, rps, conc, closed, k, m_ratio, log_y,
    ):  # fmt: skip
        total, g, g_passes, g_s0, g_gamma = _moe_loglik_and_grad(
            c1p, pc1, c2p, c2v, kc2d, ikv, ikd, c1s, c2s, passes, sigma0.item(),
            gamma.item(), grp, a_p, rps, conc, closed, k, m_ratio, log_y, softness, rtol,
            max_iter,
        )  # fmt: skip
        return (
            np.array(total), g[0].copy(), g[1].copy(), g[2].copy(), g[3].copy(),
            g[4].copy(), g[5].copy(), g[6].copy(), g[7].copy(), g[8].copy(), g_passes,
            np.array(g_s0), np.array(g_gamma),
        )  # fmt: skip

    return moe_row_loglik_numba, 1


def moe_row_loglik(group_costs, passes, sigma0, gamma, grp, a_p, rps, conc, closed, k,
                   m_ratio, log_y, softness: float):  # fmt: skip
    r"""The ``moe`` rows' total log density as a graph variable (output 0 of
    :class:`MoeRowLogLikelihood`).

    Per row, with the costs :math:`C_{1u} = C_1, C_{2u} = C_2, C_{3u} = C_3` of
    :func:`row_loglik` and the expert part at full coverage :math:`C_{1s} = P_i c_{1s}`,
    :math:`C_{2s} = P_i c_{2s}`, :math:`C_{3s} = C_{2s}\iota_v` (it bends at the verifier's
    knee), the costs at coverage :math:`\varphi` are
    :math:`\mathbf C(\varphi) = \mathbf C_u + \varphi\,\mathbf C_s` and
    :math:`\varphi(T) = 1 - (1 - m/M)^T = 1 - e^{-\kappa T}`, :math:`\kappa = -\log(1 - m/M)`
    (:func:`laws.expert_coverage`).

    *Closed loop* (:math:`N` streams): :math:`T = N(k + 1)` and
    :math:`L = C_1 + N C_2 + N^2 C_3` at :math:`\mathbf C(\varphi)`
    (:func:`laws.closed_loop_latency`).

    *Open loop* (rate :math:`\lambda`): :math:`L^*` is the least fixed point of
    :math:`F(L) = L_\mathrm{law}(\lambda; \mathbf C(\varphi(T)))`,
    :math:`T = \lambda L (k + 1)` (:func:`laws.routed_tokens`; the law with the soft wall,
    :func:`laws.latency`). :math:`F` increases in :math:`L`, so :math:`L_{n+1} = F(L_n)` from
    :math:`L_0 = F|_{\varphi = 0}` rises monotonically to it; it stops when
    :math:`|L_{n+1} - L_n| \le 10^{-12} L_{n+1}` (:data:`MOE_RTOL`). An iterate at the wall
    (:math:`1 - \lambda C_2 \le 0`), no convergence in :data:`MOE_MAX_ITER` iterations or a
    slope :math:`s \ge 1` at the fixed point make the row saturated (``-inf``, as
    :func:`row_loglik`). The graph (:func:`laws.moe_latency_implicit`) takes 30 iterations and
    one Newton step instead; both are :math:`L^*` where those have converged. By the implicit
    function theorem, with :math:`d_c = \partial\log L_\mathrm{law}/\partial C_c` at
    :math:`\mathbf C(\varphi^*)` (:func:`laws.latency_sensitivities`) and

    .. math::

        \beta = \frac{d\varphi}{d\log L} = \kappa\lambda(k+1)\,L^*(1 - \varphi^*), \qquad
        s = \frac{\partial F}{\partial L}\Big|_{L^*} = \beta \sum_c d_c C_{cs},

    .. math::

        d\log L^* = \frac{1}{1 - s}\sum_c d_c\, d C_c \Big|_{\varphi = \varphi^*}

    (the graph's final Newton step has the same gradient with :math:`s` capped at
    :data:`laws.SLOPE_CAP`). Closed-loop rows have :math:`\beta = 0` and no division.

    *Density*: log headroom :math:`\log h = \min(\log C_1(\varphi^*) - \log L, 0)`, noise
    :math:`\log s_i = \log\sigma_0 - \gamma\log h` and the log-normal density of
    :func:`row_loglik`. Below the clip, :math:`\log h` moves with :math:`\log L` directly and
    through :math:`\varphi` in :math:`C_1`, so with :math:`u = \log y - \log L`,
    :math:`a_\mu = u/s^2`, :math:`a_s = u^2/s^2 - 1`

    .. math::

        \frac{\partial\log p}{\partial C_c}\Big|_{\varphi} = \frac{w\,d_c}{1 - s}
        - [c = 1]\frac{\gamma a_s}{C_1}, \qquad
        w = a_\mu + \gamma a_s\Big(1 - \frac{C_{1s}\beta}{C_1}\Big)

    (at the clip :math:`w = a_\mu` and no second term), chained to the group inputs through
    :math:`C_1 = a c_{1p} + P(\pi_1 + \varphi c_{1s})`,
    :math:`C_2 = a c_{2p} + P(c_{2v} + \kappa_d + \varphi c_{2s})`,
    :math:`C_3 = (a c_{2p} + P c_{2v} + \varphi P c_{2s})\iota_v + P\kappa_d\iota_d`
    (:math:`\kappa_d = k c_{2d}`).

    Parameters
    ----------
    group_costs : sequence of 9 tensors
        Per-group arrays in the order of :data:`MOE_GROUP_INPUTS` (:func:`row_loglik`'s seven,
        then ``c1s, c2s`` per verifier pass).
    passes : tensor
        The rows' verifier passes :math:`P_i`.
    sigma0, gamma : tensor
        Noise scale and its growth toward saturation.
    grp : int array
        Each row's coefficient group.
    a_p, rps, conc, closed : array or tensor
        Prefill ratio, open-loop rate, closed-loop concurrency and closed flag.
    k : array or tensor
        The rows' draft length (tokens per verifier pass ``k + 1``).
    m_ratio : array or tensor
        Experts per token over experts per layer, :math:`m/M` (0: no coverage term).
    log_y : array or tensor
        Log latency.
    softness : float
        The open-loop wall's softness (:func:`laws.log_headroom`).
    """
    if len(group_costs) != len(MOE_GROUP_INPUTS):
        raise ValueError(f"group_costs needs {len(MOE_GROUP_INPUTS)} arrays: {MOE_GROUP_INPUTS}")
    return MoeRowLogLikelihood(softness)(
        *group_costs, passes, sigma0, gamma, grp, a_p, rps, conc, closed, k, m_ratio, log_y
    )[0]
