"""Fit speed: the Bayesian fit against the paper's per-configuration ``curve_fit``, same rows.

Usage::

    nice .venv/bin/python benchmarks/fit_speed.py --cases demo --repeats 3
    nice .venv/bin/python benchmarks/fit_speed.py --cases paper --repeats 1 --write

For each case it measures, in the same process and on the same validated rows,

* ``bayes``: :func:`specbayes.fit.fit` wall time end to end on the default core, split into
  ``build`` (validation, design arrays, the ``pm.Model``), ``compile`` (nutpie's numba
  compile), ``start`` (the L-BFGS search for where chains begin), ``sample`` (4 chains of
  NUTS and the exact noise-scale draws) and ``groups`` (the stored log-likelihood and
  predictive groups), with its health numbers and *ESS per second* (minimum bulk ESS over
  the free variables / wall time);
* ``curve_fit``: :func:`specbayes.baseline.fit_configurations` — SciPy ``curve_fit`` of
  (C1, C2) per configuration (the paper's method), point estimates only.

Reported numbers are medians over ``--repeats`` runs (same sampler seed: the repeats time the
same chains) or over ``--seeds`` runs (one fit per sampler seed: a health study; each run's
health is printed too). Target (issue 42): the paper's dense verifiers within 10× the
``curve_fit`` time of the same rows, healthy, at the default sampler configuration.

Cases: ``demo`` and ``paper`` read ``data/<name>.parquet`` when present (``paper-dense`` /
``paper-moe``: its dense / MoE verifiers); ``real`` the real B200 sweeps in ``data/real``;
``sim-multi`` is 3 verifiers × 2 GPUs × 2 drafters simulated from the model; ``sim-paper``
a paper-sized grid simulated from the model itself (3 verifiers × 2 GPUs × 16 cells).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]


def load_case(name: str) -> pd.DataFrame:
    """Rows of a case; ``paper-dense`` / ``paper-moe``: the paper set's dense / MoE verifiers."""
    if name in ("demo", "paper", "paper-dense", "paper-moe"):
        path = REPO / "data" / f"{name.split('-')[0]}.parquet"
        if not path.exists():
            raise SystemExit(f"{path} not found (build it with the simulator first)")
        df = pd.read_parquet(path)
        if name in ("paper-dense", "paper-moe"):
            from specbayes.catalog import load_model

            is_moe = df["verifier"].map(lambda v: load_model(v).is_moe)
            df = df[is_moe] if name == "paper-moe" else df[~is_moe]
        return df
    if name == "real":
        from specbayes.datasets import load_dataset

        return load_dataset("real/speculators_qwen3.8-27b_b200_sweeps.csv")
    if name == "sim-multi":
        from specbayes.model.simulate import simulate_sweeps

        df, _ = simulate_sweeps(
            verifiers={"A": 8e9, "B": 14e9, "C": 32e9},
            hardware=("H100", "B200"),
            drafters=(("D1", 1e9), ("D2", 0.5e9)),
            seed=21,
        )
        return df
    if name == "sim-paper":
        from specbayes.model.simulate import simulate_sweeps

        cells = tuple((p, g) for p in (256, 512, 768, 1024) for g in (256, 512, 768, 1024))
        df, _ = simulate_sweeps(
            verifiers={"V8B": 8e9, "V14B": 14e9, "V32B": 32e9},
            hardware=("H100", "A100"),
            cells=cells,
            alphas=(0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
            ks=(1, 3, 5, 8),
            loads=tuple(np.linspace(0.05, 0.85, 9)),
            seed=0,
        )
        return df
    raise SystemExit(f"unknown case {name!r}")


def time_curve_fit(table) -> float:
    from specbayes.baseline import fit_configurations

    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit_configurations(table.data)
    return time.perf_counter() - t0


def time_bayes(
    table, model: str, config: dict, save: Path | None = None, priors: dict | None = None
) -> dict:
    from specbayes.fit import fit

    t0 = time.perf_counter()
    f = fit(table, model=model, sampler_config=config, priors=priors, progress=False)
    wall = time.perf_counter() - t0
    s = f.summary()
    worst = f.diagnostics().sort_values("ess_bulk").head(5)
    print("worst-mixing variables:\n" + worst.to_string(index=False), flush=True)
    if save is not None:
        f.save(save)
        print(f"fit saved to {save}", flush=True)
    ss = f.idata.sample_stats
    s.update(
        wall_s=wall,
        build_s=f.config.get("build_s", np.nan),
        compile_s=f.config.get("compile_s") or 0.0,
        start_s=f.config.get("start_s") or 0.0,
        # the scouting run (sampling.scouted_starts) is part of sample_s
        scout_s=f.config.get("scout_s") or 0.0,
        scout_restarted=f.config.get("scout_restarted") or 0,
        sample_s=f.config.get("sample_s", np.nan),
        groups_s=f.config.get("groups_s", np.nan),
        ess_per_s=s["min_ess_bulk"] / wall,
        mean_steps=float(ss["n_steps"].mean()),
    )
    return s


def _save_path(folder: Path | None, case: str, model: str, repeat: int) -> Path | None:
    if folder is None:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{case}_{model}_{repeat}.nc"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--cases",
        default="demo",
        help="comma list: demo, paper, paper-dense, paper-moe, real, sim-multi, sim-paper",
    )
    parser.add_argument("--model", default="sd")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--seeds",
        default=None,
        help="comma list of sampler seeds, one fit each (replaces --repeats)",
    )
    parser.add_argument("--draws", type=int, default=None)
    parser.add_argument("--tune", type=int, default=None)
    parser.add_argument("--chains", type=int, default=None)
    parser.add_argument("--write", action="store_true", help="append to benchmarks/fit_speed.md")
    parser.add_argument("--save-dir", type=Path, default=None, help="save each fit here (netCDF)")
    parser.add_argument(
        "--priors",
        type=json.loads,
        default=None,
        help='JSON overrides, e.g. \'{"sweeps": "marginal"}\'',
    )
    args = parser.parse_args()
    from specbayes.data import validate_sweeps

    given = (
        ("draws", args.draws),
        ("tune", args.tune),
        ("chains", args.chains),
    )
    config = {k: v for k, v in given if v is not None}
    lines = []
    for case in args.cases.split(","):
        df = load_case(case)
        table = validate_sweeps(df, allow_unknown_alpha=args.model != "dense")
        configs = (
            [dict(config, seed=int(seed)) for seed in args.seeds.split(",")]
            if args.seeds
            else [config] * args.repeats
        )
        cf = [time_curve_fit(table) for _ in configs]
        runs = []
        for i, cfg in enumerate(configs):
            runs.append(
                time_bayes(
                    table,
                    args.model,
                    cfg,
                    _save_path(args.save_dir, case, args.model, i),
                    args.priors,
                )
            )
            r = runs[-1]
            print(
                f"run {i + 1}/{len(configs)} (seed {cfg.get('seed', 'default')}): "
                f"{r['divergences']} divergences, max R-hat {r['max_r_hat']:.2f}, min bulk ESS "
                f"{r['min_ess_bulk']:.0f}, {r['wall_s']:.0f} s, healthy {r['healthy']}",
                flush=True,
            )
        med = {
            k: statistics.median(r[k] for r in runs)
            for k in (
                "wall_s",
                "build_s",
                "compile_s",
                "start_s",
                "scout_s",
                "sample_s",
                "groups_s",
                "ess_per_s",
                "min_ess_bulk",
                "max_r_hat",
                "mean_steps",
            )
        }
        cf_med = statistics.median(cf)
        result = {
            "case": case,
            "model": args.model,
            "rows": runs[0]["rows"],
            "repeats": len(runs),
            "curve_fit_s": cf_med,
            **med,
            "ratio_to_curve_fit": med["wall_s"] / cf_med,
            "divergences": [r["divergences"] for r in runs],
            "scout_restarted": [r["scout_restarted"] for r in runs],
            "healthy": [r["healthy"] for r in runs],
            "config": {
                **(dict(config, seeds=args.seeds) if args.seeds else config),
                **({"priors": args.priors} if args.priors else {}),
            }
            or "defaults",
        }
        print(json.dumps(result, default=str))
        lines.append(
            f"| {case} | {args.model} | {result['rows']} | {len(runs)} | "
            f"{med['wall_s']:.1f} | {med['build_s']:.1f} | {med['compile_s']:.1f} | "
            f"{med['start_s']:.1f} | {med['scout_s']:.1f} {result['scout_restarted']} | "
            f"{med['sample_s']:.1f} | {med['groups_s']:.1f} | "
            f"{cf_med:.2f} | "
            f"{result['ratio_to_curve_fit']:.1f}× | {med['min_ess_bulk']:.0f} | "
            f"{med['ess_per_s']:.1f} | {med['max_r_hat']:.3f} | {result['divergences']} | "
            f"{med['mean_steps']:.1f} | {result['healthy']} | {result['config']} |"
        )
    header = (
        "| case | model | rows | runs | bayes wall s (median) | build s | compile s | "
        "start s | scout s (chains restarted) | sample s | groups s | curve_fit s | ratio | "
        "min bulk ESS | ESS/s | max R-hat | divergences | steps/draw | healthy | "
        "sampler_config |\n|" + "---|" * 20
    )
    stamp = (
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs (shared), python {platform.python_version()}"
    )
    text = f"\n### {stamp}\n\n{header}\n" + "\n".join(lines) + "\n"
    print(text)
    if args.write:
        with open(REPO / "benchmarks" / "fit_speed.md", "a") as fh:
            fh.write(text)


if __name__ == "__main__":
    main()
