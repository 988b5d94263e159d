r"""Figures. Each takes its result first, keyword arguments after, accepts ``ax=`` and returns
the figure. Bands are the central :data:`~specbayes.intervals.INTERVAL_PROB`
interval of posterior draws of the *mean* latency model (``mu``), not predictive draws.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import matplotlib.pyplot as plt
import matplotlib.ticker as mticker
import numpy as np
import pandas as pd
from matplotlib.colors import BoundaryNorm, ListedColormap, to_rgb
from matplotlib.patches import Patch, Rectangle

from specbayes.intervals import INTERVAL_PROB

__all__ = [
    "DENSE_COLOR",
    "k_color",
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


#: Dense decoding's colour in every figure (no k colour is this dark).
DENSE_COLOR = "#222222"
#: Colours of k = 1 … 10 (larger k take the last): one ordered scale shared by every figure,
#: so a k has one colour in the speedup, capacity, cost-ratio, collapse and k-map figures.
_K_COLORS = plt.get_cmap("turbo")(np.linspace(0.08, 0.95, 10))
#: Legend text for the shaded bands of every figure.
BAND_TEXT = f"shaded: central {INTERVAL_PROB:.0%} interval of posterior draws"


_BAND = Patch(color="grey", alpha=0.3, lw=0)


def k_color(k: int):
    """The colour of draft length ``k`` in every figure; dense (``k = 0``) is :data:`DENSE_COLOR`.

    One mapping for all figures, so a colour never changes meaning between them.
    """
    k = int(k)
    if k <= 0:
        return DENSE_COLOR
    return tuple(_K_COLORS[min(k, len(_K_COLORS)) - 1])


def _k_of(label) -> int | None:
    """The draft length a curve's key names: an int, or a label like ``"k=4"``."""
    if isinstance(label, int | np.integer):
        return int(label)
    m = re.search(r"\bk\s*=\s*(\d+)", str(label))
    return int(m.group(1)) if m else (0 if "dense" in str(label) else None)


def _k_label(k: int, planned: int | None, recommended: Mapping[int, str] | None) -> str:
    """``"k=4 (planned; best at 1 req/s)"``: a curve's k and its role in the headline."""
    roles = (["planned"] if k == planned else []) + (
        [recommended[k]] if recommended and k in recommended else []
    )
    name = "dense" if k == 0 else f"k={k}"
    return f"{name} ({'; '.join(roles)})" if roles else name


def _axes(ax, figsize=(6.4, 4.4)):
    if ax is None:
        _, ax = plt.subplots(figsize=figsize, layout="constrained")
    return ax.figure, ax


