r"""Speedup and break-even of speculative decoding on a chosen metric: p99 TTFT, ITL, ...

:mod:`specbayes.plan` answers on the mean latency, the paper's law. A fit that models
per-point metrics (``fit(..., metrics=)``, :mod:`specbayes.model.metrics`) answers the
same questions on any of them: per posterior draw, the metric of dense decoding over the
metric of the SD arm at the same load, :math:`S_m = m_\mathrm{dense}/m_\mathrm{SD}`
(> 1: SD is faster on that metric), and the load at which it crosses 1. SD helps ITL most
(a verify pass emits :math:`E` tokens) and TTFT least (the prompt is prefilled either way,
and the drafter adds its own prefill), so the break-even differs by metric.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from specbayes.intervals import INTERVAL_PROB, summarize
from specbayes.plan import Arm

__all__ = ["arm_rows", "metric_draws", "metric_speedup"]


def arm_rows(arm: Arm, load: str, values: Any) -> pd.DataFrame:
    """``arm`` as rows in the sweep schema, one per load (``"rps"`` or ``"concurrency"``):
    what ``fit.metric`` and ``fit.mean_latency`` evaluate (a row without ``concurrency`` is
    open loop)."""
    rows = pd.concat([arm.row()] * len(values), ignore_index=True)
    return rows.assign(**{load: np.asarray(values, dtype=float)})


def metric_draws(fit: Any, arm: Arm, name: str, load: str, values: Any) -> np.ndarray:
    """(sample, load) draws of the expected metric ``name`` of ``arm`` at each load
    (``load`` is ``"rps"`` or ``"concurrency"``); ``inf`` past the wall."""
    values = np.asarray(values, dtype=float)
    if load not in ("rps", "concurrency"):
        raise ValueError(f"load must be 'rps' or 'concurrency'; got {load!r}")
    if not (values.ndim == 1 and len(values) and np.all(np.isfinite(values) & (values >= 0))):
        raise ValueError(f"{load}: give one or more finite loads >= 0")
    return np.asarray(fit.metric(arm_rows(arm, load, values), name).values, dtype=float)


def metric_speedup(
    fit: Any,
    arm: Arm,
    name: str,
    *,
    rps: Any = None,
    concurrency: Any = None,
    prob: float = INTERVAL_PROB,
) -> dict[str, pd.DataFrame]:
    r"""SD's speedup over dense on metric ``name`` vs load, and where it stops paying.

    Give exactly one of ``rps`` (open loop) or ``concurrency`` (closed loop). Per draw
    :math:`S_m = m_\mathrm{dense}/m_\mathrm{SD}` from the *same* posterior draw of both
    arms; the break-even is the first load of the grid where :math:`S_m` falls below 1
    (linear between grid points; none where it stays above 1 or starts below it).

    Returns
    -------
    dict
        ``speedup``: per load ``median, lo, hi`` of :math:`S_m`, ``p_faster`` and the
        medians of both arms' metric (s); ``break_even``: one row, the crossing load's
        ``median, lo, hi``, ``p_cross`` (share of draws crossing inside the grid) and
        ``p_sd_faster_at_lightest``.

    Raises
    ------
    ValueError
        The arm is dense, the fit does not model ``name`` (from ``fit.metric``), or not
        exactly one load grid is given.
    """
    if arm.k == 0:
        raise ValueError("metric_speedup compares an SD arm (k >= 1) with dense decoding")
    if (rps is None) == (concurrency is None):
        raise ValueError("give exactly one of rps (open loop) or concurrency (closed loop)")
    load = "rps" if rps is not None else "concurrency"
    values = np.sort(np.asarray(rps if rps is not None else concurrency, dtype=float))
    sd = metric_draws(fit, arm, name, load, values)
    dense = metric_draws(fit, replace(arm, k=0, alpha=None, drafter=None), name, load, values)
    with np.errstate(all="ignore"):
        s = dense / sd
    table = summarize(s, prob=prob)
    table.insert(0, load, values)
    table["p_faster"] = np.mean(s > 1.0, axis=0)
    table[f"dense_{name}_median"] = np.median(dense, axis=0)
    table[f"sd_{name}_median"] = np.median(sd, axis=0)
    cross = _first_crossing(s, values)
    cs = summarize(cross, prob=prob)  # NaN (no crossing in the grid) left out
    be = pd.DataFrame(
        {
            "metric": [name],
            f"{load}_median": cs["median"].to_numpy(),
            f"{load}_lo": cs["lo"].to_numpy(),
            f"{load}_hi": cs["hi"].to_numpy(),
            "p_cross": [float(np.mean(np.isfinite(cross)))],
            "p_sd_faster_at_lightest": [float(np.mean(s[:, 0] > 1.0))],
        }
    )
    for t in (table, be):
        t.attrs.update(arm=arm.label(), metric=name, load=load)
    return {"speedup": table, "break_even": be}


def _first_crossing(s: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Per draw, the first load where ``s`` goes from above 1 to below (interpolated in
    ``x``); NaN where it never does inside the grid. A draw past the wall in SD (``s`` 0)
    crosses; one past dense's wall (``inf``) does not."""
    above = s > 1.0
    down = above[:, :-1] & ~above[:, 1:]
    out = np.full(len(s), np.nan)
    rows = np.flatnonzero(down.any(axis=1))
    j = np.argmax(down[rows], axis=1)
    s0, s1 = s[rows, j], s[rows, j + 1]
    with np.errstate(all="ignore"):
        frac = np.where(np.isfinite(s1) & (s0 != s1), (s0 - 1.0) / (s0 - s1), 0.0)
    out[rows] = x[j] + np.clip(frac, 0.0, 1.0) * (x[j + 1] - x[j])
    return out
