"""``specbayes plan`` and ``specbayes report``: decisions from a saved fit."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

from specbayes.commands import (
    acceptance,
    acceptance_list,
    float_list,
    int_list,
    nonneg_int,
    positive_float,
    positive_int,
    positive_int_list,
    probability,
    slo_spec,
    tokens,
)

#: Printed column names (with units) of the plan tables; columns not listed are not printed.
COLUMNS: dict[str, dict[str, str]] = {
    "speedup": {
        "rps": "load (req/s)",
        "concurrency": "streams N",
        "median": "speedup median",
        "lo": "90% lo",
        "hi": "90% hi",
        "p_faster": "P(SD faster)",
        "p_dense_saturated": "P(dense sat.)",
        "p_sd_saturated": "P(SD sat.)",
    },
    "break_even": {
        "k": "k",
        "rps_star_median": "RPS* median (req/s)",
        "rps_star_lo": "90% lo",
        "rps_star_hi": "90% hi",
        "n_star_median": "N* median (streams)",
        "n_star_lo": "90% lo",
        "n_star_hi": "90% hi",
        "p_wins_then_loses": "P(wins, then loses)",
        "p_always_wins": "P(always wins)",
        "p_never_wins": "P(never wins)",
        "p_loses_then_wins": "P(loses, then wins)",
        "dense_saturation_rps_median": "dense saturates at (req/s)",
    },
    "cost_ratios": {
        "k": "k",
        "c1r_mean": "C1R mean",
        "c1r_lo": "90% lo",
        "c1r_hi": "90% hi",
        "c2r_mean": "C2R mean",
        "c2r_lo": "90% lo ",
        "c2r_hi": "90% hi ",
        "p_c2r_above_1": "P(C2R > 1)",
        "red_flag": "red flag",
    },
    "k_table": {
        "alpha": "alpha",
        "rps": "load (req/s)",
        "concurrency": "streams N",
        "k_bayes": "best k",
        "expected_latency": "E[latency] (s)",
        "regret": "regret",
        "p_bayes_saturated": "P(best k sat.)",
    },
    "capacity": {
        "k": "k",
        "capacity_rps": "capacity (req/s)",
        "median_rps": "median (req/s)",
        "capacity_streams": "capacity (streams)",
        "median_streams": "median (streams)",
        "throughput_rps": "throughput there (req/s)",
        "zero_load_latency_median": "zero-load latency (s)",
        "p_slo_feasible": "P(SLO met at ~0 load)",
        "binding": "binding SLO",
        "max_measured_rps": "highest measured (req/s)",
        "max_measured_concurrency": "highest measured (streams)",
        "extrapolated": "extrapolated",
    },
}
COLUMNS["replicas"] = {**COLUMNS["capacity"], "replicas": "replicas"}
COLUMNS["metric_speedup"] = {
    **{c: COLUMNS["speedup"][c] for c in ("rps", "concurrency", "median", "lo", "hi")},
    "p_faster": "P(SD faster)",
}
COLUMNS["metric_break_even"] = {
    "metric": "metric",
    "rps_median": "break-even median (req/s)",
    "rps_lo": "90% lo",
    "rps_hi": "90% hi",
    "concurrency_median": "break-even median (streams)",
    "concurrency_lo": "90% lo",
    "concurrency_hi": "90% hi",
    "p_cross": "P(SD stops paying in the grid)",
    "p_sd_faster_at_lightest": "P(SD faster at the lightest load)",
}

TITLES = {
    "speedup": "speedup over dense vs load (L_dense / L_SD)",
    "break_even": "break-even load RPS* (where SD and dense cross: SD stops paying, or starts)",
    "cost_ratios": "cost ratios SD / dense (C1R: zero-load cost, C2R: cost per unit of load)",
    "k_table": "best draft length per (alpha, load); k = 0 is dense",
    "capacity": "capacity: highest load meeting the SLO",
    "replicas": "replicas to carry the total load under the SLO",
    "metric_speedup": "speedup over dense on the chosen metric (metric_dense / metric_SD)",
    "metric_break_even": "where SD stops paying on the chosen metric",
}
#: Titles of the closed-loop view (N streams in flight in both arms), where they differ.
TITLES_CLOSED = {
    "speedup": "speedup over dense vs concurrency, same N streams in both (L_dense / L_SD = "
    "throughput gain)",
    "break_even": "break-even concurrency N* (where SD and dense cross at the same streams)",
    "k_table": "best draft length per (alpha, streams); k = 0 is dense",
    "capacity": "capacity: most streams meeting the SLO, and the throughput they deliver",
    "replicas": "replicas to carry the total streams under the SLO (each at most its capacity)",
}

LEGEND = (
    "90% lo / hi: the central 90 % interval of posterior draws; ∞: unbounded (the server "
    "saturates in some draws); —: undefined (e.g. no draw crosses break-even; not measured)."
)


def _arm_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "configuration (default: the measured SD sweep with the most rows, ties to the highest "
        "load, among those matching the options given; its alpha is that sweep's)"
    )
    g.add_argument("--verifier", help="verifier model, as in the data (e.g. Llama-3.1-8B)")
    g.add_argument("--hardware", help="accelerator, as in the data (e.g. H100-SXM)")
    g.add_argument("--drafter", help="draft model, as in the data")
    g.add_argument(
        "--cell",
        help="workload: a fitted cell, or '<prefill>x<decode>' (e.g. 256x256), which sets the "
        "tokens; with --prefill/--decode, a label",
    )
    g.add_argument("--prefill", type=tokens, help="mean prompt tokens")
    g.add_argument("--decode", type=tokens, help="mean output tokens")
    g.add_argument("--alpha", type=acceptance, help="per-token acceptance (omit: the data's)")
    g.add_argument("--k", type=nonneg_int, help="draft length of the SD arm")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan",
        help="speedup vs load, break-even, best k, capacity and replicas from a saved fit",
        description="Decisions with intervals from a saved fit (FIT.nc). Every number is "
        "computed per posterior draw and then summarised. Loads in requests/s (open loop) or "
        "streams in flight (closed loop), latencies in seconds, intervals are central 90 % "
        "intervals.",
    )
    p.add_argument("fit", type=Path, help="fit artefact written by `specbayes fit --out`")
    _arm_args(p)
    p.add_argument(
        "--rps", type=float_list, help="request rates for the speedup and k tables (open loop)"
    )
    p.add_argument(
        "--concurrency",
        type=positive_int_list,
        help="closed-loop stream counts N (e.g. 1,4,16), the same N in SD and dense: speedup "
        "per N, the break-even N* beyond which SD loses, k-table and capacity in streams "
        "(default view of a fit whose rows are all closed loop: N = 1, 2, 4, … up to the "
        "highest measured)",
    )
    p.add_argument("--alphas", type=acceptance_list, help="alpha grid of the k-table")
    p.add_argument("--ks", type=int_list, default=list(range(0, 11)), help="candidate k (0=dense)")
    p.add_argument(
        "--slo",
        type=slo_spec,
        metavar="SECONDS|NAME=SECONDS,...",
        help="SLOs the capacity must meet: a mean-latency SLO in seconds, or statistics the fit "
        "models (`specbayes fit --metrics`), e.g. ttft_p99=2,itl_p99=0.05 (latency = the mean)",
    )
    p.add_argument("--prob", type=probability, default=0.9, help="P all SLOs must be met")
    p.add_argument(
        "--metric",
        metavar="NAME",
        help="also the speedup and break-even on this modelled metric (e.g. ttft_p99, "
        "itl_p50: `specbayes fit --metrics`), at the same loads",
    )
    p.add_argument(
        "--total-rps",
        type=positive_float,
        help="total load (req/s) to size replicas for (needs --slo; open-loop view)",
    )
    p.add_argument(
        "--total-streams",
        type=positive_int,
        help="total streams in flight to size replicas for, spread evenly over them (needs "
        "--slo; closed-loop view)",
    )
    p.add_argument("--out", type=Path, help="folder for the CSV tables and plan.json")
    p.set_defaults(func=run_plan)

    r = sub.add_parser(
        "report",
        help="figures (PNG) and a markdown summary of a saved fit",
        description="Write the collapse plot, speedup bands, k-map, cost ratios, capacity "
        "vs SLO and summary.md for one configuration of a saved fit.",
    )
    r.add_argument("fit", type=Path, help="fit artefact written by `specbayes fit --out`")
    _arm_args(r)
    r.add_argument(
        "--slo",
        type=slo_spec,
        metavar="SECONDS|NAME=SECONDS,...",
        help="a mean-latency SLO (s) for the headline, or NAME=SECONDS,...: `latency` (the mean) "
        "for the headline, the metrics the fit models (e.g. ttft_p99=1,itl_p50=0.012) as lines "
        "in metrics_vs_load.png and the capacity under all of them in summary.md",
    )
    r.add_argument("--prob", type=probability, default=0.9)
    r.add_argument("--out", type=Path, required=True, help="output folder")
    r.set_defaults(func=run_report)


def load_plannable(path: Path):
    """The fit at ``path``, refused (one line) when its level cannot be planned with."""
    from specbayes.fit import load_fit

    fit = load_fit(path)
    if fit.model_name == "dense":
        raise ValueError(
            f"{path}: a dense-level fit (k = 0 rows only) has no drafter costs, and plan "
            "compares SD with dense — fit the sd level: `specbayes fit DATA --model sd`"
        )
    return fit


def _arm(fit, args):
    from specbayes.arms import resolve_arm

    names = ("verifier", "hardware", "drafter", "cell", "prefill", "decode", "alpha", "k")
    arm = resolve_arm(fit, **{n: getattr(args, n) for n in names})
    if arm.k == 0:  # plan and report compare an SD arm with dense
        raise ValueError("--k 0: the planner compares an SD arm with dense — give --k 1 or more")
    if arm.k > 0 and arm.alpha is None and not getattr(fit, "alpha_inferred", False):
        raise ValueError("--alpha: the fit did not infer alpha for this arm — give --alpha")
    return arm


def _notes(fit, arm, args) -> list[str]:
    from specbayes.arms import arm_notes

    defaulted = any(getattr(args, n) is None for n in ("drafter", "k", "cell"))
    return arm_notes(fit, arm, defaulted=defaulted)


def rate_grid(top: float, n: int = 7) -> list[float]:
    """About ``n`` loads from 0 to ``top`` on round steps (1, 2, 2.5 or 5 × 10^k req/s)."""
    if not (np.isfinite(top) and top > 0):
        return [0.0]
    raw = top / (n - 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    count = math.floor(top / step + 1e-9)
    return [round(i * step, 10) for i in range(count + 1)]


def _cell(value, column: str) -> str:
    if isinstance(value, bool | np.bool_):
        return "yes" if value else "no"
    if isinstance(value, int | np.integer):
        return str(value)
    if isinstance(value, float | np.floating):
        if np.isnan(value):
            return "—"
        if np.isinf(value):
            return "∞" if value > 0 else "-∞"
        if column.startswith("p_"):
            return f"{value:.2f}"
        return f"{value:.4g}"
    return str(value)


def display(name: str, table):
    """``table`` with printed column names (units, '90% lo/hi') and formatted cells."""
    import pandas as pd

    cols = {c: h for c, h in COLUMNS[name].items() if c in table}
    return pd.DataFrame({h: [_cell(v, c) for v in table[c]] for c, h in cols.items()})


#: Columns the closed-loop view leaves out: a closed loop never saturates, so they are 0.
OPEN_LOOP_ONLY = ("p_bayes_saturated",)


def _print(name: str, table, closed: bool = False) -> None:
    title = (TITLES_CLOSED if closed else TITLES).get(name, TITLES[name])
    if closed:
        table = table.drop(columns=list(OPEN_LOOP_ONLY), errors="ignore")
    print(f"\n== {title}\n{display(name, table).to_string(index=False)}")


def closed_view(fit, args) -> bool:
    """Plan in concurrency: asked for, or the fit's rows are all closed loop and no --rps."""
    from specbayes import plan

    return args.concurrency is not None or (args.rps is None and plan.fitted_closed_loop(fit))


