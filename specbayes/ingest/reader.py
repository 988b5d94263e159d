"""Dispatch: any supported file → the sweep table, with the caller's configuration labels.

The tool and its version are recognised from the content (gzip, JSON, JSON Lines, YAML,
CSV, parquet; GuideLLM report generations, ``vllm bench serve``, SGLang ``bench_serving``,
plain sweep tables), never from the file name.

A benchmark file cannot know the configuration it measured — verifier, drafter, hardware,
draft length ``k``, acceptance — so the caller supplies those labels as keyword arguments
or in a small *sidecar* file (YAML or JSON)::

    verifier: Qwen3-8B          # labels for every file
    hardware: H100-SXM
    files:                      # optional per-file overrides, by file name or glob
      "sd-*.json": {drafter: EAGLE3, k: 3, acceptance_length: 2.6}

Precedence: keyword arguments > the sidecar's ``files`` entry > its top level > what the
file itself says (the served model name as ``verifier``; vLLM's spec-decode counters as
acceptance and ``k``). A ``k`` given by the caller that contradicts the file is an error.
"""

from __future__ import annotations

import fnmatch
import io
import math
import re
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from specbayes import laws
from specbayes.data import OPTIONAL_COLUMNS, REQUIRED_COLUMNS, TEXT_COLUMNS, strip_labels
from specbayes.ingest import guidellm, vllm_bench
from specbayes.ingest._common import (
    ERROR_THRESHOLD,
    RATE_TOLERANCE,
    ROW_COLUMNS,
    IngestError,
    LoadedFile,
    load_file,
)
from specbayes.ingest.guidellm_csv import is_guidellm_csv, read_guidellm_csv

__all__ = ["LABELS", "detect_format", "ingest_files", "load_sidecar", "read"]

#: Configuration labels the caller may give (the file cannot know them).
LABELS: tuple[str, ...] = (
    "verifier",
    "drafter",
    "hardware",
    "k",
    "alpha",
    "acceptance_length",
    "acceptance_marginal",
    "cell",
    "tp",
)


_NUMERIC_COLUMNS = {c for c in ROW_COLUMNS if c not in TEXT_COLUMNS} - {"k"}


def _rows(loaded: LoadedFile, thresholds: dict) -> tuple[list[dict], dict]:
    path, data = loaded.path, loaded.data
    if loaded.kind == "parquet":
        try:
            table = pd.read_parquet(path)
        except Exception as exc:  # pyarrow raises its own types for corrupt files
            raise IngestError(path, f"unreadable parquet file ({exc})") from None
        return _table_rows(table, path)
    if loaded.kind == "csv":
        if is_guidellm_csv(data):
            return read_guidellm_csv(data, path, **thresholds)
        try:
            table = pd.read_csv(io.StringIO(data))
        except (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError) as exc:
            msg = str(exc).strip().replace("\n", " ")
            raise IngestError(path, f"unreadable CSV ({msg})") from None
        return _table_rows(table, path)
    if loaded.kind in ("json", "yaml") and isinstance(data, dict):
        if guidellm.is_guidellm(data):
            return guidellm.read_guidellm(data, path, **thresholds)
        if vllm_bench.is_vllm_bench(data) or vllm_bench.is_sglang_bench(data):
            row = vllm_bench.read_vllm_bench(data, path, **thresholds)
            return [row], {"format": _bench_format(data), "model": _bench_model(data)}
        raise _unknown(path, data)
    if isinstance(data, list):
        if not data:
            raise IngestError(path, "empty list: the file holds no benchmark run")
        rows = []
        for i, doc in enumerate(data):
            where = f"line[{i + 1}]" if loaded.kind == "jsonl" else f"[{i}]"
            if not (vllm_bench.is_vllm_bench(doc) or vllm_bench.is_sglang_bench(doc)):
                if isinstance(doc, dict):
                    raise _unknown(path, doc, where)
                raise IngestError(
                    path, f"expected a result object, got {type(doc).__name__}", where
                )
            rows.append(vllm_bench.read_vllm_bench(doc, path, prefix=where, **thresholds))
        fmt = _bench_format(data[0]) + (" (JSON Lines)" if loaded.kind == "jsonl" else "")
        return rows, {"format": fmt, "model": _bench_model(data[0])}
    raise IngestError(path, f"unsupported content ({type(data).__name__} at the top level)")


