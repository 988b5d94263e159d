r"""The paper's qualitative findings about SD cost ratios, as posterior probabilities.

Kong et al. (2026) report three regularities of the ratios
:math:`C_{1R}(\alpha, k) = C_{1,\mathrm{sd}}/C_{1,\mathrm{dense}}` and
:math:`C_{2R}(\alpha, k) = C_{2,\mathrm{sd}}/C_{2,\mathrm{dense}}` (``docs/model.md``, "Speedup";
the paper's Fig. 4–5), on Qwen3-8B at 1024/1024 and across workloads:

(a) **C1R < 1 for every k** — SD always lowers the load-independent cost;
(b) **C2R > 1 except at high alpha** — SD raises the load-dependent cost unless acceptance is
    very high, so its zero-load win shrinks with load (the "red flag" of :mod:`specbayes.plan`);
(c) **the k minimising C1R is larger than the k minimising C2R** — the tension behind
    "use a smaller k at high load".

:func:`paper_findings` evaluates them on one fitted arm (verifier, hardware, drafter, cell)
over an (alpha, k) grid. The per-(alpha, k) summaries are :func:`specbayes.plan.cost_ratios`
itself (the planner's numbers, one call per alpha); the quantities that need the draws
jointly — "for every k", the per-draw argmin over k, the alpha at which :math:`C_{2R}` crosses
1 — come from the same coefficient draws (:func:`specbayes.plan.coefficient_draws`) through
:func:`specbayes.laws.effective_costs`. Every check states a posterior probability; its
``holds`` flag is a convenience reading of it, with the rule written next to it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from specbayes import laws, plan

__all__ = [
    "PAPER_ALPHAS",
    "Findings",
    "c2r_crossing_alpha",
    "median_cell",
    "paper_findings",
    "ratio_draws",
]

#: The paper's forced-acceptance grid, alpha = 0.50, 0.55, ..., 1.00 (the paper's sweeps).
PAPER_ALPHAS: tuple[float, ...] = tuple(np.round(np.arange(0.50, 1.0001, 0.05), 2).tolist())


class Findings(NamedTuple):
    """Result of :func:`paper_findings` (unpacks as ``table, checks``).

    Attributes
    ----------
    table : pandas.DataFrame
        One row per (alpha, k): the columns of :func:`specbayes.plan.cost_ratios`
        (``c1r_mean, c1r_lo, c1r_hi, c2r_mean, c2r_lo, c2r_hi, p_c1r_below_1,
        p_c2r_above_1, red_flag``) plus ``p_argmin_c1r`` / ``p_argmin_c2r`` (posterior
        probability that this k minimises the ratio over the k grid at this alpha).
        ``attrs``: the arm.
    checks : dict
        ``"c1r_below_1"``, ``"c2r_above_1"``, ``"argmin_k"`` — see :func:`paper_findings`.
    """

    table: pd.DataFrame
    checks: dict[str, dict[str, Any]]


def median_cell(data: pd.DataFrame, verifier: str, hardware: str) -> tuple[str, float, float]:
    r"""The fitted cell of (verifier, hardware) nearest the median workload.

    Over the group's cells (mean prefill p and decode g per cell), the one minimising
    :math:`|\log\frac{1+p}{1+\tilde p}| + |\log\frac{1+g}{1+\tilde g}|` with
    :math:`\tilde p, \tilde g` the medians over cells; ties go to the first label in sort
    order.

    Returns
    -------
    (cell, prefill, decode)
    """
    rows = data[(data["verifier"] == verifier) & (data["hardware"] == hardware)]
    if rows.empty:
        raise ValueError(f"no rows of ({verifier}, {hardware}) in the fit's data")
    cells = rows.groupby("cell", sort=True)[["prefill", "decode"]].mean()
    p, g = cells["prefill"].to_numpy(float), cells["decode"].to_numpy(float)
    dist = np.abs(np.log1p(p) - np.log1p(np.median(p))) + np.abs(
        np.log1p(g) - np.log1p(np.median(g))
    )
    i = int(np.argmin(dist))
    return str(cells.index[i]), float(p[i]), float(g[i])


def _resolve_cell(fit: Any, verifier: str, hardware: str, cell: Any) -> tuple[str, float, float]:
    """(label, prefill, decode) of ``cell``: None (median cell), a label, or (p, g)."""
    data = getattr(fit, "data", None)
    if cell is None:
        if data is None:
            raise ValueError("this fit carries no data: pass cell ('<prefill>x<decode>' or (p, g))")
        return median_cell(data, verifier, hardware)
    if isinstance(cell, tuple | list):
        p, g = (float(x) for x in cell)
        return f"{round(p)}x{round(g)}", p, g
    label = str(cell)
    if data is not None and "cell" in data:
        rows = data[(data["verifier"] == verifier) & (data["hardware"] == hardware)]
        rows = rows[rows["cell"] == label]
        if len(rows):
            return label, float(rows["prefill"].mean()), float(rows["decode"].mean())
    try:
        p, g = (float(x) for x in label.split("x"))
    except ValueError as exc:
        raise ValueError(
            f"cell {label!r} is not in the fit's data and is not '<prefill>x<decode>'"
        ) from exc
    return label, p, g


def ratio_draws(
    fit: Any, arm: plan.Arm, alphas: Sequence[float], ks: Iterable[int]
) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    r"""Draws of :math:`C_{1R}` and :math:`C_{2R}` over an (alpha, k) grid.

    .. math::

        C_{jR}(\alpha, k) = \frac{C_{j,\mathrm{eff}}(\alpha, k)}{C_{j,\mathrm{eff}}(\cdot, 0)},
        \qquad j = 1, 2

    with :func:`laws.effective_costs` on one set of coefficient draws of ``arm``
    (:func:`plan.coefficient_draws`), so SD and dense share every draw — as in
    :func:`plan.cost_ratios`, which this extends to a grid of alphas with the draws kept.

    Returns
    -------
    c1r, c2r : ndarray, shape (sample, alpha, k)
    coefs : dict
        The six coefficient draws, each ``(sample,)``.
    """
    alphas = np.asarray(alphas, dtype=float)
    ks = np.asarray(list(ks))
    (coefs,) = plan.coefficient_draws(fit, arm)
    c = [coefs[name][:, None, None] for name in plan.COEFFICIENTS]
    cycle = {name: coefs[name][:, None, None] for name in plan.CYCLE_COSTS}
    c1s, c2s = laws.effective_costs(
        *c, arm.decode, alphas[None, :, None], ks[None, None, :], **cycle
    )
    c1d, c2d = laws.effective_costs(*c, arm.decode, 0.5, 0)
    return c1s / c1d, c2s / c2d, coefs


def c2r_crossing_alpha(
    coefs: dict[str, np.ndarray], decode: float, k: int, *, iterations: int = 60
) -> np.ndarray:
    r"""Per draw, the acceptance at which :math:`C_{2R}(\alpha, k) = 1`.

    :math:`E(\alpha, k)` rises with alpha, so :math:`C_{2R}` falls with it: it exceeds 1 below
    the returned alpha and not above. Found by vectorised bisection on
    :func:`laws.effective_costs` (``iterations`` halvings of ``[0, 1]``). ``inf`` where
    :math:`C_{2R}(1, k) > 1` (C2R > 1 at every acceptance).

    Parameters
    ----------
    coefs : dict
        Coefficient draws (``c1p ... c2d``, and ``c2c``, ``prefill_share`` where the fit has
        them), each ``(sample,)``.
    decode : float
        Output tokens g.
    k : int
        Draft length, ``>= 1``.
    """
    c = [np.asarray(coefs[name], dtype=float) for name in plan.COEFFICIENTS]
    _, c2_dense = laws.effective_costs(*c, decode, 0.5, 0)
    # a cycle's cost per sequence and the drafter's prefill share, where the fit has them
    extra = {n: np.asarray(coefs.get(n, 0.0), dtype=float) for n in ("c2c", "prefill_share")}

    def c2r(alpha: np.ndarray) -> np.ndarray:
        return laws.effective_costs(*c, decode, alpha, k, **extra)[1] / c2_dense

    lo = np.zeros_like(c[0])
    hi = np.ones_like(c[0])
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        above = c2r(mid) > 1.0
        lo = np.where(above, mid, lo)
        hi = np.where(above, hi, mid)
    return np.where(c2r(np.ones_like(lo)) > 1.0, np.inf, 0.5 * (lo + hi))


def paper_findings(
    fit: Any,
    verifier: str,
    hardware: str,
    cell: Any = None,
    alphas: Sequence[float] = PAPER_ALPHAS,
    ks: Iterable[int] = range(1, 11),
    drafter: str | None = None,
    *,
    threshold: float = 0.5,
    high_alpha: float = 0.9,
) -> Findings:
    r"""Posterior probabilities of the paper's three cost-ratio findings on one arm.

    Parameters
    ----------
    fit : Fit
        A fitted model with SD coefficients (``fit.coefficients``; ``sd`` model).
    verifier, hardware : str
        Labels as in the fitted data.
    cell : str or (prefill, decode), optional
        Workload; default :func:`median_cell` of the fit's data.
    alphas : sequence of float
        Acceptance grid (default :data:`PAPER_ALPHAS`, 0.50–1.00).
    ks : iterable of int
        Draft lengths, all ``>= 1`` (default 1–10).
    drafter : str, optional
        Draft model (needed when the fit knows several for this verifier).
    threshold : float, default 0.5
        Posterior probability at or above which a check ``holds``.
    high_alpha : float, default 0.9
        What "high alpha" means for check (b).

    Returns
    -------
    Findings
        ``table`` (one row per (alpha, k), see :class:`Findings`) and ``checks``:

        ``"c1r_below_1"`` — (a) :math:`C_{1R} < 1` for every k:
            ``p_by_k`` (per k, P(:math:`C_{1R} < 1` at every alpha of the grid), which is
            P at the lowest alpha, :math:`C_{1R}` falling with alpha), ``p_min`` (its minimum
            over k), ``p_all`` (P(:math:`C_{1R} < 1` at every (alpha, k) jointly));
            holds iff ``p_all >= threshold``.
        ``"c2r_above_1"`` — (b) :math:`C_{2R} > 1` except at high alpha:
            ``p_by_alpha_k`` (P(:math:`C_{2R} > 1`) per (alpha, k)),
            ``alpha_threshold_by_k`` (the lowest grid alpha at which
            P(:math:`C_{2R} > 1`) < 0.5 — above it too, by monotonicity; ``None`` if none),
            ``alpha_cross_median_by_k`` (posterior median of the per-draw alpha where
            :math:`C_{2R} = 1`, :func:`c2r_crossing_alpha`; the continuous version of the
            threshold; ``inf``: above 1 at every alpha); holds iff for every k
            P(:math:`C_{2R} > 1`) >= ``threshold`` at the lowest grid alpha and the
            threshold alpha is ``None`` or ``>= high_alpha``.
        ``"argmin_k"`` — (c) the k minimising :math:`C_{1R}` exceeds the k minimising
            :math:`C_{2R}`, per draw over the k grid: ``p_by_alpha``
            (P(:math:`\arg\min_k C_{1R} > \arg\min_k C_{2R}`) per alpha), ``p_mean``
            (its mean over the alpha grid), ``mean_argmin_c1r_by_alpha`` /
            ``mean_argmin_c2r_by_alpha`` (posterior-mean argmins); holds iff
            ``p_mean >= threshold``. At alpha = 1 both ratios usually fall all the way to
            the largest k (every draft is accepted), a tie that counts against the check.

        Every check also carries ``finding`` (the sentence) and ``holds``.
    """
    alphas = np.asarray(alphas, dtype=float)
    if alphas.size == 0 or np.any(~np.isfinite(alphas)) or np.any((alphas <= 0) | (alphas > 1)):
        raise ValueError("alphas must be a non-empty grid in (0, 1]")
    alphas = np.unique(alphas)
    ks = np.asarray(list(ks))
    if ks.size == 0 or np.any(ks < 1) or np.any(ks != np.round(ks)):
        raise ValueError("ks must be draft lengths >= 1 (the ratios compare SD with dense)")
    ks = np.unique(ks.astype(int))
    label, prefill, decode = _resolve_cell(fit, verifier, hardware, cell)
    arm = plan.Arm(
        verifier, hardware, prefill=prefill, decode=decode, drafter=drafter, cell=label, k=1
    )

    c1r, c2r, coefs = ratio_draws(fit, arm, alphas, ks)  # (sample, alpha, k)
    n_s = c1r.shape[0]
    best1 = ks[np.argmin(c1r, axis=-1)]  # (sample, alpha)
    best2 = ks[np.argmin(c2r, axis=-1)]
    parts = []
    for i, a in enumerate(alphas):
        part = plan.cost_ratios(fit, replace(arm, alpha=float(a)), ks=ks)
        part.insert(0, "alpha", float(a))
        part["p_argmin_c1r"] = np.mean(best1[:, i, None] == ks[None, :], axis=0)
        part["p_argmin_c2r"] = np.mean(best2[:, i, None] == ks[None, :], axis=0)
        parts.append(part)
    table = pd.concat(parts, ignore_index=True)
    table.attrs.update(
        verifier=verifier,
        hardware=hardware,
        drafter=drafter,
        cell=label,
        prefill=prefill,
        decode=decode,
        draws=n_s,
    )

    # (a)
    below = c1r < 1.0
    p_by_k = np.mean(below.all(axis=1), axis=0)
    p_all = float(np.mean(below.all(axis=(1, 2))))
    check_a = dict(
        finding="C1R < 1 for every k (SD lowers the load-independent cost)",
        p_by_k=dict(zip(ks.tolist(), p_by_k.tolist(), strict=True)),
        p_min=float(p_by_k.min()),
        p_all=p_all,
        holds=bool(p_all >= threshold),
    )

    # (b)
    p_above = np.mean(c2r > 1.0, axis=0)  # (alpha, k)
    thresholds, crossing = {}, {}
    for j, k in enumerate(ks.tolist()):
        low = np.flatnonzero(p_above[:, j] < 0.5)
        thresholds[k] = float(alphas[low[0]]) if low.size else None
        cross = c2r_crossing_alpha(coefs, decode, k)
        crossing[k] = float(np.quantile(cross, 0.5, method="inverted_cdf"))
    holds_b = bool(
        np.all(p_above[0, :] >= threshold)
        and all(t is None or t >= high_alpha - 1e-12 for t in thresholds.values())
    )
    check_b = dict(
        finding=f"C2R > 1 except at high alpha (>= {high_alpha:g})",
        p_by_alpha_k={
            (float(a), int(k)): float(p_above[i, j])
            for i, a in enumerate(alphas)
            for j, k in enumerate(ks)
        },
        alpha_threshold_by_k=thresholds,
        alpha_cross_median_by_k=crossing,
        high_alpha=high_alpha,
        holds=holds_b,
    )

    # (c)
    p_gt = np.mean(best1 > best2, axis=0)  # (alpha,)
    p_mean = float(np.mean(p_gt))
    check_c = dict(
        finding="the k minimising C1R is larger than the k minimising C2R",
        p_by_alpha=dict(zip(alphas.tolist(), p_gt.tolist(), strict=True)),
        p_mean=p_mean,
        mean_argmin_c1r_by_alpha=dict(zip(alphas.tolist(), best1.mean(0).tolist(), strict=True)),
        mean_argmin_c2r_by_alpha=dict(zip(alphas.tolist(), best2.mean(0).tolist(), strict=True)),
        holds=bool(p_mean >= threshold),
    )
    return Findings(table, dict(c1r_below_1=check_a, c2r_above_1=check_b, argmin_k=check_c))
