r"""The paper's method: SciPy least-squares fits, the baseline every validation table shows.

Three levels, as in Kong et al. (2026) §2.5 and Fig. 7:

1. :func:`fit_configurations` — per configuration (one sweep over load), :math:`(C_1, C_2)`
   of :math:`L = C_1/(1 - \lambda C_2)` (open loop) or :math:`L = C_1 + N C_2` (closed loop);
2. :func:`fit_cycle_coefficients` — per (verifier, drafter, hardware, cell), the six cycle
   coefficients jointly over every (alpha, k) row (:func:`laws.effective_costs`), and the
   cell's dense costs :math:`(C_1, C_2)` (columns ``C1, C2``);
3. :func:`fit_trends` / :func:`predict_trends` — trends across cells (docs/model.md §6), which
   predict cells that were never fitted — the paper's leave-n-out. Each
   (verifier, drafter, hardware) group gets one of two forms, chosen automatically:

   * ``form = "cycle"`` (the group has SD rows): each coefficient's own trend —
     :math:`c_{1p}, c_{2p}` linear in prefill p, :math:`c_{1v}, c_{2v}` linear in the
     time-averaged KV size :math:`p + g/2`, :math:`c_{1d}, c_{2d}` constant;
   * ``form = "dense"`` (every row of the group is dense, ``k = 0``): within a cell only the
     aggregates :math:`C_1 = c_{1p} + g\,c_{1v}` and :math:`C_2 = c_{2p} + g\,c_{2v}` are
     identified — the split is not, so trends of split coefficients fitted per cell are noise.
     Substituting the same trend forms, :math:`c_{jp} = a_j + b_j p` and
     :math:`c_{jv} = c_j + d_j (p + g/2)`, gives a model *linear in its parameters*

     .. math::  C_j(p, g) = a_j + b_j\,p + c_j\,g + d_j\,g\,(p + g/2), \qquad j = 1, 2

     fitted to the cells' :math:`(C_1, C_2)` by (weighted) linear least squares. Nothing
     keeps the four terms, or the implied :math:`c_{jp}, c_{jv}`, positive — only a
     prediction below zero is clipped (it would be an extrapolation far outside the cells).
     With too few cells (or cells that do not vary in p or g) the terms that cannot be
     identified are dropped (:data:`DENSE_TERMS`, in order of priority).

All nonlinear fits use ``scipy.optimize.curve_fit`` on log latency with log-coefficients
(relative error, positive coefficients by construction); open-loop fits are started inside
the feasible region :math:`\lambda C_2 < 1`.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
from scipy.optimize import OptimizeWarning, curve_fit

from specbayes import laws

__all__ = [
    "CYCLE_COEFFICIENTS",
    "DENSE_TERMS",
    "TREND_COVARIATE",
    "fit_configurations",
    "fit_cycle_coefficients",
    "fit_dense_trend",
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

#: Terms of the dense-only trend :math:`C_j = a_j + b_j p + c_j g + d_j g (p + g/2)`, in the
#: order they are admitted when cells are few (intercept first).
DENSE_TERMS = ("intercept", "slope_prefill", "slope_decode", "slope_decode_kv")


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
    # start: C1 from the lightest point, C2 from Little's law at the heaviest one. Rows may
    # mix open (load = rps) and closed loop (load = N) when one configuration's dense rows are
    # fitted together (a synchronous N = 1 point beside a rate sweep): then C1 starts from the
    # fastest row, and the C2 start and its bound come from the open-loop rows alone.
    if closed.any() and not closed.all():
        opened = np.flatnonzero(~closed)
        i0, i1 = np.argmin(lat), opened[np.argmax(load[opened])]
        open_max = load[opened].max()
    else:
        i0, i1 = np.argmin(load), np.argmax(load)
        open_max = load.max()
    c1_0 = max(lat[i0] * 0.9, 1e-6)
    if closed.all():
        c2_0 = max((lat[i1] - c1_0) / max(load[i1], 1e-9), 1e-6)
    else:
        c2_0 = max(min((1 - c1_0 / lat[i1]) / max(load[i1], 1e-9), 0.9 / max(open_max, 1e-9)), 1e-6)

    def model(_, log_c1, log_c2):
        return np.log(_row_latency(closed, load, np.exp(log_c1), np.exp(log_c2)))

    if len(sweep) < 2 or np.ptp(load) == 0:
        return dict(c1=np.nan, c2=np.nan, r2=np.nan, n=len(sweep), ok=False)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OptimizeWarning)
            upper = np.log(1.0 / max(open_max, 1e-12)) if not closed.all() else np.inf
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
    has_sd = bool((rows["k"] > 0).any())
    # dense-only cell: (C1, C2) of all its rows jointly (open and closed loop share them,
    # docs/model.md §1) — the only dense quantities a dense-only cell identifies
    agg = {} if has_sd else _fit_one_config(rows)
    costs = dict(
        sd=has_sd,
        C1=agg.get("c1", np.nan),
        C2=agg.get("c2", np.nan),
        dense_ok=bool(agg.get("ok", False)),
    )
    configs = fit_configurations(rows)
    ok = configs[configs.ok]
    if ok.empty:
        return dict(ok=False, **costs)
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
        return dict(ok=False, **costs)
    vals = dict(x0)
    vals.update({n: float(np.exp(v)) for n, v in zip(free, p, strict=True)})
    if not has_sd:
        vals.update(c1d=np.nan, c2d=np.nan)
    else:  # dense costs implied by the (identified) split, at the cell's mean decode
        c1, c2 = laws.effective_costs(*(vals[n] for n in CYCLE_COEFFICIENTS), g, 0.5, 0)
        costs.update(C1=float(c1), C2=float(c2), dense_ok=True)
    pred = predict_cycle({k: np.nan_to_num(v) for k, v in vals.items()}, rows)
    return dict(
        **vals,
        r2=r_squared(lat, pred),
        r2_log=r_squared(np.log(lat), np.log(pred)),
        n=len(rows),
        ok=True,
        **costs,
    )


def fit_cycle_coefficients(sweeps: pd.DataFrame) -> pd.DataFrame:
    r"""Six cycle coefficients per (verifier, drafter, hardware, cell), jointly over (alpha, k).

    Dense rows (``k = 0``) of the same verifier, hardware and cell are fitted together with
    every drafter's SD rows (they pin :math:`c_p, c_v`). A cell without SD rows (drafter
    ``"none"``) still gets its six-coefficient fit, but there only the aggregates
    :math:`C_1 = c_{1p} + g\,c_{1v}`, :math:`C_2 = c_{2p} + g\,c_{2v}` are identified: they are
    fitted directly (all the cell's dense rows, open and closed loop, in one
    :math:`(C_1, C_2)` fit) into ``C1, C2``.

    Returns
    -------
    pandas.DataFrame
        One row per (verifier, drafter, hardware, cell): ``prefill, decode``, the six
        coefficients, ``r2, r2_log, n, ok`` (of the six-coefficient fit), ``sd`` (the cell
        has SD rows), ``C1, C2`` (dense costs at the cell's decode: fitted directly in a
        dense-only cell, implied by the six coefficients otherwise) and ``dense_ok``.
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