def _bench_format(doc: dict) -> str:
    return "sglang bench_serving" if vllm_bench.is_sglang_bench(doc) else "vllm bench serve"


def _bench_model(doc: dict) -> str | None:
    model = doc.get("model_id")
    return model if isinstance(model, str) and model else None


def _unknown(path: str, doc: dict, where: str | None = None) -> IngestError:
    keys = ", ".join(sorted(map(str, doc))[:12]) or "none"
    return IngestError(
        path,
        "not a GuideLLM report (needs 'benchmarks'), a vllm bench serve result (needs "
        "'request_throughput' and 'num_prompts') nor a sweep table; top-level keys: " + keys,
        where,
    )


def _table_rows(df: pd.DataFrame, path: str) -> tuple[list[dict], dict]:
    df = strip_labels(df)
    missing = [c for c in ("prefill", "decode", "rps", "latency") if c not in df.columns]
    if missing:
        raise IngestError(
            path,
            "a CSV/parquet file must be a sweep table (docs/model.md §9) or a GuideLLM CSV; "
            f"missing column(s) {', '.join(missing)}",
            missing[0],
        )
    if df.empty:
        raise IngestError(path, "the sweep table has no rows")
    df = df.copy()
    for col in df.columns:
        if col not in _NUMERIC_COLUMNS and col != "k":
            continue
        num = pd.to_numeric(df[col], errors="coerce")
        text = df[col].astype(object).where(df[col].notna(), "").astype(str).str.strip()
        bad = num.isna() & (text != "")
        if bad.any():
            raise IngestError(path, f"not a number in rows {_row_list(bad)}", col)
        df[col] = num.astype(float)
    if "k" in df:
        k = df["k"]
        bad = k.notna() & ~((k >= 0) & (k == np.round(k)))
        if bad.any():
            raise IngestError(path, f"must be an integer >= 0; rows {_row_list(bad)}", "k")
    lat = df["latency"]
    bad = ~(np.isfinite(lat) & (lat > 0))
    if bad.any():
        raise IngestError(path, f"must be finite and > 0; rows {_row_list(bad)}", "latency")
    closed = df["concurrency"].gt(0) if "concurrency" in df else pd.Series(False, df.index)
    fill = df["rps"].isna() & closed
    if fill.any():
        df.loc[fill, "rps"] = df.loc[fill, "concurrency"] / df.loc[fill, "latency"]
    rps = df["rps"]
    bad = ~(np.isfinite(rps) & (rps >= 0))
    if bad.any():
        raise IngestError(
            path,
            f"must be finite and >= 0 (empty only with concurrency); rows {_row_list(bad)}",
            "rps",
        )
    known = set(REQUIRED_COLUMNS) | set(OPTIONAL_COLUMNS)
    extra = [c for c in df.columns if c not in known]
    if extra:
        warnings.warn(f"{path}: columns kept as they are: {', '.join(extra)}", stacklevel=3)
    records = df.to_dict(orient="records")
    for i, row in enumerate(records):
        if not (isinstance(row.get("source"), str) and row["source"]):
            row["source"] = f"{path}#row[{i}]"
    return records, {"format": "sweep table", "model": None}


def _row_list(mask: pd.Series) -> str:
    rows = [str(i) for i in mask.index[mask.to_numpy()]]
    return ", ".join(rows[:10]) + (f" and {len(rows) - 10} more" if len(rows) > 10 else "")