def plot_collapse(points: pd.DataFrame, *, ax=None, max_x: float = 0.98, title: str | None = None):
    r"""The universal collapse: every configuration on :math:`y = 1/(1 - x)`.

    Colour is the draft length (:func:`k_color`; dense its own), marker the verifier; dense
    points and smaller groups are drawn last, so no verifier's points hide under another's.

    Parameters
    ----------
    points : pandas.DataFrame
        Columns ``x`` (utilisation :math:`1 - C_1/\mu`, which is :math:`\lambda C_2` without
        batch curvature; :func:`specbayes.report.collapse_points`), ``y`` (:math:`L/C_1`)
        and optionally ``k`` and ``verifier`` (colour and marker; else ``group`` colours),
        ``excluded`` (bool, drawn hollow) and ``past_wall`` (bool: measured rows the fitted
        law calls saturated, drawn as crosses at ``x = 1``).
    """
    fig, ax = _axes(ax)
    xs = np.linspace(0, max_x, 200)
    ax.plot(xs, 1.0 / (1.0 - xs), color="black", lw=1.5, label="$y = 1/(1-x)$", zorder=3)
    idx = points.index
    excluded = points.get("excluded", pd.Series(False, index=idx)).astype(bool)
    past = points.get("past_wall", pd.Series(False, index=idx)).astype(bool)
    by_k = "k" in points and "verifier" in points
    if by_k:
        keys = points["verifier"].astype(str) + "|" + points["k"].astype(int).astype(str)
    else:
        keys = points["group"] if "group" in points else pd.Series("data", index=idx)
    groups = keys.groupby(keys).groups
    markers = dict(
        zip(sorted(points["verifier"].unique()) if by_k else [], "osD^vP*", strict=False)
    )
    # the largest groups first, dense last: nothing small is buried under a big cloud
    order = sorted(groups, key=lambda g: (by_k and g.endswith("|0"), -len(groups[g])))
    for i, name in enumerate(order):
        sub = points.loc[groups[name]]
        if by_k:
            verifier, k = name.rsplit("|", 1)
            color, marker, label = k_color(int(k)), markers[verifier], None
        else:
            color, marker, label = f"C{i % 10}", "o", str(name)
        kept = ~excluded.loc[sub.index] & ~past.loc[sub.index]
        ax.scatter(
            sub.x[kept],
            sub.y[kept],
            s=10,
            alpha=0.7,
            color=color,
            marker=marker,
            label=label,
            zorder=4 + i / len(order),
        )
        hollow = excluded.loc[sub.index] & ~past.loc[sub.index]
        if hollow.any():
            ax.scatter(
                sub.x[hollow],
                sub.y[hollow],
                s=14,
                marker=marker,
                facecolors="none",
                edgecolors=color,
            )
    if by_k:  # legend: marker = verifier, colour = k
        for verifier, marker in markers.items():
            ax.scatter([], [], marker=marker, color="grey", s=16, label=verifier)
        for k in sorted(points["k"].astype(int).unique()):
            ax.add_patch(Rectangle((0, 1), 0, 0, color=k_color(k), label=_k_label(k, None, None)))
    if past.any():  # measured rows the fitted law calls saturated: shown, not hidden
        ax.scatter(
            np.ones(int(past.sum())),
            points["y"][past],
            marker="x",
            s=22,
            color="black",
            label=f"past the fitted law's wall ({int(past.sum())})",
            zorder=6,
        )
    ax.set_xlim(0, 1.02)
    top = np.nanquantile(points["y"], 0.995) if len(points) else 10
    ax.set_ylim(0.8, max(3.0, min(top * 1.1, 60)))
    ax.set_xlabel(
        r"utilisation $x = 1 - C_1/\mu$ ($\mu$: the fitted mean latency at that load;"
        "\n"
        r"$= \lambda\,C_2$ without batch curvature)"
    )
    ax.set_ylabel(r"normalised latency $y = L / C_1$")
    ax.set_title(title or "Latency collapse: measured points vs the law $y=1/(1-x)$", fontsize=10)
    ax.legend(fontsize=7, ncol=2, loc="upper left", markerscale=1.5)
    ax.grid(alpha=0.3)
    return fig


#: Each load axis: its column in the planner's tables, its axis label and its unit.
_LOADS = {
    "rps": ("request rate (req/s)", "req/s"),
    "concurrency": ("streams N in flight, the same N in SD and dense (closed loop)", "streams"),
}


def _load_of(table: pd.DataFrame) -> str:
    """The load column of a planner table: ``"concurrency"`` (closed loop) or ``"rps"``."""
    return "concurrency" if "concurrency" in table else "rps"


def _mark_break_even(ax, break_even, planned, *, vertical: bool, unit: str = "req/s") -> None:
    """The planned k's break-even load (median, dashed) and its interval (band), across a
    load axis on x (``vertical``) or y, in ``unit`` (req/s, or streams: N*); nothing when
    there is none."""
    if break_even is None or not np.isfinite(break_even[0]):
        return
    med, lo, hi = break_even
    color = k_color(planned) if planned else "black"
    band, line = (ax.axvspan, ax.axvline) if vertical else (ax.axhspan, ax.axhline)
    band(lo, hi, color=color, alpha=0.12, lw=0)
    # stream counts read as whole numbers (1620, not 1.62e+03)
    star, fmt = ("N* = ", "{:.0f}") if unit == "streams" else ("", "{:.3g}")
    streams = unit == "streams"
    label = f"break-even {'' if vertical or streams else 'load of '}k={planned}: {star}"
    # stream counts: the interval on a second line, so the legend fits the figure beside the
    # recommended k's labels ("best at 128 streams")
    label += f"{fmt.format(med)} {unit}{chr(10) if streams else ' '}"
    label += f"({INTERVAL_PROB:.0%}: {fmt.format(lo)}–{fmt.format(hi)})"
    line(
        med,
        color=color,
        ls="--",
        lw=1.4,
        label=label + ("" if vertical else "; dense faster above"),
    )


