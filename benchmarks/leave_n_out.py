"""Held-out-cell accuracy: specbayes vs the paper's curve_fit trends on the same folds.

Runs :func:`specbayes.validate.leave_n_out` on a slice of the bundled ``paper`` dataset and
appends the table to ``benchmarks/leave_n_out.md``.

    .venv/bin/python benchmarks/leave_n_out.py --model dense --hardware H100-SXM \
        --verifiers Qwen3-8B,Qwen3-14B,Qwen3-32B,Llama-3.1-8B,Llama-3.1-70B --write

``--hardware`` takes a comma list (default: both GPUs of the paper set).
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import time
from pathlib import Path

from specbayes.datasets import load_dataset
from specbayes.report import markdown_table
from specbayes.validate import leave_n_out

OUT = Path(__file__).with_name("leave_n_out.md")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="dense", choices=["dense", "sd", "moe"])
    ap.add_argument("--hardware", default="H100-SXM,A100-SXM-80GB", help="comma list")
    ap.add_argument(
        "--verifiers", default="Qwen3-8B,Qwen3-14B,Qwen3-32B,Llama-3.1-8B,Llama-3.1-70B"
    )
    ap.add_argument("--n", default="1,2,4")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--write", action="store_true", help="append the result to leave_n_out.md")
    args = ap.parse_args()

    data = load_dataset("paper")
    verifiers = args.verifiers.split(",")
    hardware = args.hardware.split(",")
    rows = data[data.verifier.isin(verifiers) & data.hardware.isin(hardware)]
    if args.model == "dense":
        rows = rows[rows.k == 0]
    ns = [int(x) for x in args.n.split(",")]
    t0 = time.perf_counter()
    res = leave_n_out(rows, model=args.model, n=ns, repeats=args.repeats, seed=0, n_jobs=args.jobs)
    wall = time.perf_counter() - t0
    table = res.overall.drop(columns=["wall_s"])
    text = [
        f"### {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC — {platform.machine()}, "
        f"{args.model} model, {args.hardware}, {len(verifiers)} verifiers, "
        f"{len(rows)} rows, n = {ns}, {args.repeats} folds each, wall {wall:.0f} s",
        "",
        f"Command: `.venv/bin/python benchmarks/leave_n_out.py --model {args.model} "
        f"--hardware {args.hardware} --verifiers {args.verifiers} --n {args.n} "
        f"--repeats {args.repeats} --write`",
        "",
        markdown_table(table, floatfmt=".3f"),
        "",
    ]
    if len(res.skipped):
        text += ["Skipped:", "", markdown_table(res.skipped), ""]
    print("\n".join(text))
    print(res.folds.to_string())
    if args.write:
        if not OUT.exists():
            OUT.write_text(
                "# Leave-n-out over cells — recorded results\n\n"
                "specbayes (posterior median; predictive intervals) vs the paper's method "
                "(curve_fit per cell + linear trends across cells) on the same folds. "
                "`r2_log`/`r2`: held-out R² on log latency / latency (mean over folds); "
                "`cov50`/`cov90`: share of held-out rows inside the 50 % / 90 % predictive "
                "intervals (calibrated: 0.5 / 0.9); `elpd_per_row`: held-out log predictive "
                "density per row.\n\n"
            )
        with OUT.open("a") as fh:
            fh.write("\n".join(text) + "\n")


if __name__ == "__main__":
    main()
