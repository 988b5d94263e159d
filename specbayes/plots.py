r"""Figures. Each takes its result first, keyword arguments after, accepts ``ax=`` and returns
the figure. Bands are the central :data:`~specbayes.intervals.INTERVAL_PROB`
interval of posterior draws of the *mean* latency model (``mu``), not predictive draws.
"""

from __future__ import annotations

from collections.abc import Mapping

import matplotlib.pyplot as plt
import matplotlib.ticker as mticker
import numpy as np
import pandas as pd
from matplotlib.colors import BoundaryNorm, ListedColormap

from specbayes.intervals import INTERVAL_PROB

__all__ = [
    "plot_capacity",
    "plot_collapse",
    "plot_cost_ratios",
    "plot_coverage",
    "plot_heldout",
    "plot_k_map",
    "plot_pareto_k",
    "plot_pit",
    "plot_speedup",
]


def _axes(ax, figsize=(6.4, 4.4)):
    if ax is None:
        _, ax = plt.subplots(figsize=figsize, layout="constrained")
    return ax.figure, ax


def plot_collapse(points: pd.DataFrame, *, ax=None, max_x: float = 0.98):
    r"""The universal collapse: every configuration on :math:`y = 1/(1 - x)`.

    Parameters
    ----------
    points : pandas.DataFrame
        Columns ``x`` (utilisation :math:`1 - C_1/\mu`, which is :math:`\lambda C_2` without
        batch curvature; :func:`specbayes.report.collapse_points`), ``y`` (:math:`L/C_1`)
        and optionally ``group`` (colour), ``excluded`` (bool, drawn hollow) and ``past_wall``
        (bool: measured rows the fitted law calls saturated, drawn as crosses at ``x = 1``).
    """
    fig, ax = _axes(ax)
    xs = np.linspace(0, max_x, 200)
    ax.plot(xs, 1.0 / (1.0 - xs), color="black", lw=1.5, label="$y = 1/(1-x)$", zorder=3)
    groups = points["group"] if "group" in points else pd.Series("data", index=points.index)
    excluded = points.get("excluded", pd.Series(False, index=points.index)).astype(bool)
    past_wall = points.get("past_wall", pd.Series(False, index=points.index)).astype(bool)
    for i, (name, idx) in enumerate(groups.groupby(groups).groups.items()):
        sub = points.loc[idx]
        kept = ~excluded.loc[idx] & ~past_wall.loc[idx]
        color = f"C{i % 10}"
        ax.scatter(sub.x[kept], sub.y[kept], s=9, alpha=0.6, color=color, label=str(name))
        hollow = excluded.loc[idx] & ~past_wall.loc[idx]
        if hollow.any():
            ax.scatter(sub.x[hollow], sub.y[hollow], s=14, facecolors="none", edgecolors=color)
    past = points.get("past_wall", pd.Series(False, index=points.index)).astype(bool)
    if past.any():  # measured rows the fitted law calls saturated: shown, not hidden
        ax.scatter(
            np.ones(int(past.sum())),
            points["y"][past],
            marker="x",
            s=22,
            color="black",
            label=f"past the fitted law's wall ({int(past.sum())})",
            zorder=4,
        )
    ax.set_xlim(0, 1.02)
    top = np.nanquantile(points["y"], 0.995) if len(points) else 10
    ax.set_ylim(0.8, max(3.0, min(top * 1.1, 60)))
    ax.set_xlabel(r"utilisation $x = 1 - C_1/\mu$ (= $\lambda\,C_2$ without curvature)")
    ax.set_ylabel(r"normalised latency $y = L / C_1$")
    ax.set_title("Latency collapse: measured points vs the law $y=1/(1-x)$")
    ax.legend(fontsize=7, ncol=2, loc="upper left", markerscale=1.5)
    ax.grid(alpha=0.3)
    return fig


