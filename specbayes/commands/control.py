"""``specbayes control table``: the online k controller's table, exported from a saved fit."""

from __future__ import annotations

import argparse
from pathlib import Path

from specbayes.commands import acceptance_list, float_list, int_list, positive_int_list


def register(sub: argparse._SubParsersAction) -> None:
    from specbayes.commands.plan import _arm_args

    p = sub.add_parser(
        "control",
        help="the online k controller's table (k* over acceptance and load) from a saved fit",
        description="Tools of the online draft-length controller (specbayes.control).",
    )
    inner = p.add_subparsers(dest="control_command", metavar="SUBCOMMAND", required=True)
    t = inner.add_parser(
        "table",
        help="export the posterior k-table over an (alpha, load) grid as CSV",
        description="Each candidate k's posterior expected latency at every (alpha, load) grid "
        "point, the Bayes choice k_bayes, its regret and P(it is the fastest), as CSV: what "
        "specbayes.control.KTable.from_frame reads and KController decides from, without "
        "the fit.",
    )
    t.add_argument("fit", type=Path, help="fit artefact written by `specbayes fit --out`")
    _arm_args(t)
    t.add_argument("--alphas", type=acceptance_list, help="alpha grid (default 0.30-0.95)")
    t.add_argument("--rps", type=float_list, help="request rates (open loop)")
    t.add_argument(
        "--concurrency",
        type=positive_int_list,
        help="streams in flight (closed loop; default for a fit whose rows are all closed loop)",
    )
    t.add_argument("--ks", type=int_list, default=list(range(0, 8)), help="candidate k (0=dense)")
    t.add_argument("--out", type=Path, required=True, help="CSV file to write")
    t.set_defaults(func=run_table)


def run_table(args: argparse.Namespace) -> int:
    import numpy as np

    from specbayes import control
    from specbayes.commands.plan import _arm, _load_grid, closed_view, load_plannable

    if args.rps is not None and args.concurrency is not None:
        raise ValueError("--rps and --concurrency: one load at a time (open or closed loop)")
    if args.out.suffix.lower() != ".csv":
        raise ValueError(f"--out {args.out}: the table is written as CSV — name a .csv file")
    fit = load_plannable(args.fit)
    arm = _arm(fit, args)
    closed = closed_view(fit, args)
    loads = _load_grid(fit, arm, args, closed, n=13)
    if "rps" in loads:  # the table's grid increases: the asked rates sorted, once each
        loads["rps"] = sorted(set(loads["rps"]))
    alphas = args.alphas or control.DEFAULT_ALPHAS
    (grid,) = loads.values()
    # the table spans its own alphas and k: the arm names the configuration, not one (alpha, k)
    print(f"k-table for {arm.verifier} + {arm.drafter} on {arm.hardware}, workload {arm.cell}: "
          f"{len(alphas)} alphas x {len(grid)} loads x {len(args.ks)} k")  # fmt: skip
    table = control.k_table(fit, arm, alphas=alphas, ks=args.ks, **loads)
    frame = table.to_frame()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(args.out, index=False)
    unsure = int(np.sum(table.p_best < 0.5))
    best = sorted({int(k) for k in table.k_bayes.ravel()})
    print(f"wrote {args.out} ({len(frame)} rows); best k in {best}; "
          f"{unsure} grid points where the best k is the fastest with P < 0.5")  # fmt: skip
    return 0
