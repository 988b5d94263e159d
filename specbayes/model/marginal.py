r"""The sweeps' costs integrated out of the sampled density (``priors["sweeps"] = "marginal"``).

In the pooled structure every sweep :math:`s` has its own :math:`c_s = (\log C_{1s},
\log C_{2s})` around the cycle decomposition :math:`m_s` (:func:`specbayes.model.graph.
pooled_costs`): :math:`c_s \sim \mathcal N(m_s, D)`, :math:`D = \mathrm{diag}(\tau_1^2,
j^2)`. Sampled, they are two axes per sweep — 13,120 on the paper set's dense verifiers,
where an iid Normal of that size alone takes nutpie 31 leapfrog steps per draw
(``benchmarks/fit_speed.md``, 2026-12-07). Here they are integrated out instead.

A sweep's rows pin its costs to about 1 %, over which the law is close to linear, so each
row's expected log latency is taken to first order about a point :math:`c^0_s` near the
sweep's conditional posterior (:func:`linearise` about :func:`sweep_point`'s least-squares
costs, then :func:`relinearise` at the conditional mean given the optimised start):

.. math::

    \mu_i(c_s) \approx \mu_i(c^0_s) + J_i (c_s - c^0_s), \qquad
    y_i = \mu_i(c_s) + \sigma w_i \varepsilon_i,

with the row's noise scale :math:`w_i` (:func:`~specbayes.model.likelihood.log_row_scale`)
at :math:`c^0_s`'s utilisation. Then a sweep's rows are jointly Normal given the hierarchy,
:math:`y_s \sim \mathcal N(\mu(c^0) + J(m_s - c^0),\ \sigma^2 W + J D J^\top)`, whose density
(Woodbury, :func:`marginal_logp`) needs per sweep only six weighted sums over its rows:

.. math::

    \log p(y_s) = -\tfrac{n_s}{2}\log 2\pi\sigma^2 - \textstyle\sum_i \log w_i
    - \tfrac12\log|D|\,|Q_s| - \tfrac12\big(r^\top P r - b^\top Q_s^{-1} b\big),

:math:`P = \mathrm{diag}(1/\sigma^2 w_i^2)`, :math:`r = y_s - \mu(c^0) - J(m_s - c^0)`,
:math:`Q_s = D^{-1} + J^\top P J`, :math:`b = J^\top P r`. The costs' conditional given the
hierarchy is :math:`\mathcal N(m_s + Q_s^{-1} b, Q_s^{-1})`; :func:`draw_sweeps` draws them
after sampling, so the posterior carries ``log_c1``, ``log_c2`` and ``mu`` as a sampled fit's
does, and the stored log-likelihood is the exact law's at those draws.

On the ``moe`` level the law also reads each sweep's expert reads :math:`X_s` (``expert_c1``,
:mod:`specbayes.model.experts`), which the hierarchy sets and the sampler moves: the rows are
taken to first order in :math:`\log X_s` too, about :math:`x^0_s`, with a third column
:math:`K_i` of :math:`J`. Then :math:`\mu(c^0) + K(\log X_s - x^0_s)` is the rows' mean at the
sampled reads, and the six sums at it follow from ten over the rows
(:func:`fold_expert_reads`); the costs are integrated out as before.

What the approximation leaves out: the law's curvature over a sweep's conditional spread
(second order in ~1 %), and the truncation of :math:`\log C_2` at the open-loop wall (the rows
themselves keep a sweep below it). The noise scale and :math:`\tau_1` are sampled here, not
integrated out: the rows' covariance is not a multiple of :math:`\sigma^2`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numba
import numpy as np
import pymc as pm
import pytensor.tensor as pt
import xarray as xr
from pytensor.gradient import DisconnectedType
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op
from pytensor.link.numba.dispatch.basic import numba_njit, register_funcify_default_op_cache_key

from specbayes.model.likelihood import (
    draw_blocks,
    log_mean_latency,
    log_row_scale,
    over_blocks,
)

__all__ = [
    "Linearisation", "SweepSums", "SweepTerms", "add_draws", "conditional_mean", "draw_sweeps",
    "fold_expert_reads", "form", "integrate_sweeps", "integrated", "linearise",
    "linearised_in_reads", "marginal_likelihood", "marginal_logp", "register_jax",
    "relinearise", "row_view", "sweep_point",
]  # fmt: skip

#: Finite-difference step (natural log of a cost) for the law's Jacobian.
_STEP = 1e-5


@dataclass(frozen=True)
class Linearisation:
    """The law to first order about each sweep's point ``c0`` (sweep, 2): per row ``mu0``
    (the law's log latency at ``c0``), ``jac`` (row, 2: its derivatives in log C1, log C2;
    row, 3 on the ``moe`` level: and in the log expert reads) and ``ell`` (:math:`-\\log h`,
    the row's log utilisation term at ``c0``, of the law without expert reads: the noise
    grows with the queue, module :mod:`specbayes.model.graph`). ``x0`` (sweep): the ``moe``
    level's log expert reads :math:`x^0_s` the rows are linearised at, else ``None``."""

    c0: np.ndarray
    mu0: np.ndarray
    jac: np.ndarray
    ell: np.ndarray
    x0: np.ndarray | None = None


def row_view(design):
    """The row arrays :func:`linearise`, :func:`sweep_point` and :func:`draw_sweeps` read, from
    a :class:`~specbayes.model.design.Design`; on the ``moe`` level with each row's ``m/M``
    (``expert_ratio``) and k (``expert_k``)."""
    from types import SimpleNamespace

    s = design.obs_sweep
    moe = design.level == "moe"
    return SimpleNamespace(
        obs_sweep=s, load=design.load, obs_closed=design.obs_closed, log_count=design.log_count,
        log_latency=design.log_latency, log_wall=design.log_wall, k=design.k,
        expert_ratio=design.extra["expert_ratio"][s] if moe else None,
        expert_k=design.k[s].astype(float) if moe else None,
    )  # fmt: skip


