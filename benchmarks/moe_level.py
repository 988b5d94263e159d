"""The ``moe`` level against ``sd`` on the same MoE rows: health, time, noise, LOO.

Usage::

    .venv/bin/python benchmarks/moe_level.py
    .venv/bin/python benchmarks/moe_level.py --verifier gpt-oss-20b --cells all --write

For one verifier of ``data/paper.parquet`` (default Qwen3-30B-A3B) on one GPU (default
H100-SXM) and the given cells (default four that span both prompt and output lengths), fits
``moe`` and ``sd`` at the defaults (4 chains, seed 20260) on the same rows, one after the
other, and prints per level: the wall time and its split, sampler health, the posterior
median of the noise scale ``sigma``, ``elpd_loo`` (PSIS-LOO over the fitted rows) and, for
``moe``, the expert reads ``c1s`` against the roofline's. ``--write`` appends the table to
``benchmarks/moe.md``.
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import time
import warnings
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
CELLS = "256x256,1024x1024,256x1024,1024x256"


def rows(verifier: str, hardware: str, cells: str):
    """The paper set's rows of one verifier, GPU and the given cells (``all``: every cell)."""
    from specbayes.datasets import load_dataset

    d = load_dataset("paper")
    d = d[(d["verifier"] == verifier) & (d["hardware"] == hardware)]
    if cells != "all":
        d = d[d["cell"].isin(cells.split(","))]
    if d.empty:
        raise SystemExit(f"no rows of {verifier} on {hardware} in cells {cells}")
    return d.reset_index(drop=True)


def one_fit(data, level: str) -> dict:
    """Fit ``level`` and collect what the table reports."""
    import arviz as az

    from specbayes.fit import fit

    t0 = time.perf_counter()
    f = fit(data, model=level, progress=False)
    wall = time.perf_counter() - t0
    s = f.summary()
    post = f.idata.posterior
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loo = az.loo(f.idata, pointwise=True)
    out = {
        "level": level,
        "rows": s["rows"],
        "wall_s": wall,
        "compile_s": f.config.get("compile_s") or 0.0,
        "sample_s": f.config.get("sample_s", np.nan),
        "divergences": s["divergences"],
        "max_r_hat": s["max_r_hat"],
        "min_ess_bulk": s["min_ess_bulk"],
        "worst": s["worst"],
        "sigma": float(np.median(post["sigma"].values)),
        "elpd_loo": float(loo.elpd_loo),
        "pareto_k_07": int(np.sum(np.asarray(loo.pareto_k) > 0.7)),
        "c1s": "–",
    }
    if "expert_cost" in post:
        q = np.quantile(post["expert_cost"].values.reshape(-1, post["expert_cost"].shape[-1]),
                        [0.05, 0.5, 0.95], axis=0)  # fmt: skip
        out["c1s"] = "; ".join(
            f"{g.replace('|', ' on ')}: {1e3 * q[1, i]:.2f} ms ({1e3 * q[0, i]:.2f}–"
            f"{1e3 * q[2, i]:.2f})"
            for i, g in enumerate(post["expert_cost"].coords["group"].values)
        )
    print(out, flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verifier", default="Qwen3-30B-A3B")
    parser.add_argument("--hardware", default="H100-SXM")
    parser.add_argument("--cells", default=CELLS, help=f"comma list or 'all' (default {CELLS})")
    parser.add_argument("--levels", default="moe,sd")
    parser.add_argument("--write", action="store_true", help="append to benchmarks/moe.md")
    args = parser.parse_args()
    from specbayes.model.physics import roofline_centres

    data = rows(args.verifier, args.hardware, args.cells)
    roof = roofline_centres(args.verifier, args.hardware, None, 512, 256, coverage=True)
    results = [one_fit(data, level) for level in args.levels.split(",")]
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    head = (
        "| level | rows fitted | wall s | compile s | sample s | divergences | max R-hat | "
        "min bulk ESS | worst | sigma (median) | elpd_loo | Pareto k > 0.7 | c1s (90 %) |\n|"
        + "---|"
        * 13
    )
    lines = [
        f"| {r['level']} | {r['rows']} | {r['wall_s']:.0f} | {r['compile_s']:.0f} | "
        f"{r['sample_s']:.0f} | {r['divergences']} | {r['max_r_hat']:.2f} | "
        f"{r['min_ess_bulk']:.0f} | `{r['worst'].replace('|', ', ')}` | {r['sigma']:.4f} | "
        f"{r['elpd_loo']:.0f} | "
        f"{r['pareto_k_07']} | {r['c1s']} |"
        for r in results
    ]
    text = (
        f"\n### {stamp} — {args.verifier}, {args.hardware}, cells {args.cells} (code "
        f"{commit}, {platform.machine()}, 2 CPUs)\n\n"
        f"Command: `.venv/bin/python benchmarks/moe_level.py --verifier {args.verifier} "
        f"--hardware {args.hardware} --cells {args.cells}`; roofline c1s "
        f"{1e3 * roof['c1s']:.2f} ms.\n\n{head}\n" + "\n".join(lines) + "\n"
    )
    print(text)
    if args.write:
        with open(REPO / "benchmarks" / "moe.md", "a") as fh:
            fh.write(text)


if __name__ == "__main__":
    main()
