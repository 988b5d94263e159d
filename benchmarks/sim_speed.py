"""Simulator speed benchmark: wall time to build the bundled datasets.

Targets (issue 3): ``demo`` <= 60 s and ``paper`` <= 30 min on the 2-core build machine.

Usage::

    .venv/bin/python benchmarks/sim_speed.py                 # demo only
    .venv/bin/python benchmarks/sim_speed.py --paper         # demo and paper
    .venv/bin/python benchmarks/sim_speed.py --paper --write-data   # also (re)write data/*.parquet

Each build runs in a fresh interpreter (``specbayes simulate --dataset ...``) so the time
includes start-up and loading the numba cache, as a user would see it. The result is
appended to ``benchmarks/sim_speed.md``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGETS = {"demo": 60.0, "paper": 30 * 60.0}


def build(name: str, out: Path, seed: int) -> float:
    """Seconds to build one dataset via the CLI in a fresh process."""
    exe = Path(sys.executable).with_name("specbayes")
    cmd = [str(exe), "simulate", "--dataset", name, "--seed", str(seed), "--out", str(out)]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=ROOT)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--paper", action="store_true", help="also time the paper dataset")
    parser.add_argument("--write-data", action="store_true", help="write data/<name>.parquet")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import pandas as pd

    names = ["demo", "paper"] if args.paper else ["demo"]
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            out = ROOT / "data" / f"{name}.parquet" if args.write_data else Path(tmp) / "x.pq"
            seconds = build(name, out.with_suffix(".parquet"), args.seed)
            df = pd.read_parquet(out.with_suffix(".parquet"))
            sweeps = int((df["sweep_index"] == 0).sum())
            ok = "PASS" if seconds <= TARGETS[name] else "FAIL"
            lines.append(
                f"| {name} | {seconds:.1f} s | {TARGETS[name]:.0f} s | {ok} | {len(df)} rows, "
                f"{sweeps} sweeps |"
            )
            print(lines[-1], flush=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    cpus = os.cpu_count()
    header = (
        f"\n### {stamp} — {platform.processor() or platform.machine()}, {cpus} CPUs, "
        f"seed {args.seed}\n\n| dataset | wall time | target | | size |\n|---|---|---|---|---|\n"
    )
    with (ROOT / "benchmarks" / "sim_speed.md").open("a") as fh:
        fh.write(header + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
