"""Gradient cost: the rows' density as one compiled pass against the same density in PyTensor.

Usage::

    nice .venv/bin/python benchmarks/likelihood_speed.py --verifiers Qwen3-8B
    nice .venv/bin/python benchmarks/likelihood_speed.py --verifiers all --write

On the paper set's dense verifiers (``data/paper.parquet``, the rows a fit keeps), in one
process: the default core's ``sd`` model (:func:`specbayes.model.build_model`) with the
observed rows' collapsed density written as :class:`specbayes.model.rows.CollapsedRows`
(``graph.COMPILED_ROWS = True``, the default) and written with PyTensor
(:func:`specbayes.model.likelihood.collapsed_logp` of the graph's mean and noise scale,
``False``); each model's log density and gradient compiled with PyTensor's numba backend
(nutpie's), evaluated at the model's initial point. Reports the median time per evaluation
over ``--repeats`` rounds of ``--calls`` calls, alternating the two, the time of the priors'
terms alone (what neither form changes), and checks that both give the same log density.
Every NUTS leapfrog step is one such evaluation.
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


def compiled(model, terms=None):
    """The model's log density (of ``terms``; all by default) and gradient, numba, and the
    initial point in the sampler's coordinates."""
    import pytensor

    values = model.value_vars
    lp = model.logp(vars=terms)
    fn = pytensor.function(values, [lp, *pytensor.grad(lp, values, disconnected_inputs="ignore")],
                           mode="NUMBA", on_unused_input="ignore")  # fmt: skip
    point = model.initial_point()
    return fn, [point[v.name] for v in values]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--verifiers", default="Qwen3-8B", help="comma list or 'all'")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--write", action="store_true", help="append the result to the .md file")
    args = ap.parse_args(argv)

    from fit_speed import load_case

    from specbayes.model import graph
    from specbayes.model.design import build_design
    from specbayes.model.fitted import prepare_table

    df = load_case("paper-dense")
    if args.verifiers != "all":
        df = df[df["verifier"].isin(args.verifiers.split(","))]
    design = build_design(prepare_table(df, "sd"), "sd")
    fns = {}
    for name, flag in (("graph", False), ("compiled", True)):
        graph.COMPILED_ROWS = flag
        model = graph.build_model(design)
        t0 = time.perf_counter()
        fns[name] = compiled(model)
        print(f"{name}: compile {time.perf_counter() - t0:.1f} s, "
              f"logp {fns[name][0](*fns[name][1])[0]:.6f}", flush=True)  # fmt: skip
    fns["priors"] = compiled(model, model.free_RVs)
    graph.COMPILED_ROWS = True
    same = np.isclose(fns["graph"][0](*fns["graph"][1])[0],
                      fns["compiled"][0](*fns["compiled"][1])[0], rtol=1e-10)  # fmt: skip

    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(args.repeats):
        for name, (fn, point) in fns.items():
            t0 = time.perf_counter()
            for _ in range(args.calls):
                fn(*point)
            times[name].append((time.perf_counter() - t0) / args.calls * 1e3)
    ms = {name: statistics.median(t) for name, t in times.items()}
    line = (
        f"| {args.verifiers} | {len(design.load):,} | {len(design.coords['sweep']):,} | "
        f"{ms['graph']:.2f} | {ms['compiled']:.2f} | {ms['graph'] / ms['compiled']:.2f}× | "
        f"{ms['priors']:.2f} | {'yes' if same else 'NO'} |"
    )
    head = ("| verifiers | rows | sweeps | graph ms | compiled ms | ratio | priors alone ms "
            "| same logp |\n|---|---|---|---|---|---|---|---|")  # fmt: skip
    print(head + "\n" + line)
    if args.write:
        md = REPO / "benchmarks" / "likelihood_speed.md"
        with md.open("a") as f:
            f.write(
                f"\n### {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
                f"{platform.machine()}, python {platform.python_version()} — the default core\n\n"
                f"`nice .venv/bin/python benchmarks/likelihood_speed.py --verifiers "
                f"{args.verifiers} --repeats {args.repeats} --calls {args.calls} --write`; "
                "milliseconds per log density + gradient (numba), median of the repeats.\n\n"
                f"{head}\n{line}\n"
            )


if __name__ == "__main__":
    main()