def plot_speedup(tables: Mapping[str, pd.DataFrame], *, ax=None, title: str | None = None):
    """Speedup vs request rate with interval bands, one curve per configuration.

    Each curve is drawn only over the loads where its band is a band of latency ratios: both
    interval ends finite and fewer than 5 % of draws with either server saturated (there the
    speedup is unbounded or zero by convention, not a ratio). Where a curve ends, a dotted
    vertical line marks the load at which saturation enters the band.

    Parameters
    ----------
    tables : mapping of label -> DataFrame
        Outputs of :func:`specbayes.plan.speedup` (columns ``rps, median, lo, hi``).
    """
    fig, ax = _axes(ax)
    marked = False
    for i, (label, t) in enumerate(tables.items()):
        color = f"C{i % 10}"
        ok = np.isfinite(t["lo"]) & np.isfinite(t["hi"]) & np.isfinite(t["median"])
        for col in ("p_dense_saturated", "p_sd_saturated"):
            if col in t:
                ok = ok & (t[col] < 0.05)
        ok = np.array(ok, dtype=bool)
        ok = np.logical_and.accumulate(ok)  # up to the first load where the band breaks
        ax.plot(t.rps[ok], t["median"][ok], color=color, label=label)
        ax.fill_between(t.rps[ok], t["lo"][ok], t["hi"][ok], color=color, alpha=0.18, lw=0)
        if not ok.all():
            stop = float(t.rps.to_numpy()[np.argmin(ok)])
            ax.axvline(
                stop,
                color=color,
                ls=":",
                lw=1.2,
                label=None if marked else "a server saturates in > 5 % of draws",
            )
            marked = True
    ax.axhline(1.0, color="black", lw=1, ls="--")
    ax.set_xlabel("request rate (req/s)")
    ax.set_ylabel("speedup over dense  $L_{dense}/L_{SD}$")
    ax.set_title(title or f"SD speedup vs load (median, {INTERVAL_PROB:.0%} band)")
    handles, labels = ax.get_legend_handles_labels()
    order = sorted(range(len(labels)), key=lambda n: labels[n].startswith("a server"))
    ax.legend([handles[n] for n in order], [labels[n] for n in order], fontsize=8)  # k first
    ax.grid(alpha=0.3)
    return fig


def plot_k_map(ktable: pd.DataFrame, *, ax=None, title: str | None = None):
    """The best draft length over (alpha, request rate): the Bayes choice, k = 0 is dense.

    Parameters
    ----------
    ktable : pandas.DataFrame
        Output of :func:`specbayes.plan.optimal_k` (columns ``alpha, rps, k_bayes``).
    """
    fig, ax = _axes(ax)
    grid = ktable.pivot(index="alpha", columns="rps", values="k_bayes")
    ks = ktable.attrs.get("ks", sorted(ktable["k_bayes"].unique()))
    levels = [-1, *ks]
    sd_ks = [k for k in ks if k != 0]
    sd_colors = iter(plt.cm.viridis(np.linspace(0.0, 1.0, max(len(sd_ks), 1))))
    colors = ["#dddddd"] + ["#e76f51" if k == 0 else next(sd_colors) for k in ks]
    cmap = ListedColormap(colors)
    norm = BoundaryNorm(np.arange(len(levels) + 1) - 0.5, cmap.N)
    idx = np.vectorize(lambda v: levels.index(int(v)))(grid.to_numpy())
    rps, alphas = grid.columns.to_numpy(), grid.index.to_numpy()
    mesh = ax.pcolormesh(rps, alphas, idx, cmap=cmap, norm=norm, shading="nearest")
    cbar = fig.colorbar(mesh, ax=ax, ticks=np.arange(len(levels)))
    cbar.ax.set_yticklabels(["saturated"] + [("dense" if k == 0 else f"k={k}") for k in ks])
    for (i, a), (j, r) in ((p, q) for p in enumerate(alphas) for q in enumerate(rps)):
        if len(alphas) * len(rps) <= 120:
            ax.text(
                r,
                a,
                str(levels[idx[i, j]]) if idx[i, j] else "–",
                ha="center",
                va="center",
                fontsize=7,
                color="white",
            )
    ax.set_xlabel("request rate (req/s)")
    ax.set_ylabel(r"acceptance rate $\alpha$")
    ax.set_title(title or "Best draft length k (lowest expected latency)")
    return fig


