"""The knee on the bundled demo: health, the knee found, LOO and residuals by load rank.

Fits ``data/demo.parquet`` (``sd``, default sampler settings) with the paper's law and with
the knee (``priors={"knee": KNEE}``, ``specbayes fit --knee``) and prints per fit: sampler
health, the knee per (verifier, GPU) per chain (tokens per pass; the simulator's is 2.5
roofline ridges = 553 tokens on the H100), its excess, ``az.loo`` (elpd, rows with Pareto
k > 0.7) and the in-sample log residual of the posterior-median mean latency by load rank
within each sweep (1 = the synchronous N = 1 point, 9 = the top constant rate).

    .venv/bin/python benchmarks/knee.py                  # both fits
    .venv/bin/python benchmarks/knee.py --only knee --width 0.25

``--width`` scales the knee's smooth turn (:data:`specbayes.laws.KNEE_WIDTH`, in units of
:math:`\\sqrt{B_K}`). Results: ``benchmarks/knee.md``.
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import arviz as az
import numpy as np
import pandas as pd

from specbayes import laws
from specbayes.fit import fit
from specbayes.model.priors import KNEE

REPO = Path(__file__).resolve().parents[1]


def report(name: str, f, seconds: float) -> None:
    """Print one fit's health, knee, LOO and residuals by load rank."""
    diag = f.diagnostics()
    print(
        f"\n## {name}: {seconds:.0f} s, divergences {f.divergences}, "
        f"max R-hat {diag['r_hat'].max():.2f}, min bulk ESS {diag['ess_bulk'].min():.0f}"
    )
    print("worst:", ", ".join(diag.sort_values("ess_bulk").index[:4]))
    post = f.idata.posterior
    if "knee_at" in post:
        for g, group in enumerate(post["knee_at"].coords["group"].values):
            at = post["knee_at"].values[:, :, g].mean(axis=1).round(0)
            ex = post["knee_excess"].values[:, :, g].mean(axis=1).round(3)
            print(f"knee {group}: tokens per chain {at.tolist()}, excess {ex.tolist()}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loo = az.loo(f.idata, pointwise=True, var_name="log_latency")
    k = np.asarray(loo.pareto_k)
    print(
        f"loo: elpd {loo.elpd_loo:.1f}, p_loo {loo.p_loo:.1f}, "
        f"Pareto k > 0.7: {(k > 0.7).sum()} of {k.size} ({(k > 0.7).mean():.1%})"
    )
    rows = f.data.reset_index(drop=True).copy()
    mu = np.log(f.mean_latency(rows, measured=True).median("sample").values)
    rows["residual"] = np.log(rows["latency"].to_numpy()) - mu
    keys = ["verifier", "cell", "k", "alpha"]
    rows["rank"] = rows.groupby(keys, dropna=False)["rps"].rank().astype(int)
    table = rows.groupby("rank")["residual"].agg(["mean", "std", "min", "max"]).round(3)
    print(table.T.to_string())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", choices=("law", "knee"), default=None)
    p.add_argument("--width", type=float, default=laws.KNEE_WIDTH)
    args = p.parse_args()
    laws.KNEE_WIDTH = args.width
    demo = pd.read_parquet(REPO / "data/demo.parquet")
    runs = {"law": None, "knee": {"knee": KNEE}}
    for name, priors in runs.items():
        if args.only and name != args.only:
            continue
        start = time.perf_counter()
        f = fit(demo, model="sd", priors=priors)
        label = name if name == "law" else f"knee (width {args.width:g})"
        report(label, f, time.perf_counter() - start)


if __name__ == "__main__":
    main()
