r"""The paper's method: SciPy least-squares fits, the baseline every validation table shows.

Three levels, as in Kong et al. (2026) §2.5 and Fig. 7:

1. :func:`fit_configurations` — per configuration (one sweep over load), :math:`(C_1, C_2)`
   of :math:`L = C_1/(1 - \lambda C_2)` (open loop) or :math:`L = C_1 + N C_2` (closed loop);
2. :func:`fit_cycle_coefficients` — per (verifier, drafter, hardware, cell), the six cycle
   coefficients jointly over every (alpha, k) row (:func:`laws.effective_costs`);
3. :func:`fit_trends` / :func:`predict_trends` — each coefficient's trend across cells
   (DESIGN.md §1.6: :math:`c_{1p}, c_{2p}` linear in prefill, :math:`c_{1v}, c_{2v}` linear in
   the time-averaged KV size :math:`p + g/2`, :math:`c_{1d}, c_{2d}` constant), which
   predicts cells that were never fitted — the paper's leave-n-out.

All fits use ``scipy.optimize.curve_fit`` on log latency with log-coefficients (relative
error, positive coefficients by construction); open-loop fits are started inside the
feasible region :math:`\lambda C_2 < 1`.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
from scipy.optimize import OptimizeWarning, curve_fit

from specbayes import laws

__all__ = [
    "CYCLE_COEFFICIENTS",
    "TREND_COVARIATE",
    "fit_configurations",
    "fit_cycle_coefficients",
    "fit_trends",
    "predict_cycle",
    "predict_trends",
    "r_squared",
]

CYCLE_COEFFICIENTS = ("c1p", "c1v", "c1d", "c2p", "c2v", "c2d")
CONFIG_KEY = ["verifier", "drafter", "hardware", "cell", "alpha", "k"]
CELL_KEY = ["verifier", "drafter", "hardware", "cell"]

#: Covariate of each coefficient's cell trend (``None``: constant across cells).
TREND_COVARIATE: dict[str, str | None] = {
    "c1p": "prefill",
    "c2p": "prefill",
    "c1v": "kv",
    "c2v": "kv",
    "c1d": None,
    "c2d": None,
}


def r_squared(observed, predicted) -> float:
    """Coefficient of determination :math:`1 - \\sum (y-\\hat y)^2 / \\sum (y-\\bar y)^2`."""
    y = np.asarray(observed, dtype=float)
    f = np.asarray(predicted, dtype=float)
    ok = np.isfinite(y) & np.isfinite(f)
    y, f = y[ok], f[ok]
    if y.size < 2 or np.ptp(y) == 0:
        return np.nan
    return float(1.0 - np.sum((y - f) ** 2) / np.sum((y - y.mean()) ** 2))


def _row_latency(closed: np.ndarray, load: np.ndarray, c1, c2) -> np.ndarray:
    """Law of each row: open loop through Little's law, closed loop linear in N."""
    with np.errstate(all="ignore"):
        open_ = laws.latency(load, c1, c2)
        return np.where(closed, laws.closed_loop_latency(load, c1, c2), open_)


def _load(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    closed = df["concurrency"].notna().to_numpy() if "concurrency" in df else np.zeros(len(df))
    closed = closed.astype(bool)
    load = np.where(closed, df.get("concurrency", np.nan), df["rps"]).astype(float)
    return closed, load


def _fit_one_config(sweep: pd.DataFrame) -> dict:
    closed, load = _load(sweep)
    lat = sweep["latency"].to_numpy(float)
    # start: C1 from the lightest point, C2 from Little's law at the heaviest one
    i0, i1 = np.argmin(load), np.argmax(load)
    c1_0 = max(lat[i0] * 0.9, 1e-6)
    if closed.all():
        c2_0 = max((lat[i1] - c1_0) / max(load[i1], 1e-9), 1e-6)
    else:
        c2_0 = max(
            min((1 - c1_0 / lat[i1]) / max(load[i1], 1e-9), 0.9 / max(load.max(), 1e-9)), 1e-6
        )

    def model(_, log_c1, log_c2):
        return np.log(_row_latency(closed, load, np.exp(log_c1), np.exp(log_c2)))

    if len(sweep) < 2 or np.ptp(load) == 0:
        return dict(c1=np.nan, c2=np.nan, r2=np.nan, n=len(sweep), ok=False)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OptimizeWarning)
            upper = np.log(1.0 / max(load.max(), 1e-12)) if not closed.all() else np.inf
            p, _ = curve_fit(
                model,
                None,
                np.log(lat),
                p0=[np.log(c1_0), np.log(c2_0)],
                bounds=([-np.inf, -np.inf], [np.inf, upper]),
                method="trf",
            )
    except (RuntimeError, ValueError):
        return dict(c1=np.nan, c2=np.nan, r2=np.nan, n=len(sweep), ok=False)
    c1, c2 = np.exp(p)
    pred = _row_latency(closed, load, c1, c2)
    return dict(c1=c1, c2=c2, r2=r_squared(lat, pred), n=len(sweep), ok=True)


