"""``specbayes plan`` and ``specbayes report``: decisions from a saved fit."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from specbayes.commands import float_list, int_list


def _arm_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("configuration (defaults: the most-measured SD configuration)")
    g.add_argument("--verifier")
    g.add_argument("--hardware")
    g.add_argument("--drafter")
    g.add_argument("--cell", help="workload label (default '<prefill>x<decode>')")
    g.add_argument("--prefill", type=float, help="mean prompt tokens")
    g.add_argument("--decode", type=float, help="mean output tokens")
    g.add_argument("--alpha", type=float, help="per-token acceptance (omit: inferred alpha)")
    g.add_argument("--k", type=int, help="draft length of the SD arm")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan",
        help="speedup vs load, break-even, best k, capacity and replicas from a saved fit",
        description="Decisions with intervals from a saved fit (FIT.nc). Every number is "
        "computed per posterior draw and then summarised.",
    )
    p.add_argument("fit", type=Path, help="fit artefact written by `specbayes fit --out`")
    _arm_args(p)
    p.add_argument("--rps", type=float_list, help="request rates for the speedup table")
    p.add_argument("--alphas", type=float_list, help="alpha grid of the k-table")
    p.add_argument("--ks", type=int_list, default=list(range(0, 11)), help="candidate k (0=dense)")
    p.add_argument("--slo", type=float, help="mean-latency SLO in seconds")
    p.add_argument("--prob", type=float, default=0.9, help="probability the SLO must be met")
    p.add_argument("--total-rps", type=float, help="total load to size replicas for")
    p.add_argument("--out", type=Path, help="directory for CSV/JSON tables")
    p.set_defaults(func=run_plan)

    r = sub.add_parser(
        "report",
        help="figures (PNG) and a markdown summary of a saved fit",
        description="Write the collapse plot, speedup bands, k-map, cost ratios, capacity "
        "vs SLO and summary.md for one configuration of a saved fit.",
    )
    r.add_argument("fit", type=Path)
    _arm_args(r)
    r.add_argument("--slo", type=float, help="mean-latency SLO in seconds for the headline")
    r.add_argument("--prob", type=float, default=0.9)
    r.add_argument("--out", type=Path, required=True, help="output directory")
    r.set_defaults(func=run_report)


def _arm(fit, args):
    from dataclasses import replace

    from specbayes.report import default_arm

    arm = default_arm(fit)
    changes = {
        name: getattr(args, name)
        for name in ("verifier", "hardware", "drafter", "cell", "prefill", "decode", "alpha", "k")
        if getattr(args, name) is not None
    }
    if ("prefill" in changes or "decode" in changes) and "cell" not in changes:
        changes["cell"] = None
    arm = replace(arm, **changes)
    if arm.cell is None:
        arm = replace(arm, cell=f"{round(arm.prefill)}x{round(arm.decode)}")
    return arm


def _print(title: str, df) -> None:
    import pandas as pd

    with pd.option_context(
        "display.width", 140, "display.max_columns", 30, "display.float_format", "{:.4g}".format
    ):
        print(f"\n== {title}\n{df.to_string(index=False)}")


def run_plan(args: argparse.Namespace) -> int:
    from dataclasses import replace

    import numpy as np

    from specbayes import laws, plan
    from specbayes.fit import load_fit

    fit = load_fit(args.fit)
    arm = _arm(fit, args)
    if arm.k == 0:
        raise ValueError("the planner compares an SD arm with dense: give --k >= 1")
    print(f"plan for {arm.label()} on {arm.hardware}, workload {arm.cell}")
    dense = plan.effective_cost_draws(fit, replace(arm, k=0, alpha=None, drafter=None))
    sat = np.median(laws.saturation_rps(*dense))
    rps = args.rps or list(np.round(np.linspace(0, 0.9 * sat, 7), 3))
    tables = {
        "speedup": plan.speedup(fit, arm, rps),
        "break_even": plan.break_even(fit, arm),
        "cost_ratios": plan.cost_ratios(fit, arm, ks=[k for k in args.ks if k > 0]),
    }
    k_arm = arm if arm.alpha is not None else replace(arm, alpha=0.75)
    alphas = args.alphas or ([arm.alpha] if arm.alpha is not None else [0.6, 0.75, 0.9])
    tables["k_table"] = plan.optimal_k(fit, k_arm, alphas, rps, ks=args.ks)
    if args.slo is not None:
        tables["capacity"] = plan.capacity(fit, arm, args.slo, prob=args.prob, ks=args.ks)
        if args.total_rps is not None:
            tables["replicas"] = plan.replicas(
                fit, arm, args.total_rps, args.slo, prob=args.prob, ks=args.ks
            )
    for name, t in tables.items():
        shown = t
        if name == "k_table":
            shown = t[
                ["alpha", "rps", "k_bayes", "expected_latency", "regret", "p_bayes_saturated"]
            ]
        _print(name, shown)
    sat_rows = tables["speedup"][tables["speedup"].p_dense_saturated > 0.5]
    if len(sat_rows):
        print(
            f"\nnote: at {', '.join(f'{r:g}' for r in sat_rows.rps)} req/s the dense server is "
            "saturated in most draws — its latency is unbounded, so the speedup there is not a "
            "ratio of latencies (reported as P(faster) only)."
        )
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        for name, t in tables.items():
            t.to_csv(args.out / f"{name}.csv", index=False)
        (args.out / "plan.json").write_text(
            json.dumps(
                {name: t.to_dict(orient="records") for name, t in tables.items()},
                indent=2,
                default=float,
            )
        )
        print(f"\nwrote {len(tables)} tables to {args.out}/")
    return 0


def run_report(args: argparse.Namespace) -> int:
    from specbayes.fit import load_fit
    from specbayes.report import write_report

    fit = load_fit(args.fit)
    head = write_report(fit, args.out, arm=_arm(fit, args), slo=args.slo, prob=args.prob)
    print("\n".join(head.lines))
    print(f"report written to {args.out}/summary.md")
    return 0
