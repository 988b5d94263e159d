r"""Health, speedup and scale checks of the next model core (``specbayes.model``).

Usage (results are printed as JSON lines and appended to ``--out``)::

    .venv/bin/python benchmarks/model_core.py small [--seeds 8] [--cases NAME ...]
    .venv/bin/python benchmarks/model_core.py demo [--seeds 2]
    .venv/bin/python benchmarks/model_core.py prior

``small``: every case of :mod:`small_sweeps` × seeds 1..N with the one default sampler
configuration (:data:`specbayes.model.sampling.SAMPLER_CONFIG`); the model is compiled
once per case (compile time reported separately). Per fit: divergences, worst R-hat, worst
bulk ESS over the free variables, wall time, and the speedup check — at each matched load,
the 90 % interval of the expected speedup :math:`L_\mathrm{dense}/L_\mathrm{sd}` (from the
sweeps' :math:`C_1, C_2` through :mod:`specbayes.laws`) and of the predictive speedup (with
the observation noise of both rows) against the observed one.

``demo [--seeds N] [--priors JSON]``: the fit of ``data/demo.parquet`` (pooled structure) at seeds
1..N: health, wall time, ``az.loo`` with its Pareto k, finiteness of the stored groups.

``artefact``: what ``specbayes fit data/demo.parquet --model sd --out fit.nc`` gives a user:
health, ``az.loo`` (share of Pareto k > 0.7), no ``inf`` in ``log_likelihood`` or
``posterior_predictive``, ``pm.sample_prior_predictive`` on the model behind ``load_fit`` (share
of draws whose latencies are all finite), ``az.plot_ppc`` on the artefact.

``prior``: ``pm.sample_prior_predictive`` on every case: share of finite latencies.

``validate [--leave-out N] [--repeats R]``: ``specbayes.validate.leave_n_out`` with the next
core on the demo (what ``specbayes validate data/demo.parquet --model sd --leave-out N`` runs),
against the curve_fit trends on the same folds.

``heldout [--cases CELL ...]``: leave one demo cell out (both verifiers), fit the rest (seed 1),
predict the cell from the hierarchy (``NextFit.predict(rows, measured=True)``):
R² of the predictive median latency, 50 %/90 % interval coverage.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
warnings.filterwarnings("ignore")

import small_sweeps  # noqa: E402

from specbayes import laws  # noqa: E402
from specbayes.model import build_design, build_model, health, sample  # noqa: E402
from specbayes.model.sampling import compile_model  # noqa: E402

LEVEL = 0.90


def _row_latency(post, sweep: int, load: float, closed: bool) -> np.ndarray:
    c1 = np.exp(post["log_c1"].values[..., sweep]).ravel()
    c2 = np.exp(post["log_c2"].values[..., sweep]).ravel()
    if closed:
        return laws.closed_loop_latency(load, c1, c2)
    return laws.latency(load, c1, c2)


def speedup_check(case, design, idata, rng) -> list[dict]:
    """Expected and predictive 90 % speedup intervals at each matched load vs observed."""
    post = idata.posterior
    sigma = post["sigma"].values.ravel()
    data = design.data
    key = "concurrency" if case.closed else "target_rps"
    lo, hi = 50 * (1 - LEVEL), 50 * (1 + LEVEL)
    out = []
    for _, row in case.speedups.iterrows():
        at = data[np.isclose(data[key], row["load"])]
        dense, sd = at[at["k"] == 0].index[0], at[at["k"] > 0].index[0]
        lat = []
        for i in (dense, sd):
            load = design.load[i]
            lat.append(_row_latency(post, design.obs_sweep[i], load, case.closed))
        mean = lat[0] / lat[1]
        noise = np.exp(sigma * (rng.standard_normal(sigma.size) - rng.standard_normal(sigma.size)))
        pred = mean * noise
        obs = float(data.loc[dense, "latency"] / data.loc[sd, "latency"])
        e_lo, e_hi = np.percentile(mean, [lo, hi])
        p_lo, p_hi = np.percentile(pred, [lo, hi])
        out.append(
            {
                "load": float(row["load"]),
                "observed": obs,
                "expected": [float(e_lo), float(e_hi)],
                "predictive": [float(p_lo), float(p_hi)],
                "in_expected": bool(e_lo <= obs <= e_hi),
                "in_predictive": bool(p_lo <= obs <= p_hi),
            }
        )
    return out


def run_small(names: list[str], seeds: int, out: Path) -> None:
    for name in names:
        case = small_sweeps.case(name)
        design = build_design(case.table)
        model = build_model(design)
        t0 = time.perf_counter()
        compiled = compile_model(model)
        compile_s = time.perf_counter() - t0
        for seed in range(1, seeds + 1):
            idata, timing = sample(model, seed, compiled=compiled)
            h = health(idata, model)
            sp = speedup_check(case, design, idata, np.random.default_rng(seed))
            post = idata.posterior
            rec = {
                "case": name,
                "structure": design.structure,
                "seed": seed,
                **h,
                "compile_s": round(compile_s, 1),
                "sample_s": round(timing["sample_s"], 2),
                "speedup_in_expected": sum(s["in_expected"] for s in sp),
                "speedup_in_predictive": sum(s["in_predictive"] for s in sp),
                "speedup_loads": len(sp),
                "speedups": sp,
                "tokens_per_cycle": _q(post["tokens_per_cycle"].values),
                "sigma": _q(post["sigma"].values),
            }
            _emit(rec, out)


def _q(x: np.ndarray) -> list[float]:
    return [round(float(v), 4) for v in np.percentile(x.ravel(), [5, 50, 95])]


def _emit(rec: dict, out: Path) -> None:
    line = json.dumps(rec)
    print(line, flush=True)
    with out.open("a") as fh:
        fh.write(line + "\n")


def run_prior(out: Path) -> None:
    import pymc as pm

    for name in small_sweeps.all_case_names():
        case = small_sweeps.case(name)
        model = build_model(build_design(case.table))
        pp = pm.sample_prior_predictive(1000, model=model, random_seed=1)
        lat = pp.prior_predictive["log_latency"].values
        _emit({"prior": name, "finite_share": float(np.isfinite(lat).mean())}, out)


def _demo_table():
    import pandas as pd

    from specbayes.data import validate_sweeps

    return validate_sweeps(
        pd.read_parquet(Path(__file__).resolve().parents[1] / "data/demo.parquet")
    )


def run_demo(seeds: list[int], priors: dict, out: Path) -> None:
    """The default core's fit of the demo (``fit_next``) at each seed: health, LOO."""
    import arviz as az

    from specbayes.model.fitted import fit_next

    table = _demo_table()
    for seed in seeds:
        result = fit_next(table, priors=priors, seed=seed)
        loo = az.loo(result.idata, pointwise=True)
        k = np.asarray(loo.pareto_k)
        groups = ("log_likelihood", "posterior_predictive")
        rec = {
            "demo": seed,
            "priors": priors,
            **result.summary(),
            "elpd_loo": float(loo.elpd_loo),
            "pareto_k_gt_0.7": int((k > 0.7).sum()),
            "groups_finite": all(np.isfinite(result.idata[g]["log_latency"]).all() for g in groups),
            "tau": _q(result.idata.posterior["tau"].values[..., 0]),
            "noise_growth": _q(result.idata.posterior["noise_growth"].values),
        }
        rec.pop("sampler_config")
        _emit(rec, out)