def _mark_measured(
    ax, measured: float | None, top: float, unit: str, start: float | None = None
) -> None:
    """Shade the loads above the highest measured one: there the curves extrapolate the law
    (from ``start``, default ``measured``: a map of cells shades whole cells)."""
    if measured is None or not np.isfinite(measured) or measured >= top:
        return
    ax.axvspan(
        measured if start is None else start,
        top,
        facecolor="none",
        edgecolor="grey",
        hatch="//",
        alpha=0.35,
        lw=0,
        label=f"beyond the highest measured {_count(measured)} {unit}: extrapolated",
    )


def _count(v: float) -> str:
    """A measured load as people write it: 128, 83.2, 22.7 (not 83.1612)."""
    return f"{v:.3g}" if v < 100 else f"{v:.0f}"


def _streams_axis(axis) -> None:
    """A log-2 axis of stream counts labelled 1, 2, 4, … (the levels sweeps are run at)."""
    axis.set_major_locator(mticker.LogLocator(base=2))
    axis.set_major_formatter(mticker.FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(mticker.NullFormatter())


def plot_speedup(
    tables: Mapping,
    *,
    ax=None,
    title: str | None = None,
    planned: int | None = None,
    recommended: Mapping[int, str] | None = None,
    break_even: tuple[float, float, float] | None = None,
    measured: float | None = None,
):
    """Speedup vs load with interval bands, one curve per draft length.

    The load is the request rate (open loop) or, for tables with a ``concurrency`` column,
    the number of streams in flight, the same in SD and dense (closed loop, on a log-2
    axis; there the speedup is also SD's throughput gain).

    Each curve is drawn only over the loads where its band is a band of latency ratios: both
    interval ends finite and fewer than 5 % of draws with either server saturated (there the
    speedup is unbounded or zero by convention, not a ratio). Where a curve ends, a dotted
    vertical line marks the load at which saturation enters the band.

    Parameters
    ----------
    tables : mapping of k (int, or a label such as ``"k=4"``) -> DataFrame
        Outputs of :func:`specbayes.plan.speedup` (columns ``rps`` or ``concurrency``,
        ``median, lo, hi``); each curve takes its k's colour (:func:`k_color`).
    planned : int, optional
        The planned arm's k: drawn thicker and labelled "planned".
    recommended : mapping k -> str, optional
        Why a k is recommended (e.g. ``{3: "best at 1 req/s"}``), added to its label.
    break_even : (median, lo, hi), optional
        The planned arm's break-even load (req/s, or N* in streams) and its interval: a
        dashed line and a band.
    measured : float, optional
        The highest measured load: the loads above it are hatched (extrapolated).
    """
    fig, ax = _axes(ax, figsize=(6.4, 5.4))
    load = _load_of(next(iter(tables.values())))
    xlabel, unit = _LOADS[load]
    marked = False
    for i, (key, t) in enumerate(tables.items()):
        k = _k_of(key)
        color = k_color(k) if k is not None else f"C{i % 10}"
        label = _k_label(k, planned, recommended) if k is not None else str(key)
        ok = np.isfinite(t["lo"]) & np.isfinite(t["hi"]) & np.isfinite(t["median"])
        for col in ("p_dense_saturated", "p_sd_saturated"):
            if col in t:
                ok = ok & (t[col] < 0.05)
        ok = np.array(ok, dtype=bool)
        ok = np.logical_and.accumulate(ok)  # up to the first load where the band breaks
        lw = 2.8 if k is not None and k == planned else 1.5
        x = t[load]
        ax.plot(x[ok], t["median"][ok], color=color, lw=lw, label=label)
        ax.fill_between(x[ok], t["lo"][ok], t["hi"][ok], color=color, alpha=0.18, lw=0)
        if not ok.all():
            stop = float(x.to_numpy()[np.argmin(ok)])
            ax.axvline(
                stop,
                color=color,
                ls=":",
                lw=1.2,
                label=None if marked else "curve ends: a server saturates in > 5 % of draws",
            )
            marked = True
    span = [f(t[load]) for t in tables.values() for f in (np.min, np.max)]
    _mark_measured(ax, measured, max(span), unit)
    _mark_break_even(ax, break_even, planned, vertical=True, unit=unit)
    # dense is the baseline (speedup 1); where the headline recommends it, the line says so
    dense = _k_label(0, planned, recommended) + ": speedup 1" if 0 in (recommended or {}) else None
    ax.axhline(1.0, color=DENSE_COLOR, lw=1, ls="--", label=dense)
    if load == "concurrency":
        ax.set_xscale("log", base=2)
        _streams_axis(ax.xaxis)
        ax.set_xlim(min(span), max(span))  # the N* band may run past the grid
    ax.set_xlabel(xlabel)
    ax.set_ylabel("speedup over dense  $L_{dense}/L_{SD}$ (> 1: SD wins)")
    what = "concurrency" if load == "concurrency" else "load"
    ax.set_title(title or f"SD speedup vs {what} (median, {INTERVAL_PROB:.0%} band)", fontsize=10)
    _legend_below(ax)
    ax.grid(alpha=0.3)
    return fig


def _legend_below(ax) -> None:
    """Two columns under the axes: the k first, then the marks explained, then the bands."""
    handles, labels = ax.get_legend_handles_labels()
    order = sorted(range(len(labels)), key=lambda n: not labels[n].startswith(("k=", "dense")))
    ax.legend(
        [handles[n] for n in order] + [_BAND],
        [labels[n] for n in order] + [BAND_TEXT],
        fontsize=7,
        ncol=2,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.13),
    )