def detect_format(path: str | Path) -> str:
    """A short description of what ``path`` holds, e.g. ``"guidellm v2 (0.8.1)"``.

    Raises
    ------
    IngestError
        If the file is not a supported format (the message names file and field).
    """
    return _rows(load_file(path), {})[1]["format"]


def load_sidecar(path: str | Path) -> dict:
    """Read a labels sidecar (YAML or JSON mapping; see the module docstring).

    Raises
    ------
    IngestError
        If it is not a mapping or uses unknown label names.
    """
    loaded = load_file(path)
    data = loaded.data
    if not isinstance(data, dict):
        raise IngestError(path, "a sidecar must be a mapping of labels")
    files = data.get("files", {})
    if not isinstance(files, dict):
        raise IngestError(path, "expected a mapping of file name → labels", "files")
    for where, labels in [("", data), *((f"files.{k}", v) for k, v in files.items())]:
        if not isinstance(labels, dict):
            raise IngestError(path, "expected a mapping of labels", where)
        bad = [k for k in labels if k not in LABELS and not (where == "" and k == "files")]
        if bad:
            raise IngestError(
                path, f"unknown label(s) {', '.join(map(str, bad))}; known: {', '.join(LABELS)}"
            )
    return data


def _sidecar_labels(sidecar: Mapping | None, path: str) -> dict:
    if not sidecar:
        return {}
    labels = {k: v for k, v in sidecar.items() if k != "files"}
    name = Path(path).name
    for pattern, extra in (sidecar.get("files") or {}).items():
        if fnmatch.fnmatch(name, str(pattern)) or fnmatch.fnmatch(path, str(pattern)):
            labels.update(extra)
    return labels


def read(
    path: str | Path,
    *,
    rate_tolerance: float = RATE_TOLERANCE,
    error_threshold: float = ERROR_THRESHOLD,
    **labels: Any,
) -> pd.DataFrame:
    """Read one benchmark file into the sweep table.

    Parameters
    ----------
    path : str or Path
        A GuideLLM report (JSON, gzip JSON, YAML, CSV), a ``vllm bench serve`` result (one
        object or JSON Lines), an SGLang ``bench_serving`` JSONL, or a sweep CSV/parquet.
    rate_tolerance, error_threshold : float
        Saturation thresholds: achieved / target rate below ``rate_tolerance`` and errored
        (or excess incomplete) requests above ``error_threshold`` of the total flag a row.
    **labels
        Configuration labels (:data:`LABELS`); None values are ignored.

    Returns
    -------
    pandas.DataFrame
        One row per benchmark/run in the sweep schema (:data:`ROW_COLUMNS` first);
        ``attrs`` holds ``source`` (the path) and ``format``.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    IngestError
        (a ``ValueError``) naming the file and the field, for anything malformed.
    """
    unknown = [k for k in labels if k not in LABELS]
    if unknown:
        raise TypeError(f"unknown label(s) {', '.join(unknown)}; known: {', '.join(LABELS)}")
    loaded = load_file(path)
    thresholds = {"rate_tolerance": rate_tolerance, "error_threshold": error_threshold}
    rows, info = _rows(loaded, thresholds)
    if labels.get("cell") is not None:
        _check_cell_label(str(labels["cell"]), rows, info, loaded.path)
    df = _frame(rows, {k: v for k, v in labels.items() if v is not None}, info, loaded.path)
    df.attrs["source"] = loaded.path
    df.attrs["format"] = info["format"]
    return df


