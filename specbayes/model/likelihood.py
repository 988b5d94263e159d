r"""The observation model: one function of the sweep costs, for every evaluation.

Each row's expected log latency follows from its sweep's :math:`C_1, C_2` through the latency
law (:func:`specbayes.laws.log_headroom`): open loop :math:`L = C_1/(1 - \lambda C_2)`, closed
loop :math:`L = C_1 + N C_2`, so :math:`\log L = \log C_1 - \log h`. Observed log latencies are
Normal around it with scale :math:`\sigma` (multiplicative error). The prior keeps every
open-loop sweep's :math:`C_2` below :math:`1/\lambda_\max` of its observed rows, so no draw
places an observed row past saturation: :math:`\mu` is finite for every draw.
"""

from __future__ import annotations

from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from typing import Any

import numpy as np

from specbayes import laws
from specbayes.laws._common import _namespace
from specbayes.parallel import default_workers


def log_mean_latency(
    log_c1: Any,
    log_c2: Any,
    load: Any,
    closed: Any,
    c3: Any = 0.0,
    wall_softness: float = 0.0,
    *,
    knee: tuple[Any, Any] | None = None,
    experts: tuple[Any, Any, Any] | None = None,
) -> Any:
    r""":math:`\mu = \log C_1 - \log h(C_1, C_2, C_3; \lambda \text{ or } N)` per row.

    Parameters
    ----------
    log_c1, log_c2 : array or tensor
        The row's sweep costs (already indexed per row), natural log.
    load : array or tensor
        Request rate (open loop) or concurrency N (closed loop).
    closed : array or tensor of bool
        Which rows are closed loop.
    c3 : array or tensor, default 0
        The row's batch curvature :math:`C_3` (:func:`specbayes.laws.token_knee_curvature`).
    wall_softness : float, default 0
        The model graph's soft curved wall (:func:`specbayes.laws.log_headroom`).
    knee : (batch, slope), optional
        The row's knee instead of a curvature (:func:`specbayes.laws.knee_latency`).
    experts : (c1s, ratio, k), optional
        The ``moe`` level (:mod:`specbayes.model.experts`): the row's expert reads per
        request at full coverage :math:`C_{1s}`, :math:`m/M` and k. Then :math:`\mu` is the
        log of the least fixed point :math:`L = (C_1 + \varphi(\lambda L(k+1))\,C_{1s})/
        (1 - \lambda C_2)` (:func:`specbayes.laws.moe_fixed_cost_latency`: Lambert's W for
        NumPy, Newton and the implicit-function gradient in a graph) or, closed loop,
        :math:`L = C_1 + N C_2 + \varphi(N(k+1))\,C_{1s}`. Not with ``c3`` or ``knee``.
    """
    xp_exp = np.exp if isinstance(log_c1, np.ndarray) else _pt_exp
    c1, c2 = xp_exp(log_c1), xp_exp(log_c2)
    if experts is not None:
        return _log_moe_latency(c1, c2, load, closed, *experts)
    return log_c1 - laws.log_headroom(
        c1, c2, load, load, closed, c3, knee=knee, wall_softness=wall_softness
    )


def _log_moe_latency(c1: Any, c2: Any, load: Any, closed: Any, c1s: Any, ratio: Any, k: Any):
    """:func:`log_mean_latency` of the ``moe`` level (its docstring)."""
    xp = _namespace(c1, c2, c1s)
    # each branch at a harmless load on the other loop's rows (0: the law at idle)
    rps, streams = xp.where(closed, 0.0, load), xp.where(closed, load, 0.0)
    # the planner's laws with the same expert reads (laws.Experts): one law for both
    reads = laws.Experts(c1s, ratio, k)
    with np.errstate(all="ignore"):
        open_loop = laws.latency(rps, c1, c2, experts=reads)
        closed_loop = laws.closed_loop_latency(streams, c1, c2, experts=reads)
        return xp.log(xp.where(closed, closed_loop, open_loop))