def _load_grid(fit, arm, args, closed: bool, n: int = 7) -> dict:
    """``{"rps": [...]}`` or ``{"concurrency": [...]}``: the asked loads or a default grid
    (about ``n`` rates from 0 to 0.9 of dense saturation; the doubling stream counts up to
    the highest measured)."""
    from dataclasses import replace

    from specbayes import laws, plan

    if closed:
        return {
            "concurrency": args.concurrency or plan.stream_grid(plan.measured_streams(fit, arm))
        }
    c1, c2, c3, knee = plan.effective_cost_draws(fit, replace(arm, k=0, alpha=None, drafter=None))
    sat = float(np.median(laws.saturation_rps(c1, c2, c3, **laws.term_keywords(knee))))
    return {"rps": args.rps or rate_grid(0.9 * sat, n)}


def _tables(fit, arm, args, closed: bool = False) -> dict:
    from dataclasses import replace

    from specbayes import plan

    load = _load_grid(fit, arm, args, closed)
    tables = {
        "speedup": plan.speedup(fit, arm, **load),
        "break_even": plan.break_even(fit, arm, closed_loop=closed),
        "cost_ratios": plan.cost_ratios(fit, arm, ks=[k for k in args.ks if k > 0] or [arm.k]),
    }
    k_arm = arm if arm.alpha is not None else replace(arm, alpha=0.75)
    alphas = args.alphas or ([arm.alpha] if arm.alpha is not None else [0.6, 0.75, 0.9])
    tables["k_table"] = plan.optimal_k(fit, k_arm, alphas, ks=args.ks, **load)
    if args.metric is not None:
        from specbayes.metric_plan import metric_speedup

        out = metric_speedup(fit, arm, args.metric, **load)
        tables["metric_speedup"], tables["metric_break_even"] = out["speedup"], out["break_even"]
    if args.slo is not None:
        ks = sorted({*args.ks, arm.k})  # the arm's own k is always answered about
        cap = dict(prob=args.prob, ks=ks, slo=args.slo)
        tables["capacity"] = plan.capacity(fit, arm, closed_loop=closed, **cap)
        if closed and args.total_streams is not None:
            total = dict(total_streams=args.total_streams)
        elif not closed and args.total_rps is not None:
            total = dict(total_rps=args.total_rps)
        else:
            total = None
        if total is not None:
            tables["replicas"] = plan.replicas(fit, arm, **total, **cap)
    return tables


