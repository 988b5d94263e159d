r"""The online k controller under bursty traffic, in the embedded simulator (issue 46).

Usage::

    nice .venv/bin/python benchmarks/k_controller.py --seeds 1,2,3 [--write]
    nice .venv/bin/python benchmarks/k_controller.py --fit fit.nc --seeds 1   # a saved fit

The fit is the demo's (``specbayes fit data/demo.parquet --model sd``: Llama-3.1-8B on one
H100, EAGLE-3 head); its k-table (:func:`specbayes.control.k_table`, alphas 0.30-0.95 x
0-40 req/s) drives a :class:`specbayes.control.KController` (its default
:class:`~specbayes.control.ControllerConfig`: request rate over 30 s and acceptance over 5 s,
each since a change of it; 60 s dwell before a switch that raises the utilisation; 3 % margin,
waived for 5 s after a change of the rate; near-ties to the lower utilisation) on the 256 x 256
workload of the simulator that made the demo. Each trace (:func:`specbayes.sim.trace.trace`,
900 s around 7 req/s, acceptance 0.75 falling to 0.5 half-way: a prompt-mix change) is
served by

* ``controller`` — asked at every counter scrape (``--epoch``, 1 s: a serving stack polling
  vLLM's ``/metrics``; a table lookup), starting at the batch-1 best k;
* ``best fixed`` — every k in 0..7 served, the lowest mean latency kept (hindsight);
* ``batch-1 best`` — the k the table gives at 0 req/s and the starting acceptance;
* ``goodput`` — a SmartSpec-style chooser (Liu et al., arXiv 2406.14066) inside the engine:
  every step's k in 0..7 maximises the estimated goodput, the decoding sequences' expected
  tokens :math:`n E(\hat\alpha, k)` over the step time from linear profiles of the verifier
  (in batched tokens) and of a drafter pass (in sequences) — fitted to the engine's own pass
  costs, as the paper profiles the model offline — with :math:`\hat\alpha` a moving average
  (weight 0.05 per step) of the accepted share of drafted tokens, as the paper's
  token-acceptance estimate. Unlike the paper it picks one k for the whole batch each step
  and changes it without a stall (the controller pays 0.2 s per switch).

The same requests (arrival seed) for every policy; a switch of k stops the engine for 0.2 s
(:class:`specbayes.sim.engine.Schedule`). Per (trace, seed): mean and p99 latency of each
policy, switches, the share of time at each k.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from specbayes.report import markdown_table

warnings.filterwarnings("ignore")
REPO = Path(__file__).resolve().parents[1]
VERIFIER, HARDWARE, DRAFTER, CELL = "Llama-3.1-8B", "H100-SXM", "EAGLE3-Llama-3.1-8B", (256, 256)
TRACES = ("bursts", "ramp", "modulated")
BASE, ALPHA, SHIFT, DURATION = 7.0, 0.75, 0.5, 900.0
EPOCH = 1.0  # s between scrapes, and decisions


def table(fit_path: str | None):
    from specbayes import control, plan
    from specbayes.fit import fit, load_fit

    if fit_path:
        f = load_fit(fit_path)
    else:
        f = fit(pd.read_parquet(REPO / "data" / "demo.parquet"), model="sd", progress=False)
    p, g = CELL
    arm = plan.Arm(VERIFIER, HARDWARE, p, g, drafter=DRAFTER, cell=f"{p}x{g}", alpha=ALPHA, k=3)
    return control.k_table(f, arm, rps=list(np.arange(0.0, 40.01, 2.5)), ks=range(0, 8))


def run(tab, name: str, seed: int, epoch_s: float = EPOCH) -> dict:
    from specbayes import control
    from specbayes.sim.trace import run_trace, trace

    tr = trace(name, BASE, ALPHA, duration=DURATION, alpha_shift=SHIFT, seed=seed)
    kw = dict(verifier=VERIFIER, hardware=HARDWARE, drafter=DRAFTER, prefill=CELL[0],
              decode=CELL[1], seed=seed)  # fmt: skip
    fixed = {k: run_trace(tr, k, **kw).summary() for k in range(0, 8)}
    best = min(fixed, key=lambda k: fixed[k]["mean_latency"])
    b1 = tab.best(ALPHA, 0.0)
    ctl = control.KController(tab, k=b1, alpha=ALPHA)
    t0 = time.perf_counter()
    s = run_trace(
        tr, ctl.decide, k0=b1, epoch_s=epoch_s, scrape_s=min(5.0, epoch_s), **kw
    ).summary()
    wall = time.perf_counter() - t0
    gp = run_trace(tr, "goodput", k0=b1, alpha0=ALPHA, **kw).summary()
    return dict(
        trace=name, seed=seed, requests=s["requests"],
        ctl_mean=s["mean_latency"], ctl_p99=s["p99_latency"], switches=s["switches"],
        time_at_k=" ".join(f"{k}:{v:.2f}" for k, v in s["time_at_k"].items()),
        best_k=best, best_mean=fixed[best]["mean_latency"], best_p99=fixed[best]["p99_latency"],
        b1_k=b1, b1_mean=fixed[b1]["mean_latency"], b1_p99=fixed[b1]["p99_latency"],
        dense_mean=fixed[0]["mean_latency"], dense_p99=fixed[0]["p99_latency"],
        goodput_mean=gp["mean_latency"], goodput_p99=gp["p99_latency"],
        goodput_k=" ".join(f"{k}:{v:.2f}" for k, v in gp["time_at_k"].items() if v >= 0.005),
        ctl_wall_s=wall,
    )  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--fit", default=None, help="a saved sd fit of the demo (default: fit it)")
    ap.add_argument("--write", action="store_true", help="append the table to k_controller.md")
    ap.add_argument("--epoch", type=float, default=EPOCH, help="scrape and decision period (s)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    tab = table(args.fit)
    print(f"k-table in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    rows = [run(tab, name, int(s), args.epoch) for s in args.seeds.split(",") for name in TRACES]
    df = pd.DataFrame(rows)
    df["ctl_vs_best"] = df["ctl_mean"] / df["best_mean"] - 1.0
    df["ctl_vs_b1"] = df["ctl_mean"] / df["b1_mean"] - 1.0
    df["p99_vs_goodput"] = df["ctl_p99"] / df["goodput_p99"] - 1.0
    out = markdown_table(df.round(3))
    print(out)
    if args.write:
        cmd = f"nice .venv/bin/python benchmarks/k_controller.py --seeds {args.seeds}"
        cmd += f" --fit {args.fit}" if args.fit else ""
        cmd += f" --epoch {args.epoch:g}" if args.epoch != EPOCH else ""
        stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        with open(Path(__file__).with_suffix(".md"), "a") as fh:
            fh.write(f"\n### {stamp}\n\nCommand: `{cmd} --write` "
                     f"(wall {time.perf_counter() - t0:.0f} s)\n\n{out}\n")  # fmt: skip


if __name__ == "__main__":
    main()