def fit_configurations(sweeps: pd.DataFrame) -> pd.DataFrame:
    """Per-configuration :math:`(C_1, C_2)` by ``curve_fit`` (the paper's Fig. 1 / 2a fits).

    Parameters
    ----------
    sweeps : pandas.DataFrame
        Validated sweep rows (``validate_sweeps(...).data``). Configurations are the
        ``sweep`` labels of :func:`specbayes.data.sweep_labels` (so a sweep whose alpha was
        measured per point stays one configuration); raw rows fall back to the key columns.

    Returns
    -------
    pandas.DataFrame
        One row per configuration: the key columns (alpha: the sweep's mean), ``c1, c2,
        r2, n, ok``.
    """
    key = [c for c in CONFIG_KEY if c in sweeps]
    by = "sweep" if "sweep" in sweeps else key
    out = []
    for _, sweep in sweeps.groupby(by, dropna=False, sort=True):
        labels = {c: sweep[c].iloc[0] for c in key}
        if "alpha" in labels:
            labels["alpha"] = sweep["alpha"].mean()
        out.append({**labels, **_fit_one_config(sweep)})
    return pd.DataFrame(out)


def predict_cycle(coefs: pd.DataFrame | dict, rows: pd.DataFrame) -> np.ndarray:
    """Latency of ``rows`` from six cycle coefficients per row (arrays or a frame aligned
    with ``rows``) through :func:`laws.effective_costs` and the latency law."""
    c = [np.asarray(coefs[name], dtype=float) for name in CYCLE_COEFFICIENTS]
    alpha = rows["alpha"].fillna(0.5).to_numpy(float)
    c1, c2 = laws.effective_costs(
        *c, rows["decode"].to_numpy(float), alpha, rows["k"].to_numpy(float)
    )
    closed, load = _load(rows)
    return _row_latency(closed, load, c1, c2)


def _fit_one_cell(rows: pd.DataFrame) -> dict:
    lat = rows["latency"].to_numpy(float)
    has_sd = (rows["k"] > 0).any()
    configs = fit_configurations(rows)
    ok = configs[configs.ok]
    if ok.empty:
        return dict(ok=False)
    # start: dense C1 = c1p + g c1v split 10/90, C2 likewise; drafter terms a tenth of verifier
    g = rows["decode"].mean()
    dense = ok[ok.k == 0] if (ok.k == 0).any() else ok
    c1, c2 = dense.c1.median(), dense.c2.median()
    x0 = dict(c1p=0.1 * c1, c1v=0.9 * c1 / g, c2p=0.1 * c2, c2v=0.9 * c2 / g)
    x0.update(c1d=0.1 * x0["c1v"], c2d=0.1 * x0["c2v"])
    free = [n for n in CYCLE_COEFFICIENTS if has_sd or n not in ("c1d", "c2d")]

    def model(_, *logs):
        vals = dict(x0)
        vals.update({n: np.exp(v) for n, v in zip(free, logs, strict=True)})
        with np.errstate(all="ignore"):
            pred = predict_cycle(vals, rows)
        return np.log(np.where(np.isfinite(pred), pred, 1e6))

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OptimizeWarning)
            p, _ = curve_fit(
                model,
                None,
                np.log(lat),
                p0=[np.log(x0[n]) for n in free],
                method="trf",
                max_nfev=2000,
            )
    except (RuntimeError, ValueError):
        return dict(ok=False)
    vals = dict(x0)
    vals.update({n: float(np.exp(v)) for n, v in zip(free, p, strict=True)})
    if not has_sd:
        vals.update(c1d=np.nan, c2d=np.nan)
    pred = predict_cycle({k: np.nan_to_num(v) for k, v in vals.items()}, rows)
    return dict(
        **vals,
        r2=r_squared(lat, pred),
        r2_log=r_squared(np.log(lat), np.log(pred)),
        n=len(rows),
        ok=True,
    )