def _write_plan(out: Path, arm, tables: dict) -> None:
    from specbayes.artefacts import dumps, staged_dir

    with staged_dir(out) as tmp:
        for name, t in tables.items():
            t.to_csv(tmp / f"{name}.csv", index=False)
        doc = dict(
            arm=arm.label(),
            verifier=arm.verifier,
            hardware=arm.hardware,
            drafter=arm.drafter,
            workload=dict(cell=arm.cell, prefill=arm.prefill, decode=arm.decode),
            alpha=arm.alpha,
            k=arm.k,
            units=dict(
                rps="requests/s",
                concurrency="streams in flight (closed loop)",
                latency="s",
                interval="central 90 % (lo, hi)",
            ),
            tables={name: t.to_dict(orient="records") for name, t in tables.items()},
        )
        (tmp / "plan.json").write_text(dumps(doc))


def _saturation_note(speedup) -> None:
    sat_rows = speedup[speedup.p_dense_saturated > 0.5]
    if len(sat_rows):
        print(
            f"note: at {', '.join(f'{r:g}' for r in sat_rows.rps)} req/s the dense server is "
            "saturated in most draws — its latency is unbounded, so the speedup there is not a "
            "ratio of latencies (read P(SD faster))."
        )


def _n_star_note(fit, arm, break_even) -> None:
    from specbayes import plan
    from specbayes.report import n_star_line

    # N* compares two curves: it is measured only as far as both arms are
    print(n_star_line(break_even, beyond=plan.measured_streams(fit, arm, min)))