def _law(rows, log_c1, log_c2, log_x=None):
    """The rows' expected log latency at their costs (per row); with ``log_x``, the ``moe``
    level's at those log expert reads (``rows.expert_ratio``, ``rows.expert_k``)."""
    experts = None if log_x is None else (np.exp(log_x), rows.expert_ratio, rows.expert_k)
    with np.errstate(all="ignore"):
        return log_mean_latency(log_c1, log_c2, rows.load, rows.obs_closed, experts=experts)


def linearise(rows, c0: np.ndarray, x0: np.ndarray | None = None) -> Linearisation:
    """The law of every fitted row to first order about its sweep's ``c0`` (central
    differences of :func:`~specbayes.model.likelihood.log_mean_latency`); on the ``moe``
    level also about its sweep's log expert reads ``x0``."""
    s = rows.obs_sweep
    point = [c0[s, 0], c0[s, 1]] + ([] if x0 is None else [x0[s]])
    mu0 = _law(rows, *point)
    columns = []
    for j in range(len(point)):
        up, down = list(point), list(point)
        up[j], down[j] = point[j] + _STEP, point[j] - _STEP
        columns.append((_law(rows, *up) - _law(rows, *down)) / (2 * _STEP))
    ell = (mu0 if x0 is None else _law(rows, *point[:2])) - point[0]
    return Linearisation(c0=c0, mu0=mu0, jac=np.stack(columns, axis=1), ell=ell, x0=x0)


def sweep_point(design, x0: np.ndarray | None = None, iterations: int = 60) -> np.ndarray:
    """Each sweep's weighted least-squares :math:`(\\log C_1, \\log C_2)` (sweep, 2): damped
    Gauss–Newton on all sweeps at once, every step kept below the open-loop wall; on the
    ``moe`` level at the log expert reads ``x0``. A sweep whose rows do not separate the two
    (one load) stays near its start along the ridge — the linearisation needs a point near
    the data, not a unique one."""
    s, y, n_sweeps = design.obs_sweep, design.log_latency, len(design.k)
    weight = np.exp(design.log_count)
    a = np.full(n_sweeps, np.inf)
    np.minimum.at(a, s, y)
    top = np.zeros(n_sweeps)
    np.maximum.at(top, s, design.load)
    wall = np.asarray(design.log_wall, float)
    b = np.where(np.isfinite(wall), wall + np.log(0.5), a - np.log(np.maximum(top, 1.0)))
    c0 = np.stack([a, b], axis=1)
    damping = np.full(n_sweeps, 1e-3)
    cost = _sweep_cost(design, c0, weight, x0)
    for _ in range(iterations):
        lin = linearise(design, c0, x0)
        r, jac = y - lin.mu0, lin.jac[:, :2]
        g = _per_sweep(jac * (weight * r)[:, None], s, n_sweeps)
        jj = jac[:, :, None] * jac[:, None, :] * weight[:, None, None]
        h = _per_sweep(jj.reshape(len(y), 4), s, n_sweeps).reshape(n_sweeps, 2, 2)
        h = h + (damping[:, None, None] * (np.trace(h, axis1=1, axis2=2) + 1e-12)[:, None, None]
                 * np.eye(2))  # fmt: skip
        step = np.linalg.solve(h, g[..., None])[..., 0]
        trial = c0 + step
        trial[:, 1] = np.minimum(trial[:, 1], wall - 1e-6)
        new = _sweep_cost(design, trial, weight, x0)
        better = np.isfinite(new) & (new <= cost)
        c0 = np.where(better[:, None], trial, c0)
        cost = np.where(better, new, cost)
        damping = np.clip(np.where(better, damping / 3, damping * 4), 1e-9, 1e6)
    return c0


def _sweep_cost(design, c0: np.ndarray, weight: np.ndarray, x0=None) -> np.ndarray:
    """Per sweep, the weighted sum of squared residuals at ``c0`` (inf past a wall)."""
    s = design.obs_sweep
    mu = _law(design, c0[s, 0], c0[s, 1], None if x0 is None else x0[s])
    r2 = np.where(np.isfinite(mu), weight * (design.log_latency - mu) ** 2, np.inf)
    return np.bincount(design.obs_sweep, r2, minlength=len(design.k))


def _per_sweep(values: np.ndarray, sweep: np.ndarray, n_sweeps: int) -> np.ndarray:
    """Column sums of ``values`` (row, m) per sweep."""
    return np.stack([np.bincount(sweep, v, minlength=n_sweeps) for v in values.T], axis=1)


def _sums(xp, value, mu0, jac, ell, log_count, gamma, sweep, n_sweeps, experts=False):
    """Per sweep the weighted sums :math:`\\sum v e^2, \\sum v J e, \\sum v J J^T` with
    :math:`e = y - \\mu^0`, :math:`v = 1/w^2` (NumPy, or :class:`SweepSums` in a graph): six
    for two columns of :math:`J`, ten for three (the ``moe`` level's)."""
    if xp is not np:
        return SweepSums(n_sweeps, experts)(gamma, value, mu0, jac, ell, log_count, sweep)[0]
    return _sums_kernel(jac)(float(gamma), value, mu0, jac, ell, log_count, sweep, n_sweeps)[0]


