"""GuideLLM benchmark reports (JSON, gzip JSON, YAML) → sweep rows.

Every schema generation is read through the same metric paths (see
``shared/notes/input_formats.md`` §1):

========== =========================================================================
generation markers
========== =========================================================================
legacy     ≤ 0.3: no top-level ``args``/``metadata``; each benchmark has ``args``,
           ``run_stats``, ``request_totals``
0.4        top-level ``args`` and no ``metadata``; benchmarks have ``config`` and
           ``metrics.request_totals``
v1         ``metadata.version == 1`` (0.5 – 0.6)
v2         ``metadata.version == 2`` (0.7+; top-level ``config``)
========== =========================================================================

Per benchmark the row takes

* ``rps`` = ``request_totals.successful / duration`` (the measurement window; falls back
  to ``metrics.requests_per_second.successful.mean`` when ``duration`` is absent) — one
  estimator everywhere, the same definition as vLLM's ``request_throughput``;
* ``latency`` = ``metrics.request_latency.successful.mean`` (seconds). When the report
  keeps every successful request (``len(requests.successful) == successful``), the mean
  is recomputed from the records and must agree (relative 1e-6); a sampled list is not
  used. Without the metric, the complete records give it (``latency_source =
  "requests"``), else Little's law ``request_concurrency / rps`` (``"littles_law"``);
* ``latency_p50`` / ``_p90`` / ``_p95`` / ``_p99`` from ``request_latency``'s percentiles
  (legacy files lack ``p50``: the median is used); ``ttft``, ``itl`` and ``tpot`` (means)
  and their ``_p50 … _p99`` from ``time_to_first_token_ms``, ``inter_token_latency_ms``
  and ``time_per_output_token_ms``, converted from ms to s; ``prefill`` / ``decode``
  from the mean prompt / output token counts, ``mean_batch`` from the time-weighted
  ``request_concurrency``;
* strategy: ``synchronous`` is a closed loop with ``concurrency = 1``, ``concurrent`` one
  with ``concurrency = streams``; ``constant`` / ``poisson`` are open loop with
  ``target_rps = rate``; ``throughput`` is the saturated capacity run and is flagged.

Saturation flags (``saturated = True`` + ``saturation_reason``; the row is kept): the
throughput strategy; achieved rate below ``rate_tolerance`` × target; errored requests
above ``error_threshold`` of the total; incomplete requests well beyond what is normally
in flight when the window closes (2 × mean concurrency + 1, plus ``error_threshold`` of
the total); GuideLLM's own over-saturation detector (``is_over_saturated`` in the
scheduler constraints).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from specbayes.ingest._common import (
    ERROR_THRESHOLD,
    PERCENTILE_LEVELS,
    RATE_TOLERANCE,
    Fields,
    IngestError,
    check_row,
    flag,
    put_seconds,
)

__all__ = [
    "STRATEGIES",
    "benchmark_row",
    "detect_generation",
    "is_guidellm",
    "read_guidellm",
]

#: Load strategies GuideLLM writes in ``strategy.type_``.
STRATEGIES: tuple[str, ...] = ("synchronous", "throughput", "concurrent", "constant", "poisson")

_REL_TOL = 1e-6

#: GuideLLM streaming metric (ms, under ``metrics``) → schema column (s). GuideLLM's ITL
#: excludes the first token and its TPOT includes it (``specbayes.data.OPTIONAL_COLUMNS``).
_STREAMING_METRICS: dict[str, str] = {
    "time_to_first_token_ms": "ttft",
    "inter_token_latency_ms": "itl",
    "time_per_output_token_ms": "tpot",
}


def is_guidellm(doc: Any) -> bool:
    """Whether a decoded document looks like a GuideLLM report."""
    return isinstance(doc, dict) and "benchmarks" in doc


def detect_generation(doc: dict, path: str | Path = "<report>") -> str:
    """The schema generation of a GuideLLM report: ``legacy``, ``0.4``, ``v1`` or ``v2``.

    Raises
    ------
    IngestError
        If the report has no (or an empty) ``benchmarks`` list, or an unknown
        ``metadata.version``.
    """
    top = Fields(doc, path)
    benchmarks = top.raw("benchmarks")
    if not isinstance(benchmarks, list):
        raise top.error(f"expected a list, got {type(benchmarks).__name__}", "benchmarks")
    if not benchmarks:
        raise top.error("empty list: the report holds no benchmark", "benchmarks")
    meta = doc.get("metadata")
    if isinstance(meta, dict) and "version" in meta:
        version = meta["version"]
        if version == 1:
            return "v1"
        if version == 2:
            return "v2"
        raise top.error(
            f"unknown GuideLLM report schema version {version!r} (known: 1, 2)",
            "metadata.version",
        )
    first = benchmarks[0]
    if isinstance(first, dict) and "config" not in first and "args" in first:
        return "legacy"
    return "0.4"


def _model_name(doc: dict, generation: str) -> str | None:
    top = Fields(doc, "")
    for key in (
        "config.spec.backend.model",  # v2 (0.8)
        "config.backend.model",  # v2 (0.7 scenario)
        "config.model",
        "args.model",  # 0.4 – 0.6
        "benchmarks[0].config.backend.model",
        "benchmarks[0].worker.backend_model",  # legacy
    ):
        value = top.raw(key, None)
        if isinstance(value, str) and value:
            return value
    return None


def read_guidellm(
    doc: dict,
    path: str | Path,
    *,
    rate_tolerance: float = RATE_TOLERANCE,
    error_threshold: float = ERROR_THRESHOLD,
) -> tuple[list[dict], dict]:
    """Rows of a decoded GuideLLM report, one per benchmark.

    Parameters
    ----------
    doc : dict
        The decoded JSON/YAML report.
    path : str or Path
        File name for error messages and the ``source`` column.
    rate_tolerance, error_threshold : float
        Saturation thresholds (see the module docstring).

    Returns
    -------
    rows : list of dict
        Sweep-schema fields per benchmark.
    info : dict
        ``format`` (e.g. ``"guidellm v1 (0.5.2)"``) and ``model`` (the served model name,
        or None).

    Raises
    ------
    IngestError
        Naming the file and the field, for a malformed report or benchmark.
    """
    generation = detect_generation(doc, path)
    version = Fields(doc, path).raw("metadata.guidellm_version", None)
    label = f"guidellm {generation}" + (f" ({version})" if isinstance(version, str) else "")
    rows = []
    for index, bench in enumerate(doc["benchmarks"]):
        prefix = f"benchmarks[{index}]"
        if not isinstance(bench, dict):
            raise IngestError(path, f"expected a mapping, got {type(bench).__name__}", prefix)
        fields = Fields(bench, path, prefix)
        row = benchmark_row(
            fields,
            legacy=generation == "legacy",
            rate_tolerance=rate_tolerance,
            error_threshold=error_threshold,
        )
        row["source"] = f"{path}#{prefix}"
        rows.append(row)
    return rows, {"format": label, "model": _model_name(doc, generation)}


def benchmark_row(
    b: Fields,
    *,
    legacy: bool,
    rate_tolerance: float = RATE_TOLERANCE,
    error_threshold: float = ERROR_THRESHOLD,
    require_rate: bool = True,
) -> dict[str, Any]:
    """The sweep row of one GuideLLM benchmark (``b`` rooted at ``benchmarks[i]``).

    ``require_rate=False`` accepts a constant/poisson benchmark without a target rate
    (CSV exports of 0.5.2 drop it).
    """
    strategy = b.sub("args.strategy" if legacy else "config.strategy")
    kind = strategy.text("type_")
    if kind not in STRATEGIES:
        raise strategy.error(f"unknown strategy {kind!r} (known: {', '.join(STRATEGIES)})", "type_")
    totals = b.sub("request_totals" if legacy else "metrics.request_totals")
    n_ok = totals.num("successful", nonnegative=True)
    n_err = totals.num("errored", 0.0, nonnegative=True)
    n_inc = totals.num("incomplete", 0.0, nonnegative=True)
    if n_ok == 0:
        raise totals.error(
            f"0 successful requests ({n_err:g} errored, {n_inc:g} incomplete): this "
            f"{kind} benchmark measured no latency",
            "successful",
        )
    metrics = b.sub("metrics")

    duration = b.num("duration", None, positive=True)
    if duration is not None:
        rps = n_ok / duration
    else:
        rps = metrics.num("requests_per_second.successful.mean", positive=True)

    row: dict[str, Any] = {
        "strategy": kind,
        "rps": rps,
        "n_requests": n_ok,
        "n_errored": n_err,
        "n_incomplete": n_inc,
        "mean_batch": metrics.num("request_concurrency.successful.mean", None, nonnegative=True),
        "saturated": False,
        "saturation_reason": "",
    }
    if kind == "synchronous":
        row["concurrency"] = 1.0
    elif kind == "concurrent":
        row["concurrency"] = strategy.num("streams", positive=True)
    elif kind in ("constant", "poisson"):
        rate = strategy.num("rate", *(() if require_rate else (None,)), positive=True)
        if rate is not None:
            row["target_rps"] = rate

    _latency(b, metrics, row, n_ok)
    lat = (
        metrics.sub("request_latency.successful")
        if metrics.has("request_latency.successful")
        else None
    )
    if lat is not None:
        _percentiles(lat, "latency", row, scale=1.0, positive=True)
    for key, column in _STREAMING_METRICS.items():
        _streaming(metrics, key, column, row)
    row["prefill"] = metrics.num("prompt_token_count.successful.mean", nonnegative=True)
    row["decode"] = metrics.num("output_token_count.successful.mean", positive=True)

    _saturation(b, row, kind, legacy, rate_tolerance, error_threshold)
    return check_row(row, b)


def _percentiles(dist: Fields, column: str, row: dict, *, scale: float, positive: bool) -> None:
    """``<column>_p50 … _p99`` from one distribution's ``percentiles`` (times ``scale``).

    Legacy files lack ``p50``; their ``median`` is the same statistic. A level the file
    does not carry stays empty: none is interpolated from its neighbours.
    """
    for level in PERCENTILE_LEVELS:
        keys = (f"percentiles.p{level}", "median") if level == 50 else (f"percentiles.p{level}",)
        value = None
        for key in keys:
            value = dist.num(key, None, positive=positive, nonnegative=not positive)
            if value is not None:
                break
        row[f"{column}_p{level}"] = None if value is None else value * scale


def _streaming(metrics: Fields, key: str, column: str, row: dict) -> None:
    """Mean and percentiles of one per-request streaming metric (ms in the file, s here)."""
    if not metrics.has(f"{key}.successful"):
        return
    dist = metrics.sub(f"{key}.successful")
    put_seconds(row, column, dist.num("mean", None, nonnegative=True))
    _percentiles(dist, column, row, scale=1e-3, positive=False)


def _record_latency(record: Fields) -> float:
    value = record.num("request_latency", None, positive=True)
    if value is not None:
        return value
    for start, end in (("request_start_time", "request_end_time"), ("start_time", "end_time")):
        if record.has(start) and record.has(end):
            return check_positive(record.num(end) - record.num(start), record, end)
    raise record.error("missing (needs request_latency or start/end times)", "request_latency")


def check_positive(value: float, fields: Fields, key: str) -> float:
    """``value`` if finite and > 0, else an error naming ``key``."""
    if not (math.isfinite(value) and value > 0):
        raise fields.error(f"gives a non-positive latency {value}", key)
    return value


def _latency(b: Fields, metrics: Fields, row: dict, n_ok: float) -> None:
    records = b.raw("requests.successful", None)
    record_mean = None
    if isinstance(records, list) and len(records) == n_ok:
        values = []
        for j, record in enumerate(records):
            if not isinstance(record, dict):
                raise b.error("expected a mapping", f"requests.successful[{j}]")
            values.append(
                _record_latency(Fields(record, b.path, f"{b.prefix}.requests.successful[{j}]"))
            )
        record_mean = math.fsum(values) / len(values)

    key = "request_latency.successful.mean"
    mean = metrics.num(key, None, positive=True)
    if mean is not None:
        if record_mean is not None and not math.isclose(mean, record_mean, rel_tol=_REL_TOL):
            raise metrics.error(
                f"= {mean!r} s disagrees with the mean over the {len(records)} per-request "
                f"records (requests.successful[*].request_latency) = {record_mean!r} s",
                key,
            )
        row["latency"], row["latency_source"] = mean, "request_latency"
    elif record_mean is not None:
        row["latency"], row["latency_source"] = record_mean, "requests"
    elif row["mean_batch"]:
        row["latency"], row["latency_source"] = row["mean_batch"] / row["rps"], "littles_law"
    else:
        raise metrics.error(
            "missing, and neither complete per-request records nor request_concurrency "
            "are there to recover the mean latency",
            key,
        )


def _over_saturated(b: Fields) -> bool:
    state = b.raw("scheduler_state", None)
    if not isinstance(state, dict):
        return False
    for group in ("scheduler_constraints", "end_queuing_constraints", "end_processing_constraints"):
        constraints = state.get(group)
        if not isinstance(constraints, dict):
            continue
        for action in constraints.values():
            meta = action.get("metadata") if isinstance(action, dict) else None
            if isinstance(meta, dict) and meta.get("is_over_saturated") is True:
                return True
    return False


def _saturation(
    b: Fields, row: dict, kind: str, legacy: bool, rate_tolerance: float, error_threshold: float
) -> None:
    total = row["n_requests"] + row["n_errored"] + row["n_incomplete"]
    if kind == "throughput":
        flag(row, "throughput strategy: a max-concurrency capacity run (saturated by design)")
    target = row.get("target_rps")
    if target and row["rps"] < rate_tolerance * target:
        flag(
            row,
            f"rate shortfall: achieved {row['rps']:.4g} req/s < {rate_tolerance:g} x "
            f"target {target:.4g} req/s",
        )
    if row["n_errored"] > error_threshold * total:
        flag(row, f"errored: {row['n_errored']:g} of {total:g} requests")
    in_flight = row.get("concurrency") or row.get("mean_batch") or 0.0
    if kind != "throughput" and row["n_incomplete"] > 2 * in_flight + 1 + error_threshold * total:
        flag(
            row,
            f"incomplete: {row['n_incomplete']:g} of {total:g} requests unfinished "
            f"(about {in_flight:.3g} expected in flight)",
        )
    if not legacy and _over_saturated(b):
        flag(row, "GuideLLM over-saturation detector fired")
