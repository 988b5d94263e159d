"""The paper's three cost-ratio findings, as posterior probabilities of a saved fit.

For every (verifier, hardware, drafter) of the fit, at the median cell of its data
(:func:`specbayes.findings.median_cell`), runs :func:`specbayes.findings.paper_findings`
and prints a markdown summary plus one detail table per arm; ``--write`` appends both to
``benchmarks/paper_findings.md`` with the command line and the date.

    .venv/bin/python benchmarks/paper_findings.py fits/paper_sd.nc --write

(a) C1R < 1 for every k; (b) C2R > 1 except at high alpha; (c) the k minimising C1R is larger
than the k minimising C2R. Needs an ``sd`` fit (SD rows); dense-only groups are listed as
skipped.
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from specbayes.findings import PAPER_ALPHAS, median_cell, paper_findings
from specbayes.fit import load_fit
from specbayes.report import markdown_table

OUT = Path(__file__).with_name("paper_findings.md")


def _fmt_by_k(values: dict, fmt: str = ".2f", lowest: float | None = None) -> str:
    """``k1 0.55 · k2 0.70 …`` (``–``: none in the grid; ``∞``: C2R > 1 at every alpha;
    ``≤a``: already at the grid's lowest alpha ``a``)."""

    def one(v) -> str:
        if v is None:
            return "–"
        if lowest is not None and v <= lowest:
            return "≤" + format(v, fmt)
        return "∞" if np.isinf(v) else format(v, fmt)

    return " · ".join(f"k{k} {one(v)}" for k, v in values.items())


def _arms(data: pd.DataFrame) -> tuple[list[tuple[str, str, str]], list[dict]]:
    arms, skipped = [], []
    for (v, h), rows in data.groupby(["verifier", "hardware"], sort=True):
        drafters = sorted(set(rows.loc[rows.k > 0, "drafter"].dropna()))
        if not drafters:
            skipped.append(dict(verifier=v, hardware=h, reason="no SD rows (dense only)"))
        arms += [(v, h, d) for d in drafters]
    return arms, skipped


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("fit", help="saved fit (netCDF, Fit.save)")
    ap.add_argument("--alphas", default=",".join(f"{a:g}" for a in PAPER_ALPHAS))
    ap.add_argument("--ks", default="1,2,3,4,5,6,7,8,9,10")
    ap.add_argument("--threshold", type=float, default=0.5, help="probability for 'holds'")
    ap.add_argument("--high-alpha", type=float, default=0.9, help="'high alpha' of finding b")
    ap.add_argument("--write", action="store_true", help=f"append the tables to {OUT.name}")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    alphas = [float(a) for a in args.alphas.split(",")]
    ks = [int(k) for k in args.ks.split(",")]

    t0 = time.perf_counter()
    fit = load_fit(args.fit)
    summary = fit.summary()
    arms, skipped = _arms(fit.data)
    rows, details = [], []
    for v, h, d in arms:
        cell, _, _ = median_cell(fit.data, v, h)
        try:
            table, checks = paper_findings(
                fit,
                v,
                h,
                cell=cell,
                alphas=alphas,
                ks=ks,
                drafter=d,
                threshold=args.threshold,
                high_alpha=args.high_alpha,
            )
        except ValueError as exc:
            skipped.append(dict(verifier=v, hardware=h, reason=f"{d}: {exc}"))
            continue
        a, b, c = checks["c1r_below_1"], checks["c2r_above_1"], checks["argmin_k"]
        rows.append(
            {
                "verifier": v,
                "hardware": h,
                "drafter": d,
                "cell": cell,
                "(a) P(C1R<1 ∀α,k)": a["p_all"],
                "(a) min_k P(C1R<1 ∀α)": a["p_min"],
                "(a)": "holds" if a["holds"] else "fails",
                "(b) α where P(C2R>1) < 0.5": _fmt_by_k(
                    b["alpha_threshold_by_k"], lowest=min(alphas)
                ),
                "(b)": "holds" if b["holds"] else "fails",
                "(c) P(argmin C1R > argmin C2R), mean over α": c["p_mean"],
                "(c)": "holds" if c["holds"] else "fails",
            }
        )
        p2 = table.pivot(index="alpha", columns="k", values="p_c2r_above_1")
        p2.columns = [f"P(C2R>1) k={k}" for k in p2.columns]
        detail = pd.DataFrame(
            {
                "alpha": p2.index,
                "min_k P(C1R<1)": table.groupby("alpha")["p_c1r_below_1"].min().to_numpy(),
                **{col: p2[col].to_numpy() for col in p2.columns},
                "E[argmin C1R]": list(c["mean_argmin_c1r_by_alpha"].values()),
                "E[argmin C2R]": list(c["mean_argmin_c2r_by_alpha"].values()),
                "P(argmin C1R > argmin C2R)": list(c["p_by_alpha"].values()),
            }
        )
        details.append(
            (
                f"{v} + {d} on {h}, cell {cell} ({table.attrs['draws']} draws); median α "
                f"where C2R = 1: {_fmt_by_k(b['alpha_cross_median_by_k'], '.3f')}",
                detail,
            )
        )
    wall = time.perf_counter() - t0

    command = ".venv/bin/python benchmarks/paper_findings.py " + shlex.join(
        sys.argv[1:] if argv is None else argv
    )
    health = ", ".join(
        f"{k} {summary[k]:.3g}" if isinstance(summary[k], float) else f"{k} {summary[k]}"
        for k in ("model", "rows", "divergences", "max_r_hat", "min_ess_bulk", "healthy")
    )
    text = [
        f"### {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC — {platform.machine()}, "
        f"fit `{args.fit}` ({health}), wall {wall:.1f} s",
        "",
        f"Command: `{command}`",
        "",
        f"'holds' at posterior probability ≥ {args.threshold:g}; (b) 'high alpha' = "
        f"α ≥ {args.high_alpha:g}; α grid {alphas[0]:g}–{alphas[-1]:g} ({len(alphas)} values), "
        f"k = {ks[0]}–{ks[-1]}.",
        "",
        markdown_table(pd.DataFrame(rows), floatfmt=".3f") if rows else "(no SD arm)",
        "",
    ]
    if not summary["healthy"]:
        text += ["**The fit failed its health checks: read these probabilities with care.**", ""]
    for title, detail in details:
        text += [f"#### {title}", "", markdown_table(detail, floatfmt=".2f"), ""]
    if skipped:
        text += ["Skipped:", "", markdown_table(pd.DataFrame(skipped)), ""]
    out = "\n".join(text)
    print(out)
    if args.write:
        if not args.out.exists():
            args.out.write_text(
                "# The paper's cost-ratio findings — recorded results\n\n"
                "Posterior probabilities (specbayes.findings.paper_findings) of Kong et al.'s "
                "findings: (a) C1R < 1 for every k, (b) C2R > 1 except at high alpha, (c) the "
                "k minimising C1R exceeds the k minimising C2R; per arm at the median cell of "
                "the fitted data.\n\n"
            )
        with args.out.open("a") as fh:
            fh.write(out + "\n")
    return out


if __name__ == "__main__":
    main()