def fold_expert_reads(sums, delta):
    """The six sums of :func:`_sums` at the sampled expert reads from the ten at ``x0``
    (NumPy or PyTensor): with :math:`e' = e - K\\delta`, :math:`\\delta = \\log X_s - x^0_s`,
    :math:`\\sum v e'^2 = \\sum v e^2 - 2\\delta \\sum v K e + \\delta^2 \\sum v K^2` and
    :math:`\\sum v J_j e' = \\sum v J_j e - \\delta \\sum v J_j K`. Columns in: :math:`e^2,
    J_1 e, J_2 e, K e, J_1^2, J_1 J_2, J_1 K, J_2^2, J_2 K, K^2`."""
    xp = np if isinstance(sums, np.ndarray) else pt
    c = [sums[..., i] for i in range(10)]
    return xp.stack(
        [c[0] - 2.0 * delta * c[3] + delta**2 * c[9], c[1] - delta * c[6], c[2] - delta * c[8],
         c[4], c[5], c[7]],
        axis=-1,
    )  # fmt: skip


_FAST = {"nsz", "arcp", "contract", "reassoc"}


@numba.njit(inline="always")
def _row(i, gamma, value, mu0, ell, log_count):
    """A row's residual :math:`e`, weight :math:`v = 1/w^2` and its derivative in gamma."""
    v = math.exp(log_count[i] - 2.0 * gamma * ell[i])
    return value[i] - mu0[i], v, -2.0 * ell[i] * v


@numba.njit(inline="always")
def _add(sums, d_sums, s, v, dv, terms):
    for k in range(len(terms)):
        sums[s, k] += v * terms[k]
        d_sums[s, k] += dv * terms[k]


@numba.njit(cache=True, error_model="numpy", fastmath=_FAST)
def _weighted_sums(gamma, value, mu0, jac, ell, log_count, sweep, n_sweeps):
    """:func:`_sums` and their derivative in the noise growth, one pass over the rows: the six
    of two columns of :math:`J`."""
    sums, d_sums = np.zeros((n_sweeps, 6)), np.zeros((n_sweeps, 6))
    for i in range(value.shape[0]):
        e, v, dv = _row(i, gamma, value, mu0, ell, log_count)
        j1, j2 = jac[i, 0], jac[i, 1]
        _add(sums, d_sums, sweep[i], v, dv, (e * e, j1 * e, j2 * e, j1 * j1, j1 * j2, j2 * j2))
    return sums, d_sums


@numba.njit(cache=True, error_model="numpy", fastmath=_FAST)
def _expert_sums(gamma, value, mu0, jac, ell, log_count, sweep, n_sweeps):
    """:func:`_weighted_sums` with the ``moe`` level's third column :math:`K` of :math:`J`
    (the log expert reads): ten sums, in :func:`fold_expert_reads`' order."""
    sums, d_sums = np.zeros((n_sweeps, 10)), np.zeros((n_sweeps, 10))
    for i in range(value.shape[0]):
        e, v, dv = _row(i, gamma, value, mu0, ell, log_count)
        j1, j2, x = jac[i, 0], jac[i, 1], jac[i, 2]
        terms = (e * e, j1 * e, j2 * e, x * e, j1 * j1, j1 * j2, j1 * x, j2 * j2, j2 * x, x * x)
        _add(sums, d_sums, sweep[i], v, dv, terms)
    return sums, d_sums


def _sums_kernel(jac):
    return _expert_sums if np.shape(jac)[1] == 3 else _weighted_sums


class SweepSums(Op):
    """:func:`_sums` in a graph (output 0) and their derivative in the noise growth
    (output 1, what ``L_op`` uses): one compiled pass over the rows instead of a scatter-add
    of six columns and its gathers (1.74 ms a gradient on the paper set's dense verifiers).
    Inputs: ``gamma`` (the differentiable one), then the rows' observed values, ``mu0``,
    ``jac``, ``ell``, ``log_count`` and sweep index; ``experts``: ``jac`` has the ``moe``
    level's third column (ten sums)."""

    __props__ = ("n_sweeps", "experts")

    def __init__(self, n_sweeps: int, experts: bool = False):
        self.n_sweeps, self.experts = int(n_sweeps), bool(experts)

    def make_node(self, *inputs):
        dtypes = ("float64",) * 6 + ("int64",)
        ndims = (0, 1, 1, 2, 1, 1, 1)
        tensors = [pt.as_tensor_variable(x).astype(t) for x, t in zip(inputs, dtypes, strict=True)]
        for x, nd in zip(tensors, ndims, strict=True):
            if x.ndim != nd:
                raise TypeError(f"SweepSums: input {x} must have {nd} dimensions")
        return Apply(self, tensors, [pt.dmatrix(), pt.dmatrix()])

    def perform(self, node, inputs, output_storage):
        gamma, *rows = (np.asarray(x) for x in inputs)
        out = _sums_kernel(rows[2])(float(gamma), *rows, self.n_sweeps)
        for store, value in zip(output_storage, out, strict=True):
            store[0] = value

    def connection_pattern(self, node):
        return [[True, True]] + [[False, False]] * 6

    def L_op(self, inputs, outputs, output_grads):
        if not isinstance(output_grads[1].type, DisconnectedType):
            raise NotImplementedError("SweepSums has no second derivatives")
        return [pt.sum(output_grads[0] * outputs[1])] + [DisconnectedType()() for _ in range(6)]


@register_funcify_default_op_cache_key(SweepSums)
def _numba_sweep_sums(op, node, **kwargs):
    """The Op inside numba-compiled graphs (nutpie's default backend)."""
    n_sweeps, experts = op.n_sweeps, op.experts

    @numba_njit
    def sweep_sums_numba(gamma, value, mu0, jac, ell, log_count, sweep):
        rows = (gamma.item(), value, mu0, jac, ell, log_count, sweep, n_sweeps)
        return _expert_sums(*rows) if experts else _weighted_sums(*rows)

    return sweep_sums_numba, 1


