"""The report: figures (PNG), tables (CSV/JSON) and a markdown summary of a fit's decisions.

``write_report(fit, out_dir)`` answers the deployment questions of Kong et al. (arXiv
2605.15051; ``docs/model.md``) — where does SD stop paying, which k, how much load fits under
an SLO — for one arm (by default a measured SD sweep, :func:`specbayes.arms.default_arm`) and
writes everything a person needs to act on them: the collapse plot (does the latency law
hold?), speedup vs load with bands for several k, the k-map over (alpha, load), C1R/C2R vs
k, capacity vs SLO, and ``summary.md`` with the headline answers. A closed-loop fit
(:func:`specbayes.plan.fitted_closed_loop`) gets its speedup and capacity figures in streams
(``speedup_vs_concurrency.png`` with N*, ``capacity_vs_slo.png`` in streams).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from specbayes import laws, plan
from specbayes.arms import alpha_point, default_arm, resolve_arm
from specbayes.artefacts import dumps, staged_dir
from specbayes.intervals import INTERVAL_PROB
from specbayes.report_tables import (  # markdown_table, excluded_table re-exported: __all__
    _excluded_section,
    _health_section,
    excluded_table,
    markdown_table,
)

__all__ = [
    "Headline",
    "collapse_points",
    "default_arm",
    "excluded_table",
    "markdown_table",
    "n_star_line",
    "resolve_arm",
    "write_report",
]


def collapse_points(fit: Any) -> pd.DataFrame:
    r"""Each fitted row normalised by its configuration's posterior-mean costs.

    With :math:`\bar\mu` the law (:func:`laws.latency`, with batch curvature or knee) at the
    posterior-mean :math:`(C_1, C_2, C_3)`, returns the utilisation
    ``x = 1 - E[C1]/mu_bar`` (:func:`laws.log_headroom`; :math:`\lambda E[C_2]` without
    curvature; 1 past the wall), ``y = L/E[C1]`` and a ``group`` label (verifier,
    dense/SD): a row the law fits exactly lies on :math:`y = 1/(1-x)`. ``past_wall`` marks
    measured rows that the law at the mean costs calls saturated (drawn at ``x = 1``).
    """
    d = fit.data.reset_index(drop=True)
    ds = fit.coefficients(d)
    coefs = [ds[name].values for name in plan.COEFFICIENTS]  # (sample, row)
    n = coefs[0].shape[0]
    alpha = np.tile(d["alpha"].fillna(0.5).to_numpy(), (n, 1))
    unknown = (d["k"] > 0) & d["alpha"].isna()
    for (v, dr, cell), idx in d[unknown].groupby(["verifier", "drafter", "cell"]).groups.items():
        alpha[:, idx] = np.asarray(fit.alpha_draws(v, dr, cell))[:, None]
    g, k = d["decode"].to_numpy(), d["k"].to_numpy()
    # the costs per speculative cycle (fixed, per sequence) where the fit has them
    cycle = {name: ds[name].values for name in plan.CYCLE_COSTS if name in ds}
    c1, c2 = laws.effective_costs(*coefs, g, alpha, k, **cycle)
    draws = {n: ds[n].values for n in ds.data_vars}
    c3 = plan.curvature(draws, g, alpha, k)
    c1m, c2m, c3m = (np.mean(np.broadcast_to(c, c1.shape), axis=0) for c in (c1, c2, c3))
    # the knee or a moe fit's expert reads, at their posterior means
    bend = plan.law_term(draws, g, alpha, k)
    bend = laws.term_keywords(
        laws.map_term(bend, lambda x: np.mean(np.broadcast_to(x, c1.shape), axis=0))
    )
    conc = d["concurrency"].to_numpy(dtype=float) if "concurrency" in d else np.full(len(d), np.nan)
    mu = np.where(  # the law at the posterior-mean costs (inf past its wall)
        np.isfinite(conc),
        laws.closed_loop_latency(np.nan_to_num(conc), c1m, c2m, c3m, **bend),
        laws.latency(np.nan_to_num(d["rps"].to_numpy(dtype=float)), c1m, c2m, c3m, **bend),
    )
    group = d["verifier"] + np.where(d["k"] > 0, " SD", " dense")
    past = ~np.isfinite(mu)  # measured, yet past the wall of the law at the mean costs
    return pd.DataFrame(
        dict(
            x=1.0 - c1m / mu,
            y=d["latency"] / c1m,
            group=group,
            verifier=d["verifier"].astype(str),
            k=d["k"].astype(int),
            past_wall=past,
        )
    )


@dataclass
class Headline:
    """The three answers the demo prints."""

    arm: plan.Arm
    break_even: pd.Series
    k_low: int
    k_high: int
    rps_low: float
    rps_high: float
    slo: float
    capacity: pd.DataFrame
    lines: list[str] = field(default_factory=list)
    #: closed-loop fits: the speedup per stream count and the break-even concurrency row
    closed_loop: pd.DataFrame | None = None
    n_star: pd.Series | None = None
    #: closed-loop fits: the stream counts ``k_low`` and ``k_high`` are best at (the
    #: lightest and heaviest measured; ``rps_low``/``rps_high`` are then NaN)
    streams_low: float | None = None
    streams_high: float | None = None


def _streams(n: float) -> str:
    """A stream count as people write it: 5.83, 332, 1620 (not 1.62e+03)."""
    return f"{n:.3g}" if n < 100 else f"{n:.0f}"


def n_star_line(table: pd.DataFrame, prob: float = INTERVAL_PROB, beyond: float = np.nan) -> str:
    """One sentence on the break-even concurrency of ``plan.break_even(..., closed_loop=True)``
    (its first row); ``beyond``: the highest measured concurrency, past which N* is an
    extrapolation."""
    row = table.iloc[0]
    if np.isfinite(row.n_star_median):
        # the direction most crossing draws take: a MoE verifier's dense arm can lose first
        gains = row.p_loses_then_wins > row.p_wins_then_loses
        verb, p = ("wins", "loses, then wins") if gains else ("loses", "wins, then loses")
        text = (
            f"SD {verb} beyond N* = {_streams(row.n_star_median)} streams ({prob:.0%} interval "
            f"{_streams(row.n_star_lo)}–{_streams(row.n_star_hi)}; P({p}) "
            f"{row[_crossing_column(gains)]:.2f})"
        )
        if row.n_star_median > beyond:  # the law trusted past the data
            text += f" — beyond the highest measured {beyond:g} streams: extrapolated"
    else:
        text = "SD and dense cross at no stream count in most draws"
    return (
        f"{text}; P(always wins) {row.p_always_wins:.2f}, P(never wins) "
        f"{row.p_never_wins:.2f}, P(loses, then wins) {row.p_loses_then_wins:.2f}"
    )


def _closed_loop_view(fit, arm, head: Headline) -> None:
    """A closed-loop fit's answers in streams: speedup per N (the same N in both arms) and
    N*, put on ``head`` and first among its lines (the fit's users asked "at N streams")."""
    if not plan.fitted_closed_loop(fit):
        return
    head.closed_loop = plan.speedup(
        fit, arm, concurrency=plan.stream_grid(plan.measured_streams(fit, arm))
    )
    be = plan.break_even(fit, arm, closed_loop=True)
    head.n_star = be.iloc[0]
    line = n_star_line(be, beyond=plan.measured_streams(fit, arm, min))
    head.lines.insert(
        0, f"Break-even concurrency (closed loop, the same N streams in both): {line}."
    )


def _beyond(row: pd.Series) -> str:
    if not row.extrapolated:
        return ""
    if "max_measured_concurrency" in row:
        top = row.max_measured_concurrency
        if np.isfinite(top):
            return f" (extrapolated: highest measured {top:g} streams)"
    else:
        top = row.max_measured_rps
        if np.isfinite(top):
            return f" (extrapolated: highest measured rate {top:.2f} req/s)"
    return f" (extrapolated: {'dense' if row.k == 0 else f'k = {row.k}'} not measured here)"


def _stream_text(n: float) -> str:
    """``"1 stream"``, ``"128 streams"``."""
    return f"{_streams(n)} stream{'' if n == 1 else 's'}"


def _kname(k: int) -> str:
    return "dense (no SD)" if k == 0 else ("none (saturated)" if k < 0 else f"k = {k}")


def _k_at(ktab: pd.DataFrame, alpha: float, loads) -> list[int]:
    """The k-table's best k at ``alpha`` (a grid value) and each of ``loads``."""
    col = "concurrency" if "concurrency" in ktab else "rps"
    near = ktab[ktab["alpha"] == alpha].set_index(col)["k_bayes"]
    return [int(near.loc[x]) for x in loads]


def _closed_capacity_line(arm, cap: pd.DataFrame, slo: float, prob: float) -> str:
    def one(row) -> str:
        name = "dense" if row.k == 0 else f"k = {row.k}"
        return (
            f"{name}: {_stream_text(row.capacity_streams)} per server (throughput "
            f"{row.throughput_rps:.3g} req/s){_beyond(row)}"
        )

    return (
        f"Capacity at a mean-latency SLO of {slo:.3g} s (P ≥ {prob:g}; closed loop, streams "
        f"in flight): {one(cap.iloc[0])}, {one(cap.iloc[-1])}."
    )


def _headline(fit, arm, ktab, slo, prob) -> Headline:
    """The three answers for ``arm``; the best-k line reads ``ktab`` at the arm's alpha
    (:func:`specbayes.arms.alpha_point`, which the k-table's alpha grid contains).

    A k-table in streams (``concurrency``, a closed-loop fit) is read at the lightest and
    heaviest stream counts measured in both arms (:func:`plan.measured_stream_range`, which
    the grid contains), and the capacity is answered in streams per server."""
    be = plan.break_even(fit, arm).iloc[0]
    alphas = ktab["alpha"].unique()
    point = alpha_point(fit, arm)
    nearest = alphas[np.argmin(np.abs(alphas - point))]
    alpha_txt = f"alpha = {nearest:g}" + (
        ", the posterior median of the inferred alpha" if arm.alpha is None else ""
    )
    if "concurrency" in ktab:
        low, high = plan.measured_stream_range(fit, arm)
        grid = np.sort(ktab["concurrency"].unique())
        low = low if np.isfinite(low) else grid[0]
        high = high if np.isfinite(high) else grid[-1]
        k_low, k_high = _k_at(ktab, nearest, (low, high))
        cap = plan.capacity(fit, arm, slo, prob=prob, ks=[0, arm.k], closed_loop=True)
        h = Headline(arm, be, k_low, k_high, np.nan, np.nan, slo, cap)
        h.streams_low, h.streams_high = float(low), float(high)
        best = (
            f"Best draft length (closed loop, {alpha_txt}): {_kname(k_low)} at "
            f"{_stream_text(low)}, {_kname(k_high)} at {_stream_text(high)} (the lightest and "
            "heaviest stream counts measured in both arms)."
        )
        h.lines = [
            "Break-even load if served open loop (Poisson arrivals — not what these closed-loop "
            f"sweeps measured, so the law's prediction): {_break_even_text(arm, be)}.",
            best,
            _closed_capacity_line(arm, cap, slo, prob),
        ]
        return h
    rates = np.sort(ktab["rps"].unique())
    k_low, k_high = _k_at(ktab, nearest, (rates[0], rates[-1]))
    cap = plan.capacity(fit, arm, slo, prob=prob, ks=[0, arm.k])
    h = Headline(arm, be, k_low, k_high, float(rates[0]), float(rates[-1]), slo, cap)
    h.lines = [
        f"Break-even load: {_break_even_text(arm, be)}.",
        f"Best draft length ({alpha_txt}): {_kname(k_low)} at {rates[0]:.2g} req/s, "
        f"{_kname(k_high)} at {rates[-1]:.2g} req/s.",
        "Capacity at a mean-latency SLO of "
        f"{slo:.3g} s (P ≥ {prob:g}): dense {cap.capacity_rps.iloc[0]:.2f} req/s"
        f"{_beyond(cap.iloc[0])}, k = {arm.k}: {cap.capacity_rps.iloc[-1]:.2f} req/s"
        f"{_beyond(cap.iloc[-1])}.",
    ]
    return h


def _crossing_column(gains: bool) -> str:
    """``plan.break_even``'s probability of the crossing's direction: SD slower below the
    crossing (``gains``) or faster."""
    return "p_loses_then_wins" if gains else "p_wins_then_loses"


def _break_even_text(arm, be: pd.Series) -> str:
    """The open-loop break-even load RPS* of ``plan.break_even`` (its row ``be``)."""
    if np.isfinite(be.rps_star_median):
        gains = be.p_loses_then_wins > be.p_wins_then_loses  # most crossings: SD wins past it
        verb, p = ("starts", "loses then wins") if gains else ("stops", "wins then loses")
        be_text = (
            f"SD ({arm.label()}) {verb} paying at {be.rps_star_median:.2f} req/s "
            f"({INTERVAL_PROB:.0%} interval {be.rps_star_lo:.2f}–{be.rps_star_hi:.2f}; "
            f"P({p}) = {be[_crossing_column(gains)]:.2f})"
        )
    else:
        be_text = (
            f"SD ({arm.label()}) never crosses dense below saturation: "
            f"P(always wins) = {be.p_always_wins:.2f}, P(never wins) = {be.p_never_wins:.2f}"
        )
    return be_text


def write_report(
    fit: Any,
    out_dir: str | Path,
    *,
    arm: plan.Arm | None = None,
    slo: float | dict[str, float] | None = None,
    prob: float = 0.9,
) -> Headline:
    """Write figures, tables and ``summary.md`` for ``arm`` into ``out_dir``.

    Everything is written into a hidden folder beside ``out_dir`` first and moved into
    place only when all of it succeeded (:func:`specbayes.artefacts.staged_dir`): a failure
    (e.g. an SLO below the zero-load latency) leaves no half-written report.

    Parameters
    ----------
    fit : specbayes.model.fitted.NextFit
        A fitted sd (or moe) model.
    out_dir : path
        Created if needed; existing files of the same names are replaced.
    arm : plan.Arm, optional
        The configuration to plan for (default: :func:`default_arm`).
    slo : float or dict, optional
        Mean-latency SLO in seconds (default: twice the median zero-load dense latency), or
        ``{name: seconds}`` (:func:`specbayes.slo.parse_slo`): its ``latency`` entry is the
        mean-latency SLO, its metric entries go to ``metrics_vs_load.png`` and the summary
        (:mod:`specbayes.report_metrics`).
    prob : float
        Probability at which capacity must meet the SLO.

    Returns
    -------
    Headline
        The three headline answers (also written at the top of ``summary.md``).
    """
    with staged_dir(out_dir) as tmp:
        return _write_report(fit, tmp, arm=arm, slo=slo, prob=prob)


def _speedup_grid(sat: float) -> np.ndarray:
    """24 loads from 0 to 95 % of the dense saturation rate (median draw)."""
    return np.linspace(0.0, 0.95 * sat, 24)


def _stream_grid_fine(fit, arm, head: Headline) -> np.ndarray:
    """48 stream counts from 1 to a doubling past the data, or on to the top of the N* band
    (at most 16 times the data): the crossing is drawn where the law puts it."""
    measured = plan.measured_streams(fit, arm)
    measured = measured if np.isfinite(measured) else 64.0
    n_hi = head.n_star.n_star_hi if head.n_star is not None else np.nan
    top = min(max(2 * measured, n_hi if np.isfinite(n_hi) else 0), 16 * measured)
    return np.geomspace(1, 2 ** np.ceil(np.log2(top)), 48)


def _k_map_streams(fit, arm) -> list[float]:
    """The k-map's stream counts: 1, 2, 4, … two doublings past the highest measured in both
    arms (those cells extrapolate), with the lightest and heaviest measured ones, which the
    headline reads."""
    low, high = plan.measured_stream_range(fit, arm)
    top = 4 * high if np.isfinite(high) else np.nan
    extra = [x for x in (low, high) if np.isfinite(x)]
    return sorted({*map(float, plan.stream_grid(top)), *extra})


def _stream_band(fit, k_arm, slo: float, ks) -> dict:
    """``lo, hi``: the central interval of the stream count meeting ``slo``, per k (its
    quantiles are capacities at probabilities (1 ± INTERVAL_PROB) / 2)."""
    band = {}
    for end, p in (("lo", (1 + INTERVAL_PROB) / 2), ("hi", (1 - INTERVAL_PROB) / 2)):
        try:
            cap = plan.capacity(fit, k_arm, slo, prob=p, ks=ks, closed_loop=True)
            band[end] = cap["capacity_streams"].to_numpy()
        except ValueError:  # no stream count meets it at that probability
            band[end] = np.zeros(len(ks), dtype=int)
    return band


def _capacity_curves(fit, k_arm, c1_med: float, prob: float, ks, closed_loop=False):
    """Capacity per k at 16 SLOs from 1.05 to 4 zero-load dense latencies; closed loop in
    streams, with a band (:func:`_stream_band`)."""
    caps = []
    for s in np.linspace(1.05 * c1_med, 4.0 * c1_med, 16):
        try:
            cap = plan.capacity(fit, k_arm, s, prob=prob, ks=ks, closed_loop=closed_loop)
        except ValueError:
            continue
        if closed_loop:
            cap = cap.assign(**_stream_band(fit, k_arm, s, cap["k"]))
        caps.append(cap.assign(slo=s))
    curves = pd.concat(caps, ignore_index=True)
    curves.attrs["prob"] = prob
    return curves


def _recommended(head: Headline) -> dict[int, str]:
    """``{k: "best at 1 req/s"}`` (closed loop ``"best at 1 and 128 streams"``): the
    headline's best k at its lightest and heaviest load."""
    closed = head.streams_low is not None
    loads = (head.streams_low, head.streams_high) if closed else (head.rps_low, head.rps_high)
    roles: dict[int, list[str]] = {}
    for k, r in zip((head.k_low, head.k_high), loads, strict=True):
        if k >= 0:
            roles.setdefault(k, []).append(_streams(r) if closed else f"{r:.2g}")
    if closed:
        return {
            k: f"best at {' and '.join(rs)} stream{'' if rs == ['1'] else 's'}"
            for k, rs in roles.items()
        }
    return {k: f"best at {' and '.join(rs)} req/s" for k, rs in roles.items()}


def _load_marks(head: Headline, roles: dict[int, str]) -> dict:
    """The speedup and capacity figures' marks: the planned arm's break-even (RPS*, or N*
    closed loop) and the recommended k (best at a req/s, or at a stream count)."""
    if head.n_star is not None:
        n = head.n_star
        return dict(break_even=(n.n_star_median, n.n_star_lo, n.n_star_hi), recommended=roles)
    be = head.break_even
    return dict(break_even=(be.rps_star_median, be.rps_star_lo, be.rps_star_hi), recommended=roles)


def _config_title(arm: plan.Arm, k_arm: plan.Arm | None) -> str:
    """The configuration a figure is about: verifier, drafter, GPU, workload (and alpha)."""
    text = f"{arm.verifier} + {arm.drafter} on {arm.hardware}, workload {arm.cell}"
    if k_arm is None:
        return text
    alpha = f"{arm.alpha:g}" if arm.alpha is not None else f"inferred (median {k_arm.alpha:g})"
    return f"{text}, alpha={alpha}"


def _collapse_title(fit: Any, n: int) -> str:
    d = fit.data
    names = ", ".join(sorted(d.verifier.astype(str).unique()))
    gpus = ", ".join(sorted(d.hardware.astype(str).unique()))
    cells = sorted(d.cell.astype(str).unique())
    cells = ", ".join(cells) if len(cells) <= 3 else f"{len(cells)} workloads"
    return (
        f"Latency collapse: {n} measured points vs the law $y=1/(1-x)$\n{names} on {gpus}; {cells}"
    )


def _write_report(fit: Any, out: Path, *, arm, slo, prob) -> Headline:
    import matplotlib.pyplot as plt

    from specbayes import plots
    from specbayes.report_metrics import METRIC_FIGURE, metrics_section, split_slo

    arm = arm or default_arm(fit)
    slo, slos = split_slo(fit, slo)
    if slo is not None and not slo > 0:
        raise ValueError(f"--slo {slo:g}: a latency SLO must be > 0 seconds")
    dense = replace(arm, k=0, alpha=None, drafter=None)
    c1d, c2d, c3d, knee_d = plan.effective_cost_draws(fit, dense)  # (C1, C2, C3, knee) draws
    sat_draws = laws.saturation_rps(c1d, c2d, c3d, **laws.term_keywords(knee_d))
    sat = float(np.median(sat_draws))  # dense saturation rate (median draw)
    sat_safe = float(np.quantile(sat_draws, 0.05))  # dense unsaturated here w.p. 0.95
    figures: dict[str, Any] = {}
    written: list[str] = []
    k_arm = replace(arm, alpha=alpha_point(fit, arm) if arm.k else 0.75)
    c1_med = float(np.median(c1d))
    slo = slo or 2.0 * c1_med
    # the arm's own alpha is on the grid: the headline's best k is read at it, not near it
    alphas = np.unique(np.append(np.round(np.arange(0.5, 1.0001, 0.05), 2), k_arm.alpha))
    sd_arm = arm if arm.k else replace(k_arm, k=1)
    if plan.fitted_closed_loop(fit):  # the k-map and best k in streams, as the fit's user asks
        kmap_measured = plan.measured_streams(fit, sd_arm, min)
        ktab = plan.optimal_k(fit, k_arm, alphas, concurrency=_k_map_streams(fit, sd_arm))
    else:
        kmap_measured = None
        ktab = plan.optimal_k(fit, k_arm, alphas, np.linspace(0.02 * sat, 0.95 * sat_safe, 12))
    head = _headline(fit, sd_arm, ktab, slo, prob)
    _closed_loop_view(fit, sd_arm, head)
    if head.closed_loop is not None:
        head.closed_loop.to_csv(out / "speedup_concurrency.csv", index=False)
        written.append("speedup_concurrency.csv")

    # every figure shows the planned k and the headline's recommended ones, in their colours
    roles = _recommended(head)
    planned = arm.k or None
    key = [k for k in (planned, *roles) if k]
    ks_show = sorted({*key, *[k for k in (1, 2, 4, 6, 8) if k not in key][: max(5 - len(key), 0)]})
    closed = head.closed_loop is not None
    marks = _load_marks(head, roles)
    config = _config_title(arm, k_arm)
    points = collapse_points(fit)
    figures["collapse.png"] = plots.plot_collapse(points, title=_collapse_title(fit, len(points)))
    if closed:  # the fit's user asked "at N streams": the figures are in streams
        load = dict(concurrency=_stream_grid_fine(fit, arm, head))
        measured = plan.measured_streams(fit, arm, min)
        name, what = "speedup_vs_concurrency.png", "concurrency (closed loop)"
    else:
        load = dict(rps=_speedup_grid(sat))
        # a measured speedup needs both arms: the lower of their highest fitted rates
        tops = plan.measured_max_rps(fit, arm, [0, arm.k])
        measured = float(np.min(tops)) if np.all(np.isfinite(tops)) else None
        name, what = "speedup_vs_rps.png", "load"
    sp = {k: plan.speedup(fit, replace(arm, k=k), **load) for k in ks_show} if arm.k else {}
    if sp:
        figures[name] = plots.plot_speedup(
            sp,
            title=f"Speedup over dense vs {what}\n{config}",
            planned=planned,
            measured=measured,
            **marks,
        )
        pd.concat([t.assign(config=f"k={k}") for k, t in sp.items()]).to_csv(
            out / "speedup.csv", index=False
        )
        written.append("speedup.csv")
    ktab.to_csv(out / "k_table.csv", index=False)
    written.append("k_table.csv")
    figures["k_map.png"] = plots.plot_k_map(
        ktab,
        title=f"Best draft length k (lowest expected latency)\n{_config_title(arm, None)}",
        planned=(k_arm.alpha, arm.k) if arm.k else None,
        measured=kmap_measured,
    )
    ratios = plan.cost_ratios(fit, k_arm if arm.k else replace(k_arm, k=1))
    ratios.to_csv(out / "cost_ratios.csv", index=False)
    written.append("cost_ratios.csv")
    figures["cost_ratios.png"] = plots.plot_cost_ratios(
        ratios, title=f"Cost ratios SD / dense vs k\n{config}", planned=planned, recommended=roles
    )
    cap_ks = sorted({0, 1, 2, 4, 6, 8, *key})
    curves = _capacity_curves(fit, k_arm, c1_med, prob, cap_ks, closed_loop=closed)
    curves.to_csv(out / "capacity.csv", index=False)
    written.append("capacity.csv")
    figures["capacity_vs_slo.png"] = plots.plot_capacity(
        curves,
        title=f"{'Streams' if closed else 'Capacity'} under a mean-latency SLO\n{config}",
        planned=planned,
        slo=slo,
        **marks,
    )
    metric = metrics_section(
        fit, arm, out, slo=slos, prob=prob, closed=closed, top_rps=_speedup_grid(sat)[-1]
    )
    if metric is not None:
        figures[METRIC_FIGURE] = metric.figure
        written.append("metrics.csv")
        head.lines += metric.capacity
    try:
        for name, fig in figures.items():
            fig.savefig(out / name, dpi=110)
    finally:
        for fig in figures.values():
            plt.close(fig)
    _write_summary(out, fit, arm, head, ratios, figures, written, metric)
    (out / "headline.json").write_text(_headline_json(arm, head, slo))
    return head


def _headline_json(arm: plan.Arm, head: Headline, slo: float) -> str:
    """``headline.json``: strict JSON (``null`` for non-finite numbers, explained inside)."""
    return dumps(
        dict(
            arm=arm.label(),
            verifier=arm.verifier,
            hardware=arm.hardware,
            drafter=arm.drafter,
            workload=dict(cell=arm.cell, prefill=arm.prefill, decode=arm.decode),
            alpha=arm.alpha,
            k=arm.k,
            lines=head.lines,
            units=dict(
                rps="requests/s",
                latency="s",
                slo="s",
                interval=f"central {INTERVAL_PROB:.0%} interval of posterior draws (lo, hi)",
            ),
            break_even=head.break_even.to_dict(),
            k_low=head.k_low,
            k_high=head.k_high,
            slo=slo,
            capacity=head.capacity.to_dict(orient="records"),
            **_closed_loop_json(head),
        )
    )


def _closed_loop_json(head: Headline) -> dict:
    if head.closed_loop is None:
        return {}
    return dict(
        # the stream counts k_low and k_high are best at (the lightest and heaviest measured)
        k_low_streams=head.streams_low,
        k_high_streams=head.streams_high,
        streams_unit="streams in flight (closed loop)",
        break_even_concurrency=head.n_star.to_dict(),
        speedup_concurrency=head.closed_loop.to_dict(orient="records"),
    )


def _ratios_section(ratios: pd.DataFrame, moe: bool = False) -> list[str]:
    def interval(lo, hi):
        return [f"{a:.3f}–{b:.3f}" for a, b in zip(lo, hi, strict=True)]

    table = pd.DataFrame(
        {
            "k": ratios["k"],
            "C1R mean": ratios["c1r_mean"].map("{:.3f}".format),
            "C1R 90 % interval": interval(ratios["c1r_lo"], ratios["c1r_hi"]),
            "C2R mean": ratios["c2r_mean"].map("{:.3f}".format),
            "C2R 90 % interval": interval(ratios["c2r_lo"], ratios["c2r_hi"]),
            "P(C1R < 1)": ratios["p_c1r_below_1"].map("{:.2f}".format),
            "P(C2R > 1)": ratios["p_c2r_above_1"].map("{:.2f}".format),
            "red flag": np.where(ratios["red_flag"], "**yes**", "no"),
        }
    )
    return [
        "## Cost ratios",
        "",
        "SD over dense, same server and workload: C1R = C1,SD / C1,dense (zero-load cost; "
        "1/C1R is the zero-load speedup), C2R = C2,SD / C2,dense (cost per unit of load; "
        "C2R > 1 means the speedup shrinks as load rises). Red flag: P(C2R > 1) ≥ 0.9.",
        *(
            [
                "",
                "Model `moe`: C1 and C2 leave out the expert reads φ·X, none at zero load; they "
                "grow with the tokens a pass routes, and SD (k + 1 per sequence) covers the "
                "experts at a lower load than dense, so the speedup vs load and the break-even "
                "above include them and the ratios alone do not.",
            ]
            if moe
            else []
        ),
        "",
        markdown_table(table),
        "",
    ]


_FIGURES = {
    "collapse.png": "every measured point normalised by its configuration's fitted C1 and C2 "
    "(colour: k, as in every figure; marker: verifier). "
    "If the latency law holds, the points lie on the black curve y = 1/(1 − x); systematic "
    "departures show where the model is wrong.",
    "speedup_vs_rps.png": "SD's speedup over dense vs load: the planned k (thick), the "
    "recommended k and others (median, 90 % band). SD wins above the dashed line; a curve "
    "stops (dotted) where a server saturates in > 5 % of draws; dashed vertical line and "
    "band: the planned arm's break-even load (90 %); hatched: above the highest rate at "
    "which both arms were measured.",
    "k_map.png": "the draft length with the lowest expected latency at each (acceptance rate, "
    "load); dotted cells: that k is the fastest in fewer than half the draws (uncertain); "
    "dashed line: the planned arm's alpha. Where C2R > 1 the best k falls as load rises.",
    "cost_ratios.png": "C1R and C2R vs k with 90 % intervals (red circles: P(C2R > 1) ≥ 0.9); "
    "vertical lines: the planned (solid) and recommended (dotted) k.",
    "capacity_vs_slo.png": "the highest request rate whose mean latency meets an SLO with the "
    "stated probability, per k (planned k thick; open circles: above the highest measured "
    "load); the horizontal band is the planned arm's break-even load, the dotted line the "
    "headline's SLO.",
}
#: Captions of a closed-loop fit's figures, where they differ (the load is streams N).
_FIGURES_CLOSED = {
    "k_map.png": "the draft length with the lowest expected latency at each (acceptance rate, "
    "number of streams N in flight, the same N for every k; closed loop, log-2 axis); dotted "
    "cells: that k is the fastest in fewer than half the draws (uncertain); dashed line: the "
    "planned arm's alpha; hatched: stream counts above the highest measured one, where the "
    "map extrapolates the law. Where C2R > 1 the best k falls as N rises.",
    "speedup_vs_concurrency.png": "how much faster SD is than dense decoding with the same N "
    "streams in flight in both (closed loop; also SD's throughput gain at N), for the planned "
    "k (thick) and a few others (median and shaded 90 % band; log-2 axis of N). Above the "
    "dashed line SD wins; the dashed vertical line and its band are the planned arm's "
    "break-even concurrency N* and its 90 % interval — beyond it dense is faster; hatched: "
    "stream counts above the highest measured one, where the curves extrapolate the law.",
    "capacity_vs_slo.png": "the most streams (closed loop, the same N in SD and dense) whose "
    "mean latency meets an SLO with the stated probability, per k (line; planned k thick; "
    "shaded: the central 90 % interval of that stream count; open circles: above the highest "
    "measured concurrency); the horizontal line and band are the planned arm's N*, the dotted "
    "line the headline's SLO.",
}


def _closed_loop_section(head: Headline) -> list[str]:
    """Speedup per stream count, for a fit whose rows are all closed loop."""
    if head.closed_loop is None:
        return []
    t = head.closed_loop
    table = pd.DataFrame(
        {
            "streams N": t["concurrency"].astype(int),
            "speedup median": t["median"],
            "90% lo": t["lo"],
            "90% hi": t["hi"],
            "P(SD faster)": t["p_faster"],
        }
    )
    return [
        "## Closed loop: speedup per stream count",
        "",
        "The fitted sweeps are all closed loop (N streams always in flight), so the plan is "
        "in streams: SD and dense at the same N. There the speedup L_dense / L_SD is also "
        "SD's throughput gain (Little's law, N / L).",
        "",
        markdown_table(table),
        "",
    ]


_LOAD_UNITS = {
    False: "requests per second",
    True: "streams in flight (closed loop; throughputs in requests per second)",
}


def _curvature_text(fit, arm) -> str:
    """The summary's words on a fit made with ``--curvature`` (where its passes bend), else
    the empty string."""
    from specbayes.arms import knee_text

    text = knee_text(fit, arm)
    return "" if text is None else f" with a batch curvature (`--curvature`): {text}"


def _metrics_lines(metric) -> list[str]:
    if metric is None:
        return []
    return ["## Modelled metrics", "", *[f"- {line}" for line in metric.lines], ""]


def _write_summary(out, fit, arm, head, ratios, figures, written, metric=None) -> None:
    captions = {**_FIGURES, **(_FIGURES_CLOSED if head.closed_loop is not None else {})}
    if metric is not None:
        captions["metrics_vs_load.png"] = metric.caption
    lines = [
        "# specbayes report",
        "",
        f"Configuration planned for: **{arm.label()}** on **{arm.hardware}**, workload "
        f"**{arm.cell}** (prefill ≈ {arm.prefill:.0f}, decode ≈ {arm.decode:.0f} tokens). "
        f"Model: `{getattr(fit, 'model_name', '?')}`{_curvature_text(fit, arm)}. Latencies "
        "are in seconds, loads in "
        f"{_LOAD_UNITS[head.closed_loop is not None]}; intervals are central "
        f"{INTERVAL_PROB:.0%} intervals of "
        "posterior draws of the mean latency. The model and its formulas: `docs/model.md`.",
        "",
        "## Headline answers",
        "",
        *[f"- {line}" for line in head.lines],
        "",
        *_closed_loop_section(head),
        *_metrics_lines(metric),
        *_excluded_section(getattr(fit, "excluded", None)),
        *_health_section(fit),
        "## Figures",
        "",
        *[
            line
            for name in figures
            for line in (f"![{name}]({name})", "", f"`{name}` — {captions[name]}", "")
        ],
        *_ratios_section(ratios, moe=getattr(fit, "model_name", "sd") == "moe"),
        f"Tables (CSV): {', '.join(f'`{w}`' for w in written)}; the headline answers as JSON: "
        "`headline.json`.",
    ]
    (out / "summary.md").write_text("\n".join(lines) + "\n")
