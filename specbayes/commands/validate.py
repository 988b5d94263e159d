"""``specbayes validate``: leave-n-out over cells, in-sample checks, tables and figures."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from specbayes.commands import int_list


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "validate",
        help="leave-n-out over (prefill, decode) cells vs the curve_fit baseline, plus LOO/PPC",
        description="Hold out n cells per (verifier, hardware), fit the rest, and score the "
        "held-out rows (R², ELPD, 50/90 %% coverage, PIT) for specbayes and for the paper's "
        "curve_fit trend baseline on the same folds; then fit all data for in-sample checks "
        "(PSIS-LOO Pareto k, BFMI, posterior-predictive coverage).",
    )
    p.add_argument("data", type=Path, help="sweep table (CSV/parquet) or bundled name (demo)")
    p.add_argument("--model", choices=["dense", "sd", "moe"], default="sd")
    p.add_argument("--leave-out", type=int_list, default=[1, 2, 4], help="n values, e.g. 1,2,4")
    p.add_argument("--repeats", type=int, default=3, help="folds per n")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--draws", type=int, help="posterior draws per chain (default: the fit's)")
    p.add_argument("--tune", type=int, help="tuning steps per chain")
    p.add_argument("--chains", type=int, help="chains")
    p.add_argument("--jobs", type=int, help="parallel fold processes (default: all cores)")
    p.add_argument("--no-baseline", action="store_true", help="skip the curve_fit baseline")
    p.add_argument("--out", type=Path, required=True, help="output directory")
    p.set_defaults(func=run)


def _load(path: Path):
    from specbayes.data import read_sweeps
    from specbayes.datasets import load_dataset

    if path.exists():
        return read_sweeps(path)
    return load_dataset(str(path))


def in_sample_checks(result) -> dict:
    """PSIS-LOO (with Pareto k), BFMI and posterior-predictive coverage of the fitted rows."""
    import arviz as az
    import numpy as np

    out: dict = {}
    loo = az.loo(result.idata, pointwise=True)
    k = np.asarray(loo.pareto_k).ravel()
    out.update(
        elpd_loo=float(loo.elpd_loo),
        se=float(loo.se),
        p_loo=float(loo.p_loo),
        pareto_k_above_0_7=int(np.sum(k > 0.7)),
        n_obs=int(k.size),
    )
    out["bfmi_min"] = float(np.min(az.bfmi(result.idata)))
    pp = result.idata.posterior_predictive["latency"].stack(sample=("chain", "draw"))
    y = result.idata.observed_data["latency"].to_numpy()
    lo, hi = np.quantile(pp.to_numpy(), [0.05, 0.95], axis=-1)
    out["ppc_cov90_in_sample"] = float(np.mean((y >= lo) & (y <= hi)))
    out["pareto_k"] = k
    return out


def run(args: argparse.Namespace) -> int:
    import matplotlib.pyplot as plt

    from specbayes import plots
    from specbayes.data import validate_sweeps
    from specbayes.fit import fit
    from specbayes.validate import leave_n_out

    cfg = {
        k: v
        for k, v in (
            ("draws", args.draws),
            ("tune", args.tune),
            ("chains", args.chains),
            ("seed", args.seed),
        )
        if v is not None
    }
    table = validate_sweeps(_load(args.data), allow_unknown_alpha=True)
    print(f"{table.summary()}; leave-out n = {args.leave_out}, {args.repeats} folds each")
    methods = ("specbayes",) if args.no_baseline else ("specbayes", "baseline")
    res = leave_n_out(
        table,
        model=args.model,
        n=args.leave_out,
        repeats=args.repeats,
        seed=args.seed,
        sampler_config=cfg,
        methods=methods,
        n_jobs=args.jobs,
    )
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    res.folds.to_csv(out / "folds.csv", index=False)
    res.overall.to_csv(out / "overall.csv", index=False)
    res.predictions.to_csv(out / "heldout_predictions.csv", index=False)
    res.skipped.to_csv(out / "skipped.csv", index=False)
    print("\n== held-out scores (mean over folds)")
    print(res.overall.to_string(index=False, float_format="{:.4g}".format))
    if len(res.skipped):
        print("\n== skipped")
        print(res.skipped.to_string(index=False))

    print("\nfitting all rows for in-sample checks …")
    full = fit(table, model=args.model, sampler_config=cfg, progress=False)
    checks = in_sample_checks(full)
    pareto_k = checks.pop("pareto_k")
    checks.update(full.summary())
    print(json.dumps(checks, indent=2, default=float))
    (out / "in_sample.json").write_text(json.dumps(checks, indent=2, default=float))
    (out / "overall.json").write_text(res.overall.to_json(orient="records", indent=2))

    figs = {
        "heldout_vs_observed.png": plots.plot_heldout(res.predictions),
        "pareto_k.png": plots.plot_pareto_k(pareto_k),
    }
    if res.pit:
        figs["coverage_vs_nominal.png"] = plots.plot_coverage(res.pit)
        figs["pit_hist.png"] = plots.plot_pit(res.pit)
    for name, fig in figs.items():
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
    print(f"\nwrote tables and {len(figs)} figures to {out}/")
    return 0
