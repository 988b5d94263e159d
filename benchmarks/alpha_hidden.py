"""Acceptance hidden: is the inferred alpha honest? (issue 42)

Usage::

    nice .venv/bin/python benchmarks/alpha_hidden.py real --seeds 20260,1,2,3
    nice .venv/bin/python benchmarks/alpha_hidden.py sim --seeds 1,2,3,4

``real``: the real B200 sweeps (``data/real``: Qwen3.8-27B, DSpark k = 7 and MTP k = 2 on two
workloads, closed loop) with ``alpha``, ``acceptance_length`` and ``alpha_source`` dropped —
what GuideLLM or ``vllm bench serve`` give without the server's metrics. Per seed: the fit's
health at the defaults and, per SD arm, the inferred alpha's 90 % interval against the alpha
the measured acceptance length implies (:func:`specbayes.laws.alpha_from_acceptance_length`).

``sim``: the pooled structure's latent alpha on sets simulated from the model
(:func:`specbayes.model.simulate.simulate_sweeps`): one drafter (``one``) or two
(``two``: a head of 0.25B and a 1B draft model), k = 1, 3, 5, four cells, one acceptance per
(cell, drafter) hidden. Per seed: health and the 90 % intervals against the true alphas.
"""

from __future__ import annotations

import argparse

import numpy as np

from specbayes import laws
from specbayes.data import validate_sweeps
from specbayes.fit import fit

HIDDEN = ("alpha", "acceptance_length", "alpha_source")


def _health(f) -> str:
    s = f.summary()
    return (
        f"{f.design.structure}: {s['divergences']} divergences, max R-hat {s['max_r_hat']:.3f}, "
        f"min bulk ESS {s['min_ess_bulk']:.0f} ({s['worst']}), {s['wall_s']:.0f} s, "
        f"healthy {s['healthy']}"
    )


def real(seed: int) -> bool:
    from specbayes.datasets import load_dataset

    df = load_dataset("real/speculators_qwen3.8-27b_b200_sweeps.csv")
    lengths = df[df["k"] > 0].groupby(["cell", "drafter", "k"])["acceptance_length"].mean()
    hidden = df.drop(columns=[c for c in HIDDEN if c in df])  # the csv carries no alpha column
    table = validate_sweeps(hidden, allow_unknown_alpha=True)
    f = fit(table, model="sd", sampler_config={"seed": seed}, progress=False)
    print(f"seed {seed}: {_health(f)}", flush=True)
    ok = f.healthy
    for (cell, drafter, k), length in lengths.items():
        alpha = float(laws.alpha_from_acceptance_length(length, k))
        lo, hi = np.quantile(f.alpha_draws("Qwen3.8-27B", drafter, cell), [0.05, 0.95])
        inside = lo <= alpha <= hi
        ok &= inside
        print(
            f"  {cell:15s} {drafter:7s} k={k}: acceptance length {length:.3f} -> alpha "
            f"{alpha:.3f}; inferred 90 % [{lo:.3f}, {hi:.3f}] {'inside' if inside else 'MISSED'}"
        )
    return bool(ok)


def sim(seed: int, drafters: int) -> bool:
    from specbayes.model.simulate import simulate_sweeps

    pairs = (("D1B", 1e9),) if drafters == 1 else (("EAGLE3-8B", 0.25e9), ("Draft-1B", 1e9))
    df, truth = simulate_sweeps(drafters=pairs, unknown_alpha=True, seed=seed)
    f = fit(df, model="sd", sampler_config={"seed": seed}, progress=False)
    print(f"seed {seed}, {len(pairs)} drafter(s): {_health(f)}", flush=True)
    inside = []
    for _, r in truth.iterrows():
        lo, hi = np.quantile(f.alpha_draws(r.verifier, r.drafter, r.cell), [0.05, 0.95])
        inside.append(lo <= r.alpha <= hi)
    print(f"  true alpha inside the 90 % interval: {sum(inside)} of {len(inside)}")
    return bool(f.healthy and all(inside))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("case", choices=("real", "sim"))
    parser.add_argument("--seeds", default="20260")
    parser.add_argument("--drafters", type=int, default=2, help="sim: 1 or 2 drafters")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    results = [real(s) if args.case == "real" else sim(s, args.drafters) for s in seeds]
    print(f"{sum(results)} of {len(results)} seeds healthy with every alpha inside")


if __name__ == "__main__":
    main()