def plot_k_map(
    ktable: pd.DataFrame,
    *,
    ax=None,
    title: str | None = None,
    planned: tuple[float, int] | None = None,
    uncertain_below: float = 0.5,
    measured: float | None = None,
):
    """The best draft length over (alpha, load): the Bayes choice, k = 0 is dense.

    The load is the request rate or, for a table with a ``concurrency`` column, the number
    of streams in flight, the same for every k (closed loop; a log-2 axis, one cell per
    stream count). Cells take their k's colour (:func:`k_color`). Where the Bayes choice is
    the fastest candidate in fewer than ``uncertain_below`` of the posterior draws
    (``p_best_k<k>``) a dot marks the cell: the best k is uncertain there.

    Parameters
    ----------
    ktable : pandas.DataFrame
        Output of :func:`specbayes.plan.optimal_k` (columns ``alpha, rps`` or
        ``concurrency``, ``k_bayes`` and ``p_best_k<k>``).
    planned : (alpha, k), optional
        The planned arm: a dashed line at its alpha.
    measured : float, optional
        The highest measured load: the cells above it are hatched (extrapolated).
    """
    fig, ax = _axes(ax, figsize=(6.6, 4.8))
    load = _load_of(ktable)
    grid = ktable.pivot(index="alpha", columns=load, values="k_bayes")
    ks = ktable.attrs.get("ks", sorted(ktable["k_bayes"].unique()))
    levels = [-1, *ks]
    colors = ["#dddddd"] + [k_color(k) for k in ks]
    cmap = ListedColormap(colors)
    norm = BoundaryNorm(np.arange(len(levels) + 1) - 0.5, cmap.N)
    idx = np.vectorize(lambda v: levels.index(int(v)))(grid.to_numpy())
    rps, alphas = grid.columns.to_numpy(dtype=float), grid.index.to_numpy()
    closed = load == "concurrency"
    if closed:  # cells of equal width on the log-2 axis: edges at geometric midpoints
        edges = _log_edges(rps)
        a_edges = _lin_edges(alphas)
        mesh = ax.pcolormesh(edges, a_edges, idx, cmap=cmap, norm=norm, shading="flat")
    else:
        mesh = ax.pcolormesh(rps, alphas, idx, cmap=cmap, norm=norm, shading="nearest")
    cbar = fig.colorbar(mesh, ax=ax, ticks=np.arange(len(levels)))
    cbar.ax.set_yticklabels(["saturated"] + [("dense" if k == 0 else f"k={k}") for k in ks])
    # a number per cell on small maps, unless a row is too thin to hold one (an alpha added
    # between grid steps, e.g. the planned arm's)
    steps = np.diff(alphas)
    numbers = len(alphas) * len(rps) <= 120 and (
        len(steps) == 0 or steps.min() >= 0.5 * np.median(steps)
    )
    if numbers:
        for (i, a), (j, r) in ((p, q) for p in enumerate(alphas) for q in enumerate(rps)):
            rgb = to_rgb(colors[idx[i, j]]) if idx[i, j] else (0.9,) * 3
            dark = np.dot(rgb, (0.3, 0.6, 0.1))  # any colour spec (dense's is a name)
            ax.text(
                r,
                a,
                str(levels[idx[i, j]]) if idx[i, j] else "–",
                ha="center",
                va="center",
                fontsize=7,
                color="white" if dark < 0.5 else "black",
            )
    p_best = np.array(
        [
            row.get(f"p_best_k{int(row['k_bayes'])}", np.nan) if row["k_bayes"] >= 0 else np.nan
            for _, row in ktable.iterrows()
        ],
        dtype=float,
    )
    unsure = ktable[p_best < uncertain_below]
    dot_x = unsure[load].to_numpy(dtype=float)
    if closed and numbers:  # beside the cell's number, not on it
        right = edges[1:][np.searchsorted(rps, dot_x)]
        dot_x = dot_x * (right / dot_x) ** 0.6
    ax.scatter(
        dot_x,
        unsure.alpha,
        s=10,
        color="white",
        edgecolors="black",
        lw=0.5,
        label=f"best k uncertain, P(it is fastest) < {uncertain_below:g}: {len(unsure)} cells",
    )
    if planned is not None:
        a, k = planned
        ax.axhline(a, color="black", ls="--", lw=1.2, label=f"planned arm: alpha={a:g}, k={k}")
    xlabel, unit = _LOADS[load]
    if closed:
        ax.set_xscale("log", base=2)
        _streams_axis(ax.xaxis)
        ax.set_xlim(edges[0], edges[-1])
        above = rps[rps > measured] if measured is not None else []
        if len(above):  # whole cells: from the edge below the first unmeasured stream count
            start = edges[int(np.flatnonzero(rps > measured)[0])]
            _mark_measured(ax, measured, edges[-1], unit, start=start)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(r"acceptance rate $\alpha$")
    ax.set_title(title or "Best draft length k (lowest expected latency)", fontsize=10)
    # closed loop: one column, as the hatch's label is long
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=1 if closed else 2)
    return fig