def register_jax() -> None:
    """Lower :class:`SweepSums` to JAX (``sampler="numpyro"``): the same sums by
    ``segment_sum``; the gamma derivative (output 1) by the same formula."""
    import jax
    import jax.numpy as jnp
    from pytensor.link.jax.dispatch import jax_funcify

    def lowered_for(op):
        def lowered(gamma, value, mu0, jac, ell, log_count, sweep):
            e, v = value - mu0, jnp.exp(log_count - 2.0 * gamma * ell)
            j = [jac[:, c] for c in range(3 if op.experts else 2)]
            terms = [e * e] + [a * e for a in j]  # in the kernels' order
            terms += [j[a] * j[b] for a in range(len(j)) for b in range(a, len(j))]
            terms = jnp.stack(terms, axis=1)
            seg = jax.ops.segment_sum
            return (
                seg(terms * v[:, None], sweep, op.n_sweeps),
                seg(terms * (-2.0 * ell * v)[:, None], sweep, op.n_sweeps),
            )

        return lowered

    jax_funcify.register(SweepSums)(lambda op, **kwargs: lowered_for(op))

    def sweep_terms(sums, m1, m2, c0, tau1, jitter, sigma2):
        rr, (b1, b2), (q11, q12, q22) = _conditional(
            sums, m1 - c0[:, 0], m2 - c0[:, 1], tau1, jitter, sigma2
        )
        det = q11 * q22 - q12**2
        quad = rr / sigma2 - (q22 * b1**2 - 2.0 * q12 * b1 * b2 + q11 * b2**2) / det
        return -0.5 * jnp.sum(jnp.log(tau1**2 * jitter**2 * det)) - 0.5 * jnp.sum(quad)

    def terms_lowered(*inputs):  # the value and, by JAX, its gradient (SweepTerms' outputs:
        # every input's but c0's, which is minus m's)
        value, grads = jax.value_and_grad(sweep_terms, argnums=(0, 1, 2, 4, 5, 6))(*inputs)
        return (value, *grads)

    jax_funcify.register(SweepTerms)(lambda op, **kwargs: terms_lowered)


def _conditional(sums, delta1, delta2, tau1, jitter, sigma2):
    """Per sweep :math:`r^T P r` (times :math:`\\sigma^2`), :math:`b`, :math:`Q` (NumPy or
    PyTensor, broadcasting over leading axes)."""
    see, s1, s2, a11, a12, a22 = (sums[..., i] for i in range(6))
    rr = see - 2.0 * (delta1 * s1 + delta2 * s2) + delta1**2 * a11 + 2.0 * delta1 * delta2 * a12
    rr = rr + delta2**2 * a22
    b1 = (s1 - a11 * delta1 - a12 * delta2) / sigma2
    b2 = (s2 - a12 * delta1 - a22 * delta2) / sigma2
    q11, q22, q12 = 1.0 / tau1**2 + a11 / sigma2, 1.0 / jitter**2 + a22 / sigma2, a12 / sigma2
    return rr, (b1, b2), (q11, q12, q22)


def marginal_logp(value, m1, m2, tau1, jitter, sigma2, gamma, mu0, jac, ell, log_count, *,
                  sweep, c0, log_x=None, x0=None, totals=None):  # fmt: skip
    r"""The rows' log density with every sweep's costs integrated out (module docstring):
    ``m1``, ``m2`` the sweeps' decomposition (log C1, log C2), ``tau1``, ``jitter`` their
    deviation scales, ``sigma2`` the noise variance, ``gamma`` the noise growth; ``mu0``,
    ``jac``, ``ell`` the rows' :class:`Linearisation`, ``log_count`` theirs
    (:func:`~specbayes.model.design.log_counts`), ``sweep`` each row's sweep (NumPy), ``c0``
    the points; on the ``moe`` level ``log_x`` the sweeps' log expert reads and ``x0`` the
    linearisation's. ``totals``: :math:`(\\sum_i \\ell_i, \\sum_i \\log(n_i/n_\\mathrm{ref}))`
    where a graph holds them as data (two sums over the rows a gradient need not repeat)."""
    xp = np if isinstance(m1, np.ndarray) and isinstance(value, np.ndarray) else pt
    n_sweeps = int(np.max(sweep)) + 1  # every sweep has rows
    sums = _sums(xp, value, mu0, jac, ell, log_count, gamma, sweep, n_sweeps, x0 is not None)
    if x0 is not None:
        sums = fold_expert_reads(sums, log_x - x0)
    if xp is np:
        arrays = (np.asarray(a, dtype=np.float64) for a in (sums, m1, m2, c0))
        per_sweep = _sweep_terms(*arrays, float(tau1), float(jitter), float(sigma2))[0]
    else:
        per_sweep = SweepTerms()(sums, m1, m2, c0, tau1, jitter, sigma2)[0]
    n = value.shape[0]
    ell_sum, count_sum = (xp.sum(ell), xp.sum(log_count)) if totals is None else totals
    log_w = gamma * ell_sum - 0.5 * count_sum
    return -0.5 * n * xp.log(2.0 * np.pi * sigma2) - log_w + per_sweep


