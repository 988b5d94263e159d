r"""What the simulator's output implies for the latency law: per-configuration fits, collapse.

Used to write ``data/README.md`` and the note on the simulator's measured properties; it is
the paper's baseline analysis (SciPy ``curve_fit`` of :math:`L = C_1/(1 - \lambda C_2)` per
configuration on the unsaturated points), not the Bayesian model.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.optimize import curve_fit

__all__ = ["collapse_r2", "fit_per_config", "sd_ratios", "summary"]

KEY = ["verifier", "drafter", "hardware", "cell", "k", "alpha"]


def _law(lam, c1, c2):
    return c1 / (1.0 - lam * c2)


def fit_per_config(df: pd.DataFrame, min_points: int = 5) -> pd.DataFrame:
    r"""Fit :math:`L = C_1/(1-\lambda C_2)` to each configuration's unsaturated sweep points.

    Rows used: ``sweep_index >= 0`` (not the throughput row) and not ``saturated``.

    Returns
    -------
    pandas.DataFrame
        One row per configuration: ``c1``, ``c2``, ``r2`` (on latency), ``n``, ``x_max``
        (largest :math:`\lambda C_2` fitted).
    """
    use = df[(df["sweep_index"] >= 0) & ~df["saturated"].astype(bool)]
    out = []
    for key, d in use.groupby(KEY, dropna=False, sort=True):
        if len(d) < min_points:
            continue
        x, y = d["rps"].to_numpy(float), d["latency"].to_numpy(float)
        try:
            (c1, c2), _ = curve_fit(
                _law,
                x,
                y,
                p0=[y.min(), 0.5 / x.max()],
                bounds=([0.0, 0.0], [np.inf, 0.999 / x.max()]),
            )
        except RuntimeError:
            continue
        r2 = 1.0 - ((y - _law(x, c1, c2)) ** 2).sum() / ((y - y.mean()) ** 2).sum()
        out.append((*key, c1, c2, r2, len(d), float(x.max() * c2)))
    return pd.DataFrame(out, columns=[*KEY, "c1", "c2", "r2", "n", "x_max"])


def collapse_r2(df: pd.DataFrame, fits: pd.DataFrame) -> float:
    r"""Pooled R² of the normalised points :math:`y = L/C_1` against :math:`1/(1-x)`."""
    use = df[(df["sweep_index"] >= 0) & ~df["saturated"].astype(bool)]
    m = use.merge(fits, on=KEY, how="inner")
    x = m["rps"] * m["c2"]
    y = m["latency"] / m["c1"]
    pred = 1.0 / (1.0 - x)
    return float(1.0 - ((y - pred) ** 2).sum() / ((y - y.mean()) ** 2).sum())


def sd_ratios(fits: pd.DataFrame) -> pd.DataFrame:
    """``C1R = C1_sd/C1_dense`` and ``C2R = C2_sd/C2_dense`` per SD configuration."""
    group = ["verifier", "hardware", "cell"]
    dense = fits[fits["k"] == 0][[*group, "c1", "c2"]]
    sd = fits[fits["k"] > 0]
    m = sd.merge(dense, on=group, suffixes=("", "_dense"))
    m["c1r"] = m["c1"] / m["c1_dense"]
    m["c2r"] = m["c2"] / m["c2_dense"]
    return m


def summary(df: pd.DataFrame) -> dict:
    """Headline numbers: collapse R², per-configuration R² quantiles, C2R > 1 shares."""
    moe = df["verifier"].isin(["Qwen3-30B-A3B", "gpt-oss-20b", "Qwen3-235B-A22B"])
    fits = fit_per_config(df)
    fits_moe = fits["verifier"].isin(["Qwen3-30B-A3B", "gpt-oss-20b", "Qwen3-235B-A22B"])
    dense_fits = fits[(fits["k"] == 0) & ~fits_moe]
    ratios = sd_ratios(fits[~fits_moe])
    out = {
        "configs_fitted": len(fits),
        "dense_collapse_r2": collapse_r2(df[~moe & (df["k"] == 0)], dense_fits),
        "dense_r2_min": float(dense_fits["r2"].min()),
        "dense_r2_median": float(dense_fits["r2"].median()),
        "sd_r2_median": float(fits[(fits["k"] > 0) & ~fits_moe]["r2"].median()),
        "sd_r2_p10": float(fits[(fits["k"] > 0) & ~fits_moe]["r2"].quantile(0.1)),
        "moe_dense_law_r2_median": float(fits[fits_moe]["r2"].median()),
        "share_c1r_below_1": float((ratios["c1r"] < 1).mean()),
        "share_c2r_above_1": float((ratios["c2r"] > 1).mean()),
    }
    for lo, hi in ((0.5, 0.7), (0.7, 0.9), (0.9, 1.01)):
        sel = (ratios["alpha"] >= lo) & (ratios["alpha"] < hi)
        out[f"share_c2r_above_1_alpha_{lo}_{min(hi, 1.0)}"] = float(
            (ratios.loc[sel, "c2r"] > 1).mean()
        )
    return out