def _log_edges(x: np.ndarray) -> np.ndarray:
    """Cell edges of increasing positive centres ``x`` on a log axis: geometric midpoints,
    the outer edges half a step beyond (one cell: a factor 2 wide)."""
    lx = np.log2(x)
    if len(lx) == 1:
        return 2.0 ** np.array([lx[0] - 0.5, lx[0] + 0.5])
    mid = (lx[1:] + lx[:-1]) / 2
    return 2.0 ** np.concatenate([[lx[0] - (mid[0] - lx[0])], mid, [lx[-1] + (lx[-1] - mid[-1])]])


def _lin_edges(y: np.ndarray) -> np.ndarray:
    """Cell edges of increasing centres ``y``: midpoints, the outer edges half a step out."""
    if len(y) == 1:
        return np.array([y[0] - 0.025, y[0] + 0.025])
    mid = (y[1:] + y[:-1]) / 2
    return np.concatenate([[y[0] - (mid[0] - y[0])], mid, [y[-1] + (y[-1] - mid[-1])]])


def plot_cost_ratios(
    ratios: pd.DataFrame,
    *,
    ax=None,
    title: str | None = None,
    planned: int | None = None,
    recommended: Mapping[int, str] | None = None,
):
    """C1R and C2R vs draft length with intervals; C2R > 1 is the red flag.

    The ratios are drawn in black and grey (colour means k in every figure); the planned
    and recommended k are vertical lines in their k's colour (:func:`k_color`).

    Parameters
    ----------
    ratios : pandas.DataFrame
        Output of :func:`specbayes.plan.cost_ratios`.
    """
    fig, ax = _axes(ax)
    for name, color, marker, label in (
        ("c1r", "black", "o", "$C_{1R}$ (zero-load cost)"),
        ("c2r", "dimgrey", "s", "$C_{2R}$ (per-request load cost)"),
    ):
        mean = ratios[f"{name}_mean"]
        err = np.vstack([mean - ratios[f"{name}_lo"], ratios[f"{name}_hi"] - mean])
        ax.errorbar(
            ratios.k,
            mean,
            yerr=err,
            color=color,
            marker=marker,
            capsize=3,
            label=f"{label}, {INTERVAL_PROB:.0%} interval",
        )
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
    for k in sorted({*([planned] if planned else []), *(recommended or {})}):
        if k > 0:
            ax.axvline(
                k,
                color=k_color(k),
                lw=2.4 if k == planned else 1.4,
                ls="-" if k == planned else ":",
                label=_k_label(k, planned, recommended),
            )
    ax.set_xlabel("draft length k")
    ax.set_ylabel("ratio to dense")
    ax.set_title(title or f"Cost ratios vs k ({INTERVAL_PROB:.0%} intervals)", fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return fig


def plot_capacity(
    curves: pd.DataFrame,
    *,
    ax=None,
    title: str | None = None,
    planned: int | None = None,
    recommended: Mapping[int, str] | None = None,
    break_even: tuple[float, float, float] | None = None,
    slo: float | None = None,
):
    """Capacity (the most load meeting the SLO with the stated probability) vs latency SLO.

    The load is the request rate (``capacity_rps``) or, closed loop, the number of streams
    in flight (``capacity_streams``).

    Parameters
    ----------
    curves : pandas.DataFrame
        Columns ``slo, k, capacity_rps`` or ``capacity_streams`` (stacked outputs of
        :func:`specbayes.plan.capacity` over several SLOs); optionally ``lo, hi`` (a band
        per k, e.g. the central interval of the load meeting the SLO) and ``extrapolated``;
        ``attrs["prob"]`` the probability.
    planned, recommended
        As in :func:`plot_speedup`: the planned k drawn thicker, roles in the labels.
    break_even : (median, lo, hi), optional
        The planned arm's break-even load: a horizontal line and band — above it, that k is
        slower than dense.
    slo : float, optional
        The headline's SLO: a vertical line.
    """
    fig, ax = _axes(ax, figsize=(6.4, 5.4))
    unit = "streams" if "capacity_streams" in curves else "rps"
    col = f"capacity_{unit}"
    for k, sub in curves.groupby("k"):
        color = k_color(k)
        ax.plot(
            sub.slo,
            sub[col],
            marker=".",
            color=color,
            lw=2.8 if k == planned else 1.5,
            label=_k_label(k, planned, recommended),
        )
        if "lo" in sub:
            ax.fill_between(sub.slo, sub["lo"], sub["hi"], color=color, alpha=0.12, lw=0)
        if "extrapolated" in sub:
            ext = sub[sub.extrapolated.astype(bool)]
            ax.scatter(ext.slo, ext[col], s=40, facecolors="white", edgecolors=color, zorder=3)
    if "extrapolated" in curves and curves.extrapolated.astype(bool).any():
        above = "concurrency" if unit == "streams" else "load"
        ax.scatter(
            [],
            [],
            s=40,
            facecolors="white",
            edgecolors="grey",
            label=f"open: above the highest measured {above} (extrapolated)",
        )
    top = np.nanmax(curves["hi"] if "lo" in curves else curves[col])
    _mark_break_even(ax, break_even, planned, vertical=False, unit=unit.replace("rps", "req/s"))
    if slo is not None:
        ax.axvline(slo, color="grey", ls=":", lw=1.2, label=f"headline SLO {slo:.3g} s")
    prob = curves.attrs.get("prob", 0.9)
    ax.set_xlabel("mean-latency SLO (s)")
    if unit == "streams":
        ax.set_ylim(0, 1.08 * top)  # not stretched by a wide N* band
        ax.set_ylabel(f"most streams N (closed loop) meeting it with P ≥ {prob:g}")
    else:
        ax.set_ylabel(f"capacity (req/s) met with P ≥ {prob:g}")
    ax.set_title(title or "Capacity under a latency SLO", fontsize=10)
    if "lo" in curves:
        _legend_below(ax)
    else:
        ax.legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.13))
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
