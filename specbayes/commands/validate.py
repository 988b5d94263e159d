"""``specbayes validate``: leave-n-out over cells, in-sample checks, tables and figures."""

from __future__ import annotations

import argparse
from pathlib import Path

from specbayes.commands import nonneg_int, positive_int, positive_int_list
from specbayes.commands.fit import metric_list
from specbayes.parallel import SCHEDULER_HELP, scheduler_arg


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "validate",
        help="leave-n-out over (prefill, decode) cells vs the curve_fit baseline, plus LOO/PPC",
        description="Hold out n cells per (verifier, hardware), fit the rest, and score the "
        "held-out rows (R², ELPD, 50/90 % coverage, PIT) for specbayes and for the paper's "
        "curve_fit trend baseline on the same folds; then fit all data for in-sample checks "
        "(PSIS-LOO Pareto k, BFMI, posterior-predictive coverage).",
    )
    p.add_argument(
        "data", type=Path, help="sweep table (CSV/parquet) or a bundled name (demo, paper)"
    )
    p.add_argument("--model", choices=["dense", "sd", "moe"], default="sd")
    p.add_argument(
        "--leave-out", type=positive_int_list, default=[1, 2, 4], help="n values, e.g. 1,2,4"
    )
    p.add_argument("--repeats", type=positive_int, default=3, help="folds per n")
    p.add_argument("--seed", type=nonneg_int, default=0)
    p.add_argument("--draws", type=positive_int, help="draws per chain (default: the fit's)")
    p.add_argument("--tune", type=nonneg_int, help="tuning steps per chain")
    p.add_argument("--chains", type=positive_int, help="chains")
    p.add_argument(
        "--jobs",
        type=positive_int,
        help="workers: more than 1 runs the folds on a local Dask cluster of that many "
        "processes (default: serially, each fit sampling its chains on every core; with "
        "--scheduler local or processes: all cores)",
    )
    p.add_argument("--scheduler", type=scheduler_arg, help=SCHEDULER_HELP)
    p.add_argument("--no-baseline", action="store_true", help="skip the curve_fit baseline")
    p.add_argument(
        "--curvature",
        action="store_true",
        help="every fit with the batch curvature of `specbayes fit --curvature`",
    )
    p.add_argument(
        "--knee", action="store_true", help="every fit with the knee of `specbayes fit --knee`"
    )
    p.add_argument(
        "--integrate-sweeps",
        action="store_true",
        help="every fit with the sweeps integrated out (`specbayes fit --integrate-sweeps`)",
    )
    p.add_argument(
        "--sample-sweeps",
        action="store_true",
        help="every fit with the sweeps sampled (`specbayes fit --sample-sweeps`)",
    )
    p.add_argument(
        "--tail-excess",
        action="store_true",
        help="every fit's --metrics with the tail excess of `specbayes fit --tail-excess`",
    )
    p.add_argument(
        "--metrics",
        type=metric_list,
        default=None,
        metavar="NAMES",
        help="comma-separated per-point metrics (as `specbayes fit --metrics`, e.g. "
        "ttft_p99,itl_p50) every fit models too; the held-out rows are scored per metric "
        "(50/90 %% predictive coverage, relative error of the median)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--out", type=Path, required=True, help="output folder")
    p.set_defaults(func=run)


def _load(path: Path):
    """A sweep file, or a bundled dataset when ``path`` is a bare name (``demo``, ``paper``)."""
    from specbayes.data import read_sweeps
    from specbayes.datasets import DATA_DIR, load_dataset

    bare = len(path.parts) == 1 and not path.suffix
    if path.exists() or not bare:
        return read_sweeps(path)
    if not (DATA_DIR / path).with_suffix(".parquet").exists():
        names = sorted(p.stem for p in DATA_DIR.glob("*.parquet"))
        raise FileNotFoundError(
            f"{path}: no such sweep file, and not a bundled dataset (bundled: "
            f"{', '.join(names) or 'none'}) — check the path"
        )
    return load_dataset(str(path))


def in_sample_checks(result) -> dict:
    """PSIS-LOO (with Pareto k), BFMI and posterior-predictive coverage of the fitted rows."""
    import arviz as az
    import numpy as np

    out: dict = {}
    # the mean latency's observed variable (a fit with metrics has ``log_metric`` too)
    (name,) = [v for v in result.idata.observed_data.data_vars if v != "log_metric"]
    loo = az.loo(result.idata, pointwise=True, var_name=name)
    k = np.asarray(loo.pareto_k).ravel()
    out.update(
        elpd_loo=float(loo.elpd_loo),
        se=float(loo.se),
        p_loo=float(loo.p_loo),
        pareto_k_above_0_7=int(np.sum(k > 0.7)),
        n_obs=int(k.size),
    )
    out["bfmi_min"] = float(np.min(az.bfmi(result.idata)))
    out["ppc_cov90_in_sample"] = float(np.mean(_inside90(result.idata, name)))
    metrics = tuple(getattr(result, "metrics", ()))
    if metrics:
        from specbayes.model.metrics import long_table

        which = long_table(result.data, metrics)["metric"].to_numpy()
        inside = _inside90(result.idata, "log_metric")
        out["metric_ppc_cov90_in_sample"] = {
            m: float(np.mean(inside[which == j])) for j, m in enumerate(metrics)
        }
    out["pareto_k"] = k
    return out