def _pt_exp(x: Any) -> Any:
    import pytensor.tensor as pt

    return pt.exp(x)


def log_row_scale(mu: Any, log_c1: Any, growth: Any, log_count: Any = 0.0) -> Any:
    r"""Log noise scale of each row relative to :math:`\sigma`:
    :math:`\log w = \gamma(\mu - \log C_1) - \tfrac12 \log(n/n_\mathrm{ref})`, i.e.
    :math:`w = (1 - x)^{-\gamma} (n/n_\mathrm{ref})^{-1/2}` with :math:`x` the row's
    utilisation and :math:`n` the requests its mean is taken over — a queue near saturation
    averages fewer independent waits per request (``growth`` :math:`\gamma \ge 0`; 0 is
    constant noise), and a mean of :math:`n` requests has a standard error
    :math:`\propto n^{-1/2}`. ``log_count`` is :func:`specbayes.model.design.log_counts`
    (0 for a row without a count: the reference row)."""
    return growth * (mu - log_c1) - 0.5 * log_count


def posterior_log_row_scale(
    post: Any, sweep: np.ndarray, log_count: Any = 0.0, at: Any = Ellipsis, location: Any = None
) -> np.ndarray:
    r""":func:`log_row_scale` of the fitted rows for every posterior draw (chain, draw, obs),
    or for the draws ``at`` selects (a :func:`draw_blocks` block: (draw, obs)): at
    ``location`` where given (the draws' own, e.g. an integrated ``moe`` fit's,
    :func:`specbayes.model.marginal.noise_location`), else at the graph's ``noise_mu`` where
    it has one (the knee's: the noise grows with the utilisation of the law without it,
    :mod:`specbayes.model.graph`), else at ``mu``.

    ``post`` is the posterior with ``mu`` (and ``noise_mu``); ``sweep`` each row's sweep,
    ``log_count`` its :math:`\log(n/n_\mathrm{ref})`."""
    if location is None:
        location = (post["noise_mu"] if "noise_mu" in post else post["mu"]).values[at]
    return log_row_scale(
        location,
        post["log_c1"].values[at][..., sweep],
        post["noise_growth"].values[at][..., None],
        np.asarray(log_count),
    )


def log_density(y: Any, mu: Any, sigma: Any) -> Any:
    r"""Pointwise log density :math:`\log\mathcal N(\log L \mid \mu, \sigma)` (NumPy);
    ``sigma`` is the row's own scale :math:`\sigma w`."""
    z = (np.asarray(y) - mu) / sigma
    return -0.5 * z * z - np.log(sigma) - 0.5 * np.log(2.0 * np.pi)


def collapsed_logp(value: Any, mu: Any, log_w: Any, a: Any, b: Any) -> Any:
    r"""Log marginal density of the rows with the noise variance integrated out.

    With :math:`\sigma^2 \sim \mathrm{InverseGamma}(a, b)` and
    :math:`y_i \mid \mu, \sigma \sim \mathcal N(\mu_i, \sigma w_i)` for the :math:`n` rows
    (:func:`log_row_scale`), and :math:`r_i = (y_i - \mu_i)/w_i`,

    .. math::

        \log p(y \mid \mu, w) = \log\Gamma(a + n/2) - \log\Gamma(a) + a\log b
        - (a + n/2)\log\big(b + \tfrac12 \textstyle\sum_i r_i^2\big)
        - \textstyle\sum_i \log w_i - \tfrac n2 \log 2\pi

    and :math:`\sigma^2 \mid \mu, y \sim \mathrm{InverseGamma}(a + n/2, b + \tfrac12\sum r^2)`
    (:func:`draw_sigma`): the sampler never sees the :math:`\sigma`–cost funnel that a sweep
    with one or two residual degrees of freedom has, and the joint draws
    :math:`(\theta, \sigma)` are exact draws of the same model.
    """
    import pytensor.tensor as pt

    n = value.shape[-1]
    r = (value - mu) * pt.exp(-log_w)
    ss = pt.sum(r * r, axis=-1)
    half_n = 0.5 * n
    return (
        pt.gammaln(a + half_n)
        - pt.gammaln(a)
        + a * pt.log(b)
        - (a + half_n) * pt.log(b + 0.5 * ss)
        - pt.sum(log_w, axis=-1)
        - half_n * np.log(2.0 * np.pi)
    )


