"""The planner on a ``moe`` fit: its speedup on cells the fit never saw, against the measured.

Usage::

    .venv/bin/python benchmarks/moe_plan.py            # prints the table
    .venv/bin/python benchmarks/moe_plan.py --write    # and appends it to benchmarks/moe.md

One MoE verifier of ``data/paper.parquet`` (default Qwen3-30B-A3B on H100-SXM) is fitted on
four corner cells (:data:`moe_level.CELLS`) at the defaults, once with ``moe`` and once with
``sd``; every other cell of that verifier and GPU is held out. For each held-out SD sweep,
``plan.speedup`` of its arm (its drafter, k and measured alpha) is read at the loads the sweep
ran, and compared with the measured speedup there: the dense sweep of the same cell at the
same concurrency (closed loop) or its log latency interpolated in the rate by a monotone cubic
(PCHIP; open loop, only between the dense sweep's own lowest and highest fitted rates). Rows
validation leaves out (saturated, preempted) are not scored.

The planner's intervals are of the *mean* latency ratio (no observation noise), so they are
expected to hold somewhat less than 90 % of measured speedups where the noise matters;
reported per level: the median and 90th percentile of |log(predicted median / measured)|, the
share of measured speedups inside the 90 % interval, and how often P(SD faster) lies on the
measured side of 0.5 where the measured speedup is below 0.9 or above 1.1.
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from moe_level import CELLS  # noqa: E402


def held_out_pairs(rows: pd.DataFrame) -> pd.DataFrame:
    """One line per (held-out SD sweep, load): its arm and the measured speedup there."""
    from scipy.interpolate import PchipInterpolator

    from specbayes.data import validate_sweeps

    kept = validate_sweeps(rows).data
    out = []
    for cell, in_cell in kept.groupby("cell"):
        dense = in_cell[in_cell["k"] == 0]
        for closed in (False, True):
            loop = "concurrency" if closed else "rps"
            d = dense[dense["concurrency"].notna() == closed].sort_values(loop)
            if len(d) < 2:
                continue
            # shape-preserving: the dense latency is concave in the rate at low loads (the
            # coverage grows fast), where a straight line between two measured rates
            # under-states it (moe.md, 2026-12-07 10:46)
            curve = None if closed else PchipInterpolator(d["rps"], np.log(d["latency"]))
            sd = in_cell[(in_cell["k"] > 0) & (in_cell["concurrency"].notna() == closed)]
            for (drafter, k, alpha), sweep in sd.groupby(["drafter", "k", "alpha"]):
                for _, r in sweep.iterrows():
                    load = float(r[loop])
                    if closed:
                        match = d[d["concurrency"] == load]
                        if match.empty:
                            continue
                        dense_latency = float(match["latency"].iloc[0])
                    elif d["rps"].min() <= load <= d["rps"].max():
                        dense_latency = float(np.exp(curve(load)))
                    else:
                        continue
                    arm = dict(cell=cell, prefill=r["prefill"], decode=r["decode"])
                    arm.update(drafter=drafter, k=int(k), alpha=float(alpha), closed=closed)
                    out.append(dict(arm, load=load, measured=dense_latency / r["latency"]))
    return pd.DataFrame(out)


def planned(f, pairs: pd.DataFrame, verifier: str, hardware: str) -> pd.DataFrame:
    """``plan.speedup`` of each held-out arm at its measured loads: median, 90 % interval and
    P(SD faster) beside the measured speedup."""
    from specbayes import plan

    scored = []
    keys = ["cell", "prefill", "decode", "drafter", "k", "alpha", "closed"]
    for key, group in pairs.groupby(keys):
        cell, prefill, decode, drafter, k, alpha, closed = key
        arm = plan.Arm(verifier, hardware, prefill, decode, drafter, cell, alpha, k)
        loads = group["load"].to_numpy()
        table = plan.speedup(f, arm, **{("concurrency" if closed else "rps"): loads})
        scored.append(
            group.assign(
                median=table["median"].to_numpy(),
                lo=table["lo"].to_numpy(),
                hi=table["hi"].to_numpy(),
                p_faster=table["p_faster"].to_numpy(),
            )
        )
    return pd.concat(scored, ignore_index=True)


def summarise(scored: pd.DataFrame) -> dict:
    err = np.abs(np.log(scored["median"] / scored["measured"]))
    inside = (scored["lo"] <= scored["measured"]) & (scored["measured"] <= scored["hi"])
    clear = (scored["measured"] < 0.9) | (scored["measured"] > 1.1)
    right = (scored["p_faster"] > 0.5) == (scored["measured"] > 1.0)
    return dict(
        points=len(scored),
        arms=scored.groupby(["cell", "drafter", "k", "alpha", "closed"]).ngroups,
        median_err=float(np.median(err)),
        p90_err=float(np.quantile(err, 0.9)),
        cov90=float(np.mean(inside)),
        direction=f"{int(np.sum(right & clear))}/{int(np.sum(clear))}",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verifier", default="Qwen3-30B-A3B")
    parser.add_argument("--hardware", default="H100-SXM")
    parser.add_argument("--levels", default="moe,sd")
    parser.add_argument("--write", action="store_true", help="append to benchmarks/moe.md")
    parser.add_argument("--scores", help="write each level's scored points to SCORES-LEVEL.csv")
    args = parser.parse_args()
    from specbayes.datasets import load_dataset
    from specbayes.fit import fit

    data = load_dataset("paper")
    data = data[(data["verifier"] == args.verifier) & (data["hardware"] == args.hardware)]
    fitted = data[data["cell"].isin(CELLS.split(","))].reset_index(drop=True)
    pairs = held_out_pairs(data[~data["cell"].isin(CELLS.split(","))].reset_index(drop=True))
    lines = []
    for level in args.levels.split(","):
        t0 = time.perf_counter()
        f = fit(fitted, model=level, progress=False)
        s = f.summary()
        t1 = time.perf_counter()
        scored = planned(f, pairs, args.verifier, args.hardware)
        r = summarise(scored)
        if args.scores:
            scored.to_csv(f"{args.scores}-{level}.csv", index=False)
        health = f"{s['divergences']} div, R-hat {s['max_r_hat']:.2f}, ESS {s['min_ess_bulk']:.0f}"
        lines.append(
            f"| `{level}` | {health} | {t1 - t0:.0f} | {time.perf_counter() - t1:.1f} | "
            f"{r['arms']} / {r['points']} | {r['median_err']:.3f} | {r['p90_err']:.3f} | "
            f"{r['cov90']:.2f} | {r['direction']} |"
        )
        print(lines[-1], flush=True)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    head = (
        "| level | fit health | fit s | plan s | arms / points | median abs log error | "
        "90th pct | measured inside 90 % | P(SD faster) right side |\n|" + "---|" * 9
    )
    text = (
        f"\n### {stamp} — the planner on held-out cells: {args.verifier}, {args.hardware} "
        f"(code {commit}, {platform.machine()}, 2 CPUs)\n\n"
        f"Command: `.venv/bin/python benchmarks/moe_plan.py --verifier {args.verifier} "
        f"--hardware {args.hardware}`. Fitted: cells {CELLS} ({len(fitted)} rows before "
        "validation); planned: every SD sweep of the other cells at its measured loads.\n\n"
        f"{head}\n" + "\n".join(lines) + "\n"
    )
    print(text)
    if args.write:
        with open(REPO / "benchmarks" / "moe.md", "a") as fh:
            fh.write(text)


if __name__ == "__main__":
    main()
