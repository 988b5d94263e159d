"""The report's per-point metrics (issue 45): each modelled statistic vs load, with SLO lines.

A fit made with ``metrics=`` (:mod:`specbayes.model.metrics`) predicts TTFT, ITL and
latency percentiles per load point beside the mean latency. :func:`metrics_section` draws
``metrics_vs_load.png`` — one panel per metric, the planned SD arm and its dense baseline
vs load (streams for a closed-loop fit, req/s otherwise), the posterior median of the
expected statistic with its 90 % band, a lighter 90 % predictive band (what one measurement
would show), the measured points of that workload and a horizontal line per SLO — and
returns the summary's lines: each metric at the highest measured load, and the capacity
under every SLO given.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from specbayes import plan
from specbayes.intervals import INTERVAL_PROB
from specbayes.metric_plan import arm_rows
from specbayes.model.design import configuration_key
from specbayes.slo import MEAN_LATENCY, check_slo

__all__ = [
    "METRIC_FIGURE",
    "MetricSection",
    "metric_curves",
    "metric_points",
    "metrics_section",
    "plot_metrics",
    "split_slo",
]

#: The figure's file name in the report.
METRIC_FIGURE = "metrics_vs_load.png"

_CAPTION = (
    "each per-point metric the fit models (`specbayes fit --metrics`) vs {load}, for the "
    "planned SD arm (colour of its k) and its dense baseline (black): line, the posterior "
    "median of the expected statistic; dark band, its {p} interval; light band, the {p} "
    "predictive interval of one measurement (the metric's noise included); points, the "
    "measured sweeps of this workload; red dashed line, the SLO on that metric where one "
    "is given; hatched, loads above the highest measured one (the law extrapolated)."
)


@dataclass
class MetricSection:
    """What the report adds for a fit with metrics: figure, table, caption, the summary's
    lines per metric and the capacity under all SLOs."""

    figure: Any
    curves: pd.DataFrame
    caption: str
    lines: list[str] = field(default_factory=list)
    #: the capacity under every SLO at once (a headline answer; empty without a metric SLO)
    capacity: list[str] = field(default_factory=list)


def split_slo(fit: Any, slo: float | dict | None) -> tuple[float | None, dict[str, float]]:
    """``(mean-latency SLO or None, every SLO)`` of ``--slo SECONDS | NAME=SECONDS,...``.

    Raises
    ------
    ValueError
        An SLO on a metric the fit does not model (:func:`specbayes.slo.check_slo`).
    """
    if slo is None:
        return None, {}
    slo = {MEAN_LATENCY: slo} if np.isscalar(slo) else check_slo(fit, dict(slo))
    return slo.get(MEAN_LATENCY), slo


def _arms(arm: plan.Arm) -> dict[int, plan.Arm]:
    """The planned SD arm and its dense baseline, by k."""
    return {0: replace(arm, k=0, alpha=None, drafter=None), arm.k: arm}


def _quantiles(draws: np.ndarray) -> tuple[np.ndarray, ...]:
    """(median, lo, hi) per row of (sample, row) draws (``inf`` draws kept: past the wall)."""
    tail = (1 - INTERVAL_PROB) / 2
    qs = (0.5, tail, 1 - tail)  # no interpolation: inf - inf is not a value
    return tuple(np.quantile(draws, q, axis=0, method="inverted_cdf") for q in qs)


def metric_curves(fit: Any, arm: plan.Arm, loads: np.ndarray, closed: bool) -> pd.DataFrame:
    """Per metric and arm (dense, the SD ``arm``) and load: ``median, lo, hi`` of the expected
    statistic and ``pred_lo, pred_hi`` of one measurement (seconds; ``inf`` past the wall)."""
    load = "concurrency" if closed else "rps"
    out = []
    for k, a in _arms(arm).items():
        rows = arm_rows(a, load, loads)
        for name in fit.metrics:
            med, lo, hi = _quantiles(np.asarray(fit.metric(rows, name)))
            _, plo, phi = _quantiles(np.asarray(fit.metric(rows, name, predictive=True)))
            cols = dict(median=med, lo=lo, hi=hi, pred_lo=plo, pred_hi=phi)
            out.append(pd.DataFrame(dict(metric=name, k=k, load=loads, **cols)))
    table = pd.concat(out, ignore_index=True)
    table.attrs["load"] = load
    return table


def metric_points(fit: Any, arm: plan.Arm, closed: bool) -> pd.DataFrame:
    """The fitted rows of the arm's workload (its verifier, hardware, cell) for dense and the
    arm's k (and drafter): ``k, load`` and each modelled metric's measured value (s)."""
    d = fit.data
    cell = arm.cell or f"{round(arm.prefill)}x{round(arm.decode)}"
    same = (d.verifier == arm.verifier) & (d.hardware == arm.hardware) & (d.cell == cell)
    sd = d.k == arm.k
    if arm.drafter is not None and "drafter" in d:
        sd &= d.drafter == arm.drafter
    rows = d[same & ((d.k == 0) | _nearest_sweep(d[same & sd], arm.alpha))]
    cols = [m for m in fit.metrics if m in rows]
    load = rows["concurrency" if closed else "rps"].to_numpy(dtype=float)
    return rows[["k", *cols]].assign(load=load).reset_index(drop=True)


def _nearest_sweep(sd: pd.DataFrame, alpha: float | None) -> pd.Series:
    """Mask of the SD rows of the sweep whose alpha is nearest ``alpha`` (all when unknown)."""
    if alpha is None or "alpha" not in sd or sd.empty or sd["alpha"].isna().all():
        return pd.Series(True, index=sd.index)
    # one configuration whatever its loop mode: a GuideLLM sweep's synchronous point
    # (closed loop, N = 1) belongs with its open-loop rates
    key = configuration_key(sd) if "sweep" in sd else sd["alpha"]
    gap = (sd["alpha"].groupby(key).transform("mean") - alpha).abs()
    return gap <= gap.min() + 1e-9  # means of equal alphas differ in the last bit


def load_grid(fit: Any, arm: plan.Arm, closed: bool, top_rps: float) -> np.ndarray:
    """40 loads: stream counts from 1 to twice the highest measured (closed loop), or request
    rates from 0 to ``top_rps`` (the report's speedup grid)."""
    if closed:
        top = plan.measured_streams(fit, arm)
        return np.geomspace(1.0, 2.0 * (top if np.isfinite(top) else 32.0), 40)
    return np.linspace(0.0, top_rps, 40)


def metrics_section(
    fit: Any, arm: plan.Arm, out: Path, *, slo: dict, prob: float, closed: bool, top_rps: float
) -> MetricSection | None:
    """The figure, ``metrics.csv`` and summary lines (None when the fit models no metric)."""
    if not tuple(getattr(fit, "metrics", ())):
        return None
    curves = metric_curves(fit, arm, load_grid(fit, arm, closed, top_rps), closed)
    points = metric_points(fit, arm, closed)
    curves.to_csv(out / "metrics.csv", index=False)
    measured = plan.measured_streams(fit, arm) if closed else _measured_rps(fit, arm)
    title = f"Modelled metrics vs {'concurrency' if closed else 'load'}: {arm.label()} and dense"
    cell = arm.cell or f"{round(arm.prefill)}x{round(arm.decode)}"
    title += f"\n{arm.verifier} + {arm.drafter} on {arm.hardware}, workload {cell}"
    fig = plot_metrics(curves, points, slo=slo, k=arm.k, measured=measured, title=title)
    lines = _value_lines(curves, points, arm, closed)
    load = "stream count N (closed loop, log-2 axis)" if closed else "request rate"
    caption = _CAPTION.format(load=load, p=f"{INTERVAL_PROB:.0%}")
    capacity = _capacity_lines(fit, arm, slo, prob, closed) if set(slo) - {MEAN_LATENCY} else []
    return MetricSection(fig, curves, caption, lines, capacity)


def _measured_rps(fit: Any, arm: plan.Arm) -> float:
    top = plan.measured_max_rps(fit, arm, [0, arm.k])
    return float(np.nanmax(top)) if np.isfinite(top).any() else np.nan


def _load_text(x: float, closed: bool) -> str:
    return f"N = {x:.0f} streams" if closed else f"{x:.3g} req/s"


def seconds_text(x: float) -> str:
    """A time as people read it: ``"12.3 ms"`` below a second, ``"2.41 s"`` above."""
    if not np.isfinite(x):
        return "∞ (saturated)"
    return f"{x * 1e3:.3g} ms" if x < 1 else f"{x:.3g} s"


def _value_lines(curves, points, arm, closed) -> list[str]:
    """Per metric: each arm's expected value at its highest measured load, with its band and
    the value measured there."""
    lines = []
    for name, per in curves.groupby("metric", sort=False):
        parts = [_value_at_top(t, points, name, k, closed) for k, t in per.groupby("k", sort=False)]
        parts = [p for p in parts if p]
        if parts:
            lines.append(f"{metric_title(name)} (`{name}`): " + "; ".join(parts) + ".")
    return lines


def _value_at_top(t, points, name, k, closed) -> str:
    """``"dense at N = 128 streams: 80 ms (90% 68–90 ms; measured 86 ms)"`` or ``""``."""
    p = points[(points.k == k) & np.isfinite(points["load"])]
    if not len(p):
        return ""
    top = p.loc[p["load"].idxmax()]
    x = float(top["load"])
    med, lo, hi = (float(np.interp(x, t["load"], t[c])) for c in ("median", "lo", "hi"))
    seen = f"; measured {seconds_text(float(top[name]))}" if name in p else ""
    who = "dense" if k == 0 else f"k = {k}"
    return (
        f"{who} at {_load_text(x, closed)}, its highest measured load: expected "
        f"{seconds_text(med)} ({INTERVAL_PROB:.0%} {seconds_text(lo)}–{seconds_text(hi)}{seen})"
    )


def _capacity_lines(fit, arm, slo: dict, prob: float, closed: bool) -> list[str]:
    """The capacity of dense and the arm's k under all SLOs at once (when any is given)."""
    if not slo:
        return []
    given = ", ".join(f"{n} ≤ {seconds_text(y)}" for n, y in slo.items())
    try:
        cap = plan.capacity(fit, arm, slo=slo, prob=prob, ks=[0, arm.k], closed_loop=closed)
    except ValueError as exc:
        return [f"Capacity under all SLOs ({given}): none — {exc}."]
    unit = "capacity_streams" if closed else "capacity_rps"

    def one(row) -> str:
        who = "dense" if row.k == 0 else f"k = {row.k}"
        if not row[unit] > 0:
            return f"{who} none — {row.binding} is missed even at the lightest load"
        value = f"{row[unit]:.0f} streams" if closed else f"{row[unit]:.3g} req/s"
        beyond = ", above the highest measured load: extrapolated" if row.extrapolated else ""
        return f"{who} {value} (binding: {row.binding}{beyond})"

    mean = "" if MEAN_LATENCY in slo else " (no mean-latency SLO among them)"
    return [
        f"Capacity under all these SLOs at once ({given}{mean}; P ≥ {prob:g} that every one "
        "holds): " + "; ".join(one(r) for _, r in cap.iterrows()) + "."
    ]


_NAMES = {"ttft": "TTFT", "itl": "ITL (time per output token)", "latency": "end-to-end latency"}


def metric_title(name: str) -> str:
    """``"ttft_p99"`` → ``"TTFT p99"``, ``"itl"`` → ``"ITL (time per output token) mean"``."""
    family, _, q = name.partition("_p")
    return f"{_NAMES.get(family, family)} {f'p{q}' if q else 'mean'}"


def plot_metrics(curves, points, *, slo: dict, k: int, measured=None, title=None):
    """One panel per metric: dense and SD (``k``) vs load, bands, points and SLO lines.

    Parameters
    ----------
    curves : DataFrame
        :func:`metric_curves` (its ``attrs["load"]``: ``"concurrency"`` or ``"rps"``).
    points : DataFrame
        :func:`metric_points`.
    slo : dict
        ``{metric: seconds}``; a metric with an entry gets a horizontal line.
    measured : float, optional
        The highest measured load: loads above it are hatched (extrapolated).
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    names = list(dict.fromkeys(curves["metric"]))
    ncol = min(len(names), 3)
    nrow = -(-len(names) // ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.6 * ncol, 3.9 * nrow + 0.9), squeeze=False)
    load = curves.attrs.get("load", "rps")
    for ax, name in zip(axes.flat, names, strict=False):
        t = curves[curves.metric == name]
        _panel(ax, t, points, name, slo.get(name), measured, load == "concurrency")
        ax.set_xlabel(_XLABEL[load], fontsize=8)
    for ax in axes.flat[len(names) :]:
        ax.set_visible(False)
    handles, labels = [], []
    for ax in axes.flat[: len(names)]:  # the SLO line is in some panels only
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    handles += [Patch(color="grey", alpha=0.45, lw=0), Patch(color="grey", alpha=0.12, lw=0)]
    labels += [
        f"dark band: {INTERVAL_PROB:.0%} interval of the expected statistic",
        f"light band: {INTERVAL_PROB:.0%} predictive interval (one measurement)",
    ]
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.1 if nrow == 1 else 0.06, 1, 1))
    return fig


_XLABEL = {
    "concurrency": "streams N in flight (closed loop)",
    "rps": "request rate (req/s)",
}


def _panel(ax, t, points, name, slo, measured, closed: bool) -> None:
    from specbayes.plots import _mark_measured, _streams_axis, k_color

    values = [t["median"], t["pred_lo"], t["pred_hi"], *([points[name]] if name in points else [])]
    finite = np.concatenate([np.asarray(v, dtype=float) for v in values])
    finite = finite[np.isfinite(finite) & (finite > 0)]
    typical = np.median(t["median"][np.isfinite(t["median"])]) if len(finite) else 0.0
    scale, unit = (1e3, "ms") if typical < 1 else (1.0, "s")  # the curve's typical value
    for kk, arm in t.groupby("k", sort=False):
        color = k_color(kk)
        ok = np.isfinite(arm["median"]) & np.isfinite(arm["pred_hi"])
        x = arm["load"][ok]
        label = "dense" if kk == 0 else f"SD k={kk}"
        ax.fill_between(x, arm["pred_lo"][ok] * scale, arm["pred_hi"][ok] * scale,
                        color=color, alpha=0.1, lw=0)  # fmt: skip
        ax.fill_between(x, arm["lo"][ok] * scale, arm["hi"][ok] * scale, color=color,
                        alpha=0.3, lw=0)  # fmt: skip
        ax.plot(x, arm["median"][ok] * scale, color=color, lw=1.8, label=f"{label}: median")
        if name in points:
            p = points[points.k == kk]
            ax.plot(p["load"], p[name] * scale, "o" if kk == 0 else "s", ms=4.5, mfc="white",
                    mec=color, mew=1.3, ls="none", label=f"{label}: measured")  # fmt: skip
    if slo is not None:
        ax.axhline(slo * scale, color="red", ls="--", lw=1.3, label="SLO on that metric")
        ax.annotate(
            f"SLO {seconds_text(slo)}",
            (0.97, slo * scale),
            xycoords=("axes fraction", "data"),
            color="red",
            fontsize=7,
            ha="right",
            va="bottom",
            bbox=dict(facecolor="white", edgecolor="none", alpha=0.8, pad=1),
        )
    top = float(t["load"].max())
    _mark_measured(ax, measured, top, "streams" if closed else "req/s")
    log = bool(len(finite)) and finite.max() / finite.min() > 8
    if log:
        _plain_log(ax.yaxis)
    ax.set_ylim(top=_y_top(t, points, name, slo, measured, log) * scale)
    if closed:
        ax.set_xscale("log", base=2)
        _streams_axis(ax.xaxis)
    low = float(t["load"].min())
    ax.set_xlim(low * 0.9 if closed else low, top)
    ax.set_ylabel(f"{metric_title(name)} ({unit})", fontsize=8)
    ax.set_title(metric_title(name), fontsize=9)
    ax.grid(alpha=0.3, which="both" if closed else "major")


def _plain_log(axis) -> None:
    """A log axis labelled 20, 50, 100 (not 2 × 10^1)."""
    import matplotlib.ticker as mticker

    axis.axes.set_yscale("log")
    plain = mticker.FuncFormatter(lambda v, _: f"{v:g}")
    axis.set_major_formatter(plain)
    axis.set_minor_locator(mticker.LogLocator(subs=(2.0, 5.0)))
    axis.set_minor_formatter(plain)


def _y_top(t, points, name, slo, measured, log: bool) -> float:
    """The panel's top (s): above the measured points, the SLO and the medians up to the
    highest measured load, not where the bands run to the wall."""
    upto = t["load"] <= (measured if measured is not None and np.isfinite(measured) else np.inf)
    seen = [t.loc[upto, "median"], [slo or 0.0]]
    if name in points:
        seen.append(points[name])
    values = np.concatenate([np.asarray(v, dtype=float) for v in seen])
    top = np.nanmax(np.where(np.isfinite(values), values, np.nan))
    return top * (2.0 if log else 1.25)
