"""Scaling out: folds and a dataset build at 1 and 2 Dask workers vs serial; numpyro vs nutpie.

Every comparison runs in one process, one case after another, and is checked equal to the
serial run (fold scores and predictions; simulated rows); ``uptime`` is recorded around each
case because this machine's 2 cores are shared. Appends the tables to
``benchmarks/scale.md`` with ``--write``.

    .venv/bin/python benchmarks/scale.py --cases folds,dataset,numpyro --write

``folds``: :func:`specbayes.validate.leave_n_out` on the bundled demo, sd level, n = 1 held
out, ``--folds`` folds, default sampler settings (``--fold-cores``: the sampler's threads per
fit), serially and on a ``LocalCluster`` of 1 and 2 workers. ``dataset``: every
``--every``-th sweep group of the ``paper`` design (the same task function and engine as
:func:`specbayes.sim.build_dataset`), and the whole demo build. ``numpyro``: the demo sd
fit with nutpie and with numpyro (JAX on CPU), defaults ("vs serial": nutpie's wall time
over this sampler's).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import time
from pathlib import Path

OUT = Path(__file__).with_name("scale.md")
WORKERS = (1, 2)


def uptime() -> str:
    """The load averages (1, 5, 15 min)."""
    text = subprocess.run(["uptime"], capture_output=True, text=True).stdout
    return text.rsplit("load average:", 1)[-1].strip()


def timed(fn):
    load = uptime()
    t0 = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - t0, f"{load} → {uptime()}"


def folds_case(n_folds: int, cores: int | None = None) -> list[dict]:
    import pandas as pd

    from specbayes.datasets import load_dataset
    from specbayes.validate import leave_n_out

    data = load_dataset("demo")
    runs = [("serial", None, None)] + [(f"local, {w} worker(s)", "local", w) for w in WORKERS]
    rows, ref = [], None
    for name, scheduler, workers in runs:
        res, wall, load = timed(
            lambda s=scheduler, w=workers: leave_n_out(
                data,
                model="sd",
                n=1,
                repeats=n_folds,
                scheduler=s,
                n_jobs=w,
                sampler_config={"cores": cores} if cores else None,
            )
        )
        scores = res.folds.drop(columns="wall_s")
        if ref is None:
            ref = (scores, res.predictions)
        pd.testing.assert_frame_equal(scores, ref[0])  # raises when the scores differ
        pd.testing.assert_frame_equal(res.predictions, ref[1])
        fits = res.folds[res.folds.method.str.startswith("specbayes")]
        rows.append(
            dict(
                case=f"{n_folds} folds (demo, sd, n=1)"
                + (f", {cores} sampler thread(s) per fit" if cores else ""),
                run=name,
                wall_s=wall,
                healthy_folds=int(
                    (
                        (fits.divergences == 0)
                        & (fits.max_rhat <= 1.01)
                        & (fits.min_ess_bulk >= 400)
                    ).sum()
                ),
                r2=list(fits.r2.round(5)),
                load=load,
            )
        )
    return rows


def dataset_case(every: int) -> list[dict]:
    import pandas as pd

    from specbayes.parallel import map_tasks
    from specbayes.sim import build_dataset, design
    from specbayes.sim.datasets import _run_group

    groups = design("paper", 0)[::every]
    rows = []
    for label, build in (
        (
            f"paper design, every {every}th group ({len(groups)} groups)",
            lambda s, w: pd.DataFrame(
                [
                    r
                    for rs in map_tasks(
                        _run_group, groups, common=dict(seed=0), scheduler=s, workers=w
                    )
                    for r in rs
                ]
            ),
        ),
        (
            "demo (8 groups)",
            lambda s, w: build_dataset("demo", progress=False, workers=w or 1, scheduler=s),
        ),
    ):
        ref = None
        for name, scheduler, workers in [("serial", "serial", None)] + [
            (f"local, {w} worker(s)", "local", w) for w in WORKERS
        ]:
            df, wall, load = timed(lambda s=scheduler, w=workers, b=build: b(s, w))
            if ref is None:
                ref = df
            pd.testing.assert_frame_equal(df, ref)
            rows.append(dict(case=label, run=name, wall_s=wall, rows=len(df), load=load))
    return rows


def numpyro_case() -> list[dict]:
    from specbayes.datasets import load_dataset
    from specbayes.fit import fit

    data = load_dataset("demo")
    rows = []
    for sampler in ("nutpie", "numpyro"):
        res, wall, load = timed(
            lambda s=sampler: fit(data, model="sd", sampler_config={"sampler": s}, progress=False)
        )
        s = res.summary()
        rows.append(
            dict(
                case="demo sd fit, defaults",
                run=sampler,
                wall_s=wall,
                divergences=s["divergences"],
                max_r_hat=s["max_r_hat"],
                min_ess_bulk=s["min_ess_bulk"],
                healthy=s["healthy"],
                load=load,
            )
        )
    return rows


def _table(rows: list[dict]) -> str:
    serial = {r["case"]: r["wall_s"] for r in rows if r["run"] in ("serial", "nutpie")}
    keys = [k for k in rows[0] if k not in ("case", "run", "wall_s", "load")]
    head = ["case", "run", "wall (s)", "vs serial", *keys, "load avg (before → after)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        ratio = serial[r["case"]] / r["wall_s"]
        cells = [r["case"], r["run"], f"{r['wall_s']:.1f}", f"{ratio:.2f}×"]
        cells += [str(r[k]) for k in keys] + [r["load"]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="folds,dataset,numpyro")
    ap.add_argument("--folds", type=int, default=2, help="folds of the fold case")
    ap.add_argument(
        "--fold-cores", type=int, help="sampler threads per fold's fit (default: the fit's)"
    )
    ap.add_argument("--every", type=int, default=8, help="paper groups: every n-th")
    ap.add_argument("--write", action="store_true", help="append the tables to scale.md")
    args = ap.parse_args()
    cases = args.cases.split(",")
    tables = {}
    runs = {
        "folds": lambda: folds_case(args.folds, args.fold_cores),
        "dataset": lambda: dataset_case(args.every),
        "numpyro": numpyro_case,
    }
    for name in cases:
        tables[name] = runs[name]()
        print(json.dumps(tables[name], default=str), flush=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    text = f"\n### {stamp} — {platform.machine()}, {os.cpu_count()} CPUs\n"
    for name, rows in tables.items():
        text += f"\n{name}:\n\n{_table(rows)}\n"
    print(text)
    if args.write:
        with OUT.open("a") as fh:
            fh.write(text)


if __name__ == "__main__":
    main()
