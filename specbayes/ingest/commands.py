"""The ``specbayes ingest`` subcommand."""

from __future__ import annotations

import argparse
from pathlib import Path

from specbayes.commands import (
    acceptance,
    acceptance_length,
    nonneg_int,
    positive_int,
    probability,
)

__all__ = ["OUT_SUFFIXES", "handler", "register"]

#: File types ``--out`` can write.
OUT_SUFFIXES = (".csv", ".csv.gz", ".parquet")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``ingest`` to the ``specbayes`` command."""
    p = subparsers.add_parser(
        "ingest",
        help="read GuideLLM / vllm bench serve / sweep files into a sweep table",
        description="Read benchmark files (GuideLLM JSON/YAML/CSV reports of any version, "
        "vllm bench serve results incl. --append-result JSON Lines, SGLang bench_serving "
        "lines, sweep CSV/parquet), label them with the configuration the files cannot "
        "know, flag saturated points, and write one sweep table.",
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="benchmark files")
    p.add_argument("--verifier", help="verifier model (default: the model named in the file)")
    p.add_argument("--drafter", help="draft model ('none' or omit for dense runs)")
    p.add_argument("--hardware", help="accelerator, e.g. H100-SXM (required unless in sidecar)")
    acc = p.add_mutually_exclusive_group()
    acc.add_argument("--alpha", type=acceptance, help="per-token acceptance probability")
    acc.add_argument(
        "--acceptance-length",
        type=acceptance_length,
        help="mean acceptance length, 1 + accepted/drafts",
    )
    p.add_argument("--k", type=nonneg_int, help="draft length (0 = dense)")
    p.add_argument("--cell", help="workload label (default: <prefill>x<decode> per file)")
    p.add_argument("--tp", type=positive_int, help="tensor-parallel degree")
    p.add_argument("--sidecar", help="YAML/JSON file of labels (global and per file)")
    p.add_argument(
        "--out",
        help="write the sweep table here (.csv, .csv.gz or .parquet); written only when every "
        "row is valid",
    )
    p.add_argument(
        "--skip-invalid", action="store_true", help="skip unreadable files (listed) instead"
    )
    p.add_argument(
        "--rate-tolerance",
        type=probability,
        default=None,
        help="flag open-loop points whose achieved/target rate is below this (default 0.9)",
    )
    p.add_argument(
        "--error-threshold",
        type=probability,
        default=None,
        help="flag points with errored requests above this fraction (default 0.05)",
    )
    p.add_argument(
        "--fit", action="store_true", help="least-squares L = C1 + N*C2 per closed-loop sweep"
    )
    p.add_argument(
        "--compare",
        action="store_true",
        help="say whether SD beats the dense arm at each closed-loop concurrency",
    )
    p.set_defaults(func=handler)


def check_out(path: str | None) -> Path | None:
    """``--out`` checked before any file is read: a known table type, not a folder."""
    if path is None:
        return None
    out = Path(path)
    if out.is_dir():
        raise ValueError(f"--out {out}: is a folder — give a file name such as {out}/sweeps.csv")
    if not out.name.lower().endswith(OUT_SUFFIXES):
        raise ValueError(
            f"--out {out}: cannot write a {out.suffix or 'suffix-less'} file — the sweep "
            f"table is written as {', '.join(OUT_SUFFIXES)}; give one of those suffixes"
        )
    from specbayes.artefacts import check_writable

    check_writable(out)
    return out


def check_separator(files: list[str]) -> None:
    """A semicolon-separated ``.csv`` named as such, before the readers call it unreadable."""
    for name in files:
        path = Path(name)
        if not (path.is_file() and path.name.lower().endswith(".csv")):
            continue
        with open(path, "rb") as fh:
            first = fh.readline(4096).decode("utf-8", errors="replace")
        if first.count(";") >= 2 and "," not in first:
            raise ValueError(
                f"{path}: semicolon-separated, but CSV input is read comma-separated — save it "
                "with ',' as the separator (and '.' as the decimal mark)"
            )


def write_table(df, out: Path) -> None:
    """Write ``df`` beside ``out`` and move it into place (nothing half-written on failure)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.partial")
    try:
        if out.name.lower().endswith(".parquet"):
            df.to_parquet(tmp, index=False)
        else:
            df.to_csv(tmp, index=False, compression="gzip" if out.name.endswith(".gz") else None)
        tmp.replace(out)
    finally:
        tmp.unlink(missing_ok=True)