def fit_cycle_coefficients(sweeps: pd.DataFrame) -> pd.DataFrame:
    """Six cycle coefficients per (verifier, drafter, hardware, cell), jointly over (alpha, k).

    Dense rows (``k = 0``) of the same verifier, hardware and cell are fitted together with
    every drafter's SD rows (they pin :math:`c_p, c_v`).

    Returns
    -------
    pandas.DataFrame
        One row per (verifier, drafter, hardware, cell): ``prefill, decode``, the six
        coefficients, ``r2, r2_log, n, ok``.
    """
    out = []
    for (v, h, cell), rows in sweeps.groupby(["verifier", "hardware", "cell"], sort=True):
        drafters = sorted(set(rows.loc[rows.k > 0, "drafter"])) or ["none"]
        for dr in drafters:
            use = rows[(rows.k == 0) | (rows.drafter == dr)]
            res = _fit_one_cell(use)
            out.append(
                dict(
                    verifier=v,
                    drafter=dr,
                    hardware=h,
                    cell=cell,
                    prefill=use.prefill.mean(),
                    decode=use.decode.mean(),
                    **res,
                )
            )
    return pd.DataFrame(out)


def _covariate(frame: pd.DataFrame, name: str | None) -> np.ndarray:
    if name is None:
        return np.zeros(len(frame))
    if name == "prefill":
        return frame["prefill"].to_numpy(float)
    return (frame["prefill"] + 0.5 * frame["decode"]).to_numpy(float)


def fit_trends(cell_coefs: pd.DataFrame) -> pd.DataFrame:
    """Linear trend of each coefficient across cells, per (verifier, drafter, hardware).

    :math:`c = a + b\\,z` with :math:`z` from :data:`TREND_COVARIATE` (ordinary least
    squares; a constant where the covariate is ``None`` or has a single value).

    Returns
    -------
    pandas.DataFrame
        Columns ``verifier, drafter, hardware, coef, intercept, slope, n_cells``.
    """
    out = []
    ok = cell_coefs[cell_coefs.ok.astype(bool)]
    for (v, dr, h), cells in ok.groupby(["verifier", "drafter", "hardware"], sort=True):
        for name in CYCLE_COEFFICIENTS:
            y = cells[name].to_numpy(float)
            z = _covariate(cells, TREND_COVARIATE[name])
            good = np.isfinite(y)
            y, z = y[good], z[good]
            if y.size == 0:
                continue
            if TREND_COVARIATE[name] is None or np.ptp(z) == 0 or y.size < 2:
                a, b = float(np.mean(y)), 0.0
            else:
                b, a = np.polyfit(z, y, 1)
            out.append(
                dict(
                    verifier=v,
                    drafter=dr,
                    hardware=h,
                    coef=name,
                    intercept=a,
                    slope=b,
                    n_cells=int(y.size),
                )
            )
    return pd.DataFrame(out)


def predict_trends(trends: pd.DataFrame, rows: pd.DataFrame) -> np.ndarray:
    """Latency of ``rows`` (any cell) from the cell trends of their (verifier, drafter, hardware).

    Dense rows use the trends of the first drafter of their verifier and hardware (the
    dense coefficients :math:`c_p, c_v` are shared by every drafter). Rows whose group has no
    trend get ``NaN``. A trend extrapolated to a non-positive coefficient is clipped at a
    tiny positive value.
    """
    rows = rows.reset_index(drop=True)
    pred = np.full(len(rows), np.nan)
    if trends.empty:
        return pred
    first = trends.groupby(["verifier", "hardware"])["drafter"].first()
    drafter = rows["drafter"].where(rows["k"] > 0, None)
    dense_key = pd.MultiIndex.from_frame(rows[["verifier", "hardware"]])
    drafter = drafter.fillna(pd.Series(first.reindex(dense_key).to_numpy(), index=rows.index))
    table = trends.set_index(["verifier", "drafter", "hardware", "coef"])
    for (v, dr, h), idx in (
        rows.assign(_d=drafter).groupby(["verifier", "_d", "hardware"], sort=False).groups.items()
    ):
        sub = rows.loc[idx]
        vals = {}
        for name in CYCLE_COEFFICIENTS:
            key = (v, dr, h, name)
            if key not in table.index:
                vals[name] = np.zeros(len(sub)) if name in ("c1d", "c2d") else np.nan
                continue
            a, b = table.loc[key, ["intercept", "slope"]].to_numpy(float)
            vals[name] = np.maximum(a + b * _covariate(sub, TREND_COVARIATE[name]), 1e-12)
        if any(np.isscalar(x) and np.isnan(x) for x in vals.values()):
            continue
        pred[np.asarray(idx)] = predict_cycle(vals, sub)
    return pred
