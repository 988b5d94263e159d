"""``specbayes simulate``: single points, sweeps and the bundled datasets from the simulator.

Examples::

    specbayes simulate --verifier Qwen3-8B --hardware H100 --prefill 512 --decode 256 --rps 8
    specbayes simulate --verifier Qwen3-8B --k 3 --alpha 0.8 --profile sweep --out s.csv
    specbayes simulate --dataset demo --seed 0 --out data/demo.parquet
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specbayes.artefacts import check_writable
from specbayes.commands import positive_int
from specbayes.parallel import SCHEDULER_HELP, scheduler_arg


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``simulate`` subcommand."""
    p = subparsers.add_parser(
        "simulate",
        help="simulate a vLLM-like server: one load point, a sweep, or a bundled dataset",
        description="Discrete-event simulation of a continuous-batching LLM server with "
        "speculative decoding (forced acceptance alpha) and MoE routing, costed by a roofline "
        "of the hardware. Rows follow the sweep schema (seconds, req/s).",
    )
    p.add_argument("--verifier", help="verifier model (catalog name, e.g. Qwen3-8B)")
    p.add_argument("--drafter", help="drafter (default: the verifier's EAGLE-3 head when k > 0)")
    p.add_argument("--hardware", default="H100-SXM", help="accelerator (default H100-SXM)")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel GPUs (default 1)")
    p.add_argument("--prefill", type=int, default=512, help="prompt tokens (default 512)")
    p.add_argument("--decode", type=int, default=256, help="output tokens (default 256)")
    p.add_argument("--alpha", type=float, help="forced per-token acceptance in (0, 1] (k > 0)")
    p.add_argument("--k", type=int, default=0, help="draft length, 0 = no speculation")
    load = p.add_mutually_exclusive_group()
    load.add_argument("--rps", type=float, help="open-loop request rate (req/s)")
    load.add_argument("--concurrency", type=int, help="closed loop: N concurrent streams")
    load.add_argument(
        "--profile",
        choices=["sweep", "synchronous", "throughput"],
        help="sweep = synchronous, throughput, then rates up to the highest non-preempting one",
    )
    load.add_argument(
        "--dataset", choices=["demo", "paper"], help="build a bundled dataset (ignores the model)"
    )
    p.add_argument(
        "--arrival",
        choices=["constant", "poisson"],
        default="constant",
        help="open-loop arrivals (default constant, as GuideLLM's sweep)",
    )
    p.add_argument(
        "--rates", type=_sweep_rates, default=9, help="load points of a sweep (>= 2, default 9)"
    )
    p.add_argument("--n-requests", type=positive_int, help="requests of a single point")
    p.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    p.add_argument(
        "--workers",
        type=positive_int,
        help="workers for --dataset (default: all CPUs; 1 runs in this process, more start a "
        "local Dask cluster unless --scheduler says otherwise)",
    )
    p.add_argument("--scheduler", type=scheduler_arg, help=SCHEDULER_HELP + " (--dataset)")
    p.add_argument("--out", help="write rows to .csv or .parquet (default: print a table)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=handler)


def _sweep_rates(text: str) -> int:
    """A sweep's number of load points: an integer >= 2 (a line needs two points)."""
    n = positive_int(text)
    if n < 2:
        raise argparse.ArgumentTypeError(f"must be at least 2 (a sweep needs two loads); got {n}")
    return n


_SUFFIXES = (".csv", ".csv.gz", ".parquet")


def _check_out(out: str | None) -> None:
    """``--out``'s suffix and writability, before any simulation."""
    if out is None:
        return
    if not out.endswith(_SUFFIXES):
        raise ValueError(f"--out must end in .csv, .csv.gz or .parquet; got {out}")
    if Path(out).is_dir():
        raise ValueError(f"--out {out}: is a folder — give a file name ending in .csv or .parquet")
    check_writable(Path(out))


def _write(df, out: str | None) -> None:
    if out is None:
        cols = [
            c
            for c in (
                "verifier",
                "drafter",
                "hardware",
                "cell",
                "k",
                "alpha",
                "strategy",
                "rps",
                "latency",
                "ttft",
                "itl",
                "mean_batch",
                "preemptions",
                "saturated",
            )
            if c in df
        ]
        print(df[cols].to_string(index=False, float_format=lambda x: f"{x:.4g}"))
        return
    from specbayes.ingest.commands import write_table

    path = Path(out)
    if not (path.suffix in (".parquet", ".csv") or path.name.endswith(".csv.gz")):
        raise ValueError(f"--out must end in .csv, .csv.gz or .parquet; got {out}")
    write_table(df, path)  # through a temporary file: nothing half-written if interrupted
    print(f"wrote {len(df)} rows to {path}", file=sys.stderr)


def handler(args: argparse.Namespace) -> int:
    """Run the ``simulate`` subcommand."""
    import pandas as pd

    from specbayes import sim

    _check_out(args.out)
    if args.dataset:
        df = sim.build_dataset(
            args.dataset,
            seed=args.seed,
            progress=not args.no_progress,
            workers=args.workers,
            scheduler=args.scheduler,
        )
        _write(df, args.out)
        return 0
    if not args.verifier:
        raise ValueError("--verifier is required (or use --dataset demo|paper)")
    common = dict(
        hardware=args.hardware,
        drafter=args.drafter,
        tp=args.tp,
        prefill=args.prefill,
        decode=args.decode,
        alpha=args.alpha,
        k=args.k,
    )
    if args.profile == "sweep":
        from tqdm import tqdm

        total = args.rates + 1  # + the throughput point (a backed-off top rate adds more)
        with tqdm(
            total=total, desc="sweep", unit="point", file=sys.stderr, disable=args.no_progress
        ) as bar:
            df = sim.sweep(
                args.verifier,
                n_rates=args.rates,
                arrival=args.arrival,
                seed=args.seed,
                on_point=bar.update,
                **common,
            )
        _write(df, args.out)
        return 0
    if args.rps is None and args.concurrency is None and args.profile is None:
        raise ValueError("give one load: --rps, --concurrency, --profile or --dataset")
    row = sim.simulate_point(
        args.verifier,
        rps=args.rps,
        concurrency=args.concurrency,
        strategy=args.profile if args.profile else (args.arrival if args.rps else None),
        n_requests=args.n_requests,
        seed=args.seed,
        **common,
    )
    _write(pd.DataFrame([row]), args.out)
    return 0