def _inside90(idata, name: str):
    """Whether each observation of ``name`` lies in its central 90 % predictive interval."""
    import numpy as np

    pp = idata.posterior_predictive[name].stack(sample=("chain", "draw"))
    y = idata.observed_data[name].to_numpy()
    lo, hi = np.quantile(pp.to_numpy(), [0.05, 0.95], axis=-1)
    return (y >= lo) & (y <= hi)


def _config(args: argparse.Namespace) -> dict:
    pairs = (("draws", args.draws), ("tune", args.tune), ("chains", args.chains))
    return {k: v for k, v in (*pairs, ("seed", args.seed)) if v is not None}


def _write(out: Path, res, checks: dict, pareto_k) -> int:
    """Tables, JSON and figures into ``out`` (staged: all or nothing); the figure count."""
    import matplotlib.pyplot as plt

    from specbayes import plots
    from specbayes.artefacts import dumps, staged_dir

    figs = {
        "heldout_vs_observed.png": plots.plot_heldout(res.predictions),
        "pareto_k.png": plots.plot_pareto_k(pareto_k),
    }
    if res.pit:
        figs["coverage_vs_nominal.png"] = plots.plot_coverage(res.pit)
        figs["pit_hist.png"] = plots.plot_pit(res.pit)
    try:
        with staged_dir(out) as tmp:
            res.folds.to_csv(tmp / "folds.csv", index=False)
            res.overall.to_csv(tmp / "overall.csv", index=False)
            res.predictions.to_csv(tmp / "heldout_predictions.csv", index=False)
            res.skipped.to_csv(tmp / "skipped.csv", index=False)
            if not res.metric_overall.empty:
                res.metric_folds.to_csv(tmp / "metric_folds.csv", index=False)
                res.metric_overall.to_csv(tmp / "metric_overall.csv", index=False)
                res.metric_predictions.to_csv(tmp / "metric_predictions.csv", index=False)
            (tmp / "in_sample.json").write_text(dumps(checks))
            (tmp / "overall.json").write_text(
                dumps(
                    {
                        "overall": res.overall.to_dict(orient="records"),
                        "metrics": res.metric_overall.to_dict(orient="records"),
                    }
                )
            )
            for name, fig in figs.items():
                fig.savefig(tmp / name, dpi=110)
    finally:
        for fig in figs.values():
            plt.close(fig)
    return len(figs)


def check_metric_args(args: argparse.Namespace, table) -> None:
    """``--metrics`` names columns the data carry (one line)."""
    metrics = getattr(args, "metrics", None) or ()
    missing = [m for m in metrics if m not in table.data]
    if missing:
        raise ValueError(
            f"--metrics {','.join(missing)}: no such column in {args.data} — name only the "
            "metrics the data carry"
        )


def run(args: argparse.Namespace) -> int:
    from specbayes.artefacts import check_out_dir, dumps
    from specbayes.commands.fit import check_flags, check_level, flag_priors
    from specbayes.data import validate_sweeps
    from specbayes.fit import fit
    from specbayes.validate import leave_n_out

    check_flags(args)
    check_out_dir(args.out)
    cfg = _config(args)
    table = validate_sweeps(_load(args.data), allow_unknown_alpha=True)
    check_metric_args(args, table)
    check_level(table, args.model, args.data)  # before the folds' progress bars
    print(f"{table.summary()}; leave-out n = {args.leave_out}, {args.repeats} folds each")
    methods = ("specbayes",) if args.no_baseline else ("specbayes", "baseline")
    priors = flag_priors(args)
    res = leave_n_out(
        table,
        model=args.model,
        n=args.leave_out,
        repeats=args.repeats,
        seed=args.seed,
        sampler_config=cfg,
        methods=methods,
        n_jobs=args.jobs,
        scheduler=args.scheduler,
        progress=not args.quiet,
        priors=priors,
        metrics=args.metrics,
    )
    if res.folds.empty:
        reasons = (
            "; ".join(res.skipped["reason"].astype(str).unique()[:2]) if len(res.skipped) else ""
        )
        raise ValueError(
            f"--leave-out {','.join(map(str, args.leave_out))}: no fold could be formed "
            f"({reasons}) — hold out fewer cells than each (verifier, hardware) group has"
        )
    print("\n== held-out scores (mean over folds)")
    print(res.overall.to_string(index=False, float_format="{:.4g}".format))
    if len(res.skipped):
        print("\n== skipped")
        print(res.skipped.to_string(index=False))
    if not res.metric_overall.empty:
        print("\n== held-out metrics (pooled over folds)")
        print(res.metric_overall.to_string(index=False, float_format="{:.4g}".format))

    metric_kw = {"metrics": args.metrics} if args.metrics else {}
    print("\nfitting all rows for in-sample checks …")
    full = fit(
        table, model=args.model, sampler_config=cfg, priors=priors,
        progress=not args.quiet, **metric_kw,
    )  # fmt: skip
    checks = in_sample_checks(full)
    pareto_k = checks.pop("pareto_k")
    checks.update(full.summary())
    print(dumps(checks, note_nulls=False))
    n_figs = _write(args.out, res, checks, pareto_k)
    print(f"\nwrote tables and {n_figs} figures to {args.out}/")
    return 0