@numba.njit(cache=True, error_model="numpy", fastmath={"nsz", "arcp", "contract", "reassoc"})
def _sweep_terms(sums, m1, m2, c0, tau1, jitter, sigma2):
    r"""The sweeps' terms of :func:`marginal_logp`,
    :math:`\sum_s -\tfrac12\log|D|\,|Q_s| - \tfrac12(r^\top P r - b^\top Q_s^{-1} b)`,
    and its gradient in each input, in one pass over the sweeps (:class:`SweepTerms`).

    With :math:`\delta = m_s - c^0_s`, :math:`x = Q_s^{-1} b` (the costs' conditional shift)
    and :math:`e = \delta + x`: :math:`\partial/\partial m_s = D^{-1} x`;
    :math:`\partial/\partial Q_{s,jj}` is :math:`-\tfrac12((Q_s^{-1})_{jj} + x_j^2)`
    (:math:`\tau_1`, jitter); in the sums :math:`\sum v e^2` : :math:`-1/2\sigma^2`,
    :math:`\sum v J_j e` : :math:`e_j/\sigma^2`, :math:`\sum v J_j J_k` :
    :math:`-((Q_s^{-1})_{jk} + e_j e_k)/2\sigma^2` per entry; in :math:`\sigma^2`,
    :math:`(\mathrm{tr}(Q_s^{-1}A) + r^\top P r\,\sigma^2 + x^\top A x)/2\sigma^4 -
    b^\top x/\sigma^2`, :math:`A = J^\top W^{-1} J`. ``tests/test_marginal.py`` checks all
    against central differences."""
    n_sweeps = m1.size
    g_sums, g_m1, g_m2 = np.empty((n_sweeps, 6)), np.empty(n_sweeps), np.empty(n_sweeps)
    t1, t2, s = 1.0 / tau1**2, 1.0 / jitter**2, sigma2
    total, g_t1, g_t2, g_s = 0.0, 0.0, 0.0, 0.0
    for i in range(n_sweeps):
        see, s1, s2, a11, a12, a22 = sums[i]
        d1, d2 = m1[i] - c0[i, 0], m2[i] - c0[i, 1]
        rr = see - 2.0 * (d1 * s1 + d2 * s2) + d1 * d1 * a11 + 2.0 * d1 * d2 * a12 + d2 * d2 * a22
        b1, b2 = (s1 - a11 * d1 - a12 * d2) / s, (s2 - a12 * d1 - a22 * d2) / s
        q11, q12, q22 = t1 + a11 / s, a12 / s, t2 + a22 / s
        det = q11 * q22 - q12 * q12
        i11, i12, i22 = q22 / det, -q12 / det, q11 / det  # Q^-1
        x1, x2 = i11 * b1 + i12 * b2, i12 * b1 + i22 * b2
        bx = b1 * x1 + b2 * x2
        total += -0.5 * math.log(det) - 0.5 * (rr / s - bx)
        g_m1[i], g_m2[i] = t1 * x1, t2 * x2
        g_t1 += -0.5 * (i11 + x1 * x1)
        g_t2 += -0.5 * (i22 + x2 * x2)
        e1, e2 = d1 + x1, d2 + x2
        g_sums[i, 0] = -0.5 / s
        g_sums[i, 1], g_sums[i, 2] = e1 / s, e2 / s
        g_sums[i, 3] = -0.5 * (i11 + e1 * e1) / s
        g_sums[i, 4] = -(i12 + e1 * e2) / s
        g_sums[i, 5] = -0.5 * (i22 + e2 * e2) / s
        trace = i11 * a11 + 2.0 * i12 * a12 + i22 * a22
        xax = a11 * x1 * x1 + 2.0 * a12 * x1 * x2 + a22 * x2 * x2
        g_s += 0.5 * (trace + rr + xax) / (s * s) - bx / s
    total += -0.5 * n_sweeps * math.log(tau1**2 * jitter**2)
    # d/dtau = d/dt * dt/dtau (t = tau^-2) and the -log tau of |D|^-1/2
    g_tau1 = g_t1 * (-2.0 * t1 / tau1) - n_sweeps / tau1
    g_jitter = g_t2 * (-2.0 * t2 / jitter) - n_sweeps / jitter
    return total, g_sums, g_m1, g_m2, g_tau1, g_jitter, g_s


class SweepTerms(Op):
    """:func:`_sweep_terms` in a graph: output 0 the sweeps' terms of the density, the others
    its gradient in each input (what ``L_op`` uses) — one compiled pass over the sweeps where
    PyTensor's fused loops and gathers of the same terms and their gradient took 0.3 ms a
    gradient on the paper set's dense verifiers. Inputs: the six sums (:class:`SweepSums`),
    ``m1``, ``m2``, ``c0``, ``tau1``, ``jitter``, ``sigma2``."""

    __props__ = ()
    _ndims = (2, 1, 1, 2, 0, 0, 0)

    def make_node(self, *inputs):
        tensors = [pt.as_tensor_variable(x).astype("float64") for x in inputs]
        for x, nd in zip(tensors, self._ndims, strict=True):
            if x.ndim != nd:
                raise TypeError(f"SweepTerms: input {x} must have {nd} dimensions")
        outputs = [pt.dscalar(), pt.dmatrix(), pt.dvector(), pt.dvector()] + [
            pt.dscalar() for _ in range(3)
        ]
        return Apply(self, tensors, outputs)

    def perform(self, node, inputs, output_storage):
        *arrays, tau1, jitter, sigma2 = inputs
        out = _sweep_terms(*arrays, float(tau1), float(jitter), float(sigma2))
        for store, value in zip(output_storage, out, strict=True):
            store[0] = np.asarray(value, dtype=np.float64)

    def L_op(self, inputs, outputs, output_grads):
        if any(not isinstance(g.type, DisconnectedType) for g in output_grads[1:]):
            raise NotImplementedError("SweepTerms has no second derivatives")
        og, (g_sums, g_m1, g_m2, g_tau1, g_jitter, g_s) = output_grads[0], outputs[1:]
        g_c0 = -pt.stack([g_m1, g_m2], axis=1)
        return [og * g for g in (g_sums, g_m1, g_m2, g_c0, g_tau1, g_jitter, g_s)]


@register_funcify_default_op_cache_key(SweepTerms)
def _numba_sweep_terms(op, node, **kwargs):
    """The Op inside numba-compiled graphs (nutpie's default backend)."""

    @numba_njit
    def sweep_terms_numba(sums, m1, m2, c0, tau1, jitter, sigma2):
        total, g_sums, g_m1, g_m2, g_tau1, g_jitter, g_s = _sweep_terms(
            sums, m1, m2, c0, tau1.item(), jitter.item(), sigma2.item()
        )
        return (np.array(total), g_sums, g_m1, g_m2, np.array(g_tau1), np.array(g_jitter),
                np.array(g_s))  # fmt: skip

    return sweep_terms_numba, 1


