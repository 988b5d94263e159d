"""Where the latency law misfits: in-sample error by load, and the cross-cell form of C2.

Two checks on the paper's dense verifiers (k = 0 rows of ``data/paper.parquet``, both GPUs),
behind the numbers in ``benchmarks/leave_n_out.md`` (2026-12-01 13:17 UTC entry) and the
model docs (slope effects):

``--part load``
    In-sample log error of the posterior-median latency of a fit (``--fit FIT.nc``, made
    with ``specbayes fit``; without it the slice is fitted at the defaults, ~10 min) against
    per-configuration ``curve_fit`` of the same rows, by load rank within configuration —
    and the same per-configuration least squares with a headroom exponent,
    ``log L = log C1 - (1 + delta) log(1 - lambda C2)``, to show how much of the top-decile
    error is the law's shape.
``--part form``
    Joint least squares of the curve_fit C2 totals over the (verifier, GPU) groups with the
    model's cross-cell form ``C2 = A_v A_h p + g B_vh (p + g/2)^b``, the slope ``b`` common,
    per GPU plus per verifier (the model's slope effects), or per group — against the
    paper's per-group linear trends: residual rms in log units.

    .venv/bin/python benchmarks/law_misfit.py --part load --fit FIT.nc
    .venv/bin/python benchmarks/law_misfit.py --part form
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from specbayes import laws
from specbayes.baseline import DENSE_TERMS, fit_configurations, fit_dense_trend
from specbayes.data import validate_sweeps
from specbayes.datasets import load_dataset

VERIFIERS = ["Qwen3-8B", "Qwen3-14B", "Qwen3-32B", "Llama-3.1-8B", "Llama-3.1-70B"]
HARDWARE = ["H100-SXM", "A100-SXM-80GB"]
CELL_KEY = ["verifier", "hardware", "cell"]
BINS = [0, 0.25, 0.5, 0.75, 0.9, 1.0]


def dense_slice() -> pd.DataFrame:
    df = load_dataset("paper")
    df = df[df.verifier.isin(VERIFIERS) & df.hardware.isin(HARDWARE) & (df.k == 0)]
    return validate_sweeps(df).data.reset_index(drop=True)


def _per_config_log_residuals(data: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, list]:
    """Log residuals of the law per configuration (the baseline's ``curve_fit``) and of the
    law with a headroom exponent, least squares started from the ``curve_fit`` solution; the
    exponents."""
    law, bent, deltas = np.full(len(data), np.nan), np.full(len(data), np.nan), []
    # a configuration is a cell: its rate sweep and its synchronous (N = 1, closed-loop) point
    # together, as the baseline fits them; at N = 1, rps = 1/L and C1/(1 - rps C2) = C1 + C2
    for _, sw in data.groupby(CELL_KEY):
        lam, y = sw["rps"].to_numpy(), np.log(sw["latency"].to_numpy())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cf = fit_configurations(sw.drop(columns="sweep", errors="ignore"))
        c1, c2 = cf.loc[0, ["c1", "c2"]].to_numpy(dtype=float)
        if not np.isfinite([c1, c2]).all():  # curve_fit failed: the rows stay unscored (NaN)
            continue
        law[sw.index] = np.log(laws.latency(lam, c1, c2)) - y

        def resid(th, lam=lam, y=y):
            x = np.clip(lam * np.exp(th[1]), 0.0, 0.999)
            return th[0] - (1.0 + th[2]) * np.log1p(-x) - y

        bend = least_squares(resid, [np.log(c1), np.log(c2), 0.0])
        bent[sw.index] = bend.fun
        deltas.append(bend.x[2])
    return law, bent, deltas


def by_load(data: pd.DataFrame, errors: dict[str, np.ndarray]) -> pd.DataFrame:
    rank = data.groupby(CELL_KEY)["rps"].rank(pct=True)
    frame = pd.DataFrame(errors).assign(load_rank=pd.cut(rank, BINS))
    grouped = frame.groupby("load_rank", observed=True)
    bias = grouped.mean().add_suffix(" bias")
    rms = grouped.agg(lambda s: float(np.sqrt(np.nanmean(s**2)))).add_suffix(" rms")
    return pd.concat([bias, rms], axis=1).round(4)


def r2(y, pred) -> float:
    """R² over the rows with a finite prediction."""
    ok = np.isfinite(pred)
    y, pred = y[ok], pred[ok]
    return float(1 - np.sum((y - pred) ** 2) / np.sum((y - y.mean()) ** 2))


def part_load(fit_path: str | None) -> None:
    from specbayes.fit import fit, load_fit

    if fit_path:
        f = load_fit(fit_path)
        data = f.design.data.reset_index(drop=True)
    else:
        data = dense_slice()
        f = fit(data, model="dense", progress=False)
        data = f.design.data.reset_index(drop=True)
    print("fit:", f.summary())
    post = f.idata.posterior
    print(f"gamma {float(post['gamma'].median()):.3f}  sigma0 {float(post['sigma0'].median()):.5f}")
    y = data["latency"].to_numpy()
    median = np.median(f.mean_latency(data).values, axis=0)
    law, bent, deltas = _per_config_log_residuals(data)
    print(f"rows curve_fit could not fit (left out of its columns): {int(np.isnan(law).sum())}")
    # a row whose posterior-median latency is past the curved law's wall (most draws saturate
    # it) has no finite error: counted and left out, as validate.py does
    past = ~np.isfinite(median)
    print(f"rows specbayes predicts saturated (left out of its columns): {int(past.sum())}")
    ours = np.where(past, np.nan, np.log(np.where(past, 1.0, median) / y))
    errors = {"specbayes": ours, "curve_fit law": law, "headroom exponent": bent}
    print(by_load(data, errors).to_string())
    for name, e in errors.items():
        print(
            f"{name}: in-sample R2 latency {r2(y, y * np.exp(e)):.4f}, "
            f"log {r2(np.log(y), np.log(y) + e):.4f}"
        )
    q = np.quantile(deltas, [0.05, 0.25, 0.5, 0.75, 0.95]).round(3)
    print("headroom exponent delta, 5/25/50/75/95 % over configurations:", q)


def part_form() -> None:
    data = dense_slice()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cf = fit_configurations(data)
    cf = cf[cf.ok]
    means = data.groupby(CELL_KEY)[["prefill", "decode"]].mean().reset_index()
    c = cf.merge(means, on=CELL_KEY)
    vi = c.verifier.map({v: i for i, v in enumerate(VERIFIERS)}).to_numpy()
    hi = c.hardware.map({h: i for i, h in enumerate(HARDWARE)}).to_numpy()
    gi = vi * len(HARDWARE) + hi
    n_v, n_g = len(VERIFIERS), len(VERIFIERS) * len(HARDWARE)
    lp = np.log(c.prefill.to_numpy() / 640)
    lg = np.log(c.decode.to_numpy())
    # log of the mean KV length of a request, prefill + decode / 2 (the old core's kv trend)
    lkv = np.log(c.prefill.to_numpy() + 0.5 * c.decode.to_numpy()) - np.log(960.0)
    y = np.log(c.c2.to_numpy())
    n_b = {"common": 1, "GPU + verifier": len(HARDWARE) + n_v - 1, "per group": n_g}

    def slope(th, kind):
        if kind == "common":
            return np.full(len(y), th[0])
        if kind == "per group":
            return th[gi]
        return th[hi] + np.r_[0.0, th[len(HARDWARE) :]][vi]

    n_a = n_v + len(HARDWARE) - 1  # c2p: verifier + GPU levels (additive in log, as the model)
    for kind, nb in n_b.items():

        def resid(th, kind=kind):
            a = th[:n_v][vi] + np.r_[0.0, th[n_v:n_a]][hi]  # log c2p at p = 640
            b = th[n_a : n_a + n_g][gi]  # log c2v level, per group
            return np.logaddexp(a + lp, b + lg + slope(th[n_a + n_g :], kind) * lkv) - y

        best = None
        for seed in range(4):
            th0 = np.random.default_rng(seed).normal(0.0, 0.3, n_a + n_g + nb)
            th0[:n_v] += np.log(np.exp(y).mean() * 0.3)
            th0[n_a : n_a + n_g] += np.log(np.exp(y).mean() * 0.7 / np.exp(lg).mean())
            r = least_squares(resid, th0)
            best = r if best is None or r.cost < best.cost else best
        rms = np.sqrt(np.mean(best.fun**2))
        print(
            f"C2 cell slope {kind:>15}: residual rms {rms:.4f} (log; "
            f"{np.sqrt(np.sum(best.fun**2) / (len(y) - best.x.size)):.4f} per degree of "
            f"freedom), {best.x.size} parameters"
        )
    per_group = []  # the baseline's own per-group trend of C2 (relative least squares)
    for _, grp in c.groupby(["verifier", "hardware"]):
        trend = fit_dense_trend(grp.rename(columns={"c1": "C1", "c2": "C2"}))["C2"]
        p, g = grp.prefill.to_numpy(), grp.decode.to_numpy()
        x = np.c_[np.ones_like(p), p, g, g * (p + g / 2)]  # the order of DENSE_TERMS
        fitted = x @ np.array([trend[t] for t in DENSE_TERMS])
        per_group.append(np.log(fitted / grp.c2.to_numpy()))
    r = np.concatenate(per_group)
    dof = np.sqrt(np.sum(r**2) / (len(r) - 4 * len(per_group)))
    print(
        f"curve_fit per-group linear trends: residual rms {np.sqrt(np.mean(r**2)):.4f} "
        f"(log; {dof:.4f} per degree of freedom), {4 * len(per_group)} parameters"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=["load", "form"], required=True)
    ap.add_argument("--fit", default=None, help="a saved dense fit of the slice (netCDF)")
    args = ap.parse_args()
    part_load(args.fit) if args.part == "load" else part_form()


if __name__ == "__main__":
    main()
