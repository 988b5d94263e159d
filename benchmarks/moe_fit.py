"""Health and wall time of the ``moe`` model on the paper set's MoE verifiers, one at a time.

Usage::

    .venv/bin/python benchmarks/moe_fit.py --verifiers gpt-oss-20b,Qwen3-30B-A3B,Qwen3-235B-A22B
    .venv/bin/python benchmarks/moe_fit.py --verifiers gpt-oss-20b --write

Per verifier: the rows of ``data/paper.parquet`` on H100-SXM, dense (k = 0) and SD rows at
alpha 0.6 / 0.8 / 1.0 (~1,120 rows, ~1,008 fitted), ``fit(rows, model="moe")`` at the default
core's one sampler configuration (``specbayes.model.sampling.SAMPLER_CONFIG``) with
``seed=0``. Prints the health numbers and the five worst-mixing variables; ``--write`` appends
the table to ``benchmarks/fit_speed.md``. (Its tables there before 2026-12-07 were measured
on the old core, since removed, with its ``start`` setting.)
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def rows_of(verifier: str):
    """The verifier's H100 rows: dense and SD at alpha 0.6 / 0.8 / 1.0."""
    from specbayes.datasets import load_dataset

    d = load_dataset("paper")
    d = d[(d.verifier == verifier) & (d.hardware == "H100-SXM")]
    if d.empty:
        raise SystemExit(f"no H100-SXM rows of verifier {verifier!r} in the paper set")
    return d[(d.k == 0) | d.alpha.round(3).isin([0.6, 0.8, 1.0])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verifiers", default="gpt-oss-20b,Qwen3-30B-A3B,Qwen3-235B-A22B")
    parser.add_argument("--write", action="store_true", help="append to benchmarks/fit_speed.md")
    args = parser.parse_args()

    from specbayes.fit import fit

    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    lines = []
    for verifier in args.verifiers.split(","):
        d = rows_of(verifier)
        t0 = time.perf_counter()
        f = fit(d, model="moe", sampler_config={"seed": 0}, progress=False)
        wall = time.perf_counter() - t0
        s = f.summary()
        worst = f.diagnostics().sort_values("ess_bulk").head(5)
        steps = float(f.idata.sample_stats["n_steps"].mean())
        print(verifier, s, f"wall {wall:.1f} s, {steps:.1f} steps/draw")
        print(worst[["ess_bulk", "ess_tail", "r_hat"]])
        lines.append(
            f"| {verifier} | {s['rows']} | {f.config['structure']} | "
            f"{s['divergences']} | {s['max_r_hat']:.2f} | {s['min_ess_bulk']:.0f} | "
            f"{s['min_ess_tail']:.0f} | {worst.index[0]} | {steps:.1f} | {wall:.1f} | "
            f"{'**yes**' if s['healthy'] else 'no'} |"
        )
    stamp = (
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs (shared), python {platform.python_version()}"
    )
    text = (
        f"\n### {stamp} — `benchmarks/moe_fit.py --verifiers {args.verifiers}` "
        f"(model at {commit})\n\n"
        "| verifier | fitted rows | structure | divergences | max R-hat | min bulk ESS | "
        "min tail ESS | worst | steps/draw | wall s | healthy |\n|"
        + "---|" * 11
        + "\n"
        + "\n".join(lines)
        + "\n"
    )
    print(text)
    if args.write:
        with open(REPO / "benchmarks" / "fit_speed.md", "a") as fh:
            fh.write(text)


if __name__ == "__main__":
    main()