def run_plan(args: argparse.Namespace) -> int:
    from specbayes.artefacts import check_out_dir

    for flag in ("total_rps", "total_streams"):
        if getattr(args, flag) is not None and args.slo is None:
            raise ValueError(
                f"--{flag.replace('_', '-')}: replicas are sized under an SLO — give "
                "--slo SECONDS (or NAME=SECONDS,...) too"
            )
    if args.rps is not None and args.concurrency is not None:
        raise ValueError(
            "--rps and --concurrency: one view at a time — request rates (open loop) or "
            "stream counts (closed loop)"
        )
    if args.out is not None:
        check_out_dir(args.out)
    fit = load_plannable(args.fit)
    closed = closed_view(fit, args)
    if closed and args.total_rps is not None:
        raise ValueError(
            "--total-rps: replicas are sized for an open-loop load — give --rps for the "
            "open-loop view, or --total-streams N to size them for N streams in flight"
        )
    if not closed and args.total_streams is not None:
        raise ValueError(
            "--total-streams: replicas are sized in streams for the closed-loop view — give "
            "--concurrency (or --total-rps for an open-loop load)"
        )
    arm = _arm(fit, args)
    print(f"plan for {arm.label()} on {arm.hardware}, workload {arm.cell} "
          f"(prefill {arm.prefill:g}, decode {arm.decode:g} tokens)")  # fmt: skip
    for note in _notes(fit, arm, args):
        print(note)
    if closed:
        print("closed loop: N streams always in flight, the same N in SD and dense")
    tables = _tables(fit, arm, args, closed)
    for name, t in tables.items():
        if not (name == "capacity" and "replicas" in tables):  # replicas repeats its columns
            _print(name, t, closed)
    print(f"\n{LEGEND}")
    if closed:
        _n_star_note(fit, arm, tables["break_even"])
    else:
        _saturation_note(tables["speedup"])
    cap = tables.get("capacity")
    cap_col = "capacity_streams" if closed else "capacity_rps"
    if cap is not None and not cap.loc[cap.k == arm.k, cap_col].gt(0).any():
        row = cap[cap.k == arm.k].iloc[0]
        given = ", ".join(f"{name} {y:g} s" for name, y in args.slo.items())
        print(
            f"note: k = {arm.k} does not meet the SLO ({given}) at any load with probability "
            f"{args.prob:g} (its zero-load latency is {row.zero_load_latency_median:.3g} s, "
            "median) — the other rows answer for other k"
        )
    if args.out:
        _write_plan(args.out, arm, tables)
        print(f"\nwrote {len(tables)} tables (CSV) and plan.json to {args.out}/")
    return 0


def run_report(args: argparse.Namespace) -> int:
    from specbayes.artefacts import check_out_dir
    from specbayes.report import write_report

    check_out_dir(args.out)
    fit = load_plannable(args.fit)
    arm = _arm(fit, args)
    head = write_report(fit, args.out, arm=arm, slo=args.slo, prob=args.prob)
    print("\n".join([*_notes(fit, arm, args), *head.lines]))
    print(f"report written to {args.out}/summary.md")
    return 0
