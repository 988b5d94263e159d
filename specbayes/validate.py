r"""Validation on held-out (prefill, decode) cells — how far to trust a prediction.

:func:`leave_n_out` is the paper's Fig. 7 experiment made Bayesian: for each
(verifier, hardware) group, ``n`` of its cells are held out, the model is fitted to the rest,
and the held-out rows are predicted — by specbayes (posterior median and predictive
distribution) and by the paper's curve_fit trend baseline (:mod:`specbayes.baseline`) on
the *same* folds. Scores per fold and overall:

* ``r2_log`` / ``r2`` — R² of the point prediction on log latency and on latency. The
  specbayes point is the posterior *median* of the mean latency :math:`\mu`, not its mean:
  a row near capacity has draws past saturation (:math:`\lambda` at or above
  :func:`specbayes.laws.saturation_rps`, :math:`\mu = \infty`), which make the mean
  infinite while the median stays the typical prediction. Rows whose point prediction is
  saturated (median draw past capacity; for the baseline, its trend's C2) cannot enter an
  R²: they are counted in ``saturated_rows`` and the R² is over the rest (``scored_rows``);
* ``elpd`` — expected log predictive density of the held-out rows,
  :math:`\sum_i \log \frac1S \sum_s p(y_i \mid \theta_s)` (specbayes only);
* ``cov50`` / ``cov90`` — share of held-out rows inside the central 50 % / 90 %
  predictive intervals (calibrated: close to 0.5 / 0.9; too wide is as wrong as too narrow);
* PIT values :math:`P(\tilde y \le y)` (uniform when calibrated).

With ``metrics=`` (:mod:`specbayes.model.metrics`: TTFT, ITL, latency percentiles per
point), every fold's fit models them too and each held-out row is scored per metric
(:func:`metric_predictions`, :func:`metric_scores`): coverage of the 50 % / 90 % predictive
intervals of a measurement and the relative error of the posterior median of the expected
statistic. A row without a metric (missing, not positive) is skipped for that metric only.

Folds that cannot be formed (a group with ≤ n cells, a fold without rows) are skipped with a
stated reason in ``skipped``, never a crash. Folds are independent tasks: serially, or on Dask
— a local cluster or any cluster by address (:mod:`specbayes.parallel`) — with the same
scores either way (every fold's fit draws from the same sampler seed).
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy.special import logsumexp

from specbayes import baseline
from specbayes.data import SweepTable, validate_sweeps
from specbayes.parallel import map_tasks

__all__ = [
    "Fold",
    "LeaveNOut",
    "heldout_scores",
    "leave_n_out",
    "make_folds",
    "metric_predictions",
    "metric_scores",
    "point_prediction",
]

GROUP = ["verifier", "hardware"]


@dataclass(frozen=True)
class Fold:
    """Held-out cells per (verifier, hardware) group for one fold."""

    n: int
    repeat: int
    held_out: tuple[tuple[str, str, tuple[str, ...]], ...]

    @property
    def label(self) -> str:
        return f"n={self.n}#{self.repeat}"

    def mask(self, data: pd.DataFrame) -> np.ndarray:
        """Rows of ``data`` that this fold holds out."""
        held = np.zeros(len(data), dtype=bool)
        for v, h, cells in self.held_out:
            held |= ((data.verifier == v) & (data.hardware == h) & data.cell.isin(cells)).to_numpy()
        return held


def make_folds(
    data: pd.DataFrame, n: int, repeats: int, seed: int = 0
) -> tuple[list[Fold], pd.DataFrame]:
    """Folds holding out ``n`` cells of every (verifier, hardware) group.

    Each fold draws, independently per group, one ``n``-subset of that group's cells; when
    a group has no more subsets than ``repeats``, the folds walk through all of them.
    Groups with ``<= n`` cells cannot keep a cell to learn from and are skipped.

    Returns
    -------
    folds : list of Fold
    skipped : pandas.DataFrame
        ``verifier, hardware, n, reason`` for every group left out.
    """
    rng = np.random.default_rng(seed)
    groups = {g: sorted(cells.unique()) for g, cells in data.groupby(GROUP)["cell"]}
    skipped, choices = [], {}
    for g, cells in groups.items():
        if len(cells) <= n:
            skipped.append(
                dict(
                    verifier=g[0],
                    hardware=g[1],
                    n=n,
                    reason=f"only {len(cells)} cell(s): cannot hold out {n} and keep one to fit",
                )
            )
            continue
        subsets = list(itertools.combinations(cells, n))
        if len(subsets) <= repeats:
            choices[g] = subsets
        else:
            pick = rng.choice(len(subsets), size=repeats, replace=False)
            choices[g] = [subsets[i] for i in pick]
    folds = []
    if choices:
        n_folds = max(len(c) for c in choices.values())
        for r in range(min(repeats, n_folds)):
            held = tuple((g[0], g[1], tuple(c[r % len(c)])) for g, c in sorted(choices.items()))
            folds.append(Fold(n=n, repeat=r, held_out=held))
    return folds, pd.DataFrame(skipped, columns=["verifier", "hardware", "n", "reason"])


def point_prediction(mu_draws: np.ndarray) -> np.ndarray:
    r"""Point prediction of each row: the posterior median of ``mu`` over draws.

    ``mu_draws`` of shape (sample, row) — or (row,), a point prediction already (the
    baseline's), returned as is. The median, not the mean: a draw past saturation has
    :math:`\mu = \infty`, so the mean of a row near capacity is infinite as soon as one draw
    saturates; the median is infinite only when most do (the model predicts saturation).
    """
    mu = np.asarray(mu_draws, dtype=float)
    return np.median(mu, axis=0) if mu.ndim == 2 else mu


def heldout_scores(
    observed: np.ndarray,
    mu_draws: np.ndarray | None,
    predictive_draws: np.ndarray | None = None,
    log_lik: np.ndarray | None = None,
) -> dict[str, Any]:
    """Scores of predictions of held-out rows.

    Parameters
    ----------
    observed : ndarray, shape (row,)
        Held-out latencies.
    mu_draws : ndarray, shape (sample, row) or (row,)
        Posterior draws (or a point prediction) of the mean latency.
    predictive_draws : ndarray, shape (sample, row), optional
        Posterior-predictive draws (for coverage and PIT).
    log_lik : ndarray, shape (sample, row), optional
        Pointwise log density of the observations under each draw (for ELPD).

    Returns
    -------
    dict
        ``r2_log, r2, scored_rows, saturated_rows, elpd, cov50, cov90, pit`` (``NaN``/
        ``None`` when not computable). The R² are of :func:`point_prediction` over the rows
        where it is finite (``scored_rows``); ``saturated_rows`` counts the others.
    """
    y = np.asarray(observed, dtype=float)
    point = point_prediction(mu_draws)
    finite = np.isfinite(point)
    out: dict[str, Any] = dict(
        r2_log=baseline.r_squared(np.log(y[finite]), np.log(point[finite])),
        r2=baseline.r_squared(y[finite], point[finite]),
        scored_rows=int(finite.sum()),
        saturated_rows=int((~finite).sum()),
        elpd=np.nan,
        cov50=np.nan,
        cov90=np.nan,
        pit=None,
    )
    if predictive_draws is not None:
        pp = np.asarray(predictive_draws, dtype=float)
        for level, name in ((0.5, "cov50"), (0.9, "cov90")):
            lo, hi = np.quantile(pp, [(1 - level) / 2, 1 - (1 - level) / 2], axis=0)
            out[name] = float(np.mean((y >= lo) & (y <= hi)))
        out["pit"] = np.mean(pp <= y[None, :], axis=0)
    if log_lik is not None:
        ll = np.asarray(log_lik, dtype=float)
        out["elpd"] = float(np.sum(logsumexp(ll, axis=0) - math.log(ll.shape[0])))
    return out


def metric_predictions(
    test: pd.DataFrame, name: str, expected: np.ndarray, predictive: np.ndarray
) -> pd.DataFrame:
    """Held-out rows of one metric with its prediction: one row per row measuring ``name``.

    Parameters
    ----------
    test : pandas.DataFrame
        Held-out rows (their ``name`` column is the measurement; rows without it are dropped).
    name : str
        The metric column (e.g. ``"ttft_p99"``).
    expected, predictive : ndarray, shape (sample, row)
        Draws of the expected statistic and of a measurement of it, one column per row of
        ``test`` (``NextFit.metric(test, name)`` and ``predictive=True``).

    Returns
    -------
    pandas.DataFrame
        ``row`` (position in ``test``), ``metric``, ``observed``, ``predicted`` (posterior
        median of ``expected``), ``lo50, hi50, lo90, hi90`` (central predictive intervals).
    """
    y = test[name].to_numpy(float) if name in test else np.full(len(test), np.nan)
    keep = np.flatnonzero(np.isfinite(y) & (y > 0))
    ex = np.asarray(expected, dtype=float)[:, keep]
    pp = np.asarray(predictive, dtype=float)[:, keep]
    with np.errstate(invalid="ignore"):  # a row past the wall: all draws inf
        q = np.quantile(pp, [0.25, 0.75, 0.05, 0.95], axis=0) if len(keep) else np.empty((4, 0))
    return pd.DataFrame(
        {
            "row": keep,
            "metric": name,
            "observed": y[keep],
            "predicted": np.median(ex, axis=0) if len(keep) else np.empty(0),
            "lo50": q[0],
            "hi50": q[1],
            "lo90": q[2],
            "hi90": q[3],
        }
    )


def metric_scores(preds: pd.DataFrame) -> dict[str, Any]:
    r"""Scores of one metric's held-out predictions (:func:`metric_predictions`).

    Returns
    -------
    dict
        ``rows``, ``cov50``, ``cov90`` (share of rows inside the 50 % / 90 % predictive
        interval), ``rel_err`` (mean of :math:`|\hat m / y - 1|` over rows with a finite
        median) and ``median_ratio`` (median of :math:`\hat m / y`); ``NaN`` without rows.
    """
    y = preds["observed"].to_numpy(float)
    if not len(y):
        return dict(rows=0, cov50=np.nan, cov90=np.nan, rel_err=np.nan, median_ratio=np.nan)
    ratio = preds["predicted"].to_numpy(float) / y
    ratio = ratio[np.isfinite(ratio)]
    inside = {lv: (y >= preds[f"lo{lv}"]) & (y <= preds[f"hi{lv}"]) for lv in (50, 90)}
    return dict(
        rows=len(y),
        cov50=float(inside[50].mean()),
        cov90=float(inside[90].mean()),
        rel_err=float(np.mean(np.abs(ratio - 1))) if len(ratio) else np.nan,
        median_ratio=float(np.median(ratio)) if len(ratio) else np.nan,
    )


def heldout_metrics(result, test: pd.DataFrame, seed: int | None = None) -> pd.DataFrame:
    """Every fitted metric of ``result`` predicted on ``test`` (:func:`metric_predictions`,
    stacked; ``row`` indexes ``test``). Measured rows are conditioned below their wall, as
    the held-out latency is."""
    frames = []
    for name in getattr(result, "metrics", ()):
        kw = dict(measured=True, seed=seed)
        ex = result.metric(test, name, **kw).values
        pp = result.metric(test, name, predictive=True, **kw).values
        frames.append(metric_predictions(test, name, ex, pp))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _predictions(fold: Fold, method: str, test: pd.DataFrame, mu, pp=None) -> pd.DataFrame:
    """Held-out rows with their point prediction and (when available) 90 % interval."""
    mu = np.asarray(mu, dtype=float)
    out = test[["verifier", "hardware", "cell", "k", "rps", "latency"]].assign(
        fold=fold.label,
        n=fold.n,
        method=method,
        predicted=point_prediction(mu),
    )
    if pp is not None:
        lo, hi = np.quantile(np.asarray(pp, dtype=float), [0.05, 0.95], axis=0)
        out = out.assign(lo90=lo, hi90=hi)
    return out


def _run_fold(
    fold: Fold,
    *,
    data: pd.DataFrame,
    model: str,
    sampler_config: dict | None,
    methods: tuple,
    priors: dict | None = None,
    metrics: tuple[str, ...] = (),
) -> tuple[list[dict], list[pd.DataFrame], pd.DataFrame]:
    """Fit ``methods`` on ``fold``'s training rows and score its held-out rows (one task):
    scores, predictions and (with ``metrics``) the metrics' held-out predictions."""
    held = fold.mask(data)
    train, test = data[~held], data[held]
    base = dict(fold=fold.label, n=fold.n, repeat=fold.repeat, n_train=len(train), n_test=len(test))
    rows, preds, mpreds = [], [], pd.DataFrame()
    if "baseline" in methods:
        t0 = time.perf_counter()
        trends = baseline.fit_trends(baseline.fit_cycle_coefficients(train))
        pred = baseline.predict_trends(trends, test)
        scores = heldout_scores(test["latency"].to_numpy(), pred)
        preds.append(_predictions(fold, "curve_fit trends", test, pred))
        rows.append(
            {
                **base,
                "method": "curve_fit trends",
                **scores,
                "coverage_rows": int(np.isfinite(pred).sum()),
                "wall_s": time.perf_counter() - t0,
            }
        )
    if "specbayes" in methods:
        from specbayes.fit import fit

        t0 = time.perf_counter()
        result = fit(
            train, model=model, sampler_config=sampler_config, priors=priors, progress=False,
            **({"metrics": metrics} if metrics else {}),
        )  # fmt: skip
        # measured (kept, unsaturated) rows: conditioned below their configuration's wall
        mu = result.mean_latency(test, measured=True).values
        pp = result.predict(test, measured=True).values
        ll = result.log_likelihood(test, measured=True).values
        scores = heldout_scores(test["latency"].to_numpy(), mu, pp, ll)
        preds.append(_predictions(fold, f"specbayes {model}", test, mu, pp))
        if metrics:
            mpreds = _label_metrics(heldout_metrics(result, test), fold, test)
        diag = result.diagnostics()
        rows.append(
            {
                **base,
                "method": f"specbayes {model}",
                **scores,
                "coverage_rows": len(test),
                "wall_s": time.perf_counter() - t0,
                "divergences": int(diag.attrs.get("divergences", 0)),
                "max_rhat": float(diag["r_hat"].max()),
                "min_ess_bulk": float(diag["ess_bulk"].min()),
            }
        )
    return rows, preds, mpreds


def _label_metrics(mp: pd.DataFrame, fold: Fold, test: pd.DataFrame) -> pd.DataFrame:
    """Metric predictions with their fold and the held-out row's identity columns."""
    if mp.empty:
        return mp
    cols = ("verifier", "hardware", "cell", "drafter", "k", "concurrency", "rps")
    ids = test[[c for c in cols if c in test]]
    ids = ids.iloc[mp["row"].to_numpy()].reset_index(drop=True)
    return pd.concat([ids, mp.drop(columns="row")], axis=1).assign(fold=fold.label, n=fold.n)


def _metric_tables(mpreds: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per (fold, metric) and per (n, metric) scores of the metrics' held-out rows."""
    if mpreds.empty:
        return pd.DataFrame(), pd.DataFrame()
    per_fold = [
        dict(fold=f, n=n, metric=m, **metric_scores(sub))
        for (f, n, m), sub in mpreds.groupby(["fold", "n", "metric"], sort=False)
    ]
    overall = [
        dict(n=n, metric=m, folds=sub["fold"].nunique(), **metric_scores(sub))
        for (n, m), sub in mpreds.groupby(["n", "metric"], sort=False)
    ]
    return pd.DataFrame(per_fold), pd.DataFrame(overall)


@dataclass
class LeaveNOut:
    """Results of :func:`leave_n_out`.

    Attributes
    ----------
    folds : pandas.DataFrame
        One row per (fold, method) with the scores of :func:`heldout_scores`.
    overall : pandas.DataFrame
        Per (n, method): mean scores over folds, plus pooled coverage.
    pit : dict
        ``(n, method) -> array`` of pooled PIT values.
    skipped : pandas.DataFrame
        Groups and folds left out, with reasons.
    predictions : pandas.DataFrame
        Every held-out row with ``predicted`` (:func:`point_prediction`) and, for specbayes,
        ``lo90, hi90`` (predictive interval), per fold and method.
    metric_folds, metric_overall : pandas.DataFrame
        With ``metrics``: per (fold, metric) and per (n, metric) :func:`metric_scores` of
        specbayes (pooled over the folds' held-out rows); empty otherwise.
    metric_predictions : pandas.DataFrame
        Every held-out (row, metric) with :func:`metric_predictions`' columns, per fold.
    """

    folds: pd.DataFrame
    overall: pd.DataFrame
    predictions: pd.DataFrame = field(default_factory=pd.DataFrame)
    pit: dict = field(default_factory=dict)
    skipped: pd.DataFrame = field(default_factory=pd.DataFrame)
    metric_folds: pd.DataFrame = field(default_factory=pd.DataFrame)
    metric_overall: pd.DataFrame = field(default_factory=pd.DataFrame)
    metric_predictions: pd.DataFrame = field(default_factory=pd.DataFrame)


def leave_n_out(
    sweeps: pd.DataFrame | SweepTable,
    model: str = "sd",
    n: Sequence[int] | int = (1, 2, 4),
    repeats: int = 3,
    seed: int = 0,
    *,
    sampler_config: dict | None = None,
    methods: Iterable[str] = ("specbayes", "baseline"),
    n_jobs: int | None = None,
    scheduler=None,
    progress: bool = False,
    priors: dict | None = None,
    metrics: Sequence[str] | None = None,
) -> LeaveNOut:
    """Hold out ``n`` cells per (verifier, hardware), fit on the rest, score the held-out rows.

    Parameters
    ----------
    sweeps : DataFrame or SweepTable
        Sweep rows (validated here when a raw frame is given).
    model : {"dense", "sd", "moe"}
        specbayes model level.
    n : int or sequence of int
        Cells held out per group.
    repeats : int
        Folds per ``n`` (random subsets, or all subsets when fewer).
    seed : int
        Seeds fold selection.
    sampler_config : dict, optional
        Passed to :func:`specbayes.fit.fit` (e.g. fewer draws for a smoke run).
    methods : iterable of str
        ``"specbayes"`` and/or ``"baseline"`` (the paper's curve_fit trends).
    n_jobs : int, optional
        Workers. Without ``scheduler``: ``None`` or 1 runs the folds one after another in
        this process (each fit already samples its chains on every core), more starts a
        :class:`distributed.LocalCluster` of ``n_jobs`` processes for the call. With
        ``scheduler="local"`` or ``"processes"``: that many workers (default: every CPU).
    scheduler : None, str or distributed.Client
        Where the folds run: ``"serial"``, ``"local"``, ``"processes"``, a Dask scheduler's
        address or a client (:func:`specbayes.parallel.map_tasks`). The scores do not
        depend on it.
    progress : bool
        Show a progress bar over folds (tqdm, on stderr), advanced as folds complete.
    priors : dict, optional
        Prior overrides of every fold's fit (e.g. the batch curvature,
        ``{"inverse_knee": KNEE_PRIOR}``).
    metrics : sequence of str, optional
        Per-point metrics every fold's specbayes fit models too, scored
        on the held-out rows per metric (``metric_folds``, ``metric_overall``).
    """
    from specbayes.model.metrics import check_metrics

    metrics = check_metrics(metrics)
    table = sweeps if isinstance(sweeps, SweepTable) else validate_sweeps(sweeps)
    data = table.data.reset_index(drop=True)
    methods = tuple(methods)
    ns = [n] if isinstance(n, int) else list(n)
    jobs, skipped = [], []
    for nn in ns:
        folds, sk = make_folds(data, nn, repeats, seed)
        skipped.append(sk)
        for f in folds:
            if not f.mask(data).any():
                skipped.append(
                    pd.DataFrame(
                        [
                            dict(
                                verifier="*",
                                hardware="*",
                                n=nn,
                                reason=f"fold {f.label} holds out no rows",
                            )
                        ]
                    )
                )
                continue
            jobs.append(f)
    results = map_tasks(
        _run_fold,
        jobs,
        common=dict(
            data=data,
            model=model,
            sampler_config=sampler_config,
            methods=methods,
            priors=priors,
            metrics=metrics,
        ),
        scheduler=scheduler,
        workers=n_jobs,
        progress=progress,
        desc="folds",
        unit="fold",
        label=lambda f: f.label,
    )
    folds_df = pd.DataFrame([r for rs, _, _ in results for r in rs])
    preds = [p for _, ps, _ in results for p in ps]
    mframes = [m for _, _, m in results if not m.empty]
    mpreds = pd.concat(mframes, ignore_index=True) if mframes else pd.DataFrame()
    metric_folds, metric_overall = _metric_tables(mpreds)
    predictions = pd.concat(preds, ignore_index=True) if preds else pd.DataFrame()
    pit = {}
    overall = []
    if not folds_df.empty:
        for (nn, method), sub in folds_df.groupby(["n", "method"], sort=True):
            pits = [p for p in sub["pit"] if p is not None]
            if pits:
                pit[(nn, method)] = np.concatenate(pits)
            w = sub["coverage_rows"].to_numpy(float)
            overall.append(
                dict(
                    n=nn,
                    method=method,
                    folds=len(sub),
                    r2_log=sub.r2_log.mean(),
                    r2=sub.r2.mean(),
                    r2_min=sub.r2.min(),
                    saturated_rows=int(sub.saturated_rows.sum()),
                    elpd_per_row=(sub.elpd.sum() / sub.n_test.sum())
                    if sub.elpd.notna().all()
                    else np.nan,
                    cov50=np.average(sub.cov50, weights=w) if sub.cov50.notna().all() else np.nan,
                    cov90=np.average(sub.cov90, weights=w) if sub.cov90.notna().all() else np.nan,
                    wall_s=sub.wall_s.sum(),
                )
            )
        folds_df = folds_df.drop(columns=["pit"])
    skipped_df = pd.concat(skipped, ignore_index=True) if skipped else pd.DataFrame()
    return LeaveNOut(
        folds=folds_df,
        overall=pd.DataFrame(overall),
        predictions=predictions,
        pit=pit,
        skipped=skipped_df,
        metric_folds=metric_folds,
        metric_overall=metric_overall,
        metric_predictions=mpreds,
    )
