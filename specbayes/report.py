"""The report: figures (PNG), tables (CSV/JSON) and a markdown summary of a fit's decisions.

``write_report(fit, out_dir)`` answers the reading note's deployment questions (§5, §9,
§11.2) for one arm — by default the most-measured SD configuration in the fit's data — and
writes everything a person needs to act on them: the collapse plot (does the latency law
hold?), speedup vs load with bands for several k, the k-map over (alpha, load), C1R/C2R vs
k, capacity vs SLO, and ``summary.md`` with the headline answers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from specbayes import laws, plan
from specbayes.intervals import INTERVAL_PROB

__all__ = ["Headline", "collapse_points", "default_arm", "markdown_table", "write_report"]


def markdown_table(df: pd.DataFrame, floatfmt: str = ".3g") -> str:
    """A GitHub-flavoured markdown table (no extra dependency)."""

    def cell(v: Any) -> str:
        if isinstance(v, float | np.floating):
            return "–" if np.isnan(v) else format(v, floatfmt)
        return str(v)

    head = "| " + " | ".join(map(str, df.columns)) + " |"
    rule = "|" + "|".join("---" for _ in df.columns) + "|"
    body = ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join([head, rule, *body])


def default_arm(fit: Any) -> plan.Arm:
    """The most-measured SD configuration of the fit's data (dense if there is none)."""
    d = fit.data
    sd = d[d.k > 0]
    base = sd if len(sd) else d
    key = ["verifier", "hardware", "cell"]
    top = base.groupby(key).size().idxmax()
    rows = base.set_index(key).loc[top]
    rows = rows.to_frame().T if isinstance(rows, pd.Series) else rows
    alpha = None
    k = 0
    drafter = None
    if len(sd):
        drafter = rows["drafter"].mode().iloc[0]
        ks = np.sort(rows["k"].unique())
        k = int(ks[len(ks) // 2])
        known = rows["alpha"].dropna()
        alpha = float(np.round(known.median(), 2)) if len(known) else None
    return plan.Arm(
        verifier=top[0],
        hardware=top[1],
        cell=top[2],
        prefill=float(rows["prefill"].mean()),
        decode=float(rows["decode"].mean()),
        drafter=drafter,
        alpha=alpha,
        k=k,
    )


def collapse_points(fit: Any) -> pd.DataFrame:
    r"""Each fitted row normalised by its configuration's posterior-mean costs.

    With :math:`\bar\mu` the law (:func:`laws.latency`, with batch curvature) at the
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
    c1, c2 = laws.effective_costs(*coefs, g, alpha, k)
    knees = [ds[n].values if n in ds else np.inf for n in plan.KNEES]  # none: no curvature
    c3 = laws.effective_curvature(*coefs[3:], g, alpha, k, *knees)
    c1m, c2m, c3m = (np.mean(np.broadcast_to(c, c1.shape), axis=0) for c in (c1, c2, c3))
    conc = d["concurrency"].to_numpy(dtype=float) if "concurrency" in d else np.full(len(d), np.nan)
    mu = np.where(  # the law at the posterior-mean costs (inf past its wall)
        np.isfinite(conc),
        laws.closed_loop_latency(np.nan_to_num(conc), c1m, c2m, c3m),
        laws.latency(np.nan_to_num(d["rps"].to_numpy(dtype=float)), c1m, c2m, c3m),
    )
    group = d["verifier"] + np.where(d["k"] > 0, " SD", " dense")
    past = ~np.isfinite(mu)  # measured, yet past the wall of the law at the mean costs
    return pd.DataFrame(dict(x=1.0 - c1m / mu, y=d["latency"] / c1m, group=group, past_wall=past))


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


def _beyond(row: pd.Series) -> str:
    if not row.extrapolated:
        return ""
    top = row.max_measured_rps
    measured = f"{top:.2f} req/s" if np.isfinite(top) else "none"
    return f" (extrapolated: highest measured rate {measured})"


def _headline(fit, arm, ktab, slo, prob) -> Headline:
    be = plan.break_even(fit, arm).iloc[0]
    rates = np.sort(ktab["rps"].unique())
    alphas = ktab["alpha"].unique()
    nearest = alphas[np.argmin(np.abs(alphas - (arm.alpha or 0.75)))]
    near = ktab[ktab["alpha"] == nearest]
    k_low = int(near[near.rps == rates[0]]["k_bayes"].iloc[0])
    k_high = int(near[near.rps == rates[-1]]["k_bayes"].iloc[0])
    cap = plan.capacity(fit, arm, slo, prob=prob, ks=[0, arm.k])
    h = Headline(arm, be, k_low, k_high, float(rates[0]), float(rates[-1]), slo, cap)
    if np.isfinite(be.rps_star_median):
        be_text = (
            f"SD ({arm.label()}) stops paying at {be.rps_star_median:.2f} req/s "
            f"({INTERVAL_PROB:.0%} interval {be.rps_star_lo:.2f}–{be.rps_star_hi:.2f}; "
            f"P(wins then loses) = {be.p_wins_then_loses:.2f})"
        )
    else:
        be_text = (
            f"SD ({arm.label()}) never crosses dense below saturation: "
            f"P(always wins) = {be.p_always_wins:.2f}, P(never wins) = {be.p_never_wins:.2f}"
        )

    def kname(k: int) -> str:
        return "dense (no SD)" if k == 0 else ("none (saturated)" if k < 0 else f"k = {k}")

    alpha_txt = "inferred alpha" if arm.alpha is None else f"alpha = {near.alpha.iloc[0]:g}"
    h.lines = [
        f"Break-even load: {be_text}.",
        f"Best draft length ({alpha_txt}): {kname(k_low)} at {rates[0]:.2g} req/s, "
        f"{kname(k_high)} at {rates[-1]:.2g} req/s.",
        "Capacity at a mean-latency SLO of "
        f"{slo:.3g} s (P ≥ {prob:g}): dense {cap.capacity_rps.iloc[0]:.2f} req/s"
        f"{_beyond(cap.iloc[0])}, k = {arm.k} {cap.capacity_rps.iloc[-1]:.2f} req/s"
        f"{_beyond(cap.iloc[-1])}.",
    ]
    return h


def write_report(
    fit: Any,
    out_dir: str | Path,
    *,
    arm: plan.Arm | None = None,
    slo: float | None = None,
    prob: float = 0.9,
) -> Headline:
    """Write figures, tables and ``summary.md`` for ``arm`` into ``out_dir``.

    Parameters
    ----------
    fit : specbayes.fit.Fit
        A fitted sd (or moe) model.
    out_dir : path
        Created if needed; existing files of the same names are replaced.
    arm : plan.Arm, optional
        The configuration to plan for (default: :func:`default_arm`).
    slo : float, optional
        Mean-latency SLO in seconds (default: twice the median zero-load dense latency).
    prob : float
        Probability at which capacity must meet the SLO.

    Returns
    -------
    Headline
        The three headline answers (also written at the top of ``summary.md``).
    """
    import matplotlib.pyplot as plt

    from specbayes import plots

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    arm = arm or default_arm(fit)
    dense = replace(arm, k=0, alpha=None, drafter=None)
    dense_costs = plan.effective_cost_draws(fit, dense)  # (C1, C2, C3) draws
    c1d = dense_costs[0]
    sat_draws = laws.saturation_rps(*dense_costs)
    sat = float(np.median(sat_draws))  # dense saturation rate (median draw)
    sat_safe = float(np.quantile(sat_draws, 0.05))  # dense unsaturated here w.p. 0.95
    rps = np.linspace(0.0, 0.95 * sat, 24)
    ks_show = [k for k in (1, 2, 4, 6, 8) if k != arm.k][:3] + ([arm.k] if arm.k else [])
    ks_show = sorted(set(ks_show))
    figures: dict[str, Any] = {}
    written: list[str] = []

    points = collapse_points(fit)
    figures["collapse.png"] = plots.plot_collapse(points)
    sp = {f"k={k}": plan.speedup(fit, replace(arm, k=k), rps) for k in ks_show} if arm.k else {}
    if sp:
        figures["speedup_vs_rps.png"] = plots.plot_speedup(
            sp, title=f"{arm.verifier} on {arm.hardware}, {arm.cell}, alpha={arm.alpha}"
        )
        pd.concat([t.assign(config=c) for c, t in sp.items()]).to_csv(
            out / "speedup.csv", index=False
        )
        written.append("speedup.csv")
    alphas = np.round(np.arange(0.5, 1.0001, 0.05), 2) if arm.alpha is not None else None
    k_arm = arm if arm.alpha is not None else replace(arm, alpha=0.75)
    ktab = plan.optimal_k(
        fit,
        k_arm,
        alphas if alphas is not None else [0.75],
        np.linspace(0.02 * sat, 0.95 * sat_safe, 12),
    )
    ktab.to_csv(out / "k_table.csv", index=False)
    written.append("k_table.csv")
    figures["k_map.png"] = plots.plot_k_map(ktab)
    ratios = plan.cost_ratios(fit, k_arm if arm.k else replace(k_arm, k=1))
    ratios.to_csv(out / "cost_ratios.csv", index=False)
    written.append("cost_ratios.csv")
    figures["cost_ratios.png"] = plots.plot_cost_ratios(
        ratios, title=f"Cost ratios vs k, {arm.verifier}, alpha={k_arm.alpha:g}"
    )
    c1_med = float(np.median(c1d))
    slo = slo or 2.0 * c1_med
    slos = np.linspace(1.05 * c1_med, 4.0 * c1_med, 16)
    caps = []
    for s in slos:
        try:
            caps.append(
                plan.capacity(fit, k_arm, s, prob=prob, ks=[0, 1, 2, 4, 6, 8]).assign(slo=s)
            )
        except ValueError:
            continue
    curves = pd.concat(caps, ignore_index=True)
    curves.attrs["prob"] = prob
    curves.to_csv(out / "capacity.csv", index=False)
    written.append("capacity.csv")
    figures["capacity_vs_slo.png"] = plots.plot_capacity(curves)

    head = _headline(fit, k_arm if arm.k else replace(k_arm, k=1), ktab, slo, prob)
    for name, fig in figures.items():
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
    _write_summary(out, fit, arm, head, ratios, sp, figures, written)
    (out / "headline.json").write_text(
        json.dumps(
            dict(
                arm=arm.label(),
                lines=head.lines,
                break_even=head.break_even.to_dict(),
                k_low=head.k_low,
                k_high=head.k_high,
                slo=slo,
                capacity=head.capacity.to_dict(orient="records"),
            ),
            indent=2,
            default=float,
        )
    )
    return head


def _write_summary(out, fit, arm, head, ratios, sp, figures, written) -> None:
    lines = [
        "# specbayes report",
        "",
        f"Configuration planned for: **{arm.label()}** on **{arm.hardware}**, workload "
        f"**{arm.cell}** (prefill ≈ {arm.prefill:.0f}, decode ≈ {arm.decode:.0f} tokens). "
        f"Model: `{getattr(fit, 'model_name', '?')}`. Intervals are central "
        f"{INTERVAL_PROB:.0%} intervals of posterior draws of the mean latency.",
        "",
        "## Headline answers",
        "",
        *[f"- {line}" for line in head.lines],
        "",
    ]
    excluded = getattr(fit, "excluded", None)
    if excluded is not None and len(excluded):
        counts = excluded["reason"].value_counts()
        lines += [
            f"{len(excluded)} measured points were left out of the fit "
            f"({', '.join(f'{n} {r}' for r, n in counts.items())}); they are listed in the fit "
            "artefact.",
            "",
        ]
    diag = getattr(fit, "diagnostics", None)
    if callable(diag):
        try:
            d = diag()
            per_var = d.groupby("variable", sort=False).agg(
                elements=("r_hat", "size"),
                max_r_hat=("r_hat", "max"),
                min_ess_bulk=("ess_bulk", "min"),
                min_ess_tail=("ess_tail", "min"),
            )
            divergences = int(d["divergences"].iloc[0]) if "divergences" in d else 0
            lines += [
                "## Sampler health",
                "",
                f"{divergences} divergent transitions; worst R-hat {d.r_hat.max():.3f}, lowest "
                f"bulk ESS {d.ess_bulk.min():.0f} (thresholds: 0, ≤ 1.01, ≥ 400).",
                "",
                markdown_table(per_var.reset_index()),
                "",
            ]
        except Exception as exc:  # a report must still be written
            lines += [f"(diagnostics unavailable: {exc})", ""]
    lines += [
        "## Figures",
        "",
        "- `collapse.png` — every measured point normalised by its configuration's fitted "
        "C1 and C2. If the latency law holds, the points lie on the black curve y = 1/(1 − x); "
        "systematic departures show where the model is wrong.",
    ]
    if sp:
        lines.append(
            "- `speedup_vs_rps.png` — how much faster SD is than dense decoding as load rises, "
            "for several draft lengths. Above the dashed line SD wins; the band is the "
            "uncertainty."
        )
    lines += [
        "- `k_map.png` — the draft length with the lowest expected latency at each "
        "(acceptance rate, load). Where C2R > 1 the best k falls as load rises (the k that is "
        "best at batch 1 is then wrong at high throughput); compare the left and right edges.",
        "- `cost_ratios.png` — C1R (SD/dense fixed cost) and C2R (SD/dense per-request load "
        "cost) vs k. C1R < 1 gives the zero-load speedup; C2R > 1 means the speedup shrinks "
        "with load and turns into a slowdown past the break-even rate (red circles: P > 0.9).",
        "- `capacity_vs_slo.png` — the highest request rate whose mean latency meets an SLO "
        "with the stated probability, per k.",
        "",
        "## Cost ratios",
        "",
        markdown_table(ratios),
        "",
        f"Tables: {', '.join(f'`{w}`' for w in written)}.",
    ]
    (out / "summary.md").write_text("\n".join(lines) + "\n")
