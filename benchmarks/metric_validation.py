"""Held-out validation of the per-point metric models (issue 45): TTFT / ITL / latency percentiles.

Issue 45 asks: on ``data/real`` (median / p99 TTFT and median ITL per point, closed loop) and on
simulated sweeps, the 90 % predictive intervals cover 85-95 % of held-out points per metric;
the predicted p99 TTFT at the highest unsaturated load is within ±25 % of the measured one on
each real arm. With two cells per arm, ``data/real`` has no cell to leave out, so points are
held out along the load axis:

* **held-out points** — in every sweep, sorted by load, the odd-numbered points are held out
  in one fold and the even-numbered ones in the other (two fits; every unsaturated point is
  predicted once by a fit that did not see it). Saturated points are never scored (the fit
  excludes them from the law too);
* **highest load** (``data/real`` only) — every sweep's highest unsaturated load point is held
  out (one fit), and its p99 TTFT predicted: posterior median of the expected statistic over
  the measured value.

The simulated sweeps (:func:`specbayes.sim.simulate_point`, closed loop N = 1..64, two
verifiers on H100, dense and EAGLE-3) record ``ttft_p99``, ``itl_p99`` and ``latency_p95``
and go through the same held-out-points folds — one such set per seed of ``--sim-seeds``
(default five: 28 points a set, so the pooled coverage has ~140 points and a binomial
standard error of ~0.025 at 90 %; one set's 28 cannot tell 0.90 from 0.96). Every fit uses
the default sampler settings; its health (divergences, max R-hat, min bulk ESS) is reported as
it comes.

Run: ``PYTHONPATH=. .venv/bin/python benchmarks/metric_validation.py [--write]``
(``--write`` rewrites ``benchmarks/metric_validation.md``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import time
from pathlib import Path

import numpy as np
import pandas as pd

from specbayes.data import read_sweeps, validate_sweeps
from specbayes.report import markdown_table
from specbayes.validate import heldout_metrics, metric_scores

ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT / "data" / "real" / "speculators_qwen3.8-27b_b200_sweeps.csv"
OUT = Path(__file__).with_name("metric_validation.md")
REAL_METRICS = ("ttft_p50", "ttft_p99", "itl_p50")
SIM_METRICS = ("ttft_p99", "itl_p99", "latency_p95")
SIM_PAIRS = (
    ("Qwen3-8B", "EAGLE3-Qwen3-8B", 0.7, 3),
    ("Qwen3-14B", "EAGLE3-Qwen3-14B", 0.8, 4),
)
STREAMS = (1, 2, 4, 8, 16, 32, 64)
TOP_COLUMNS = ["cell", "drafter", "k", "concurrency", "observed", "predicted", "lo90", "hi90",
               "ratio", "within_25"]  # fmt: skip
SWEEP = ["verifier", "hardware", "cell", "drafter", "k"]


def simulate(seed: int = 0) -> pd.DataFrame:
    """Closed-loop sweeps of :data:`SIM_PAIRS`, dense and SD (512 x 256 tokens)."""
    from specbayes.sim import simulate_point

    rows = []
    for verifier, drafter, alpha, k in SIM_PAIRS:
        for sd in (False, True):
            arm = dict(drafter=drafter, alpha=alpha, k=k) if sd else dict(k=0)
            for i, n in enumerate(STREAMS):
                rows.append(
                    simulate_point(verifier, hardware="H100-SXM", prefill=512, decode=256,
                                   concurrency=n, n_requests=max(200, 6 * n), seed=seed + i,
                                   **arm)
                )  # fmt: skip
    return pd.DataFrame(rows)


def load_rank(data: pd.DataFrame) -> pd.Series:
    """Each row's position along its sweep's load axis (0 = lightest)."""
    load = data["concurrency"].fillna(data["rps"])
    keys = data[SWEEP].astype(str).agg("|".join, axis=1)
    return load.groupby(keys).rank(method="first").astype(int) - 1


def highest_unsaturated(data: pd.DataFrame) -> np.ndarray:
    """Mask of every sweep's highest unsaturated load point."""
    ok = ~data["saturated"].astype(bool)
    load = data["concurrency"].fillna(data["rps"]).where(ok)
    keys = data[SWEEP].astype(str).agg("|".join, axis=1)
    return (ok & (load == load.groupby(keys).transform("max"))).to_numpy()


