"""``specbayes fit DATA --model {dense,sd,moe} --out FIT.nc``: fit and print sampler health."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from specbayes.commands import nonneg_int, positive_int


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``fit`` subcommand."""
    p = subparsers.add_parser(
        "fit",
        help="fit a latency model to sweep data and save the posterior (netCDF)",
        description="Fit the dense / sd / moe latency model to a sweep table (CSV or parquet) "
        "and print the sampler diagnostics: divergences, max R-hat, min bulk/tail ESS, "
        "wall time.",
    )
    p.add_argument("data", help="sweep table (CSV, CSV.gz or parquet)")
    p.add_argument("--model", choices=("dense", "sd", "moe"), default="sd", help="model level")
    p.add_argument(
        "--out",
        type=Path,
        required=True,
        help="output file (netCDF, e.g. fit.nc); the rows left out are listed beside it, in "
        "<name>.excluded.csv",
    )
    p.add_argument(
        "--strict",
        action="store_true",
        help="exit with status 1 when a health threshold fails "
        "(divergences > 0, R-hat > 1.01, bulk ESS < 400)",
    )
    # the defaults are the model's one sampler configuration (model.sampling), named
    # here without importing PyMC so that --help stays fast; test_cli_help checks them
    p.add_argument("--chains", type=positive_int, default=None, help="chains (default: 4)")
    p.add_argument(
        "--draws",
        type=positive_int,
        default=None,
        help="draws kept per chain (default: 1000)",
    )
    p.add_argument(
        "--tune",
        type=nonneg_int,
        default=None,
        help="tuning steps per chain, not kept (default: 1000)",
    )
    p.add_argument(
        "--seed",
        type=nonneg_int,
        default=None,
        help="seeds the sampler, the noise scale's draws and the predictive group (default: 20260)",
    )
    p.add_argument(
        "--cores",
        type=positive_int,
        default=None,
        help="cores running the chains (default: 2)",
    )
    p.add_argument(
        "--sampler",
        choices=("nutpie", "numpyro"),
        default=None,
        help="nutpie (default), or NumPyro on JAX (pip install specbayes[jax])",
    )
    p.add_argument(
        "--curvature",
        action="store_true",
        help="experimental — a batch curvature: latency bends upward past a knee of the GPU's "
        "passes (in "
        "tokens per pass, around its roofline ridge; an SD verify pass of k + 1 tokens per "
        "sequence reaches it k + 1 times sooner), so predictions beyond the measured loads "
        "widen. Real servers bend, and so does the bundled simulator (as a knee: see --knee). "
        "Off by default "
        "(benchmarks/load_extrapolation.md)",
    )
    p.add_argument(
        "--knee",
        action="store_true",
        help="experimental — a knee: past a batch where a verifier pass turns compute-bound "
        "(tokens per pass around the GPU's roofline ridge; k + 1 times sooner for an SD "
        "verify pass) each request costs more (docs/model.md). Fit, validate, predict and "
        "plan take it",
    )
    p.add_argument(
        "--metrics",
        type=metric_list,
        default=None,
        metavar="NAMES",
        help="comma-separated per-point metrics to model beside the mean latency, sharing its "
        "costs and batch: ttft, itl and latency percentiles as the data carry them (e.g. "
        "ttft_p99,itl_p50,latency_p95); what `specbayes plan --slo` needs",
    )
    p.add_argument(
        "--tail-excess",
        action="store_true",
        help="opt-in with --metrics — a tail percentile of few requests may sit on a few "
        "stalled ones: Normal noise plus an upward excess that shrinks with the requests "
        "beyond the percentile, instead of Student-t tails (docs/model.md; "
        "benchmarks/metric_model.md)",
    )
    p.add_argument(
        "--integrate-sweeps",
        action="store_true",
        help="each sweep's costs integrated out of the sampled density (the law to first "
        "order over a sweep's ~1%% spread; docs/model.md §7) — the default wherever it "
        "applies; this flag asks for it and fails where it does not: with --metrics, "
        "--knee, --curvature, --model moe or the anchored structure",
    )
    p.add_argument(
        "--sample-sweeps",
        action="store_true",
        help="each sweep's costs sampled, two axes per sweep, instead of integrated out "
        "(on the paper's dense verifiers unhealthy in 40 minutes where the integrated form "
        "is healthy in 3; benchmarks/fit_speed.md)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def metric_list(text: str) -> tuple[str, ...]:
    """``--metrics a,b``: the names, checked against the metric model's columns."""
    from specbayes.model.metrics import check_metrics

    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise argparse.ArgumentTypeError(
            f"{text!r} names no metric — give one or more, e.g. ttft_p99,itl_p50"
        )
    try:
        return check_metrics(names)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def format_summary(summary: dict) -> str:
    """The diagnostics table printed by the command."""
    from specbayes.fit import THRESHOLDS

    lines = [
        f"model {summary['model']}: {summary['rows']} rows fitted, "
        f"{summary['excluded']} excluded"
        + (" (alpha inferred)" if summary.get("alpha_inferred") else ""),
    ]
    cfg = summary.get("sampler_config") or {}
    if cfg:
        structure = f"; {summary['structure']} structure" if summary.get("structure") else ""
        if summary.get("sweeps") == "marginal":
            structure += ", each sweep's costs integrated out"
        lines.append(
            f"sampler {cfg.get('sampler', 'nutpie')}: {cfg.get('chains')} chains x "
            f"{cfg.get('draws')} draws ({cfg.get('tune')} tune), target_accept "
            f"{cfg.get('target_accept')}{structure}"
        )
    if summary.get("uncatalogued"):
        lines.append(
            "not in the catalog: " + ", ".join(summary["uncatalogued"]) + " — generic priors "
            "for their coefficients (models/README.md says how to describe one)"
        )
    prior_only = summary.get("alpha_from_prior") or []
    if prior_only:
        shown = ", ".join(prior_only[:3]) + (
            f" and {len(prior_only) - 3} more" if len(prior_only) > 3 else ""
        )
        lines.append(
            f"alpha rests on its prior for {len(prior_only)} (workload|drafter) swept at one "
            f"draft length k: {shown} — sweep two or more k of a drafter to identify it"
        )
    measured = summary.get("alpha_measured") or {}
    if measured:
        widest = max(hi - lo for _, lo, hi in measured.values())
        lines.append(
            f"alpha measured per point in {len(measured)} sweep(s): each fitted at its mean "
            f"(widest spread along a sweep {widest:.3g}; Fit.measured_alpha() lists them)"
        )
    if summary.get("unresolved"):
        lines.append(
            "no unit's rows resolve " + ", ".join(summary["unresolved"]) + ": the priors and "
            "the hierarchy place them"
        )
    lines.append(f"{'check':<16}{'value':>12}  {'threshold':>10}  ok")
    checks = [
        (
            "divergences",
            summary["divergences"],
            f"<= {THRESHOLDS['divergences']:g}",
            summary["divergences"] <= THRESHOLDS["divergences"],
        ),
        (
            "max R-hat",
            summary["max_r_hat"],
            f"<= {THRESHOLDS['r_hat']:g}",
            summary["max_r_hat"] <= THRESHOLDS["r_hat"],
        ),
        (
            "min bulk ESS",
            summary["min_ess_bulk"],
            f">= {THRESHOLDS['ess_bulk']:g}",
            summary["min_ess_bulk"] >= THRESHOLDS["ess_bulk"],
        ),
        ("min tail ESS", summary["min_ess_tail"], "", True),
        ("wall time (s)", summary["wall_s"], "", True),
    ]
    for name, value, thr, ok in checks:
        lines.append(f"{name:<16}{value:>12.4g}  {thr:>10}  {'yes' if ok else 'NO'}")
    if summary.get("start_converged") is False:  # None: numpyro's start
        lines.append(
            f"the chains' start (L-BFGS to the density's maximum) stopped unconverged after "
            f"{summary['start_iterations']} iterations: warmup had to find the bulk"
        )
    if summary.get("scout_restarted"):  # None: numpyro, or a fit before it
        lines.append(
            f"{summary['scout_restarted']} chain(s) began at the best scouting chain's position: "
            "their scouting warmup ended trapped far below it"
        )
    for group, (mid, lo, hi, roof) in (summary.get("expert_reads") or {}).items():
        against = f"roofline {1e3 * roof:.2f} ms" if roof else "no roofline: uncatalogued"
        lines.append(
            f"expert reads c1s {group}: {1e3 * mid:.2f} ms per verifier pass at full coverage "
            f"(90 %: {1e3 * lo:.2f}–{1e3 * hi:.2f}; {against})"
        )
    lines.append("healthy" if summary["healthy"] else "NOT healthy")
    return "\n".join(lines)


def check_out_file(path: Path) -> Path:
    """``--out`` as a new or replaceable ``.nc`` file, checked before any work is done."""
    if path.is_dir():
        raise ValueError(f"--out {path}: is a folder — give a file name such as {path}/fit.nc")
    if path.suffix.lower() not in (".nc", ".nc4", ".netcdf"):
        raise ValueError(
            f"--out {path}: a fit is saved as netCDF — give a name ending in .nc (e.g. fit.nc)"
        )
    if path.parent.exists() and not path.parent.is_dir():
        raise ValueError(f"--out {path}: {path.parent} is a file, not a folder")
    return path


def first_missing_folder(path: Path) -> Path | None:
    """The first of ``path``'s folders that does not exist yet (what :func:`probe_writable`
    creates, to remove if the fit fails), if any."""
    return next((p for p in reversed(path.parents) if not p.exists()), None)


def probe_writable(path: Path) -> None:
    """Create ``path``'s folder and touch a file there, so a bad ``--out`` fails before
    sampling."""
    probe = path.with_name(f".{path.name}.partial")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        probe.touch()
        probe.unlink()
    except OSError as exc:
        raise ValueError(
            f"--out {path}: cannot write there ({exc.strerror or exc}) — give a path in a "
            "folder you can write to"
        ) from None


def check_level(table, model: str, source) -> None:
    """Refuse, before any sampling, a model level the kept rows cannot inform.

    ``sd`` needs speculative-decoding rows (k > 0): without them the drafter's costs rest on
    their priors alone; ``dense`` needs dense rows (k = 0); ``moe`` refuses dense verifiers
    (:func:`specbayes.model.experts.expert_ratios` says which).
    """
    data = table.data
    if data.empty:
        return
    if model == "sd" and not (data["k"] > 0).any():
        raise ValueError(
            f"{source}: no rows with k > 0 — the sd level needs speculative-decoding sweeps "
            "(its drafter costs would rest on their priors alone); fit dense runs with "
            "--model dense"
        )
    if model == "dense" and not (data["k"] == 0).any():
        raise ValueError(
            f"{source}: no rows with k = 0 — the dense level fits dense runs only; fit "
            "speculative-decoding sweeps with --model sd"
        )
    if model == "moe":
        from specbayes.model.experts import expert_ratios

        try:
            expert_ratios(data, data["verifier"].unique())
        except ValueError as exc:
            raise ValueError(f"{source}: {exc}") from None


def check_flags(args: argparse.Namespace) -> None:
    """``--curvature`` agrees with ``--model``, ``--tail-excess`` has its ``--metrics``,
    ``--integrate-sweeps`` comes alone, not with ``--sample-sweeps`` (one line, before any
    reading)."""
    if getattr(args, "curvature", False) and args.model == "moe":
        raise ValueError(
            "--curvature: the moe level bends with the expert coverage, not a batch "
            "curvature — drop --curvature with --model moe"
        )
    if getattr(args, "tail_excess", False) and not getattr(args, "metrics", None):
        raise ValueError("--tail-excess shapes the noise of --metrics: give --metrics too")
    clash = [
        flag for flag, on in (
            ("--metrics", getattr(args, "metrics", None)), ("--knee", getattr(args, "knee", 0)),
            ("--curvature", getattr(args, "curvature", 0)), ("--model moe", args.model == "moe"),
        ) if on
    ]  # fmt: skip
    if getattr(args, "integrate_sweeps", False) and getattr(args, "sample_sweeps", False):
        raise ValueError("--integrate-sweeps and --sample-sweeps: give one")
    if getattr(args, "integrate_sweeps", False) and clash:
        raise ValueError(
            f"--integrate-sweeps: a sweep's costs are two numbers there, so it does not take "
            f"{clash[0]} — drop one of them"
        )


def save_atomically(result, path: Path) -> Path:
    """Write the fit beside ``path`` and move it into place (no half-written file on failure)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.partial")
    try:
        result.save(tmp)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def excluded_path(out: Path) -> Path:
    """Where the rows a fit left out are listed: ``<out stem>.excluded.csv`` beside it."""
    return out.with_name(f"{out.stem}.excluded.csv")


def write_excluded(excluded, out: Path, written: list[Path]) -> Path | None:
    """Write the excluded rows (with their ``reason``) beside ``out``, through a temporary
    file; ``None`` when there are none. The path written is appended to ``written`` (removed
    again if the command fails)."""
    path = excluded_path(out)
    if excluded is None or len(excluded) == 0:
        return None
    tmp = path.with_name(f".{path.name}.partial")
    try:
        excluded.to_csv(tmp, index=False)
        tmp.replace(path)
        written.append(path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def excluded_line(excluded, path: Path) -> str:
    """One line: how many rows were left out, by rule (or reason), and where they are listed
    with each row's reason."""
    col = next((c for c in ("rule", "reason") if c in excluded), None)
    counts = excluded[col].astype(str).value_counts() if col else None
    by = "" if counts is None else ": " + ", ".join(f"{n} {r}" for r, n in counts.head(4).items())
    more = "" if counts is None or len(counts) <= 4 else f", {len(counts) - 4} more"
    return f"{len(excluded)} rows excluded{by}{more} — listed with reasons in {path}"


def flag_priors(args: argparse.Namespace) -> dict | None:
    """The prior overrides ``--curvature``, ``--knee``, ``--tail-excess``,
    ``--integrate-sweeps`` or ``--sample-sweeps`` ask for (``None``: the defaults)."""
    from specbayes.model.priors import KNEE, KNEE_PRIOR, TAIL_EXCESS

    priors = {}
    if getattr(args, "tail_excess", False):
        priors["metric_excess"] = TAIL_EXCESS
    if getattr(args, "curvature", False):
        priors["inverse_knee"] = dict(KNEE_PRIOR)
    if getattr(args, "knee", False):
        if "inverse_knee" in priors:
            raise SystemExit("--knee and --curvature are two forms of one bend: give one")
        priors["knee"] = {part: dict(v) for part, v in KNEE.items()}
    if getattr(args, "integrate_sweeps", False):
        priors["sweeps"] = "marginal"
    if getattr(args, "sample_sweeps", False):
        priors["sweeps"] = "sampled"
    return priors or None


def run(args: argparse.Namespace) -> int:
    from specbayes.cli import check_interrupted
    from specbayes.data import read_sweeps, validate_sweeps
    from specbayes.fit import fit

    check_flags(args)
    out = check_out_file(args.out)
    df = read_sweeps(args.data)
    table = validate_sweeps(df, allow_unknown_alpha=True)  # one line per rule, before sampling
    if table.data.empty:
        raise ValueError(
            f"{args.data}: all {len(table.excluded)} rows are excluded ({table.summary()}) — "
            "nothing left to fit; `specbayes ingest FILE` lists each row's reason"
        )
    check_level(table, args.model, args.data)
    config = {
        key: getattr(args, key)
        for key in ("chains", "draws", "tune", "seed", "cores", "sampler")
        if getattr(args, key) is not None
    }
    # known before the folder is made: a signal while probe_writable runs leaves none behind
    created = first_missing_folder(out)
    written: list[Path] = []
    try:
        probe_writable(out)
        try:
            result = fit(
                table,
                model=args.model,
                sampler_config=config,
                priors=flag_priors(args),
                progress=not args.quiet,
                metrics=args.metrics,
            )
        except ValueError as exc:
            text = str(exc)  # the data cannot be fitted at this level: name the file
            raise ValueError(
                text if text.startswith(str(args.data)) else f"{args.data}: {text}"
            ) from exc
        check_interrupted()  # nutpie answers Ctrl-C with the draws so far: not a fit
        excluded = write_excluded(result.excluded, out, written)
        path = save_atomically(result, out)
    except BaseException:
        for done in written:  # nothing of this run is left behind
            done.unlink(missing_ok=True)
        if created is not None:  # nor an empty folder
            shutil.rmtree(created, ignore_errors=True)
        raise
    if excluded is None:  # a list beside ``out`` would be an earlier fit's
        excluded_path(out).unlink(missing_ok=True)
    summary = result.summary()
    print(format_summary(summary))
    if excluded is not None:
        print(excluded_line(result.excluded, excluded))
    print(f"wrote {path}")
    if args.strict and not summary["healthy"]:
        return 1
    return 0
