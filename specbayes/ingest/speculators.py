"""The real B200 closed-loop measurements of ``vllm-project/speculators`` → the sweep table.

Source (transcribed value by value in ``shared/real/speculators_qwen3.8-27b_b200.csv``,
long format, one metric per row): https://github.com/vllm-project/speculators,
``examples/evaluate/results/qwen3_8_27b_dspark/{baseline,dspark}_{HumanEval,math_reasoning}.csv``
(commit 01d6d4d4db61) and ``mtp_{HumanEval,math_reasoning}.csv`` (commit 8685273f70d5).
Qwen3.8-27B on 1×B200, vLLM 0.30.1rc1 nightly, GuideLLM 0.8.0 closed loop with
N = 1 … 128 streams; arms: dense (k = 0), DSpark (k = 7), native MTP (k = 2).

Per point the row takes ``concurrency = N``, ``rps`` = completed request rate,
``latency`` from Little's law = mean active concurrency / completed request rate
(``latency_source = "littles_law"``; the source prints no mean end-to-end latency),
``mean_batch`` = the mean active concurrency, ``itl`` = mean ITL, ``itl_p50`` = median
ITL, ``ttft_p50`` / ``ttft_p99`` = median / p99 TTFT (ms → s; the source prints no mean
TTFT and no other percentile, so those columns stay empty), ``prefill`` / ``decode``
= the point's mean prompt / output tokens, ``acceptance_length`` = 1 + accepted / drafts
(checked against the published value), ``cell`` = the dataset (``HumanEval`` or
``math_reasoning``). The points the source flags as queueing inside the server (DSpark at
N = 128) are ``saturated``.

Also here: :func:`fit_closed_loop` (least-squares ``L = C1 + N·C2`` per arm, with R²) and
:func:`compare_sd_dense` (does SD beat the dense arm at each concurrency?).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from specbayes.ingest._common import ROW_COLUMNS, IngestError

__all__ = [
    "CITATION",
    "DEFAULT_SOURCE",
    "compare_sd_dense",
    "convert_speculators",
    "fit_closed_loop",
    "format_comparison",
    "rebuild_real_data",
]

#: Where the transcription lives in the shared material (sibling of the repository).
DEFAULT_SOURCE = (
    Path(__file__).resolve().parents[2].parent / "shared/real/speculators_qwen3.8-27b_b200.csv"
)

CITATION = (
    "vllm-project/speculators, examples/evaluate/results/qwen3_8_27b_dspark/"
    "{baseline,dspark}_{HumanEval,math_reasoning}.csv @01d6d4d4db61 and "
    "mtp_{HumanEval,math_reasoning}.csv @8685273f70d5, with "
    "docs/user_guide/tutorials/throughput_interactivity.md "
    "(https://github.com/vllm-project/speculators)"
)

_METRICS = (
    "completed_request_rate_rps",
    "mean_active_concurrency",
    "mean_itl_ms",
    "successful_requests_in_window",
)
#: Percentiles the source prints (ms) → schema columns (s); GuideLLM's ITL, as ``itl``.
_PERCENTILE_METRICS = {
    "median_ttft_ms": "ttft_p50",
    "p99_ttft_ms": "ttft_p99",
    "median_itl_ms": "itl_p50",
}
_COLUMNS = (
    "source",
    "model",
    "draft_method",
    "k",
    "gpu",
    "tensor_parallel",
    "input_len",
    "output_len",
    "request_rate_or_concurrency",
    "rate_kind",
    "metric",
    "value",
    "acceptance_rate",
    "notes",
)


def _after_equals(text: str, path: str, field: str) -> float:
    match = re.search(r"=\s*([0-9.eE+-]+)", str(text))
    if not match:
        raise IngestError(path, f"expected 'name=<number>', got {text!r}", field)
    return float(match.group(1))


def convert_speculators(path: str | Path = DEFAULT_SOURCE) -> pd.DataFrame:
    """Turn the long-format B200 transcription into sweep-schema rows.

    Parameters
    ----------
    path : str or Path
        ``speculators_qwen3.8-27b_b200.csv`` (default: the copy in ``../shared/real``).

    Returns
    -------
    pandas.DataFrame
        48 rows (2 datasets × 3 arms × 8 concurrencies) in the sweep schema.

    Raises
    ------
    IngestError
        If a column or a metric is missing, or the acceptance length disagrees with the
        draft counters.
    """
    path = str(path)
    raw = pd.read_csv(path)
    missing = [c for c in _COLUMNS if c not in raw.columns]
    if missing:
        raise IngestError(path, "column missing", missing[0])
    raw = raw.assign(
        cell=raw["notes"].str.extract(r"subset (\S+?);", expand=False),
        drafter=raw["draft_method"].str.split().str[0],
    )
    if raw["cell"].isna().any():
        raise IngestError(path, "no 'subset <dataset>;' in the notes", "notes")
    keys = ["cell", "drafter", "k", "request_rate_or_concurrency"]
    rows = []
    for (cell, drafter, k, n), point in raw.groupby(keys, sort=True):
        values = dict(zip(point["metric"], point["value"], strict=True))
        where = f"{cell}/{drafter}/N={n:g}"
        for metric in _METRICS:
            if metric not in values:
                raise IngestError(path, f"metric missing for point {where}", metric)
        first = point.iloc[0]
        rps = float(values["completed_request_rate_rps"])
        active = float(values["mean_active_concurrency"])
        row = {
            "verifier": str(first["model"]).split("/")[-1],  # catalog style: Qwen3.8-27B
            "drafter": drafter,
            "hardware": str(first["gpu"]),
            "cell": cell,
            "tp": int(first["tensor_parallel"]),
            "k": int(k),
            "prefill": _after_equals(first["input_len"], path, "input_len"),
            "decode": _after_equals(first["output_len"], path, "output_len"),
            "rps": rps,
            "latency": active / rps,
            "itl": float(values["mean_itl_ms"]) / 1000.0,
            **{
                column: float(values[metric]) / 1000.0
                for metric, column in _PERCENTILE_METRICS.items()
                if metric in values
            },
            "n_requests": float(values["successful_requests_in_window"]),
            "concurrency": float(n),
            "mean_batch": active,
            "saturated": False,
            "saturation_reason": "",
            "latency_source": "littles_law",
            "strategy": "concurrent",
            "alpha_source": "dense" if int(k) == 0 else "acceptance_length",
            "source": f"{first['source'].split(' (')[0]} N={n:g}",
        }
        if int(k) > 0:
            published = _after_equals(first["acceptance_rate"], path, "acceptance_rate")
            for metric in ("num_drafts", "num_accepted_tokens"):
                if metric not in values:
                    raise IngestError(path, f"metric missing for SD point {where}", metric)
            counted = 1.0 + values["num_accepted_tokens"] / values["num_drafts"]
            if not np.isclose(published, counted, rtol=1e-9):
                raise IngestError(
                    path,
                    f"point {where}: published {published!r} != 1 + accepted/drafts = {counted!r}",
                    "acceptance_rate",
                )
            row["acceptance_length"] = counted
        if point["notes"].str.contains("queueing inside server").any():
            row["saturated"] = True
            row["saturation_reason"] = "source: queueing inside the server"
        rows.append(row)
    df = pd.DataFrame(rows)
    cols = [c for c in ROW_COLUMNS if c in df.columns]
    df = df[cols]
    df.attrs["source"] = path
    return df


def rebuild_real_data(
    source: str | Path = DEFAULT_SOURCE, out: str | Path | None = None
) -> pd.DataFrame:
    """Rebuild ``data/real/speculators_qwen3.8-27b_b200_sweeps.csv`` from the transcription.

    Parameters
    ----------
    source : str or Path
        The long-format transcription.
    out : str or Path, optional
        Where to write (default: ``data/real/`` of this repository).

    Returns
    -------
    pandas.DataFrame
        The rows written.
    """
    df = convert_speculators(source)
    if out is None:
        out = (
            Path(__file__).resolve().parents[2]
            / "data/real/speculators_qwen3.8-27b_b200_sweeps.csv"
        )
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(out, index=False)
    return df


def fit_closed_loop(
    df: pd.DataFrame,
    *,
    by: tuple[str, ...] = ("verifier", "drafter", "hardware", "cell", "k"),
    include_saturated: bool = False,
) -> pd.DataFrame:
    """Least-squares fit of ``L = C1 + N·C2`` to each closed-loop sweep (no Bayes here).

    A quick check that closed-loop data follow the latency law of docs/model.md §1, and a
    baseline for the Bayesian fits.

    Parameters
    ----------
    df : pandas.DataFrame
        Sweep rows with ``concurrency`` and ``latency``; open-loop rows are ignored.
    by : tuple of str
        Columns that identify one sweep.
    include_saturated : bool
        Keep rows flagged ``saturated`` (default: fit up to the saturated points only).

    Returns
    -------
    pandas.DataFrame
        One row per sweep: the ``by`` columns, ``c1`` (s), ``c2`` (s per stream), ``r2``,
        ``n_points``, ``n_max`` (largest N fitted) and ``n_saturated`` (points left out).
    """
    closed = df[df["concurrency"].notna()].copy()
    sat = (
        closed["saturated"].astype(str).str.lower().isin(["true", "1"])
        if "saturated" in closed
        else pd.Series(False, index=closed.index)
    )
    out = []
    for key, group in closed.groupby(list(by), sort=True, dropna=False):
        keep = group if include_saturated else group[~sat[group.index]]
        n = keep["concurrency"].to_numpy(float)
        lat = keep["latency"].to_numpy(float)
        record = dict(zip(by, key if isinstance(key, tuple) else (key,), strict=True))
        record.update(
            n_points=len(keep),
            n_max=float(n.max()) if len(n) else np.nan,
            n_saturated=int(len(group) - len(keep)),
        )
        if len(keep) >= 2 and np.ptp(n) > 0:
            design = np.column_stack([np.ones_like(n), n])
            (c1, c2), *_ = np.linalg.lstsq(design, lat, rcond=None)
            resid = lat - (c1 + c2 * n)
            total = np.sum((lat - lat.mean()) ** 2)
            record.update(c1=c1, c2=c2, r2=1.0 - np.sum(resid**2) / total if total > 0 else np.nan)
        else:
            record.update(c1=np.nan, c2=np.nan, r2=np.nan)
        out.append(record)
    return pd.DataFrame(out)


def compare_sd_dense(
    df: pd.DataFrame, *, by: tuple[str, ...] = ("verifier", "hardware", "cell")
) -> pd.DataFrame:
    """Does speculative decoding beat the dense arm at each concurrency?

    Pairs every SD closed-loop point with the dense point of the same ``by`` labels and
    concurrency ``N``.

    Parameters
    ----------
    df : pandas.DataFrame
        Closed-loop sweep rows with dense (k = 0) and SD (k > 0) arms.
    by : tuple of str
        Labels that must match between the arms (one workload on one server).

    Returns
    -------
    pandas.DataFrame
        Per (``by``, drafter, k, N): ``latency_dense``, ``latency_sd`` (s), ``speedup`` =
        dense / SD latency, ``speedup_per_token`` (the same on latency per output token,
        which removes the point-to-point spread of output lengths), ``sd_faster``
        (speedup > 1) and ``saturated`` (either point flagged; its comparison is not a
        steady-state one).
    """
    closed = df[df["concurrency"].notna()].copy()
    closed["saturated"] = closed.get("saturated", False)
    closed["saturated"] = closed["saturated"].astype(str).str.lower().isin(["true", "1"])
    dense = closed[closed["k"] == 0]
    sd = closed[closed["k"] > 0]
    keys = [*by, "concurrency"]
    merged = sd.merge(dense, on=keys, suffixes=("_sd", "_dense"), how="inner")
    out = merged[keys].copy()
    out.insert(len(by), "drafter", merged["drafter_sd"])
    out.insert(len(by) + 1, "k", merged["k_sd"].astype(int))
    out["latency_dense"] = merged["latency_dense"]
    out["latency_sd"] = merged["latency_sd"]
    out["speedup"] = merged["latency_dense"] / merged["latency_sd"]
    out["speedup_per_token"] = (merged["latency_dense"] / merged["decode_dense"]) / (
        merged["latency_sd"] / merged["decode_sd"]
    )
    out["sd_faster"] = out["speedup"] > 1.0
    out["saturated"] = merged["saturated_sd"] | merged["saturated_dense"]
    return out.sort_values([*by, "drafter", "concurrency"]).reset_index(drop=True)


def format_comparison(table: pd.DataFrame) -> str:
    """A printable verdict per concurrency from :func:`compare_sd_dense`."""
    lines = []
    for key, group in table.groupby(["cell", "drafter", "k"], sort=True):
        cell, drafter, k = key
        lines.append(f"{cell}: {drafter} (k={k}) vs dense")
        lines.append("       N   L_dense(s)   L_sd(s)   speedup  per-token  verdict")
        for _, r in group.iterrows():
            verdict = "SD faster" if r["sd_faster"] else "dense faster"
            if r["saturated"]:
                verdict += " (saturated point)"
            lines.append(
                f"  {r['concurrency']:6g}   {r['latency_dense']:10.3f}  {r['latency_sd']:8.3f}"
                f"   {r['speedup']:7.2f}  {r['speedup_per_token']:9.2f}  {verdict}"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m specbayes.ingest.speculators [SOURCE [OUT]]``: rebuild ``data/real``."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    source = args[0] if args else DEFAULT_SOURCE
    out = args[1] if len(args) > 1 else None
    df = rebuild_real_data(source, out)
    print(f"{len(df)} rows from {source}")
    print(fit_closed_loop(df).to_string(index=False))
    print(format_comparison(compare_sd_dense(df)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
