"""Gradient cost: the compiled rows' likelihood against the graph written with ``laws``.

Usage::

    nice .venv/bin/python benchmarks/likelihood_speed.py --verifiers Qwen3-8B,Llama-3.1-8B
    nice .venv/bin/python benchmarks/likelihood_speed.py --verifiers all --write

On the paper set's dense verifiers (``data/paper.parquet``, the rows :func:`specbayes.fit.fit`
keeps), in one process: the ``sd`` model's log density and its gradient compiled with
PyTensor's numba backend (nutpie's default) for :attr:`LatencyModel.model` (the observed
``latency`` built from :mod:`specbayes.laws`) and :attr:`LatencyModel.sampling_model` (the
same density as one :class:`specbayes.likelihood.RowLogLikelihood` term), evaluated at the
fit's start (:meth:`LatencyModel.feasible_start`). Reports the median time per evaluation
over ``--repeats`` rounds of ``--calls`` calls, alternating the two, and checks that both
give the same log density. Every NUTS leapfrog step is one such evaluation.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--verifiers", default="Qwen3-8B,Llama-3.1-8B", help="comma list or 'all'")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--write", action="store_true", help="append the result to the .md file")
    args = ap.parse_args(argv)

    import pytensor
    import pytensor.tensor as pt
    from fit_speed import load_case

    from specbayes.fit import _prepare
    from specbayes.model import LatencyModel, build_design

    df = load_case("paper-dense")
    if args.verifiers != "all":
        df = df[df["verifier"].isin(args.verifiers.split(","))]
    data, _ = _prepare(df, "sd")
    t0 = time.perf_counter()
    lm = LatencyModel(build_design(data, "sd"))
    start = lm.feasible_start()
    setup = time.perf_counter() - t0
    print(f"{len(data)} rows; least squares + start {setup:.0f} s", flush=True)

    fns, points = {}, {}
    for name in ("model", "sampling_model"):
        m = getattr(lm, name)
        point = m.initial_point()
        for rv in m.free_RVs:  # the start, in the sampler's (transformed) coordinates
            value = m.rvs_to_values[rv]
            if rv.name in start:
                tr = m.rvs_to_transforms.get(rv)
                v = start[rv.name]
                point[value.name] = (
                    tr.forward(pt.as_tensor(v), *rv.owner.inputs).eval() if tr else v
                )
        lp = m.logp()
        t0 = time.perf_counter()
        fns[name] = pytensor.function(m.value_vars, [lp, *pt.grad(lp, m.value_vars)], mode="NUMBA")
        points[name] = [point[v.name] for v in m.value_vars]
        out = fns[name](*points[name])
        print(f"{name}: compile {time.perf_counter() - t0:.0f} s, logp {out[0]:.6f}", flush=True)
    same = np.isclose(
        fns["model"](*points["model"])[0],
        fns["sampling_model"](*points["sampling_model"])[0],
        rtol=1e-10,
    )

    times: dict[str, list[float]] = {"model": [], "sampling_model": []}
    for _ in range(args.repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(args.calls):
                fn(*points[name])
            times[name].append((time.perf_counter() - t0) / args.calls * 1e3)
    graph, kernel = (statistics.median(times[n]) for n in ("model", "sampling_model"))
    line = (
        f"| {args.verifiers} | {len(data)} | {graph:.2f} | {kernel:.2f} | "
        f"{graph / kernel:.1f}× | {'yes' if same else 'NO'} |"
    )
    print("| verifiers | rows | graph ms | compiled ms | ratio | same logp |")
    print("|---|---|---|---|---|---|")
    print(line)
    if args.write:
        md = REPO / "benchmarks" / "likelihood_speed.md"
        head = (
            f"\n### {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
            f"{platform.machine()}, python {platform.python_version()}\n\n"
            f"`benchmarks/likelihood_speed.py --verifiers {args.verifiers} --repeats "
            f"{args.repeats} --calls {args.calls}`; milliseconds per log density + gradient "
            "(numba), median of the repeats.\n\n"
            "| verifiers | rows | graph ms | compiled ms | ratio | same logp |\n"
            "|---|---|---|---|---|---|\n"
        )
        if not md.exists():
            md.write_text(
                "# Gradient cost of the rows' likelihood\n\nSee the script's docstring.\n"
            )
        with md.open("a") as f:
            f.write(head + line + "\n")


if __name__ == "__main__":
    main()