def run_artefact(out: Path) -> None:
    """What a user gets from ``specbayes fit data/demo.parquet --model sd --out fit.nc``
    (the CLI, at the defaults): health, ``az.loo`` and its Pareto k, finiteness of the
    stored groups, ``pm.sample_prior_predictive`` on the model behind ``load_fit``, and
    ``az.plot_ppc`` on the artefact."""
    import subprocess
    import tempfile

    import arviz as az
    import matplotlib

    matplotlib.use("Agg")
    import pymc as pm

    from specbayes.fit import load_fit

    repo = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fit.nc"
        cmd = [sys.executable, "-m", "specbayes.cli", "fit", str(repo / "data/demo.parquet")]
        t0 = time.perf_counter()
        subprocess.run([*cmd, "--model", "sd", "--out", str(path), "--quiet"], check=True)
        wall = time.perf_counter() - t0
        result = load_fit(path)
        loo = az.loo(result.idata, pointwise=True)
        k = np.asarray(loo.pareto_k)
        infinite = {
            g: int(np.isinf(result.idata[g]["log_latency"].values).sum())
            for g in ("log_likelihood", "posterior_predictive")
        }
        prior = pm.sample_prior_predictive(1000, model=result.model, random_seed=1)
        lat = prior.prior_predictive["log_latency"].values  # (chain, draw, obs)
        finite_draws = float(np.isfinite(lat).all(axis=-1).mean())
        az.plot_ppc(result.idata, var_names=["log_latency"], num_pp_samples=50)
        summary = result.summary()
        rec = {
            "artefact": "demo sd (specbayes fit)",
            **{k_: summary[k_] for k_ in ("structure", "rows", "divergences", "max_r_hat")},
            "min_ess_bulk": summary["min_ess_bulk"],
            "healthy": summary["healthy"],
            "cli_wall_s": round(wall, 1),
            "elpd_loo": float(loo.elpd_loo),
            "pareto_k_gt_0.7": int((k > 0.7).sum()),
            "pareto_k_share": float((k > 0.7).mean()),
            "infinite_values": infinite,
            "prior_draws_all_finite": finite_draws,
            "plot_ppc": "ok",
        }
        _emit(rec, out)