def marginal_random(m1, m2, tau1, jitter, sigma2, gamma, log_count, log_x=None, rng=None,
                    size=None, *, rows):  # fmt: skip
    """Draws of the rows: each sweep's costs around its decomposition, then the exact law's
    rows around them (what the linearisation stands in for; on the ``moe`` level with the
    sweeps' log expert reads ``log_x``; ``rows`` is :func:`row_view`'s). With posterior draws
    of the hierarchy (``pm.sample_posterior_predictive``) that is a new sweep of each
    configuration; the fit's ``posterior_predictive`` group draws around each sweep's own
    drawn costs."""
    m1, m2, s = np.asarray(m1), np.asarray(m2), rows.obs_sweep
    shape = tuple(size) if size is not None else m1.shape[:-1]
    lc1 = m1 + np.asarray(tau1)[..., None] * rng.standard_normal((*shape, m1.shape[-1]))
    lc2 = m2 + np.asarray(jitter)[..., None] * rng.standard_normal((*shape, m2.shape[-1]))
    # a prior draw past a row's wall: that row is not finite
    mu = _law(rows, lc1[..., s], lc2[..., s], None if log_x is None else np.asarray(log_x)[..., s])
    queue = mu if log_x is None else _law(rows, lc1[..., s], lc2[..., s])  # the noise's law
    with np.errstate(all="ignore"):
        log_w = log_row_scale(queue, lc1[..., s], np.asarray(gamma)[..., None], log_count)
        eps = rng.standard_normal(mu.shape)
        return mu + np.sqrt(np.asarray(sigma2))[..., None] * np.exp(log_w) * eps


def form(design, pr: dict, metrics: tuple) -> str:
    """How the fit carries its sweeps' costs: ``"marginal"`` (integrated out) or
    ``"sampled"``. ``pr["sweeps"]`` ``None`` (the default): integrated out wherever the model
    can carry it — the pooled structure with the law alone or the ``moe`` level's expert reads
    (no curvature or knee) and no per-point metrics (which read each sweep's costs) — and
    alpha known; sampled elsewhere (the anchored structure samples its sweeps' costs as its
    coefficients; with an unknown alpha the integrated form is not healthy yet).
    ``"marginal"`` asks for it and refuses (one line) where it cannot; ``"sampled"`` samples
    them."""
    asked = pr["sweeps"]
    if asked not in (None, "sampled", "marginal"):
        raise ValueError(f"priors['sweeps'] is 'sampled', 'marginal' or None, got {asked!r}")
    if asked == "sampled":
        return "sampled"
    if asked is None and np.any(design.extra["sweep_latent"] >= 0):
        # an unknown alpha shifts a sweep's decomposition with it: integrated out, the
        # two-drafter set diverged at 3 of 4 seeds (1, 9, 1), sampled it is healthy at 4
        # (benchmarks/model_core.md, 2026-12-07 19:27)
        return "sampled"
    bent = [k for k in ("inverse_knee", "knee") if pr[k] is not None]
    why = (
        "the anchored structure (its sweeps' costs are its coefficients)"
        if design.structure != "pooled"
        else f"the {bent[0]!r} prior" if bent
        else "--metrics" if metrics
        else None
    )  # fmt: skip
    if why and asked == "marginal":
        raise ValueError(
            f"the sweeps integrated out (--integrate-sweeps, priors['sweeps'] = 'marginal') "
            f"do not take {why}: sample them (--sample-sweeps)"
        )
    return "sampled" if why else "marginal"


def integrated(model: pm.Model) -> bool:
    """Whether ``model`` has its sweeps' costs integrated out (:func:`marginal_likelihood`'s
    linearisation is in its data)."""
    return "lin_c0" in model.named_vars


def linearised_in_reads(model: pm.Model) -> bool:
    """Whether ``model`` is integrated on the ``moe`` level (linearised in the expert reads
    too: ``lin_x0`` is in its data)."""
    return "lin_x0" in model.named_vars


def marginal_likelihood(design, pr: dict, log_c1_eff, log_c2_eff, log_count, lin: Linearisation,
                        growth_axis: dict, log_x=None):  # fmt: skip
    """The observed ``log_latency`` of the pooled structure with the sweeps integrated out,
    and the scales it samples: ``noise_var`` (:math:`\\sigma^2`, the ``noise`` prior),
    ``tau_c1_var`` (:math:`\\tau_1^2`, the ``c1_dev`` prior) and ``noise_growth`` (on
    ``growth_axis``, :func:`specbayes.model.graph.build_model`'s); on the ``moe`` level
    ``log_x`` is the sweeps' log expert reads (``lin`` linearised in them too)."""
    noise, dev = pr["noise"], pr["c1_dev"]
    sigma2 = pm.InverseGamma("noise_var", alpha=noise["alpha"], beta=noise["beta"])
    tau1_var = pm.InverseGamma("tau_c1_var", alpha=dev["alpha"], beta=dev["beta"])
    jitter = pm.Data("c2_jitter", np.float64(pr["c2_jitter"]))
    pm.Deterministic("sigma", pt.sqrt(sigma2))
    pm.Deterministic("tau", pt.stack([pt.sqrt(tau1_var), jitter]), dims="cost")
    growth = pm.HalfNormal("noise_growth", **pr["noise_growth"], **growth_axis)
    data = {
        "mu0": pm.Data("lin_mu0", lin.mu0, dims="obs"),
        "jac": pm.Data("lin_jac", lin.jac),
        "c0": pm.Data("lin_c0", lin.c0),
        "ell": pm.Data("lin_ell", lin.ell, dims="obs"),
        "ell_sum": pm.Data("lin_ell_sum", lin.ell.sum()),
    }
    totals = (data["ell_sum"], np.float64(np.sum(design.log_count)))
    rows, experts, signature = row_view(design), (), "(s),(s),(),(),(),(),(n),(n,j),(n),(n),(s,j)"
    if log_x is not None:  # the moe level: each row's m/M and k for the exact law's draws
        pm.Data("expert_ratio", rows.expert_ratio, dims="obs")
        pm.Data("expert_k", rows.expert_k, dims="obs")
        experts, signature = (log_x, pm.Data("lin_x0", lin.x0)), signature + ",(s),(s)"

    def logp(value, *args):
        return marginal_logp(value, *args[:10], sweep=rows.obs_sweep, c0=args[10], log_x=(
            args[11] if experts else None), x0=args[12] if experts else None,
            totals=totals)  # fmt: skip

    def random(*args, rng=None, size=None):
        return marginal_random(*args[:6], args[9], args[11] if experts else None, rng=rng,
                               size=size, rows=rows)  # fmt: skip

    pm.CustomDist(
        "log_latency", log_c1_eff, log_c2_eff, pt.sqrt(tau1_var), jitter, sigma2, growth,
        data["mu0"], data["jac"], data["ell"], log_count, data["c0"], *experts,
        logp=logp, random=random, signature=signature + "->(n)",
        observed=design.log_latency, dims="obs",
    )  # fmt: skip


