"""``vllm bench serve`` results (and SGLang ``bench_serving`` lines) → sweep rows.

One JSON object per run (``--save-result``), or one per line (``--append-result``
writes JSON Lines into a ``.json`` file). See ``shared/notes/input_formats.md`` §2–§3.

Per run the row takes

* ``rps`` = ``request_throughput`` (``completed / duration``); ``target_rps`` =
  ``request_rate`` when finite (the string ``"inf"`` and JSON ``Infinity`` mean "send
  everything at once"); ``max_concurrency`` with an infinite rate is a closed loop
  (``concurrency``, strategy ``concurrent``); an infinite rate without it is a burst
  (strategy ``throughput``, flagged saturated);
* ``latency``, in order of preference (``latency_source`` says which):
  ``mean_e2el_ms`` (``"mean_e2el"``); the newer per-request ``latencies``
  (``"latencies"``); the ``--save-detailed`` arrays, ``ttfts[j] + sum(itls[j])`` over the
  successful requests (``"per_request"``; exact, the client measures e2e that way);
  ``mean_ttft_ms + mean_tpot_ms × (decode − 1)`` (``"approx"`` — exact only when every
  request has the same output length); for a closed loop, Little's law
  ``max_concurrency / request_throughput`` (``"littles_law"``);
* ``latency_p50`` / ``_p90`` / ``_p95`` / ``_p99`` = ``median_e2el_ms`` (or ``p50_…``) and
  ``p90_…`` / ``p95_…`` / ``p99_e2el_ms`` where written (``--percentile-metrics`` must
  include ``e2el``; SGLang: ``…_e2e_latency_ms``), else the percentiles of the complete
  per-request latencies when the file has them;
* ``ttft`` = ``mean_ttft_ms``; ``itl`` = ``mean_tpot_ms`` (per output token after the
  first — GuideLLM's ITL definition); ``chunk_itl`` = ``mean_itl_ms`` (per streamed
  *chunk*: several tokens share a chunk under speculative decoding); each with
  ``_p50`` … ``_p99`` from ``median_<m>_ms`` / ``p<P>_<m>_ms`` for the levels the file
  has (``--metric-percentiles``, default 99 only); ms → s;
* ``prefill`` / ``decode`` = ``total_input_tokens`` / ``total_output_tokens`` per
  completed request; ``n_errored`` = ``failed`` (older files: ``num_prompts − completed``);
* speculative decoding (newer vLLM): ``acceptance_marginal`` =
  ``spec_decode_acceptance_rate / 100`` (or accepted / draft tokens), ``acceptance_length``
  = ``spec_decode_acceptance_length`` (or ``1 + accepted / drafts``), and the draft length
  ``k`` from the per-position list (or draft tokens / drafts).

Saturation flags: burst runs; achieved rate below ``rate_tolerance`` × target; failed
requests above ``error_threshold`` of those sent.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from specbayes.ingest._common import (
    ERROR_THRESHOLD,
    PERCENTILE_LEVELS,
    RATE_TOLERANCE,
    Fields,
    check_number,
    check_row,
    flag,
    put_seconds,
)

__all__ = ["is_sglang_bench", "is_vllm_bench", "read_vllm_bench"]

_REL_TOL = 1e-6

#: Tool metric (``mean_/median_/p<P>_<metric>_ms``) → schema column. vLLM's and SGLang's
#: TPOT is the schema's ``itl`` (per output token after the first, as GuideLLM's ITL);
#: their ITL is per streamed chunk (``chunk_itl``).
_STREAMING_METRICS: dict[str, str] = {"ttft": "ttft", "tpot": "itl", "itl": "chunk_itl"}


def is_vllm_bench(doc: Any) -> bool:
    """Whether a decoded object looks like one ``vllm bench serve`` result."""
    return (
        isinstance(doc, dict)
        and "benchmarks" not in doc
        and "request_throughput" in doc
        and ("num_prompts" in doc or "mean_ttft_ms" in doc)
        and "mean_e2e_latency_ms" not in doc
    )


def is_sglang_bench(doc: Any) -> bool:
    """Whether a decoded object looks like one SGLang ``bench_serving`` line."""
    return isinstance(doc, dict) and "request_throughput" in doc and "mean_e2e_latency_ms" in doc


def _rate(f: Fields, key: str) -> float | None:
    value = f.raw(key, None)
    if value is None:
        return None
    if isinstance(value, str) and value.strip().lower() in ("inf", "infinity", "+inf"):
        return math.inf
    if isinstance(value, float) and value == math.inf:
        return math.inf
    return check_number(value, f, key, positive=True)


def _array(f: Fields, key: str, n: int | None) -> list | None:
    value = f.raw(key, None)
    if value is None:
        return None
    if not isinstance(value, list):
        raise f.error(f"expected a per-request list, got {type(value).__name__}", key)
    if n is not None and len(value) != n:
        raise f.error(f"has {len(value)} entries, other per-request lists have {n}", key)
    return value


def _per_request(f: Fields) -> dict[str, Any] | None:
    """Successful-request arrays of a ``--save-detailed`` file (None when absent)."""
    ttfts = _array(f, "ttfts", None)
    if ttfts is None:
        return None
    n = len(ttfts)
    itls = _array(f, "itls", n)
    errors = _array(f, "errors", n)
    out_lens = _array(f, "output_lens", n)
    if errors is not None:
        ok = [e in ("", None) for e in errors]
    elif out_lens is not None:
        ok = [isinstance(x, int | float) and x > 0 for x in out_lens]
    else:
        ok = [isinstance(x, int | float) and x > 0 for x in ttfts]
    latencies = None
    if itls is not None:
        latencies = []
        for j, good in enumerate(ok):
            if not good:
                continue
            t = _element(f, "ttfts", j, ttfts[j])
            gaps = itls[j]
            if not isinstance(gaps, list):
                raise f.error("expected a list of inter-chunk gaps", f"itls[{j}]")
            total = math.fsum(_element(f, f"itls[{j}]", i, g) for i, g in enumerate(gaps))
            latencies.append(t + total)
    return {"ok": ok, "latencies": latencies}


def _element(f: Fields, key: str, j: int, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise f.error(f"expected a finite number, got {value!r}", f"{key}[{j}]")
    if value < 0:
        raise f.error(f"must be >= 0, got {value!r}", f"{key}[{j}]")
    return float(value)


def read_vllm_bench(
    doc: dict,
    path: str | Path,
    *,
    prefix: str = "",
    rate_tolerance: float = RATE_TOLERANCE,
    error_threshold: float = ERROR_THRESHOLD,
) -> dict[str, Any]:
    """The sweep row of one ``vllm bench serve`` (or SGLang) result object.

    Parameters
    ----------
    doc : dict
        One decoded result object.
    path : str or Path
        File name for messages and the ``source`` column.
    prefix : str
        Position inside the file (``"line[3]"`` for JSON Lines), for messages.
    rate_tolerance, error_threshold : float
        Saturation thresholds (see the module docstring).

    Returns
    -------
    dict
        Sweep-schema fields; may include ``k`` when the file reveals the draft length.

    Raises
    ------
    IngestError
        Naming the file and field, for a malformed or empty result.
    """
    f = Fields(doc, path, prefix)
    sglang = is_sglang_bench(doc)
    completed = f.num("completed", nonnegative=True)
    failed = f.num("failed", None, nonnegative=True)
    sent = f.num("num_prompts", None, nonnegative=True)
    if failed is None and sent is not None:
        failed = max(sent - completed, 0.0)
    if completed == 0:
        raise f.error(
            f"0 successful requests ({'?' if failed is None else f'{failed:g}'} failed): "
            "this run measured no latency",
            "completed",
        )
    duration = f.num("duration", None, positive=True)
    rps = f.num("request_throughput", None, positive=True)
    if rps is None:
        if duration is None:
            raise f.error("missing, and no duration to compute it from", "request_throughput")
        rps = completed / duration

    row: dict[str, Any] = {
        "rps": rps,
        "n_requests": completed,
        "n_errored": failed,
        "saturated": False,
        "saturation_reason": "",
        "source": f"{path}#{prefix}" if prefix else str(path),
    }
    row["prefill"] = f.num("total_input_tokens", nonnegative=True) / completed
    row["decode"] = f.num("total_output_tokens", positive=True) / completed

    rate = _rate(f, "request_rate")
    max_conc = f.num("max_concurrency", None, positive=True)
    if rate is None or math.isinf(rate):
        if max_conc is not None:
            row["strategy"], row["concurrency"] = "concurrent", max_conc
        else:
            row["strategy"] = "throughput"
            flag(row, "request_rate inf without max_concurrency: a burst (saturated by design)")
    else:
        burst = f.num("burstiness", 1.0, positive=True)
        row["strategy"] = "poisson" if burst == 1.0 else "gamma"
        row["target_rps"] = rate
        if rps < rate_tolerance * rate:
            flag(
                row,
                f"rate shortfall: achieved {rps:.4g} req/s < {rate_tolerance:g} x target "
                f"{rate:.4g} req/s",
            )
    if sglang:
        row["mean_batch"] = f.num("concurrency", None, nonnegative=True)
    total = completed + (failed or 0.0)
    if failed and failed > error_threshold * total:
        flag(row, f"errored: {failed:g} of {total:g} requests failed")

    _latency(f, row, sglang)
    for metric, column in _STREAMING_METRICS.items():
        put_seconds(row, column, f.num(f"mean_{metric}_ms", None, nonnegative=True))
        for level in PERCENTILE_LEVELS:
            put_seconds(row, f"{column}_p{level}", _reported(f, metric, level, positive=False))
    _spec_decode(f, row, sglang)
    return check_row(row, f)


def _latency(f: Fields, row: dict, sglang: bool) -> None:
    e2e = "mean_e2e_latency_ms" if sglang else "mean_e2el_ms"
    detail = _per_request(f)
    exact = detail["latencies"] if detail else None
    if exact is not None and len(exact) != row["n_requests"]:
        raise f.error(
            f"mark {len(exact)} requests successful but completed = {row['n_requests']:g}",
            "errors",
        )
    mean = f.num(e2e, None, positive=True)
    if mean is not None:
        mean /= 1000.0
        if exact:
            check = math.fsum(exact) / len(exact)
            if not math.isclose(mean, check, rel_tol=1e-4):
                raise f.error(
                    f"= {mean * 1000!r} ms disagrees with the mean of ttfts + sum(itls) over "
                    f"the {len(exact)} successful requests = {check * 1000!r} ms",
                    e2e,
                )
        row["latency"], row["latency_source"] = mean, "mean_e2el"
    elif f.has("latencies"):
        values = _array(f, "latencies", len(detail["ok"]) if detail else None)
        ok = detail["ok"] if detail else [True] * len(values)
        good = [_element(f, "latencies", j, v) for j, v in enumerate(values) if ok[j]]
        good = [v for v in good if v > 0]
        if not good:
            raise f.error("holds no positive latency of a successful request", "latencies")
        exact = good
        row["latency"], row["latency_source"] = math.fsum(good) / len(good), "latencies"
    elif exact:
        row["latency"], row["latency_source"] = math.fsum(exact) / len(exact), "per_request"
    elif f.has("mean_ttft_ms") and f.has("mean_tpot_ms"):
        ttft = f.num("mean_ttft_ms", nonnegative=True) / 1000.0
        tpot = f.num("mean_tpot_ms", nonnegative=True) / 1000.0
        row["latency"] = ttft + tpot * max(row["decode"] - 1.0, 0.0)
        row["latency_source"] = "approx"
    elif row.get("concurrency"):
        row["latency"] = row["concurrency"] / row["rps"]
        row["latency_source"] = "littles_law"
    else:
        raise f.error(
            "missing, and no per-request arrays, TTFT/TPOT means or closed-loop concurrency "
            "to recover the mean end-to-end latency from",
            e2e,
        )
    if not (math.isfinite(row["latency"]) and row["latency"] > 0):
        raise f.error(
            f"mean latency recovered as {row['latency']!r} s (must be > 0)",
            row["latency_source"],
        )
    metric = "e2e_latency" if sglang else "e2el"
    for level in PERCENTILE_LEVELS:
        value = _reported(f, metric, level, positive=True)
        if value is None and exact:
            # the complete per-request latencies are the sample the tool would have summarised
            value = float(np.percentile(exact, level)) * 1000.0
        put_seconds(row, f"latency_p{level}", value if value is None or value > 0 else None)


def _reported(f: Fields, metric: str, level: int, *, positive: bool) -> float | None:
    """The ``level``-th percentile of ``metric`` (ms) as the file reports it, else None.

    ``--metric-percentiles`` chooses the ``p<level>_<metric>_ms`` keys (default only 99);
    the median is always written as ``median_<metric>_ms``.
    """
    keys = [f"p{level}_{metric}_ms"] + ([f"median_{metric}_ms"] if level == 50 else [])
    for key in keys:
        value = f.num(key, None, positive=positive, nonnegative=not positive)
        if value is not None:
            return value
    return None


def _spec_decode(f: Fields, row: dict, sglang: bool) -> None:
    if sglang:
        length = f.num("accept_length", None, positive=True)
        if length is not None and length > 1:
            row["acceptance_length"] = length
        return
    drafts = f.num("spec_decode_num_drafts", None, nonnegative=True)
    draft_tokens = f.num("spec_decode_draft_tokens", None, nonnegative=True)
    accepted = f.num("spec_decode_accepted_tokens", None, nonnegative=True)
    rate = f.num("spec_decode_acceptance_rate", None, nonnegative=True)
    length = f.num("spec_decode_acceptance_length", None, positive=True)
    per_pos = f.raw("spec_decode_per_position_acceptance_rates", None)

    marginal = None if rate is None else rate / 100.0
    if marginal is not None and marginal > 1:
        raise f.error(f"= {rate!r} % exceeds 100 %", "spec_decode_acceptance_rate")
    if draft_tokens and accepted is not None:
        counted = accepted / draft_tokens
        if marginal is not None and not math.isclose(marginal, counted, rel_tol=1e-4):
            raise f.error(
                f"= {rate!r} % disagrees with accepted / draft tokens = {100 * counted!r} %",
                "spec_decode_acceptance_rate",
            )
        marginal = counted
    if drafts and accepted is not None:
        counted = 1.0 + accepted / drafts
        if length is not None and not math.isclose(length, counted, rel_tol=1e-4):
            raise f.error(
                f"= {length!r} disagrees with 1 + accepted / drafts = {counted!r}",
                "spec_decode_acceptance_length",
            )
        length = counted
    k = None
    if isinstance(per_pos, list) and per_pos:
        k = len(per_pos)
    elif drafts and draft_tokens:
        ratio = draft_tokens / drafts
        if abs(ratio - round(ratio)) < 1e-6:
            k = round(ratio)
    if marginal is not None and marginal > 0:
        row["acceptance_marginal"] = marginal
    if length is not None and length > 1:
        row["acceptance_length"] = length
    if k is not None:
        row["k"] = k