def fit_and_predict(
    data: pd.DataFrame, held: np.ndarray, metrics, label: str, priors=None, model: str = "sd"
):
    """Fit ``model`` on ``~held`` (prior overrides ``priors``), predict every metric on the
    held-out unsaturated rows."""
    from specbayes.fit import fit

    train = data[~held]
    test = data[held & ~data["saturated"].astype(bool).to_numpy()].reset_index(drop=True)
    t0 = time.perf_counter()
    result = fit(train, model, metrics=metrics, priors=priors, progress=False)
    preds = heldout_metrics(result, test)
    ids = test[["cell", "drafter", "k", "concurrency"]].iloc[preds["row"].to_numpy()]
    preds = pd.concat([ids.reset_index(drop=True), preds.drop(columns="row")], axis=1)
    d = result.diagnostics()
    health = dict(
        fit=label,
        rows_fitted=len(train),
        rows_scored=len(test),
        divergences=int(d.attrs.get("divergences", 0)),
        max_rhat=float(d["r_hat"].max()),
        rhat_above_1_01=int((d["r_hat"] > 1.01).sum()),
        min_ess_bulk=float(d["ess_bulk"].min()),
        ess_below_400=int((d["ess_bulk"] < 400).sum()),
        worst_rhat=str(d["r_hat"].idxmax()).replace("|", "/"),  # no pipe in a markdown cell
        wall_s=round(time.perf_counter() - t0, 1),
    )
    print(health, flush=True)
    return preds.assign(fold=label), health


def alternate(data: pd.DataFrame, metrics, name: str, priors=None, model: str = "sd"):
    """Two folds: odd, then even load positions held out in every sweep."""
    rank = load_rank(data).to_numpy()
    out = [fit_and_predict(data, rank % 2 == r, metrics, f"{name} {p}", priors, model)
           for r, p in ((1, "odd"), (0, "even"))]  # fmt: skip
    return pd.concat([p for p, _ in out], ignore_index=True), [h for _, h in out]


def coverage_table(preds: pd.DataFrame, metrics) -> pd.DataFrame:
    """Per-metric scores pooled over folds (:func:`specbayes.validate.metric_scores`)."""
    rows = [dict(metric=m, **metric_scores(preds[preds.metric == m])) for m in metrics]
    return pd.DataFrame(rows)


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()


def _md(df: pd.DataFrame) -> str:
    return markdown_table(df.round(3))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="rewrite metric_validation.md")
    ap.add_argument("--skip-sim", action="store_true", help="data/real only")
    ap.add_argument("--priors", type=json.loads, default=None, help="prior overrides (JSON)")
    ap.add_argument(
        "--sim-seeds", default="0,1,2,3,4",
        help="simulated sets, one per seed (simulation seed 1000 x SEED), each in two folds",
    )  # fmt: skip
    args = ap.parse_args()
    t0, commit = time.perf_counter(), _git("rev-parse", "--short", "HEAD")
    real = validate_sweeps(read_sweeps(REAL)).data.reset_index(drop=True)
    real_preds, health = alternate(real, REAL_METRICS, "real", args.priors)
    top, h = fit_and_predict(
        real, highest_unsaturated(real), REAL_METRICS, "real highest", args.priors
    )
    health.append(h)
    top = top[top.metric == "ttft_p99"].assign(ratio=lambda t: t.predicted / t.observed)
    top = top.assign(within_25=(top.ratio - 1).abs() <= 0.25)
    sections = [
        "## data/real: held-out load points (odd / even positions, two fits)",
        _md(coverage_table(real_preds, REAL_METRICS)),
        "## data/real: p99 TTFT at each sweep's highest unsaturated load (held out, one fit)",
        _md(top[TOP_COLUMNS]),
    ]
    if not args.skip_sim:
        seeds = [int(x) for x in args.sim_seeds.split(",")]
        sim_preds = []
        for seed in seeds:
            sim = validate_sweeps(simulate(1000 * seed)).data.reset_index(drop=True)
            preds, hs = alternate(sim, SIM_METRICS, f"sim {seed}", args.priors)
            sim_preds.append(preds.assign(seed=seed))
            health += hs
        sim_preds = pd.concat(sim_preds, ignore_index=True)
        per_seed = pd.concat(
            [coverage_table(p, SIM_METRICS).assign(seed=seed)
             for seed, p in sim_preds.groupby("seed")],
            ignore_index=True,
        )  # fmt: skip
        sections += [
            f"## simulated: held-out load points (odd / even positions, two fits per set; "
            f"{len(seeds)} sets, seeds {args.sim_seeds}, pooled)",
            _md(coverage_table(sim_preds, SIM_METRICS)),
            "### per simulated set",
            _md(per_seed[["seed", "metric", "rows", "cov50", "cov90", "rel_err"]]),
        ]
    sections += ["## sampler health per fit", markdown_table(pd.DataFrame(health), ".4g")]
    body = "\n\n".join(sections)
    print(body)
    if args.write:
        head = (
            "# Metric validation (issue 45)\n\n"
            f"`PYTHONPATH=. .venv/bin/python benchmarks/metric_validation.py --write` — "
            f"{dt.date.today()}, commit {commit}, "
            f"{time.perf_counter() - t0:.0f} s in all. Method: the module docstring of "
            "`benchmarks/metric_validation.py`.\n\n"
        )
        OUT.write_text(head + body + "\n")


if __name__ == "__main__":
    main()