def run_heldout(cells: list[str] | None, out: Path) -> None:
    """Leave one cell out of the demo (both verifiers), fit the rest, predict the cell
    (:meth:`specbayes.model.fitted.NextFit.predict` with ``measured=True``)."""
    from specbayes.data import SweepTable
    from specbayes.model.fitted import fit_next
    from specbayes.validate import heldout_scores

    table = _demo_table()
    for cell in cells or sorted(table.data["cell"].unique()):
        keep = table.data["cell"] != cell
        result = fit_next(SweepTable(table.data[keep], table.excluded), seed=1)
        test = table.data[~keep]
        scores = heldout_scores(
            test["latency"].to_numpy(),
            result.mean_latency(test, measured=True).values,
            result.predict(test, measured=True).values,
        )
        scores.pop("pit")
        h = result.summary()
        _emit({"heldout_cell": cell, "rows": len(test), **scores, **{
            k: h[k] for k in ("divergences", "max_r_hat", "min_ess_bulk", "wall_s")
        }}, out)  # fmt: skip


def run_validate(n: int, repeats: int, out: Path) -> None:
    """``specbayes.validate.leave_n_out`` on the demo (the default core), the curve_fit
    trends on the same folds: overall and per-fold scores."""
    from specbayes.validate import leave_n_out

    res = leave_n_out(_demo_table(), "sd", n=n, repeats=repeats, n_jobs=1, progress=True)
    for _, row in res.folds.iterrows():
        _emit({"validate_fold": row["fold"], **row.drop(["fold"]).to_dict()}, out)
    for _, row in res.overall.iterrows():
        _emit({"validate_overall": row["method"], **row.drop(["method"]).to_dict()}, out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=["small", "demo", "artefact", "prior", "heldout", "validate"])
    ap.add_argument("--leave-out", type=int, default=1)
    ap.add_argument("--priors", default="{}", help="prior overrides (JSON), demo only")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--cases", nargs="*", default=None)
    ap.add_argument("--out", type=Path, default=Path("/tmp/model_core.jsonl"))
    args = ap.parse_args()
    if args.what == "small":
        run_small(args.cases or small_sweeps.all_case_names(), args.seeds, args.out)
    elif args.what == "demo":
        run_demo(list(range(1, args.seeds + 1)), json.loads(args.priors), args.out)
    elif args.what == "artefact":
        run_artefact(args.out)
    elif args.what == "heldout":
        run_heldout(args.cases, args.out)
    elif args.what == "validate":
        run_validate(args.leave_out, args.repeats, args.out)
    else:
        run_prior(args.out)


if __name__ == "__main__":
    main()
