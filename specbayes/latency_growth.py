"""The ``latency_growth`` rule of sweep validation: points past the unsaturated regime.

Within one sweep (≥ 4 points ordered by load), each point from the fourth on is compared
with the unsaturated latency law fitted to the lighter-load points not flagged before it —
``1/L`` linear in ``rps`` for open loop (slope ≤ 0), ``L`` linear in ``concurrency`` for
closed loop (slope ≥ 0; a fitted slope of the wrong sign is noise and is set to 0). A point
whose latency exceeds ``growth_factor`` × that prediction is past a knee
(:func:`_growth_flags`), and is left out of the fits for the points after it.

Notes
-----
Split from :mod:`specbayes.data` (whose module docstring documents the rule and whose
:func:`~specbayes.data.validate_sweeps` applies it); it depends on numpy and pandas only.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def _signed_line(x: np.ndarray, y: np.ndarray, sign: int) -> tuple[float, float]:
    """Least-squares line whose slope has the given sign (0 when the data say otherwise)."""
    xm, ym = x.mean(), y.mean()
    dx = x - xm
    slope = float(dx @ (y - ym) / (dx @ dx))
    if slope * sign < 0:
        return 0.0, float(ym)
    return slope, float(ym - slope * xm)


def _law_prediction(x: np.ndarray, lat: np.ndarray, at: float, closed: bool) -> float:
    """Latency at load ``at`` from the latency law fitted to (x, lat).

    The law's sign is known — L rises with N (closed loop), 1/L falls with rps (open
    loop) — so a noisy, flat low-load stretch never extrapolates to a falling latency.
    """
    if closed:
        slope, icpt = _signed_line(x, lat, sign=+1)
        return icpt + slope * at
    slope, icpt = _signed_line(x, 1.0 / lat, sign=-1)
    inv = icpt + slope * at
    return 1.0 / inv if inv > 0 else np.inf


def _growth_flags(df: pd.DataFrame, growth_factor: float) -> pd.Series:
    flags = np.zeros(len(df), dtype=bool)
    closed_all = df["closed"].to_numpy(bool)
    load_all = np.where(closed_all, df["concurrency"].to_numpy(float), df["rps"].to_numpy(float))
    lat_all = df["latency"].to_numpy(float)
    for idx in df.groupby("sweep", sort=False).indices.values():  # positions, not labels
        if len(idx) < 4:
            continue
        closed = bool(closed_all[idx[0]])
        order = idx[np.argsort(load_all[idx], kind="stable")]
        x, lat = load_all[order], lat_all[order]
        kept = np.ones(len(x), dtype=bool)
        for i in range(3, len(x)):
            fit_x, fit_lat = x[:i][kept[:i]], lat[:i][kept[:i]]
            if len(fit_x) < 3 or np.ptp(fit_x) <= 0:
                continue
            if lat[i] > growth_factor * _law_prediction(fit_x, fit_lat, x[i], closed):
                kept[i] = False
        flags[order[~kept]] = True
    return pd.Series(flags, index=df.index)
