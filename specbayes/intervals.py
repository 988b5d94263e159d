"""Posterior summaries: the one place that fixes interval width and how draws are summarised.

Decisions are reported as functions of posterior *draws*: every interval is a pair of
quantiles of the per-draw quantity, never a formula evaluated at posterior means.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

#: Central probability of every reported interval (5 %–95 % quantiles).
INTERVAL_PROB: float = 0.90


def interval_bounds(prob: float = INTERVAL_PROB) -> tuple[float, float]:
    """Lower and upper quantile levels of a central interval of probability ``prob``."""
    return (1.0 - prob) / 2.0, 1.0 - (1.0 - prob) / 2.0


def summarize(draws: np.ndarray, axis: int = 0, prob: float = INTERVAL_PROB) -> pd.DataFrame:
    """Mean, median and central interval of draws along ``axis``.

    Infinite draws (a saturated server has unbounded latency) are legitimate values: they
    make the mean infinite and move quantiles, which is the honest summary. Quantiles use
    the ``inverted_cdf`` rule (an actual draw, no interpolation between ``inf`` and a
    number). ``NaN`` draws (undefined quantities) are ignored; ``frac_defined`` says how
    many draws were used.

    Parameters
    ----------
    draws : ndarray
        Posterior draws; the sample axis is ``axis``.
    axis : int
        Sample axis.
    prob : float
        Interval probability.

    Returns
    -------
    pandas.DataFrame
        Columns ``mean, median, lo, hi, frac_defined``, one row per remaining index.
    """
    x = np.moveaxis(np.asarray(draws, dtype=float), axis, 0)
    x = x.reshape(x.shape[0], -1)
    lo_q, hi_q = interval_bounds(prob)
    defined = ~np.isnan(x)
    out = {name: np.full(x.shape[1], np.nan) for name in ("mean", "median", "lo", "hi")}
    for j in range(x.shape[1]):
        col = x[defined[:, j], j]
        if col.size == 0:
            continue
        with np.errstate(invalid="ignore"):
            out["mean"][j] = np.mean(col)
        out["median"][j], out["lo"][j], out["hi"][j] = np.quantile(
            col, [0.5, lo_q, hi_q], method="inverted_cdf"
        )
    out["frac_defined"] = defined.mean(axis=0)
    return pd.DataFrame(out)