def _dense_design(frame: pd.DataFrame) -> np.ndarray:
    """Columns of :data:`DENSE_TERMS`: :math:`1, p, g, g (p + g/2)`."""
    g = frame["decode"].to_numpy(float)
    return np.column_stack(
        [np.ones(len(frame)), frame["prefill"].to_numpy(float), g, g * _covariate(frame, "kv")]
    )


def _dense_terms(x: np.ndarray) -> list[int]:
    """Columns of ``x`` admitted in order while each raises the rank and cells remain.

    The intercept always; then prefill, decode and decode × KV size while the next one is
    linearly independent of those admitted (columns scaled to unit maximum first) and there
    are at least as many cells as terms.
    """
    scaled = x / np.maximum(np.abs(x).max(axis=0), 1e-300)
    keep = [0]
    for j in range(1, x.shape[1]):
        trial = [*keep, j]
        if len(trial) <= x.shape[0] and np.linalg.matrix_rank(scaled[:, trial]) == len(trial):
            keep = trial
    return keep


def fit_dense_trend(cells: pd.DataFrame, *, relative: bool = True) -> dict[str, dict]:
    r"""Least-squares trend of the dense costs across cells (dense-only data).

    .. math::  C_j(p, g) = a_j + b_j\,p + c_j\,g + d_j\,g\,(p + g/2), \qquad j = 1, 2

    is :math:`c_{jp} + g\,c_{jv}` with :math:`c_{jp} = a_j + b_j p` and
    :math:`c_{jv} = c_j + d_j (p + g/2)` (the trend forms of :data:`TREND_COVARIATE`) — linear
    in :math:`(a_j, b_j, c_j, d_j)`, solved by ``numpy.linalg.lstsq`` on column-scaled
    terms. No sign constraint: the terms may come out negative (positivity is not required
    of a trend, only of its predictions inside the data).

    Parameters
    ----------
    cells : pandas.DataFrame
        One row per cell (or configuration): ``prefill, decode, C1, C2``.
    relative : bool, default True
        Weight each cell by :math:`1/C_j`, i.e. minimise relative errors (as the log-scale
        curve fits do); ``False`` is ordinary least squares on seconds.

    Returns
    -------
    dict
        ``{"C1": {...}, "C2": {...}}``, each with the four :data:`DENSE_TERMS` (0 for a term
        that was not identified) and ``n_cells``.
    """
    x = _dense_design(cells)
    keep = _dense_terms(x)
    scale = np.maximum(np.abs(x[:, keep]).max(axis=0), 1e-300)
    out = {}
    for name in ("C1", "C2"):
        y = cells[name].to_numpy(float)
        w = 1.0 / y if relative else np.ones_like(y)
        beta, *_ = np.linalg.lstsq(x[:, keep] / scale * w[:, None], y * w, rcond=None)
        coefs = np.zeros(len(DENSE_TERMS))
        coefs[keep] = beta / scale
        out[name] = dict(zip(DENSE_TERMS, coefs.tolist(), strict=True), n_cells=len(cells))
    return out


