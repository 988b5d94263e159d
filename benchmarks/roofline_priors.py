"""How close are the roofline prior centres to least-squares cycle coefficients?

For every (verifier, drafter, hardware, cell) of a dataset, the paper's six-coefficient fit
(:func:`specbayes.baseline.fit_cycle_coefficients`) against
:func:`specbayes.model.physics.roofline_centres` at the same cell: the table is
``log(centre / fitted)``. Also the dense costs ``C1 = c1p + g c1v``, ``C2 = c2p + g c2v``
(identified by each sweep to ~1 %) and, where the data carry TTFT, ``c1p`` against the
measured prefill of the synchronous dense point (``ttft - itl``: the prefill step less one
decode step). A fitted coefficient below 1e-3 of its share of the aggregate (``c1p`` of
``C1``, ``g c1v`` of ``C1``, ``c1d`` of ``c1v``, ...) has collapsed onto its bound: it is
counted apart ("collapsed").

    .venv/bin/python benchmarks/roofline_priors.py --write

(``--datasets demo,real`` for the quick ones; the paper fit takes ~1-2 min.) ``--demo-fit N``
also samples the pooled model on the demo (seeds 1..N) with the default ``coef_mu`` prior and
with roofline centres at log sd 1.0, and reports sampler health and the bulk ESS of
``coef_mu`` per coefficient, and how far the posterior median of ``coef_mu`` lies from the
roofline centre (the prior is one centre per coefficient for every group; the
demo's two groups, 8B models on one H100, get the geometric mean of their centres).
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import time
from pathlib import Path

import numpy as np
import pandas as pd

from specbayes import baseline
from specbayes.data import read_sweeps, validate_sweeps
from specbayes.datasets import load_dataset
from specbayes.model import physics
from specbayes.report import markdown_table

OUT = Path(__file__).with_name("roofline_priors.md")
ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT / "data/real/speculators_qwen3.8-27b_b200_sweeps.csv"
COEFS = ("c1p", "c1v", "c1d", "c2p", "c2v", "c2d")
#: what each fitted coefficient is a share of, to tell a collapsed fit (share < 1e-3)
SHARE_OF = {"c1p": "C1", "c1v": "C1", "c2p": "C2", "c2v": "C2", "c1d": "c1v", "c2d": "c2v"}
MOE = ("Qwen3-30B-A3B", "gpt-oss-20b", "Qwen3-235B-A22B")
#: the long-format transcription of the real sweeps (it keeps TTFT; data/real does not)
REAL_LONG = ROOT.parent / "shared/real/speculators_qwen3.8-27b_b200.csv"


def _sweeps(name: str) -> pd.DataFrame:
    raw = read_sweeps(REAL) if name == "real" else load_dataset(name)
    return validate_sweeps(raw).data


def _centres(units: pd.DataFrame, data: pd.DataFrame) -> pd.DataFrame:
    """Roofline centres at each fitted unit (tp from the data, k = the unit's median k)."""
    tp = data.groupby(["verifier", "hardware"])["tp"].first() if "tp" in data else None
    ks = data[data.k > 0].groupby(["verifier", "hardware", "drafter", "cell"])["k"].median()
    rows = []
    for u in units.itertuples():
        k = ks.get((u.verifier, u.hardware, u.drafter, u.cell))
        c = physics.roofline_centres(
            u.verifier,
            u.hardware,
            u.drafter,
            u.prefill,
            u.decode,
            tp=int(tp[(u.verifier, u.hardware)]) if tp is not None else 1,
            k=None if k is None else round(k),
        )
        rows.append(c or {})
    return pd.DataFrame(rows, index=units.index).reindex(columns=list(COEFS))


def compare(name: str) -> tuple[pd.DataFrame, pd.DataFrame, float, pd.DataFrame, pd.DataFrame]:
    """Per-unit log ratios (``lr_*``) and collapse flags (``col_*``); TTFT check; fit seconds;
    the fitted units and the sweep rows."""
    data = _sweeps(name)
    t0 = time.perf_counter()
    units = baseline.fit_cycle_coefficients(data)
    wall = time.perf_counter() - t0
    units = units[units.ok & units.sd].reset_index(drop=True)
    cen = _centres(units, data)
    out = units[["verifier", "drafter", "hardware", "cell", "prefill", "decode"]].copy()
    g = units["decode"]
    for c in COEFS:
        out[f"lr_{c}"] = np.log(cen[c] / units[c])
        share = units[c] * (g if c in ("c1v", "c2v") else 1.0) / units[SHARE_OF[c]]
        out[f"col_{c}"] = share < 1e-3
    for j in ("1", "2"):
        agg = cen[f"c{j}p"] + g * cen[f"c{j}v"]
        out[f"lr_C{j}"] = np.log(agg / units[f"C{j}"])
        out[f"col_C{j}"] = False
    return out, _ttft_check(data), wall, units, data


def _ttft_check(data: pd.DataFrame) -> pd.DataFrame:
    """``log(c1p centre / (ttft - itl))`` at each synchronous dense point."""
    if "latency_source" in data:  # the real table: TTFT only in the long transcription
        return _real_ttft()
    if "ttft" not in data or "itl" not in data or data["ttft"].isna().all():
        return pd.DataFrame()
    sync = data[(data.k == 0) & (data.concurrency == 1)]
    rows = []
    for r in sync.itertuples():
        c = physics.roofline_centres(
            r.verifier, r.hardware, None, r.prefill, r.decode, tp=int(getattr(r, "tp", 1))
        )
        if c is not None and r.ttft > r.itl:
            rows.append(dict(verifier=r.verifier, lr=np.log(c["c1p"] / (r.ttft - r.itl))))
    return pd.DataFrame(rows)


def _real_ttft() -> pd.DataFrame:
    """The same check on the real dense N = 1 points (median TTFT, mean ITL), if present."""
    if not REAL_LONG.exists():
        return pd.DataFrame()
    d = pd.read_csv(REAL_LONG)
    d = d[(d.draft_method == "none") & (d.request_rate_or_concurrency == 1)]
    rows = []
    for _, pt in d.groupby("notes"):
        val = pt.set_index("metric")["value"]
        p = float(pt["input_len"].iloc[0].split("=")[1])
        g = float(pt["output_len"].iloc[0].split("=")[1].split()[0])
        c = physics.roofline_centres("Qwen3.8-27B", "B200", None, p, g)
        measured = (val["median_ttft_ms"] - val["mean_itl_ms"]) / 1e3
        rows.append(dict(verifier="Qwen3.8-27B", prefill=p, measured=measured, centre=c["c1p"]))
    frame = pd.DataFrame(rows)
    return frame.assign(lr=np.log(frame.centre / frame.measured))


def summary(name: str, res: pd.DataFrame, ttft: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for c in (*COEFS, "C1", "C2"):
        lr, col = res[f"lr_{c}"], res[f"col_{c}"]
        ok = lr[~col & np.isfinite(lr)]
        rows.append(_stats(name, c, ok, int(col.sum()), (lr.abs() < 1).mean()))
    if not ttft.empty:
        rows.append(_stats(name, "c1p vs ttft-itl", ttft["lr"], 0, (ttft["lr"].abs() < 1).mean()))
    return pd.DataFrame(rows)


def _stats(name, coef, lr, n_collapsed, within_all) -> dict:
    q = np.quantile(lr, [0.1, 0.5, 0.9]) if len(lr) else [np.nan] * 3
    return {
        "dataset": name,
        "coefficient": coef,
        "units": len(lr) + n_collapsed,
        "collapsed": n_collapsed,
        "median": q[1],
        "p10": q[0],
        "p90": q[2],
        "min": lr.min() if len(lr) else np.nan,
        "max": lr.max() if len(lr) else np.nan,
        "within 1 (identified)": (lr.abs() < 1).mean() if len(lr) else np.nan,
        "within 1 (all)": within_all,
    }


def by_group(res: pd.DataFrame) -> pd.DataFrame:
    """Median log ratio per (verifier, drafter, hardware), collapsed fits left out."""
    cols = {}
    for c in (*COEFS, "C1", "C2"):
        cols[c] = res[f"lr_{c}"].where(~res[f"col_{c}"])
    frame = pd.concat([res[["verifier", "drafter", "hardware"]], pd.DataFrame(cols)], axis=1)
    return frame.groupby(["verifier", "drafter", "hardware"], sort=True).median().reset_index()


def moe_sensitivity(units: pd.DataFrame, data: pd.DataFrame) -> pd.DataFrame:
    """Median log ratios of the MoE verifiers' units for other linearisation points."""
    units = units[units.verifier.isin(MOE)].reset_index(drop=True)
    keep = physics.MOE_REFERENCE_TOKENS
    rows = []
    try:
        for t in (8.0, 16.0, 32.0, 64.0, 128.0):
            physics.MOE_REFERENCE_TOKENS = t
            cen = _centres(units, data)
            row = {"reference tokens": t}
            for c in ("c1v", "c2v", "c1d", "c2d", "C1", "C2"):
                if c in ("C1", "C2"):
                    j = c[1]
                    val = cen[f"c{j}p"] + units["decode"] * cen[f"c{j}v"]
                else:
                    val = cen[c]
                row[c] = float(np.median(np.log(val / units[c])))
            rows.append(row)
    finally:
        physics.MOE_REFERENCE_TOKENS = keep
    return pd.DataFrame(rows)


def _trend_centre_cell(design) -> tuple[float, float]:
    """Prompt and output tokens at which ``coef_mu`` sits: the centre of the trend covariates,
    mean log p and mean log(p + g/2) over units (``hierarchy.trend_covariates``)."""
    n = len(design.coords["unit"])
    count = np.bincount(design.sweep_unit, None, n)
    p = np.maximum(np.bincount(design.sweep_unit, design.prefill, n) / count, 1.0)
    g = np.bincount(design.sweep_unit, design.decode, n) / count
    p_star = float(np.exp(np.mean(np.log(p))))
    s_star = float(np.exp(np.mean(np.log(p + 0.5 * g))))
    return p_star, 2.0 * (s_star - p_star)


def demo_fit(seeds: int) -> pd.DataFrame:
    """Pooled demo fit: default ``coef_mu`` vs roofline centres at sigma 1.0."""
    from specbayes.model import build_design, build_model, health, merge_priors, sample
    from specbayes.model.sampling import compile_model

    design = build_design(validate_sweeps(load_dataset("demo")))
    p, g = _trend_centre_cell(design)
    data = design.data
    logs = []
    for (v, h, dr), _ in data[data.k > 0].groupby(["verifier", "hardware", "drafter"]):
        c = physics.roofline_centres(v, h, dr, p, g, k=4)
        logs.append({name: np.log(c[name]) for name in COEFS})
    centre = pd.DataFrame(logs).mean()
    roofline = {"coef_mu": {c: {"mu": float(centre[c]), "sigma": 1.0} for c in COEFS}}
    rows = []
    for label, priors in (("default (sigma 2)", None), ("roofline (sigma 1)", roofline)):
        model = build_model(design, merge_priors(priors))
        compiled = compile_model(model)
        for seed in range(1, seeds + 1):
            idata, timing = sample(model, seed, compiled=compiled)
            hl = health(idata, model)
            ess = az_ess(idata)
            post = idata.posterior["coef_mu"].median(("chain", "draw"))
            gap = {c: float(np.abs(post.sel(coef=c) - centre[c]).max()) for c in COEFS}
            rows.append(
                {
                    "prior": label,
                    "seed": seed,
                    "divergences": hl["divergences"],
                    "rhat_max": hl["rhat_max"],
                    "ess_bulk_min": hl["ess_bulk_min"],
                    "worst": hl["worst"],
                    **{f"ess {c}": ess[c] for c in COEFS},
                    **{f"|post - centre| {c}": gap[c] for c in COEFS},
                    "sample_s": timing["sample_s"],
                }
            )
    return pd.DataFrame(rows)


def az_ess(idata) -> dict[str, float]:
    """Smallest bulk ESS of ``coef_mu`` per coefficient (over groups)."""
    import arviz as az

    ess = az.ess(idata.posterior["coef_mu"], method="bulk")["coef_mu"]
    return {c: float(ess.sel(coef=c).min()) for c in COEFS}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", default="demo,paper,real", help="comma list")
    ap.add_argument("--demo-fit", type=int, default=0, metavar="N", help="sample seeds 1..N")
    ap.add_argument("--write", action="store_true", help="append the result to the .md")
    args = ap.parse_args()
    names = args.datasets.split(",")
    summaries, groups, text, walls = [], {}, [], {}
    for name in names:
        res, ttft, walls[name], units, data = compare(name)
        if name == "paper":
            moe = moe_sensitivity(units, data)
        summaries.append(summary(name, res, ttft))
        groups[name] = by_group(res)
    head = f"### {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC — {platform.machine()}, " + ", ".join(
        f"{n} (least squares {w:.0f} s)" for n, w in walls.items()
    )
    cmd = "Command: `.venv/bin/python benchmarks/roofline_priors.py --datasets "
    text += [head, "", cmd + f"{args.datasets} --write`", ""]
    text += ["log(centre / fitted), per unit (collapsed fits counted apart):", ""]
    text += [markdown_table(pd.concat(summaries, ignore_index=True), floatfmt=".2f"), ""]
    for name, table in groups.items():
        text += [f"Median per group, {name}:", "", markdown_table(table, floatfmt=".2f"), ""]
    if "paper" in names:
        text += ["MoE verifiers (paper): median log ratio vs the linearisation point:", ""]
        text += [markdown_table(moe, floatfmt=".2f"), ""]
    if args.demo_fit:
        text += [
            "Pooled demo fit, by coef_mu prior: bulk ESS of coef_mu (smallest over groups) and "
            "|posterior median of coef_mu - roofline centre| (log units, largest over groups):",
            "",
        ]
        text += [markdown_table(demo_fit(args.demo_fit), floatfmt=".3g"), ""]
        text[2] = text[2].replace(" --write`", f" --demo-fit {args.demo_fit} --write`")
    out = "\n".join(text)
    print(out)
    if args.write:
        with OUT.open("a") as fh:
            fh.write("\n" + out)


if __name__ == "__main__":
    main()
