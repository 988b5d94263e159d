"""Two drafters on one verifier, acceptance unknown: health, inferred alpha, best k (issue 42).

Usage::

    nice .venv/bin/python benchmarks/two_drafters.py --seeds 1,2,3,4
    nice .venv/bin/python benchmarks/two_drafters.py --seeds 1 --quick   # a smoke run
    nice .venv/bin/python benchmarks/two_drafters.py --priors '{"c1_dev": null}'   # a setting

The set is what a user comparing an EAGLE-3 head with a small draft model measures: the
embedded serving simulator (``specbayes.sim``) runs Qwen3-14B on one A100 with
EAGLE3-Qwen3-14B and Qwen3-1.7B, draft lengths k = 1, 3, 5 each, on four (prefill, decode)
cells, plus the dense sweep of every cell — GuideLLM-like sweeps of 9 rates. Each
(cell, drafter) gets its own acceptance rate, drawn per seed (EAGLE-3 head U(0.6, 0.85),
draft model U(0.45, 0.75)), and then **hidden**: ``alpha``, ``alpha_source``,
``acceptance_*`` and ``alpha_hat`` are dropped, as GuideLLM and ``vllm bench serve`` report
no acceptance. Per seed it prints

* the fit's health at the default configuration (0 divergences, R-hat <= 1.01, bulk ESS
  >= 400) and its wall time;
* per (cell, drafter) the inferred alpha's 90 % interval against the drawn one;
* per drafter, on the 512x512 cell at two loads (30 % and 70 % of the dense arm's highest
  measured rate), the planner's best k (:func:`specbayes.plan.optimal_k` at the inferred
  alpha, candidates k = 1..7) against the simulator's brute force: every candidate simulated
  at that rate with the drawn alpha (3 seeds of 600 requests each, mean latency), the fastest
  kept. ``match`` is the same k; ``gap`` the brute-force latency of the planner's k over the
  brute-force best (0 where they match).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import pandas as pd

VERIFIER, HARDWARE = "Qwen3-14B", "A100-SXM-80GB"
DRAFTERS = {"EAGLE3-Qwen3-14B": (0.6, 0.85), "Qwen3-1.7B": (0.45, 0.75)}
KS = (1, 3, 5)
CELLS = ((256, 256), (512, 512), (1024, 256), (256, 1024))
CANDIDATES = tuple(range(1, 8))
HIDDEN = ("alpha_source", "acceptance_length", "acceptance_marginal", "alpha_hat")


def alphas(seed: int) -> dict[tuple[str, str], float]:
    """The acceptance rate of every (cell, drafter) for ``seed``."""
    rng = np.random.default_rng([seed, 42])
    return {
        (f"{p}x{g}", d): round(float(rng.uniform(*bounds)), 3)
        for p, g in CELLS
        for d, bounds in DRAFTERS.items()
    }


def build(seed: int, n_rates: int = 9) -> pd.DataFrame:
    """The simulated sweeps of one seed, acceptance hidden."""
    from specbayes.sim.api import sweep

    truth = alphas(seed)
    frames = []
    for p, g in CELLS:
        cell = f"{p}x{g}"
        frames.append(sweep(VERIFIER, hardware=HARDWARE, prefill=p, decode=g, n_rates=n_rates,
                            seed=seed))  # fmt: skip
        for drafter in DRAFTERS:
            for k in KS:
                frames.append(
                    sweep(VERIFIER, hardware=HARDWARE, drafter=drafter, prefill=p, decode=g,
                          alpha=truth[(cell, drafter)], k=k, n_rates=n_rates, seed=seed)
                )  # fmt: skip
    df = pd.concat(frames, ignore_index=True)
    df["alpha"] = np.nan
    return df.drop(columns=[c for c in HIDDEN if c in df])


def brute_force(drafter: str, alpha: float, rps: float, seed: int, n: int) -> pd.Series:
    """Mean simulated latency of every candidate k at ``rps`` (mean over 3 seeds)."""
    from specbayes.sim.api import simulate_point

    out = {}
    for k in CANDIDATES:
        lat = [
            simulate_point(VERIFIER, hardware=HARDWARE, drafter=drafter, prefill=512, decode=512,
                           alpha=alpha, k=k, rps=rps, n_requests=n, seed=seed * 100 + s)["latency"]
            for s in range(3)
        ]  # fmt: skip
        out[k] = float(np.mean(lat))
    return pd.Series(out)


def run(seed: int, quick: bool, priors: dict | None = None) -> dict:
    from specbayes import plan
    from specbayes.data import validate_sweeps
    from specbayes.fit import fit

    t0 = time.perf_counter()
    df = build(seed, n_rates=5 if quick else 9)
    t_sim = time.perf_counter() - t0
    table = validate_sweeps(df, allow_unknown_alpha=True)
    options = {"seed": seed, **({"draws": 200, "tune": 200} if quick else {})}
    t0 = time.perf_counter()
    f = fit(table, model="sd", priors=priors, sampler_config=options, progress=False)
    wall = time.perf_counter() - t0
    s = f.summary()
    print(
        f"seed {seed}: {len(table.data)} rows ({len(table.excluded)} excluded, simulated in "
        f"{t_sim:.0f} s); fit {wall:.0f} s: {s['divergences']} divergences, max R-hat "
        f"{s['max_r_hat']:.3f}, min bulk ESS {s['min_ess_bulk']:.0f} ({s['worst']}), "
        f"healthy {s['healthy']}",
        flush=True,
    )
    covered = []
    for (cell, drafter), a in alphas(seed).items():
        draws = f.alpha_draws(VERIFIER, drafter, cell, HARDWARE)
        lo, hi = np.quantile(draws, [0.05, 0.95])
        covered.append(lo <= a <= hi)
        print(f"  alpha {cell:9s} {drafter:17s} drawn {a:.3f}  inferred 90% [{lo:.3f}, {hi:.3f}]")
    dense = table.data[(table.data["k"] == 0) & (table.data["cell"] == "512x512")]
    top = float(dense["rps"].max())
    matches = []
    truth = alphas(seed)
    for drafter in DRAFTERS:
        arm = plan.Arm(VERIFIER, HARDWARE, 512, 512, drafter=drafter, cell="512x512", k=3)
        loads = [round(0.3 * top, 3), round(0.7 * top, 3)]
        ktab = plan.optimal_k(f, arm, alphas=None, rps=loads, ks=CANDIDATES)
        for rps, k_plan in zip(loads, ktab["k_bayes"], strict=True):
            lat = brute_force(
                drafter, truth[("512x512", drafter)], rps, seed, 200 if quick else 600
            )
            k_sim = int(lat.idxmin())
            gap = lat[k_plan] / lat[k_sim] - 1.0
            matches.append(k_plan == k_sim)
            print(
                f"  best k {drafter:17s} at {rps:.3g} req/s: planner {k_plan}, simulator {k_sim} "
                f"(gap {gap:.1%}; simulated latency by k: "
                + ", ".join(f"{k}:{v:.3g}" for k, v in lat.items())
                + ")",
                flush=True,
            )
    return dict(seed=seed, healthy=s["healthy"], wall_s=wall, alpha_covered=np.mean(covered),
                best_k_match=np.mean(matches))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default="1,2,3,4")
    parser.add_argument("--quick", action="store_true", help="few rates and draws (smoke run)")
    parser.add_argument(
        "--priors", type=json.loads, default=None,
        help="prior overrides as JSON (specbayes.model.priors), e.g. '{\"c1_dev\": null}'",
    )  # fmt: skip
    args = parser.parse_args()
    results = [run(int(s), args.quick, args.priors) for s in args.seeds.split(",")]
    print(pd.DataFrame(results).to_string(index=False))


if __name__ == "__main__":
    main()
