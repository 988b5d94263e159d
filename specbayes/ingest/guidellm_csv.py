"""GuideLLM CSV exports (0.4+: three header rows) → sweep rows.

The JSON/YAML report is the reliable source; the CSV is read for convenience when it is all
a user has. Header rows are *group* / *status and unit* / *statistic*, e.g.
``Request Latency | Successful Sec | Mean``. GuideLLM 0.5.2 writes rows whose columns do
not line up with the header (a status whose ``total_sum`` is 0 gets no columns); such a row
is an error that names it — read the JSON written beside it instead.

The CSV keeps no per-request records, and its ``Strategy`` column gives the target rate
rounded (``constant@20.62``) or not at all (0.5.2: ``constant``).
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from specbayes.ingest._common import ERROR_THRESHOLD, RATE_TOLERANCE, Fields, IngestError
from specbayes.ingest.guidellm import STRATEGIES, benchmark_row

__all__ = ["is_guidellm_csv", "read_guidellm_csv"]

# (group, status-and-unit, statistic) → path in the JSON benchmark
_COLUMNS: dict[tuple[str, str, str], str] = {
    ("Timings", "Duration", "Sec"): "duration",
    ("Request Counts", "Successful", ""): "metrics.request_totals.successful",
    ("Request Counts", "Errored", ""): "metrics.request_totals.errored",
    ("Request Counts", "Incomplete", ""): "metrics.request_totals.incomplete",
    ("Server Throughput", "Successful Requests/Sec", "Mean"): (
        "metrics.requests_per_second.successful.mean"
    ),
    ("Server Throughput", "Successful Concurrency", "Mean"): (
        "metrics.request_concurrency.successful.mean"
    ),
    ("Token Metrics", "Successful Input Tokens", "Mean"): (
        "metrics.prompt_token_count.successful.mean"
    ),
    ("Token Metrics", "Successful Output Tokens", "Mean"): (
        "metrics.output_token_count.successful.mean"
    ),
}
#: Distributions whose Mean, Median and Percentiles columns are read: (group, status and
#: unit) → path of the ``successful`` statistics in the JSON benchmark.
_DISTRIBUTIONS: dict[tuple[str, str], str] = {
    ("Request Latency", "Successful Sec"): "metrics.request_latency.successful",
    ("Time to First Token", "Successful ms"): "metrics.time_to_first_token_ms.successful",
    ("Inter Token Latency", "Successful ms"): "metrics.inter_token_latency_ms.successful",
    ("Time per Output Token", "Successful ms"): "metrics.time_per_output_token_ms.successful",
}
_COLUMNS.update(
    {
        (group, status, stat): f"{path}.{stat.lower()}"
        for (group, status), path in _DISTRIBUTIONS.items()
        for stat in ("Mean", "Median")
    }
)
_REQUIRED = (("Request Latency", "Successful Sec", "Mean"),)

#: The Percentiles cell is ``[min, p001, p01, p05, p10, p25, p75, p90, p95, p99, max]`` —
#: no p50 (the Median column is it); positions of the levels kept.
_PERCENTILE_POSITIONS: dict[str, int] = {"p90": 7, "p95": 8, "p99": 9}
_STRATEGY = ("Benchmark", "Strategy", "")


def is_guidellm_csv(text: str) -> bool:
    """Whether CSV text is a GuideLLM export (its first header row names metric groups)."""
    first = next(csv.reader(io.StringIO(text)), [])
    return "Request Latency" in first and ("Benchmark" in first or "Run Info" in first)


def _set(tree: dict, path: str, value: Any) -> None:
    parts = path.split(".")
    for part in parts[:-1]:
        tree = tree.setdefault(part, {})
    tree[parts[-1]] = value


def _number(text: str, path: str, where: str, column: tuple) -> float | None:
    if text.strip() == "":
        return None
    try:
        return float(text)
    except ValueError:
        raise IngestError(path, f"not a number: {text!r}", f"{where} column {column}") from None


def read_guidellm_csv(
    text: str,
    path: str | Path,
    *,
    rate_tolerance: float = RATE_TOLERANCE,
    error_threshold: float = ERROR_THRESHOLD,
) -> tuple[list[dict], dict]:
    """Rows of a GuideLLM CSV export, one per benchmark (see the module docstring).

    Raises
    ------
    IngestError
        For a misaligned row (0.5.2), a missing column, or a malformed value.
    """
    path = str(path)
    table = list(csv.reader(io.StringIO(text)))
    if len(table) < 3:
        raise IngestError(path, "a GuideLLM CSV needs three header rows")
    header = list(zip(*table[:3], strict=False))
    width = len(header)
    index = {tuple(c.strip() for c in col): i for i, col in enumerate(header)}
    for col in (_STRATEGY, *list(_COLUMNS)[:4], *_REQUIRED):
        if col not in index:
            raise IngestError(path, "column missing from the GuideLLM CSV header", " | ".join(col))
    data = [r for r in table[3:] if any(c.strip() for c in r)]
    if not data:
        raise IngestError(path, "the CSV holds no benchmark row", "row 4")
    rows = []
    for n, cells in enumerate(data, start=4):
        where = f"row {n}"
        if len(cells) != width:
            raise IngestError(
                path,
                f"has {len(cells)} columns but the header has {width}: this GuideLLM CSV's "
                "columns do not line up (a known GuideLLM 0.5.2 export bug) — read the "
                "JSON/YAML report written beside it",
                where,
            )
        bench: dict = {}
        for col, target in _COLUMNS.items():
            if col in index:
                value = _number(cells[index[col]], path, where, col)
                if value is not None:
                    _set(bench, target, value)
        kind, _, arg = cells[index[_STRATEGY]].partition("@")
        strategy: dict[str, Any] = {"type_": kind.strip()}
        if kind.strip() not in STRATEGIES:
            raise IngestError(path, f"unknown strategy {kind!r}", f"{where} Benchmark | Strategy")
        if arg and kind in ("constant", "poisson"):
            strategy["rate"] = _number(arg, path, where, _STRATEGY)
        elif arg and kind == "concurrent":
            strategy["streams"] = _number(arg, path, where, _STRATEGY)
        bench["config"] = {"strategy": strategy}
        _percentiles(cells, index, bench)
        row = benchmark_row(
            Fields(bench, path, where),
            legacy=False,
            rate_tolerance=rate_tolerance,
            error_threshold=error_threshold,
            require_rate=False,
        )
        row["source"] = f"{path}#{where}"
        rows.append(row)
    return rows, {"format": "guidellm csv", "model": _model(data[0], index)}


def _percentiles(cells: list[str], index: dict, bench: dict) -> None:
    """p90 / p95 / p99 of each distribution from its Percentiles cell (a JSON list)."""
    for (group, status), path in _DISTRIBUTIONS.items():
        col = index.get((group, status, "Percentiles"))
        if col is None:
            continue
        try:
            pct = json.loads(cells[col])
        except json.JSONDecodeError:
            continue
        if isinstance(pct, list) and len(pct) == 11:
            for level, position in _PERCENTILE_POSITIONS.items():
                _set(bench, f"{path}.percentiles.{level}", pct[position])


def _model(cells: list[str], index: dict) -> str | None:
    col = index.get(("Run Info", "Backend", ""))
    if col is None:
        return None
    try:
        backend = json.loads(cells[col])
    except json.JSONDecodeError:
        return None
    model = backend.get("model") if isinstance(backend, dict) else None
    return model if isinstance(model, str) and model else None