def integrate_sweeps(design, pr: dict, log_c1_eff, log_c2_eff, log_count, split: tuple,
                     growth_axis: dict) -> None:  # fmt: skip
    """:func:`marginal_likelihood` linearised at each sweep's least-squares costs; on the
    ``moe`` level with the expert reads (:func:`~specbayes.model.experts.expert_costs` of the
    sweeps' verifier passes ``split[3]``) at their prior's median, where the first
    :func:`relinearise` moves them to the optimised start's."""
    from specbayes.model.experts import expert_costs, expert_prior

    rows, log_x, x0 = row_view(design), None, None
    if design.level == "moe":
        log_x = pt.log(expert_costs(design, pr, split[3]))
        reads = pm.Model.get_context()["expert_cost"]
        # the Python linker: the default C linker's module cache takes 1.3–1.6 s to load in a
        # fresh process, and nothing else in a fit uses it (nutpie compiles with numba)
        x0 = log_x.eval({reads: np.exp(expert_prior(design, pr)[0])}, mode="FAST_COMPILE")
    lin = linearise(rows, sweep_point(rows, x0), x0)
    marginal_likelihood(design, pr, log_c1_eff, log_c2_eff, log_count, lin, growth_axis, log_x)


def draw_sweeps(rows, post, lin: Linearisation, rng) -> dict[str, np.ndarray]:
    """Draws of every sweep's costs from their conditional given each posterior draw of the
    hierarchy, and the rows' expected log latency at them (the exact law): ``log_c1``,
    ``log_c2`` (chain, draw, sweep) and ``mu`` (chain, draw, obs). ``rows`` has the design's
    row arrays (:func:`row_view`), ``post`` the posterior's ``log_c1_eff``, ``log_c2_eff``,
    ``tau``, ``noise_var``, ``noise_growth`` (and ``expert_c1``). On the ``moe`` level the
    law without expert reads, whose utilisation the noise grows with (a sampled fit's
    ``noise_mu``), is not stored but evaluated block by block where it is read
    (:func:`noise_location`)."""
    shape, s = post["log_c1_eff"].shape, rows.obs_sweep
    log_c1, log_c2, mu = np.empty(shape), np.empty(shape), np.empty((*shape[:2], s.size))
    log_x = None if lin.x0 is None else np.log(post["expert_c1"].values)

    def costs():
        # a block of draws at a time (likelihood.draw_blocks): over a chain's draws at once
        # the (draw, sweep) temporaries alone took 13 s on the paper's dense verifiers, the
        # law's over every (draw, row) 21 GB and a minute
        for at, mean, q11, q12, q22 in _moments(rows, post, lin):
            # plus L^-T z ~ N(0, Q^-1), Q = L L^T
            l11 = np.sqrt(q11)
            l21 = q12 / l11
            l22 = np.sqrt(q22 - l21**2)
            z1, z2 = rng.standard_normal((2, *q11.shape))
            x2 = z2 / l22
            log_c1[at], log_c2[at] = mean[..., 0] + (z1 - l21 * x2) / l11, mean[..., 1] + x2
            yield (at,)

    def law(at):  # the rows' law at the block's drawn costs, beside the next block's draws
        reads = None if log_x is None else log_x[at][:, s]
        mu[at] = _law(rows, log_c1[at][:, s], log_c2[at][:, s], reads)

    over_blocks(costs(), law)
    return {"log_c1": log_c1, "log_c2": log_c2, "mu": mu}


def noise_location(rows, post, at) -> np.ndarray:
    """The ``moe`` level's law without expert reads at the drawn sweep costs (draw, obs) for
    the draws ``at`` selects (a :func:`~specbayes.model.likelihood.draw_blocks` block): what
    the rows' noise grows with (a sampled fit's ``noise_mu``). Evaluated per block, not
    stored: on the paper's MoE verifiers (4,000 draws × 19,872 rows) a stored array would be
    636 MB more of a fit's memory, slow to map on first touch (``benchmarks/fit_speed.md``,
    2026-12-08)."""
    s = rows.obs_sweep
    return _law(rows, post["log_c1"].values[at][..., s], post["log_c2"].values[at][..., s])