def _check_cell_label(cell: str, rows: list[dict], info: dict, path: str) -> None:
    """A ``cell`` label must be a name or a whole ``<prefill>x<decode>``, and may not merge
    the several workloads of a sweep table into one cell."""
    if re.fullmatch(r"\s*\d*\s*[xX]\s*\d*\s*", cell) and not re.fullmatch(
        r"\s*\d+\s*[xX]\s*\d+\s*", cell
    ):
        raise ValueError(
            f"--cell {cell}: not '<prefill>x<decode>' — give both token counts (e.g. 1024x256) "
            "or a name for the workload"
        )
    if info.get("format") != "sweep table":
        return  # one benchmark file is one workload
    own = {str(r["cell"]) for r in rows if not _nan(r.get("cell"))}
    tokens = {(r.get("prefill"), r.get("decode")) for r in rows}
    found = sorted(own) if own else [f"{p:g}x{g:g}" for p, g in sorted(tokens)]
    if len(found) > 1:
        shown = ", ".join(found[:6]) + (" …" if len(found) > 6 else "")
        raise ValueError(
            f"--cell {cell}: would give one label to the {len(found)} workloads of {path} "
            f"({shown}) — omit --cell (a sweep table keeps its own cells)"
        )


def _nan(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _frame(rows: list[dict], labels: dict, info: dict, path: str) -> pd.DataFrame:
    for row in rows:
        file_k = row.get("k")
        if "k" in labels and not _nan(file_k) and int(labels["k"]) != int(file_k):
            raise IngestError(
                row.get("source", path),
                f"k = {labels['k']} was given but the file says k = {int(file_k)} "
                "(from its spec-decode counters or its k column)",
                "k",
            )
        for key, value in labels.items():
            row[key] = value
        if _nan(row.get("verifier")) and info.get("model"):
            row["verifier"] = info["model"]
        if _nan(row.get("k")):
            row["k"] = 0 if _nan(row.get("drafter")) or row.get("drafter") == "none" else None
        if _nan(row.get("k")):
            raise IngestError(
                row.get("source", path),
                f"drafter {row['drafter']!r} given without the draft length k (pass k)",
                "k",
            )
        if int(row["k"]) == 0 and _nan(row.get("drafter")):
            row["drafter"] = "none"
        _alpha(row, path)
    df = pd.DataFrame(rows)
    for col in ROW_COLUMNS:
        if col not in df.columns:
            df[col] = np.nan
    if info.get("format") != "sweep table" and df["cell"].isna().any():
        # one workload per benchmark file unless told otherwise: label it by the file's
        # median lengths (real prompts vary a little from point to point). Sweep tables keep
        # their own cells, or get validate_sweeps' per-row default.
        p = int(np.rint(df["prefill"].astype(float).median()))
        g = int(np.rint(df["decode"].astype(float).median()))
        df["cell"] = df["cell"].astype(object).where(df["cell"].notna(), f"{p}x{g}")
    for col in df.columns:
        if col in _NUMERIC_COLUMNS:
            df[col] = pd.to_numeric(df[col], errors="coerce").astype(float)
    sat = df["saturated"].astype(object)
    df["saturated"] = sat.map(
        lambda v: str(v).strip().lower() in ("true", "1", "1.0", "yes") if not _nan(v) else False
    ).astype(bool)
    reason = df["saturation_reason"].astype(object)
    df["saturation_reason"] = reason.where(reason.notna(), "").astype(str)
    rest = [c for c in df.columns if c not in ROW_COLUMNS]
    return df[[*ROW_COLUMNS, *rest]].reset_index(drop=True)


def _alpha(row: dict, path: str) -> None:
    k = int(row["k"])
    if k == 0:
        row["alpha_source"] = "dense"
        return
    if not _nan(row.get("alpha")):
        row["alpha_source"] = "given"
        return
    for col, fn, label in (
        ("acceptance_marginal", laws.alpha_from_marginal, "marginal"),
        ("acceptance_length", laws.alpha_from_acceptance_length, "acceptance_length"),
    ):
        value = row.get(col)
        if _nan(value):
            continue
        try:
            row["alpha"] = float(fn(float(value), k))
        except ValueError as exc:
            raise IngestError(
                row.get("source", path), f"= {value!r} with k = {k}: {exc}", col
            ) from None
        row["alpha_source"] = label
        return
    row["alpha_source"] = "unknown"


def ingest_files(
    paths: Iterable[str | Path],
    *,
    verifier: str | None = None,
    drafter: str | None = None,
    hardware: str | None = None,
    alpha: float | None = None,
    acceptance_length: float | None = None,
    k: int | None = None,
    cell: str | None = None,
    tp: int | None = None,
    sidecar: str | Path | Mapping | None = None,
    skip_invalid: bool = False,
    rate_tolerance: float = RATE_TOLERANCE,
    error_threshold: float = ERROR_THRESHOLD,
) -> pd.DataFrame:
    """Read benchmark files and label them into one sweep table.

    Parameters
    ----------
    paths : iterable of str or Path
        Files (any format :func:`read` accepts).
    verifier, drafter, hardware : str, optional
        Configuration labels. ``verifier`` defaults to the served model name in the file;
        ``hardware`` must come from here or the sidecar.
    alpha, acceptance_length : float, optional
        Per-token acceptance, or mean acceptance length (at most one of the two).
    k : int, optional
        Draft length (0 = dense; defaults to 0 when no drafter is named).
    cell : str, optional
        Workload label (default: ``"<prefill>x<decode>"`` from each file's median lengths).
    tp : int, optional
        Tensor-parallel degree.
    sidecar : path or mapping, optional
        Labels file (see the module docstring); keyword arguments override it.
    skip_invalid : bool
        Skip files that cannot be read, with a warning, instead of raising. Skipped files
        and their errors are listed in ``attrs["skipped"]``.
    rate_tolerance, error_threshold : float
        Saturation thresholds (see :func:`read`).

    Returns
    -------
    pandas.DataFrame
        The rows of all files; ``attrs["files"]`` lists ``(path, format, rows)``.

    Raises
    ------
    ValueError
        If labels conflict or ``hardware`` is missing; :class:`IngestError` for bad files.
    FileNotFoundError
        If a file does not exist.
    """
    if alpha is not None and acceptance_length is not None:
        raise ValueError("give alpha or acceptance_length, not both")
    if isinstance(sidecar, str | Path):
        sidecar = load_sidecar(sidecar)
    given = {
        "verifier": verifier,
        "drafter": drafter,
        "hardware": hardware,
        "alpha": alpha,
        "acceptance_length": acceptance_length,
        "k": k,
        "cell": cell,
        "tp": tp,
    }
    given = {key: v for key, v in given.items() if v is not None}
    frames, files, skipped = [], [], []
    for path in paths:
        labels = {**_sidecar_labels(sidecar, str(path)), **given}
        try:
            df = read(
                path, rate_tolerance=rate_tolerance, error_threshold=error_threshold, **labels
            )
        except (IngestError, FileNotFoundError) as exc:
            if not skip_invalid:
                raise
            warnings.warn(f"skipped: {exc}", stacklevel=2)
            skipped.append((str(path), str(exc)))
            continue
        if df["hardware"].isna().any():
            raise ValueError(
                f"{path}: hardware not given — a benchmark file cannot know it; pass "
                "hardware= (--hardware) or put it in the sidecar"
            )
        if df["verifier"].isna().any():
            raise ValueError(f"{path}: verifier not given and the file names no model")
        acc = [n for n in ("alpha", "acceptance_length") if labels.get(n) is not None]
        if acc and (df["k"] == 0).all():
            option = "--" + acc[0].replace("_", "-")
            raise ValueError(
                f"{option} {labels[acc[0]]}: {path} holds dense runs only (k = 0: no drafter "
                "or draft length given, no spec-decode counters in the file) — give --drafter "
                f"and --k for a speculative-decoding run, or omit {option}"
            )
        frames.append(df)
        files.append((str(path), df.attrs["format"], len(df)))
    if not frames:
        raise ValueError(
            "no file could be read" + (f" ({len(skipped)} skipped)" if skipped else "")
        )
    out = pd.concat(frames, ignore_index=True)
    out.attrs["files"] = files
    out.attrs["skipped"] = skipped
    out.attrs["source"] = ", ".join(f for f, _, _ in files)
    return out