def collapsed_random(mu, log_w, a, b, rng=None, size=None):
    r"""Draws of the rows: :math:`\sigma^2 \sim IG(a, b)`, then Normal around ``mu``."""
    mu = np.asarray(mu)
    shape = tuple(size) if size is not None else mu.shape[:-1]
    var = b / rng.gamma(a, size=shape)
    eps = rng.standard_normal((*shape, mu.shape[-1]))
    return mu + np.sqrt(var)[..., None] * np.exp(log_w) * eps


def draw_sigma(
    y: np.ndarray, mu: np.ndarray, log_w: np.ndarray, a: float, b: float, rng
) -> np.ndarray:
    r"""Exact posterior draws of :math:`\sigma` given each draw of ``mu``, ``log_w`` (..., obs)."""
    ss = np.sum(((y - mu) * np.exp(-log_w)) ** 2, axis=-1)
    return np.sqrt((b + 0.5 * ss) / rng.gamma(a + 0.5 * y.shape[-1], size=ss.shape))


#: Values per row (or sweep) a per-draw computation takes at once (:func:`draw_blocks`): 512 kB
#: of float64 per temporary, which the cache holds and the allocator reuses.
BLOCK_VALUES = 65_536


def draw_blocks(chains: int, draws: int, width: int):
    """``(chain, slice of draws)`` covering a (chain, draw, ``width``) array a few draws at a
    time (at least one; :data:`BLOCK_VALUES` values a block): fresh arrays of every draw's rows
    are slow to first touch, and temporaries larger than the cache slow every pass over them —
    on the paper's dense verifiers (4,000 draws × 59,040 rows) the stored groups took 15.3 s
    in blocks of 8 draws, 6.8 s a draw at a time (``benchmarks/fit_speed.md``)."""
    block = max(1, BLOCK_VALUES // max(1, width))
    for chain in range(chains):
        for start in range(0, draws, block):
            yield chain, slice(start, start + block)


#: Threads :func:`over_blocks` computes blocks in: the CPUs this process may run on, at most
#: four (each holds a block's temporaries, and the blocks' arrays stream from memory).
BLOCK_THREADS = min(4, default_workers())


def over_blocks(blocks, work, threads: int | None = None) -> None:
    """``work(*args)`` for every ``args`` that ``blocks`` yields, in ``threads`` threads.

    ``blocks`` runs in the calling thread, in order — so whatever it draws from a random
    generator is drawn in the same order as one block after another, and the results are
    the same — while the blocks' NumPy loops and compiled laws, which release the GIL, run
    on every core: on the paper's MoE verifiers (4,000 draws × 19,872 rows) the law at every
    (draw, row) is most of the sweep draws and of the stored groups (``benchmarks/
    fit_speed.md``, 2026-12-08). ``work`` writes its block's slice of preallocated arrays; at
    most two blocks a thread wait, so ``blocks``' arguments do not pile up in memory. An
    error in any block is raised here. ``threads``: :data:`BLOCK_THREADS` unless given.
    """
    threads = BLOCK_THREADS if threads is None else threads
    if threads <= 1:
        for args in blocks:
            work(*args)
        return
    with ThreadPoolExecutor(threads) as pool:
        pending: set = set()
        for args in blocks:
            if len(pending) >= 2 * threads:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for job in done:
                    job.result()
            pending.add(pool.submit(work, *args))
        for job in pending:
            job.result()
