"""TTFT / ITL / latency percentiles of an MoE verifier on cells the fit never saw: the ``moe``
level's metric model against the ``sd`` level's, on the same rows.

On the ``moe`` level a metric's zero-load part carries the verifier's expert reads at the
coverage of the tokens a pass routes, ``C1 + phi(B(k + 1)) X``
(:func:`specbayes.model.metrics.log_fixed_cost`); on ``sd`` the metric is linear in the batch.
``data/paper.parquet`` records every percentile of every point. One MoE verifier and GPU
(default Qwen3-30B-A3B on H100-SXM) is fitted with ``--metrics ttft_p99,itl_p99,latency_p95``
on its four corner cells (:data:`moe_level.CELLS`, as ``moe_plan.py``) at the defaults, once
per level; every unsaturated point of the twelve other cells is predicted
(:func:`specbayes.validate.heldout_metrics`) and scored per metric: coverage of the 50 % /
90 % predictive intervals, mean relative error of the posterior median, median ratio
predicted / observed. Each fit's health as it comes.

Run: ``PYTHONPATH=. .venv/bin/python benchmarks/moe_metrics.py [--verifier V --hardware H]
[--write]`` (``--write`` appends to ``benchmarks/moe_metrics.md``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import time
from pathlib import Path

import pandas as pd
from metric_validation import _git, _md, coverage_table
from moe_level import CELLS, rows

from specbayes.data import validate_sweeps
from specbayes.report import markdown_table
from specbayes.validate import heldout_metrics

OUT = Path(__file__).with_name("moe_metrics.md")
METRICS = ("ttft_p99", "itl_p99", "latency_p95")
LEVELS = ("moe", "sd")


def fit_level(train: pd.DataFrame, test: pd.DataFrame, level: str):
    """Fit ``level`` with :data:`METRICS` on ``train``; held-out predictions and health."""
    from specbayes.fit import fit

    t0 = time.perf_counter()
    result = fit(train, level, metrics=METRICS, progress=False)
    wall = time.perf_counter() - t0
    preds = heldout_metrics(result, test)
    s = result.summary()
    health = dict(level=level, rows=s["rows"], divergences=s["divergences"],
                  max_r_hat=s["max_r_hat"], min_ess_bulk=s["min_ess_bulk"], worst=s["worst"],
                  wall_s=round(wall, 1))  # fmt: skip
    print(health, flush=True)
    return preds.assign(level=level), health


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--verifier", default="Qwen3-30B-A3B")
    ap.add_argument("--hardware", default="H100-SXM")
    ap.add_argument("--write", action="store_true", help="append to moe_metrics.md")
    args = ap.parse_args()
    t0, commit = time.perf_counter(), _git("rev-parse", "--short", "HEAD")
    data = validate_sweeps(rows(args.verifier, args.hardware, "all")).data
    corner = data["cell"].isin(CELLS.split(",")).to_numpy()
    train = data[corner].reset_index(drop=True)
    test = data[~corner & ~data["saturated"].astype(bool).to_numpy()].reset_index(drop=True)
    out = [fit_level(train, test, level) for level in LEVELS]
    preds = pd.concat([p for p, _ in out], ignore_index=True)
    table = pd.concat(
        [coverage_table(p, METRICS).assign(level=level) for level, p in preds.groupby("level")],
        ignore_index=True,
    )
    body = "\n\n".join([
        f"Fitted: {len(train)} rows of cells {CELLS}; scored: {len(test)} unsaturated rows of "
        f"the {test['cell'].nunique()} other cells.",
        _md(table[["level", "metric", "rows", "cov50", "cov90", "rel_err", "median_ratio"]]),
        markdown_table(pd.DataFrame([h for _, h in out]), ".4g"),
    ])  # fmt: skip
    print(body)
    if args.write:
        head = (
            f"\n## {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC — {args.verifier}, "
            f"{args.hardware}, commit {commit}, {time.perf_counter() - t0:.0f} s\n\n"
            f"`PYTHONPATH=. .venv/bin/python benchmarks/moe_metrics.py --verifier "
            f"{args.verifier} --hardware {args.hardware} --write`\n\n"
        )
        if not OUT.exists():
            OUT.write_text(
                "# Metrics of an MoE verifier on held-out cells: the moe level against sd\n\n"
                "Method: the module docstring of `benchmarks/moe_metrics.py`.\n"
            )
        with OUT.open("a") as fh:
            fh.write(head + body + "\n")


if __name__ == "__main__":
    main()