def plot_cost_ratios(ratios: pd.DataFrame, *, ax=None, title: str | None = None):
    """C1R and C2R vs draft length with intervals; C2R > 1 is the red flag.

    Parameters
    ----------
    ratios : pandas.DataFrame
        Output of :func:`specbayes.plan.cost_ratios`.
    """
    fig, ax = _axes(ax)
    for name, color, label in (
        ("c1r", "C0", "$C_{1R}$ (zero-load cost)"),
        ("c2r", "C3", "$C_{2R}$ (per-request load cost)"),
    ):
        mean = ratios[f"{name}_mean"]
        err = np.vstack([mean - ratios[f"{name}_lo"], ratios[f"{name}_hi"] - mean])
        ax.errorbar(ratios.k, mean, yerr=err, color=color, marker="o", capsize=3, label=label)
    ax.axhline(1.0, color="black", lw=1, ls="--")
    flagged = ratios[ratios.red_flag]
    if len(flagged):
        ax.scatter(
            flagged.k,
            flagged.c2r_mean,
            s=120,
            facecolors="none",
            edgecolors="red",
            label="red flag: P($C_{2R}$>1) ≥ 0.9",
        )
    ax.set_xlabel("draft length k")
    ax.set_ylabel("ratio to dense")
    ax.set_title(title or f"Cost ratios vs k ({INTERVAL_PROB:.0%} intervals)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return fig


def plot_capacity(curves: pd.DataFrame, *, ax=None, title: str | None = None):
    """Capacity (req/s meeting the SLO with the stated probability) vs latency SLO.

    Parameters
    ----------
    curves : pandas.DataFrame
        Columns ``slo, k, capacity_rps`` (stacked outputs of
        :func:`specbayes.plan.capacity` over several SLOs); ``attrs["prob"]`` the probability.
    """
    fig, ax = _axes(ax)
    for i, (k, sub) in enumerate(curves.groupby("k")):
        label = "dense" if k == 0 else f"k={k}"
        ax.plot(sub.slo, sub.capacity_rps, marker=".", color=f"C{i % 10}", label=label)
        if "extrapolated" in sub:
            ext = sub[sub.extrapolated.astype(bool)]
            ax.scatter(
                ext.slo,
                ext.capacity_rps,
                s=40,
                facecolors="white",
                edgecolors=f"C{i % 10}",
                zorder=3,
            )
    if "extrapolated" in curves and curves.extrapolated.astype(bool).any():
        ax.scatter(
            [], [], s=40, facecolors="white", edgecolors="grey", label="beyond measured loads"
        )
    prob = curves.attrs.get("prob", 0.9)
    ax.set_xlabel("mean-latency SLO (s)")
    ax.set_ylabel(f"capacity (req/s) met with P ≥ {prob:g}")
    ax.set_title(title or "Capacity under a latency SLO")
    ax.legend(fontsize=8, ncol=2)
    ax.grid(alpha=0.3)
    return fig


def plot_heldout(predictions: pd.DataFrame, *, ax=None, title: str | None = None):
    """Held-out latency: predicted (posterior median, 90 % predictive interval) vs observed.

    An interval open to saturation (its upper end past capacity) runs to the top of the axes;
    rows whose point prediction is saturated cannot be placed and are counted in the legend.

    Parameters
    ----------
    predictions : pandas.DataFrame
        ``LeaveNOut.predictions`` (columns ``latency, predicted, method``; ``lo90, hi90``
        where the method has a predictive distribution).
    """
    fig, ax = _axes(ax, figsize=(5.6, 5.2))
    values = predictions[["latency", "predicted"]].to_numpy(dtype=float)
    values = values[np.isfinite(values) & (values > 0)]
    lo, hi = float(values.min()), float(values.max())
    top = hi * 1.5
    for i, (method, sub) in enumerate(predictions.groupby("method", sort=True)):
        color = f"C{i % 10}"
        sub = sub.astype({"predicted": float})
        placed = sub[np.isfinite(sub.predicted)]
        if "lo90" in placed and placed["lo90"].notna().any():
            upper = np.minimum(placed.hi90.to_numpy(float), top)
            err = np.vstack([placed.predicted - placed.lo90, upper - placed.predicted]).clip(min=0)
            ax.errorbar(
                placed.latency,
                placed.predicted,
                yerr=err,
                fmt="none",
                ecolor=color,
                alpha=0.25,
                lw=0.8,
            )
        n_sat = len(sub) - len(placed)
        label = method + (f" ({n_sat} rows predicted saturated)" if n_sat else "")
        ax.scatter(placed.latency, placed.predicted, s=8, color=color, alpha=0.7, label=label)
    ax.plot([lo, hi], [lo, hi], color="black", lw=1, ls="--")
    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):  # 1-2-5 ticks in seconds; minor labels overlapped
        axis.set_major_locator(mticker.LogLocator(subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(mticker.ScalarFormatter())
        axis.set_minor_formatter(mticker.NullFormatter())
    ax.set_ylim(lo / 1.5, top)
    ax.set_xlabel("observed mean latency (s)")
    ax.set_ylabel("predicted (s)")
    ax.set_title(title or "Held-out cells: predicted vs observed")
    ax.legend(fontsize=8)
    return fig


def plot_coverage(pit: Mapping, *, ax=None):
    """Empirical coverage of central predictive intervals vs their nominal level.

    Parameters
    ----------
    pit : mapping (n, method) -> array of PIT values
        A row is inside the central q-interval when its PIT lies in [(1−q)/2, (1+q)/2].
    """
    fig, ax = _axes(ax, figsize=(5.2, 4.6))
    levels = np.linspace(0.05, 0.95, 19)
    for i, ((n, method), values) in enumerate(sorted(pit.items())):
        v = np.asarray(values)
        cov = [np.mean((v >= (1 - q) / 2) & (v <= (1 + q) / 2)) for q in levels]
        ax.plot(levels, cov, marker=".", color=f"C{i % 10}", label=f"{method}, n={n}")
    ax.plot([0, 1], [0, 1], color="black", lw=1, ls="--", label="calibrated")
    ax.set_xlabel("nominal interval probability")
    ax.set_ylabel("share of held-out rows inside")
    ax.set_title("Predictive interval coverage on held-out cells")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return fig


def plot_pit(pit: Mapping, *, ax=None, bins: int = 10):
    """Histograms of PIT values of held-out rows (flat when calibrated)."""
    fig, ax = _axes(ax)
    for i, ((n, method), values) in enumerate(sorted(pit.items())):
        ax.hist(
            values,
            bins=bins,
            range=(0, 1),
            density=True,
            histtype="step",
            lw=1.5,
            color=f"C{i % 10}",
            label=f"{method}, n={n}",
        )
    ax.axhline(1.0, color="black", lw=1, ls="--")
    ax.set_xlabel("PIT  P(predicted ≤ observed)")
    ax.set_ylabel("density")
    ax.set_title("PIT of held-out rows: U-shape = too narrow, hump = too wide")
    ax.legend(fontsize=8)
    return fig


def plot_pareto_k(pareto_k: np.ndarray, *, ax=None):
    """PSIS-LOO Pareto k of every observation (k > 0.7: LOO unreliable for that point)."""
    fig, ax = _axes(ax)
    k = np.asarray(pareto_k, dtype=float)
    ax.scatter(np.arange(k.size), k, s=6, alpha=0.6)
    for level, color in ((0.5, "orange"), (0.7, "red")):
        ax.axhline(level, color=color, lw=1, ls="--")
    ax.set_xlabel("observation")
    ax.set_ylabel("Pareto k")
    ax.set_title(f"PSIS-LOO Pareto k ({np.mean(k > 0.7):.1%} above 0.7)")
    return fig