def fit_trends(cell_coefs: pd.DataFrame, *, relative: bool = True) -> pd.DataFrame:
    """Trends across cells, per (verifier, drafter, hardware) — the form chosen by the data.

    * A group with SD rows (``form = "cycle"``): each cycle coefficient's linear trend
      :math:`c = a + b\\,z` with :math:`z` from :data:`TREND_COVARIATE` (ordinary least
      squares; a constant where the covariate is ``None`` or has a single value).
    * A group whose cells are all dense-only (``form = "dense"``; column ``sd`` false in
      every cell): :func:`fit_dense_trend` of the cells' ``C1, C2`` — the split trends would
      be fitted to unidentified coefficients.

    Parameters
    ----------
    cell_coefs : pandas.DataFrame
        :func:`fit_cycle_coefficients` output (a table without ``sd`` is all ``"cycle"``).
    relative : bool, default True
        Passed to :func:`fit_dense_trend` (relative-error weighting of the dense form).

    Returns
    -------
    pandas.DataFrame
        Columns ``verifier, drafter, hardware, form, coef, intercept, slope, n_cells`` and,
        for ``form = "dense"`` rows (``coef`` ``C1`` or ``C2``; ``slope`` empty),
        ``slope_prefill, slope_decode, slope_decode_kv``.
    """
    out = []
    frame = cell_coefs.copy()
    if "sd" not in frame:
        frame["sd"] = True
    if "dense_ok" not in frame:
        frame["dense_ok"] = False
    keys = ["verifier", "drafter", "hardware"]
    for (v, dr, h), group in frame.groupby(keys, sort=True):
        label = dict(verifier=v, drafter=dr, hardware=h)
        if not group["sd"].astype(bool).any():
            cells = group[group.dense_ok.astype(bool)]
            cells = cells[np.isfinite(cells[["C1", "C2"]].to_numpy(float)).all(axis=1)]
            if cells.empty:
                continue
            for name, terms in fit_dense_trend(cells, relative=relative).items():
                out.append(dict(**label, form="dense", coef=name, slope=np.nan, **terms))
            continue
        cells = group[group.ok.astype(bool)]
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
                dict(**label, form="cycle", coef=name, intercept=a, slope=b, n_cells=int(y.size))
            )
    columns = [*keys, "form", "coef", "intercept", "slope", "n_cells", *DENSE_TERMS[1:]]
    return pd.DataFrame(out).reindex(columns=columns) if out else pd.DataFrame(columns=columns)


def _predict_dense(table: pd.DataFrame, key: tuple, sub: pd.DataFrame) -> np.ndarray:
    """Latency of dense rows ``sub`` from the dense-form trend ``key`` = (v, drafter, h)."""
    x = _dense_design(sub)
    costs = []
    for name in ("C1", "C2"):
        beta = table.loc[(*key, name), list(DENSE_TERMS)].to_numpy(float)
        costs.append(np.maximum(x @ beta, 1e-12))
    closed, load = _load(sub)
    pred = _row_latency(closed, load, *costs)
    return np.where(sub["k"].to_numpy() == 0, pred, np.nan)  # a dense trend knows no SD


def predict_trends(trends: pd.DataFrame, rows: pd.DataFrame) -> np.ndarray:
    """Latency of ``rows`` (any cell) from the cell trends of their (verifier, drafter, hardware).

    SD rows use their drafter's ``"cycle"`` trends. Dense rows use the ``"cycle"`` trends of
    the first drafter of their verifier and hardware (the dense coefficients
    :math:`c_p, c_v` are shared by every drafter) or, where that verifier and hardware only
    had dense rows, the ``"dense"`` trend of :math:`(C_1, C_2)`. Rows whose group has no
    trend get ``NaN``. A trend extrapolated to a non-positive coefficient (or cost) is
    clipped at a tiny positive value.
    """
    rows = rows.reset_index(drop=True)
    pred = np.full(len(rows), np.nan)
    if trends.empty:
        return pred
    if "form" not in trends:
        trends = trends.assign(form="cycle")
    order = trends.assign(_dense=trends["form"] == "dense").sort_values(
        ["_dense", "drafter"], kind="stable"
    )
    first = order.groupby(["verifier", "hardware"], sort=False)["drafter"].first()
    drafter = rows["drafter"].where(rows["k"] > 0, None) if "drafter" in rows else None
    if drafter is None:
        drafter = pd.Series([None] * len(rows), index=rows.index, dtype=object)
    dense_key = pd.MultiIndex.from_frame(rows[["verifier", "hardware"]])
    drafter = drafter.fillna(pd.Series(first.reindex(dense_key).to_numpy(), index=rows.index))
    table = trends.set_index(["verifier", "drafter", "hardware", "coef"])
    forms = trends.groupby(["verifier", "drafter", "hardware"])["form"].first()
    for (v, dr, h), idx in (
        rows.assign(_d=drafter).groupby(["verifier", "_d", "hardware"], sort=False).groups.items()
    ):
        sub = rows.loc[idx]
        if forms.get((v, dr, h)) == "dense":
            pred[np.asarray(idx)] = _predict_dense(table, (v, dr, h), sub)
            continue
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