def handler(args: argparse.Namespace) -> int:
    """Run ``specbayes ingest``; returns the exit code.

    Raises
    ------
    ValueError
        An unreadable file, a bad label, an invalid row (``SweepValidationError``) or a bad
        ``--out``: the CLI prints it as one line and exits with status 2; ``--out`` is then
        not written.
    """
    from specbayes.data import validate_sweeps
    from specbayes.ingest import ERROR_THRESHOLD, RATE_TOLERANCE, ingest_files
    from specbayes.ingest.speculators import compare_sd_dense, fit_closed_loop, format_comparison

    out = check_out(args.out)
    check_separator(args.files)
    df = ingest_files(
        args.files,
        verifier=args.verifier,
        drafter=args.drafter,
        hardware=args.hardware,
        alpha=args.alpha,
        acceptance_length=args.acceptance_length,
        k=args.k,
        cell=args.cell,
        tp=args.tp,
        sidecar=args.sidecar,
        skip_invalid=args.skip_invalid,
        rate_tolerance=args.rate_tolerance if args.rate_tolerance is not None else RATE_TOLERANCE,
        error_threshold=(
            args.error_threshold if args.error_threshold is not None else ERROR_THRESHOLD
        ),
    )
    print(summary_table(df))
    for path, error in df.attrs.get("skipped", []):
        print(f"skipped {path}: {error}")
    table = validate_sweeps(df, allow_unknown_alpha=True)  # an invalid row: one line, exit 2
    print(f"validation: {table.summary()}")
    for idx, row in table.excluded.iterrows():
        print(f"  excluded row {idx} ({row['source']}): {row['reason']}")
    if args.fit:
        fits = fit_closed_loop(df)
        if fits.empty:
            print("fit: no closed-loop sweep in the input")
        else:
            print("least-squares L = C1 + N*C2 per closed-loop sweep (flagged points left out):")
            print(fits.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    if args.compare:
        comparison = compare_sd_dense(df)
        if comparison.empty:
            print("compare: needs dense (k=0) and SD closed-loop points at the same N")
        else:
            print(format_comparison(comparison))
    if out is not None:
        write_table(df, out)
        print(f"wrote {len(df)} rows to {out}")
    return 0


def summary_table(df) -> str:
    """What was read: per file its format and rows, then one line per row."""
    lines = []
    for path, fmt, n in df.attrs.get("files", []):
        lines.append(f"{path}: {fmt}, {n} row(s)")
    header = (
        f"{'#':>3} {'strategy':<12}{'k':>2} {'N':>6} {'target':>8} {'rps':>9} "
        f"{'latency(s)':>11} {'source':<16} {'ok/err/inc':<14} flag"
    )
    lines.append(header)
    for i, r in df.iterrows():

        def fmt(value, spec):
            return format(value, spec) if value == value and value is not None else "-"

        counts = "/".join(fmt(r.get(c), "g") for c in ("n_requests", "n_errored", "n_incomplete"))
        flag = r["saturation_reason"] if r["saturated"] else ""
        lines.append(
            f"{i:>3} {r['strategy']!s:<12}{int(r['k']):>2} {fmt(r['concurrency'], '6g'):>6} "
            f"{fmt(r['target_rps'], '8.4g'):>8} {fmt(r['rps'], '9.4g'):>9} "
            f"{fmt(r['latency'], '11.4g'):>11} {r['latency_source']!s:<16} "
            f"{counts:<14} {flag}"
        )
    n_flag = int(df["saturated"].sum())
    lines.append(f"{len(df)} row(s), {n_flag} flagged saturated")
    return "\n".join(lines)