def conditional_mean(rows, post, lin: Linearisation) -> np.ndarray:
    """Each sweep's conditional mean :math:`m_s + Q_s^{-1} b` (chain, draw, sweep, 2) given
    each posterior draw (the arguments of :func:`draw_sweeps`)."""
    out = np.empty((*post["log_c1_eff"].shape, 2))
    for at, mean, *_ in _moments(rows, post, lin):
        out[at] = mean
    return out


def _moments(rows, post, lin: Linearisation):
    """Per block of draws (:func:`~specbayes.model.likelihood.draw_blocks`): where it is
    (chain, draws), the sweeps' conditional mean (draw, sweep, 2) and precision :math:`Q`
    (its three entries, each (draw, sweep))."""
    m1, m2 = post["log_c1_eff"].values, post["log_c2_eff"].values
    tau, gamma = post["tau"].values, post["noise_growth"].values
    sigma2 = post["noise_var"].values[..., None]
    args = (rows.log_latency, lin.mu0, lin.jac, lin.ell, rows.log_count, rows.obs_sweep)
    args = tuple(np.ascontiguousarray(a) for a in args)
    kernel = _sums_kernel(lin.jac)
    # blocks as wide as the rows: draw_sweeps evaluates the law on each block's rows
    for at in draw_blocks(*m1.shape[:2], rows.obs_sweep.size):
        sums = np.stack([kernel(float(g), *args, len(lin.c0))[0] for g in gamma[at]])
        if lin.x0 is not None:  # the moe level: at each draw's expert reads
            sums = fold_expert_reads(sums, np.log(post["expert_c1"].values[at]) - lin.x0)
        d1, d2 = m1[at] - lin.c0[:, 0], m2[at] - lin.c0[:, 1]
        _, (b1, b2), (q11, q12, q22) = _conditional(
            sums, d1, d2, tau[at][:, 0, None], tau[at][:, 1, None], sigma2[at]
        )
        det = q11 * q22 - q12**2
        mean = np.stack(
            [m1[at] + (q22 * b1 - q12 * b2) / det, m2[at] + (q11 * b2 - q12 * b1) / det],
            axis=-1,
        )
        yield at, mean, q11, q12, q22


#: Rounds of :func:`relinearise` before sampling.
RELINEARISE_ROUNDS = 2
#: What :func:`relinearise` reads of the start (``expert_c1`` on the ``moe`` level).
_POINT = ("log_c1_eff", "log_c2_eff", "tau", "noise_var", "noise_growth", "expert_c1")


def relinearise(model: pm.Model, compiled, point: dict):
    """Move the linearisation to each sweep's conditional mean at ``point`` (the model's
    variables at the optimised start, :func:`specbayes.model.sampling.compiled_point`): in
    ``model``'s data and in ``compiled``'s (nutpie's), which is returned (the same compiled
    graph, new data).

    The least-squares costs a fit starts from are the sweep's own; the hierarchy pulls its
    conditional away from them (0.5 % for C2's jitter, more where the decomposition misfits
    a sweep), and the law's curvature over that pull is what the first order leaves out
    (0.009–0.023 nats a sweep at a 3 % pull, 0.0005–0.005 at the conditional mean,
    ``tests/test_marginal.py``) — largest at the rows nearest a wall, which the stored
    log-likelihood scores at the drawn costs."""
    post = xr.Dataset(
        {
            name: (
                ("chain", "draw", *[f"{name}_{i}" for i in range(np.ndim(point[name]))]),
                point[name][None, None],
            )
            for name in _POINT
            if name in point
        }
    )
    rows, old = _rows_of(model), _linearisation_of(model)
    x0 = None if old.x0 is None else np.log(point["expert_c1"])
    lin = linearise(rows, conditional_mean(rows, post, old)[0, 0], x0)
    data = {"lin_c0": lin.c0, "lin_mu0": lin.mu0, "lin_jac": lin.jac, "lin_ell": lin.ell,
            "lin_ell_sum": lin.ell.sum()}  # fmt: skip
    if x0 is not None:
        data["lin_x0"] = x0
    pm.set_data(data, model=model)
    return compiled.with_data(**data)


def _rows_of(model: pm.Model):
    """The design's row arrays from ``model``'s data (what :func:`linearise` and
    :func:`draw_sweeps` read)."""
    from types import SimpleNamespace

    def data(name):
        return np.asarray(model[name].get_value())

    obs, moe = model["log_latency"], linearised_in_reads(model)
    return SimpleNamespace(
        obs_sweep=data("obs_sweep"), load=data("load"), obs_closed=data("closed"),
        log_count=data("log_count"), log_latency=np.asarray(model.rvs_to_values[obs].data),
        expert_ratio=data("expert_ratio") if moe else None,
        expert_k=data("expert_k") if moe else None,
    )  # fmt: skip


def _linearisation_of(model: pm.Model) -> Linearisation:
    names = ("c0", "mu0", "jac", "ell") + (("x0",) if linearised_in_reads(model) else ())
    return Linearisation(*(np.asarray(model[f"lin_{n}"].get_value()) for n in names))


def add_draws(idata, model: pm.Model, seed: int) -> None:
    """Add :func:`draw_sweeps`' ``log_c1``, ``log_c2`` and ``mu`` to ``idata.posterior``
    (what :func:`specbayes.model.sampling.add_collapsed` adds for a sampled fit: here the
    scales ``sigma`` and ``tau`` were sampled)."""
    rows, lin = _rows_of(model), _linearisation_of(model)
    draws = draw_sweeps(rows, idata.posterior, lin, np.random.default_rng([seed, 7]))
    dims = {"log_c1": "sweep", "log_c2": "sweep", "mu": "obs"}
    for name, values in draws.items():
        coords = {dims[name]: list(model.coords[dims[name]])}
        idata.posterior[name] = xr.DataArray(
            values, dims=("chain", "draw", dims[name]), coords=coords
        )
