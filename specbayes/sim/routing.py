r"""MoE routing: which experts a step's tokens touch, sampled token by token.

Each token picks ``m`` distinct experts out of ``M`` in every layer (uniformly, independently
across tokens and layers — real routers are skewed and correlated; see ``data/README.md``).
A step that routes ``T`` tokens through a layer reads only the distinct experts touched; their
count per layer is :math:`D_T`, with :math:`E[D_T] = M\,\varphi(T)`,
:math:`\varphi(T) = 1 - (1 - m/M)^T` (``laws.expert_coverage``). The simulator does not use
that formula: it *samples* the routing.

Sampling every token of every layer at every step would dominate the run time, so the draws
are tabulated once per (m, M, layers): ``S`` per-layer samples of :math:`D_T` for every
``T`` up to the point where all experts are touched with near certainty, then ``S2`` sums over
the layers of independent per-layer draws. The engine draws one whole-model sum per step.
Beyond ``cap`` tokens every expert is counted as read (expected misses < 0.01 per layer).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from numba import njit

__all__ = ["coverage_cap", "routing_table", "sample_distinct_experts"]


def coverage_cap(m: int, M: int, tol: float = 0.01) -> int:
    """Smallest T with expected untouched experts :math:`M (1 - m/M)^T` below ``tol``."""
    if m >= M:
        return 1
    return max(1, math.ceil(math.log(tol / M) / math.log1p(-m / M)))


@njit(cache=True)
def _sample_layer(tokens, m, M, n_samples, seed):
    """``n_samples`` draws of the distinct experts one layer touches with ``tokens`` tokens."""
    np.random.seed(seed)  # noqa: NPY002 (numba: per-thread legacy RNG)
    out = np.empty(n_samples, dtype=np.int64)
    perm = np.arange(M)
    touched = np.zeros(M, dtype=np.bool_)
    for s in range(n_samples):
        touched[:] = False
        count = 0
        for _ in range(tokens):
            # m distinct experts by a partial Fisher-Yates shuffle
            for j in range(m):
                r = j + np.random.randint(0, M - j)  # noqa: NPY002 (numba: per-thread legacy RNG)
                tmp = perm[j]
                perm[j] = perm[r]
                perm[r] = tmp
                e = perm[j]
                if not touched[e]:
                    touched[e] = True
                    count += 1
        out[s] = count
    return out


def sample_distinct_experts(tokens: int, m: int, M: int, n_samples: int, seed: int = 0):
    """Sampled distinct-expert counts of one layer for ``tokens`` routed tokens.

    Parameters
    ----------
    tokens : int
        Routed tokens T.
    m, M : int
        Experts per token and experts per layer.
    n_samples : int
        Independent draws.
    seed : int
        Seed of the draw.

    Returns
    -------
    ndarray of int
        Counts in ``[min(m, .), M]``; their mean estimates :math:`M\\varphi(T)`.
    """
    return _sample_layer(int(tokens), int(m), int(M), int(n_samples), int(seed))


@njit(cache=True)
def _build_table(m, M, layers, cap, n_layer_samples, n_sum_samples, seed):
    table = np.empty((cap + 1, n_sum_samples), dtype=np.float64)
    table[0, :] = 0.0
    for t in range(1, cap + 1):
        per_layer = _sample_layer(t, m, M, n_layer_samples, seed + t)
        for s in range(n_sum_samples):
            total = 0.0
            for _ in range(layers):
                total += per_layer[np.random.randint(0, n_layer_samples)]  # noqa: NPY002 (numba: per-thread legacy RNG)
            table[t, s] = total
    return table


@lru_cache(maxsize=16)
def routing_table(m: int, M: int, layers: int, n_sum_samples: int = 128) -> np.ndarray:
    """Table ``[T, s]`` of sampled distinct experts summed over ``layers`` (T ≤ cap).

    Deterministic for given (m, M, layers) — its own fixed seed, independent of the run's.
    """
    cap = coverage_cap(m, M)
    seed = (m * 1009 + M * 9176 + layers * 7) % (2**31 - 1)
    return _build_table(m, M, layers, cap, 256, n_sum_samples, seed)
