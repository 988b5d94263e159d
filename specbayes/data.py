"""The sweep table: schema, validation, saturation flags and group labels (docs/model.md, Data).

One row per sweep point (one load level of one configuration). Every reader — the GuideLLM
and ``vllm bench`` ingesters, the simulator, plain CSV/parquet — produces this table, and
every fit starts with :func:`validate_sweeps`, which

* raises **one** :class:`SweepValidationError` listing every violated rule with the rows
  (index labels) and field concerned — bad input is never silently repaired;
* derives the per-token ``alpha`` from marginal acceptance or acceptance length where only
  those were measured (``alpha_source`` says which);
* tells a *set* alpha from a *measured* one (:func:`sweep_labels`): a given alpha that varies
  point to point along one configuration's load sweep is marked ``alpha_source =
  "measured"`` and the sweep stays one configuration (rules below);
* warns (one :class:`UserWarning`) when configurations are left with a single load level —
  their load-independent and load-dependent costs C1, C2 cannot be separated;
* flags saturated points by the rules below and moves them, with their reason, into
  ``excluded`` — nothing leaves the table without being listed.

Saturation rules (a row is excluded when any holds)
----------------------------------------------------
``flagged``
    the ``saturated`` column is true (set by the tool, the ingester or the simulator; the
    ``saturation_reason`` column, when present, is carried into the report).
``preempted``
    ``preemptions > 0``: the KV cache overflowed, latency is no longer the steady state.
``rate_shortfall``
    open loop: achieved ``rps`` below ``target_tolerance`` (default 0.9) × ``target_rps`` —
    the server could not keep up with the offered load.
``latency_growth``
    within one sweep (:func:`sweep_labels`; ≥ 4 points ordered by load), each point from
    the fourth on is compared with the unsaturated law fitted to the lighter-load points
    not flagged before it — ``1/L`` linear in ``rps`` for open loop
    (``1/L = 1/C1 − rps·C2/C1``, slope ≤ 0), ``L`` linear in ``concurrency`` for closed
    loop (slope ≥ 0; a fitted slope of the wrong sign is noise and is set to 0). A point
    whose latency exceeds ``growth_factor`` (default 2) × that prediction is past the
    unsaturated regime (a knee), and is left out of the fits for the points after it.

``alpha_source`` values
-----------------------
``given``
    alpha is a setting of the configuration (simulated or forced acceptance): rows of one
    configuration at different alphas are different sweeps.
``measured``
    alpha was given per point but measured (e.g. derived by the user from acceptance), so it
    varies a little along the sweep: it is not part of the sweep's key, and the sweep's alpha
    is the mean of its rows. Set by :func:`validate_sweeps` (or by the user).
``marginal`` / ``acceptance_length``
    alpha derived here from ``acceptance_marginal`` / ``acceptance_length`` (measured).
``unknown``
    an SD row without acceptance information (fits that infer alpha).
``dense``
    a ``k = 0`` row.

Set or measured? Within one group (verifier, drafter, hardware, cell, k) of rows that have
an ``alpha`` but no ``alpha_source`` of their own, alpha is a setting (``given``) when it is
constant, when every distinct value recurs at two or more load levels (forced-acceptance
sweeps; closed- and open-loop levels both count), or when its values lie more than
:data:`MEASURED_ALPHA_SPREAD` (0.05) apart; otherwise the group's alphas are ``measured``.
An explicit
``alpha_source`` in the input is kept as it is (``"given"`` with an alpha varying point to
point leaves one-row configurations, and the warning says so).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from specbayes import laws
from specbayes.latency_growth import _growth_flags

__all__ = [
    "CONFIG_COLUMNS",
    "OPTIONAL_COLUMNS",
    "PERCENTILE_LEVELS",
    "REQUIRED_COLUMNS",
    "TEXT_COLUMNS",
    "TIMING_METRICS",
    "SweepTable",
    "SweepValidationError",
    "cell_label",
    "read_sweeps",
    "strip_labels",
    "sweep_labels",
    "validate_sweeps",
]

#: Columns every sweep table must have.
REQUIRED_COLUMNS: dict[str, str] = {
    "verifier": "verifier (target) model name, e.g. Qwen3-8B",
    "hardware": "accelerator name, e.g. H100-SXM",
    "prefill": "mean prompt tokens per request",
    "decode": "mean output tokens per request",
    "k": "draft length (0 = no speculation)",
    "rps": "achieved request rate (req/s)",
    "latency": "mean end-to-end request latency (s)",
}

#: Percentiles kept of each timing metric (``<metric>_p<level>`` columns, seconds).
PERCENTILE_LEVELS: tuple[int, ...] = (50, 90, 95, 99)

#: Timing metrics with a mean column (except latency, whose mean is required) and percentile
#: columns; the percentiles are only those the tool reports — never interpolated.
TIMING_METRICS: tuple[str, ...] = ("latency", "ttft", "itl", "tpot", "chunk_itl")

#: Columns that are optional; readers use exactly these names and units.
OPTIONAL_COLUMNS: dict[str, str] = {
    "alpha": "per-token acceptance probability in (0, 1]; required where k > 0 unless derivable",
    "drafter": "draft model name ('none' for dense rows)",
    "cell": "workload label grouping the rows of one (prefill, decode) workload",
    "tp": "tensor-parallel degree",
    "latency_p50": "median (p50) of end-to-end latency over requests (s)",
    "latency_p90": "90th percentile of end-to-end latency over requests (s)",
    "latency_p95": "95th percentile of end-to-end latency over requests (s)",
    "latency_p99": "99th percentile of end-to-end latency over requests (s)",
    "ttft": "mean time to first token over requests (s)",
    "ttft_p50": "median (p50) of time to first token (s)",
    "ttft_p90": "90th percentile of time to first token (s)",
    "ttft_p95": "95th percentile of time to first token (s)",
    "ttft_p99": "99th percentile of time to first token (s)",
    "itl": (
        "mean inter-token latency (s): time per output token after the first, "
        "(last token − first token) / (output tokens − 1) — GuideLLM's inter_token_latency_ms "
        "(weighted by output tokens − 1), vLLM's and SGLang's TPOT (a plain mean over requests)"
    ),
    "itl_p50": "median (p50) of that inter-token latency (s)",
    "itl_p90": "90th percentile of that inter-token latency (s)",
    "itl_p95": "95th percentile of that inter-token latency (s)",
    "itl_p99": "99th percentile of that inter-token latency (s)",
    "tpot": (
        "mean time per output token *including* the first (s), latency / output tokens — "
        "GuideLLM's time_per_output_token_ms (vLLM's TPOT is ``itl`` here)"
    ),
    "tpot_p50": "median (p50) of that time per output token (s)",
    "tpot_p90": "90th percentile of that time per output token (s)",
    "tpot_p95": "95th percentile of that time per output token (s)",
    "tpot_p99": "99th percentile of that time per output token (s)",
    "chunk_itl": (
        "mean gap between streamed chunks, pooled over all gaps (s) — vLLM's and SGLang's "
        "ITL; under speculative decoding one chunk carries several tokens (≈ the step time)"
    ),
    "chunk_itl_p50": "median (p50) of the gaps between streamed chunks (s)",
    "chunk_itl_p90": "90th percentile of the gaps between streamed chunks (s)",
    "chunk_itl_p95": "95th percentile of the gaps between streamed chunks (s)",
    "chunk_itl_p99": "99th percentile of the gaps between streamed chunks (s)",
    "n_requests": "successful requests in the measurement window",
    "n_errored": "errored requests in the window",
    "n_incomplete": "requests cancelled or unfinished at the end of the window",
    "target_rps": "offered request rate (req/s) of an open-loop point",
    "concurrency": "closed-loop streams N (fixed concurrency); empty for open loop",
    "mean_batch": "time-averaged running batch (requests)",
    "mean_in_system": "time-averaged requests in the system, queued or running (simulator)",
    "preemptions": "KV-cache preemptions during the window",
    "saturated": "true when the point is saturated (tool, ingester or simulator says so)",
    "saturation_reason": "why it was flagged",
    "acceptance_marginal": "accepted drafts / drafted tokens (what engines report)",
    "acceptance_length": "mean tokens committed per SD cycle, 1 + accepted / drafts",
    "alpha_hat": "per-token acceptance measured in the window (simulator)",
    "alpha_source": (
        "'given' (a setting), 'measured' (per point), 'marginal', 'acceptance_length', "
        "'unknown' or 'dense' (see the module docstring)"
    ),
    "latency_source": "how latency was obtained (e.g. 'mean_e2el', 'littles_law', 'approx')",
    "strategy": "load strategy: synchronous, throughput, constant, poisson, concurrent",
    "seed": "simulator seed",
    "sweep_index": "position of the point within its simulated sweep",
    "source": "file or generator the row came from",
    "sweep": "label of one configuration swept over load (default: derived, see sweep_labels)",
    "verifier_params": "verifier parameters (prior scale of its costs; default: the catalog)",
    "experts_per_token": "MoE: experts routed per token m (default: the catalog)",
    "num_experts": "MoE: experts per layer M (default: the catalog)",
}

#: Columns holding labels or text (every other schema column is numeric).
TEXT_COLUMNS = frozenset(
    {
        "verifier",
        "hardware",
        "drafter",
        "cell",
        "saturated",
        "saturation_reason",
        "alpha_source",
        "latency_source",
        "strategy",
        "source",
        "sweep",
    }
)

#: Columns that identify one configuration (one sweep over load).
CONFIG_COLUMNS: tuple[str, ...] = ("verifier", "drafter", "hardware", "cell", "alpha", "k")

#: ``alpha_source`` values of an alpha measured per point (left out of the sweep key).
MEASURED_SOURCES = ("measured", "marginal", "acceptance_length")

_NUMERIC = [c for c in (*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS) if c not in TEXT_COLUMNS]


def strip_labels(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with blanks around column names and text labels removed (a copy).

    Spreadsheets pad cells: ``" V8B "`` and ``"V8B"`` must be one verifier, not two, and a
    header ``" latency "`` the latency column.
    """
    names = [c.strip() if isinstance(c, str) else c for c in df.columns]
    text = [c for c in df.columns if c in TEXT_COLUMNS or str(c).strip() in TEXT_COLUMNS]
    if names == list(df.columns) and not text:
        return df
    out = df.copy()
    for col in text:
        values = out[col]
        if values.dtype == object or pd.api.types.is_string_dtype(values):
            out[col] = values.map(lambda v: v.strip() if isinstance(v, str) else v)
    out.columns = names
    out.attrs = dict(df.attrs)
    return out


class SweepValidationError(ValueError):
    """Invalid sweep table: the message lists each violated rule, its field and its rows."""

    def __init__(self, source: str, violations: list[tuple[str, str, list]]) -> None:
        self.source = source
        self.violations = violations
        lines = [f"{source}: invalid sweep table ({len(violations)} rule(s) violated)"]
        for rule, field, rows in violations:
            shown = ", ".join(str(r) for r in rows[:10])
            more = f" and {len(rows) - 10} more" if len(rows) > 10 else ""
            lines.append(f"  - field '{field}': {rule} — rows [{shown}{more}]")
        super().__init__("\n".join(lines))


@dataclass(frozen=True)
class SweepTable:
    """A validated sweep table.

    Attributes
    ----------
    data : pandas.DataFrame
        Rows fit for modelling, original index labels kept.
    excluded : pandas.DataFrame
        Rows left out (saturated, duplicates), with ``reason`` (the full text, including
        the tool's own words) and ``rule`` (the rule names joined by ``+``).
    """

    data: pd.DataFrame
    excluded: pd.DataFrame

    def summary(self) -> str:
        """One line per exclusion reason, for printing."""
        if self.excluded.empty:
            return f"{len(self.data)} rows kept, none excluded"
        key = "rule" if "rule" in self.excluded else "reason"
        counts = self.excluded[key].value_counts()
        parts = ", ".join(f"{n} {reason}" for reason, n in counts.items())
        return f"{len(self.data)} rows kept, {len(self.excluded)} excluded ({parts})"


def cell_label(prefill: Iterable[float], decode: Iterable[float]) -> pd.Series:
    """Default workload label ``"<prefill>x<decode>"`` from rounded token counts."""
    p = np.rint(np.asarray(prefill, dtype=float)).astype(int)
    g = np.rint(np.asarray(decode, dtype=float)).astype(int)
    return pd.Series([f"{a}x{b}" for a, b in zip(p, g, strict=True)])


def sweep_labels(df: pd.DataFrame) -> pd.Series:
    """Label of the sweep (one configuration over load) each row belongs to.

    Simulated and forced-acceptance sweeps are identified by :data:`CONFIG_COLUMNS`
    (alpha is a setting). Where alpha was *measured* per point (``alpha_source`` is
    ``measured``, ``marginal`` or ``acceptance_length``) it varies a little along the sweep,
    so it is left out of the key (:func:`validate_sweeps` decides which given alphas are
    measured). Open- and closed-loop rows never share a sweep. An explicit ``sweep``
    column, where filled, wins.
    """
    measured = df.get("alpha_source", pd.Series("", index=df.index)).isin(MEASURED_SOURCES)
    alpha = (
        df["alpha"].map(lambda a: "-" if pd.isna(a) else f"{a:.6g}").where(~measured, "measured")
    )
    closed = np.where(df["concurrency"].notna(), "closed", "open")
    label = (
        df["verifier"]
        + "|"
        + df["drafter"]
        + "|"
        + df["hardware"]
        + "|"
        + df["cell"]
        + "|k="
        + df["k"].astype(str)
        + "|alpha="
        + alpha
        + "|"
        + closed
    )
    if "sweep" in df:
        label = df["sweep"].where(df["sweep"].notna() & (df["sweep"].astype(str) != ""), label)
    return label.astype(str)


def read_sweeps(path: str | Path) -> pd.DataFrame:
    """Read a sweep table from CSV (optionally gzip) or parquet.

    The frame is returned as read (validate it with :func:`validate_sweeps`); its
    ``attrs["source"]`` holds the path so validation errors can name the file.

    Raises
    ------
    FileNotFoundError
        If the file does not exist.
    ValueError
        If the path is a folder, the suffix is not ``.csv``, ``.csv.gz`` or ``.parquet``, or
        the file cannot be read as such (empty, binary, truncated, semicolon-separated);
        the message names the file and says what to do.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such sweep file — check the path")
    if path.is_dir():
        raise ValueError(f"{path}: is a folder — give a sweep file (.csv, .csv.gz or .parquet)")
    name = path.name.lower()
    if name.endswith(".parquet") or name.endswith(".pq"):
        df = _read_parquet(path)
    elif name.endswith(".csv") or name.endswith(".csv.gz"):
        df = _read_csv(path)
    else:
        raise ValueError(
            f"{path}: unsupported sweep file type — use .csv, .csv.gz or .parquet (benchmark "
            "reports: `specbayes ingest`)"
        )
    df.attrs["source"] = str(path)
    return df


def _read_parquet(path: Path) -> pd.DataFrame:
    try:
        return pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises its own types for corrupt files
        text = " ".join(str(exc).split()).split(". ")[0][:160]
        raise ValueError(
            f"{path}: unreadable parquet file ({text}) — write it again, or give a CSV"
        ) from None


def _read_csv(path: Path) -> pd.DataFrame:
    if not path.name.lower().endswith(".gz"):
        with open(path, "rb") as fh:
            head = fh.read(4096)
        try:
            head.decode("utf-8")
        except UnicodeDecodeError as exc:
            binary = b"\x00" in head or exc.start < len(head) - 4  # not a cut multi-byte char
        else:
            binary = b"\x00" in head
        if binary:
            raise ValueError(
                f"{path}: a binary file, not CSV text — give the sweep table as comma-separated "
                "text (or .parquet)"
            )
    try:
        df = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise ValueError(
            f"{path}: empty file (no header, no rows) — a sweep table needs a header row with "
            f"the columns {', '.join(REQUIRED_COLUMNS)}"
        ) from None
    except (UnicodeDecodeError, pd.errors.ParserError, EOFError, OSError, ValueError) as exc:
        text = " ".join(str(exc).split())[:120]
        raise ValueError(
            f"{path}: not a readable CSV ({text}) — give a comma-separated text file (or .csv.gz)"
        ) from None
    for mark, name in ((";", "semicolon"), ("\t", "tab")):
        if len(df.columns) == 1 and mark in str(df.columns[0]):
            raise ValueError(
                f"{path}: {name}-separated, but a sweep table is comma-separated — save it "
                "with ',' as the separator (and '.' as the decimal mark)"
            )
    return df


def _coerce_numeric(df: pd.DataFrame, violations: list) -> None:
    for col in _NUMERIC:
        if col not in df.columns:
            continue
        raw = df[col]
        num = pd.to_numeric(raw, errors="coerce")
        bad = num.isna() & raw.notna() & (raw.astype(str).str.strip() != "")
        if bad.any():
            violations.append(("must be numeric", col, list(df.index[bad])))
        df[col] = num.astype(float)


def _rows(mask: pd.Series) -> list:
    return list(mask.index[mask.to_numpy()])


def _check_values(df: pd.DataFrame, violations: list) -> None:
    def rule(mask: pd.Series, text: str, field: str) -> None:
        if mask.any():
            violations.append((text, field, _rows(mask)))

    rule(
        ~(df["latency"] > 0) | ~np.isfinite(df["latency"]),
        "latency must be > 0 and finite",
        "latency",
    )
    rule(~(df["prefill"] >= 1), "prefill must be >= 1 token", "prefill")
    rule(~(df["decode"] >= 1), "decode must be >= 1 token", "decode")
    rule(~(df["k"] >= 0), "k must be >= 0", "k")
    rule((df["k"] >= 0) & (df["k"] != np.round(df["k"])), "k must be an integer", "k")
    closed = df["concurrency"].notna() if "concurrency" in df else pd.Series(False, df.index)
    rule(
        (df["rps"] < 0) | (df["rps"].isna() & ~closed) | np.isinf(df["rps"]),
        "rps must be >= 0 and finite (may be empty only for closed-loop rows)",
        "rps",
    )
    if "concurrency" in df:
        rule(
            closed & ~(df["concurrency"] > 0), "concurrency must be > 0 where given", "concurrency"
        )
    if "target_rps" in df:
        rule(df["target_rps"] < 0, "target_rps must be >= 0", "target_rps")
    if "concurrency" in df:
        _littles_law(df, closed, rule)
    _check_timings(df, rule)
    for col in ("verifier", "hardware"):
        rule(df[col].isna() | (df[col].astype(str).str.strip() == ""), "must not be empty", col)
    if "alpha" in df:
        a = df["alpha"]
        outside = a.notna() & ~((a > 0) & (a <= 1))
        percent = outside.any() and bool(((a[outside] > 1) & (a[outside] <= 100)).all())
        hint = " (values up to 100 look like percentages: divide by 100)" if percent else ""
        rule(outside, f"alpha must lie in (0, 1]{hint}", "alpha")
    if "acceptance_marginal" in df:
        r = df["acceptance_marginal"]
        rule(
            r.notna() & ~((r > 0) & (r <= 1)),
            "acceptance_marginal must lie in (0, 1]",
            "acceptance_marginal",
        )
    if "acceptance_length" in df:
        ell = df["acceptance_length"]
        rule(
            ell.notna() & ~((ell > 1) & (ell <= df["k"] + 1 + 1e-9)),
            "acceptance_length must lie in (1, k + 1]",
            "acceptance_length",
        )


#: Relative slack of the percentile order check: tools print percentiles of one sample, so
#: any inversion is real, but a CSV round trip may perturb the last digit.
PERCENTILE_ORDER_RTOL = 1e-9


def _check_timings(df: pd.DataFrame, rule) -> None:
    """Timing means and percentiles: finite where given, percentiles non-decreasing.

    The readers' rules: end-to-end latency > 0; TTFT and the per-token times >= 0 (vLLM
    writes a TPOT of 0 when every output is a single token). An empty cell means "not
    reported" and passes; only values present are compared, so a file with p50 and p99 but
    no p90 is checked p50 <= p99.
    """
    for metric in TIMING_METRICS:
        names = [f"{metric}_p{level}" for level in PERCENTILE_LEVELS]
        columns = [c for c in (metric, *names) if c in df and c != "latency"]
        for col in columns:
            _positive_where_given(df[col], col, rule, strict=metric == "latency")
        present = [c for c in names if c in df]
        for i, low in enumerate(present):
            for high in present[i + 1 :]:
                a, b = df[low], df[high]
                rule(
                    a.notna() & b.notna() & (a > b * (1 + PERCENTILE_ORDER_RTOL)),
                    f"{low} must be <= {high} (percentiles p50 <= p90 <= p95 <= p99)",
                    low,
                )


def _positive_where_given(v: pd.Series, col: str, rule, *, strict: bool) -> None:
    ok = ((v > 0) if strict else (v >= 0)) & np.isfinite(v)
    rule(v.notna() & ~ok, f"{col} must be {'>' if strict else '>='} 0 and finite", col)


#: Closed loop: ``rps × latency / concurrency`` above this breaks Little's law (N = λ·L; the
#: requests in flight can never exceed the N streams, so the ratio is at most ~1).
LITTLE_MAX_RATIO = 10.0


def _littles_law(df: pd.DataFrame, closed: pd.Series, rule) -> None:
    """Closed-loop rows whose rps × latency is far above N: latency (or rps) in wrong units."""
    with np.errstate(all="ignore"):
        ratio = df["rps"] * df["latency"] / df["concurrency"]
    bad = closed & (ratio > LITTLE_MAX_RATIO)
    if not bad.any():
        return
    typical = float(np.median(ratio[bad]))
    hint = (
        "latency looks like milliseconds — give seconds (divide by 1000)"
        if 300 <= typical <= 3000
        else "check the units: latency in seconds, rps in requests per second"
    )
    rule(
        bad,
        f"Little's law fails: rps × latency ≈ {typical:.3g} × concurrency (closed loop: at most "
        f"~1 ×); {hint}",
        "latency",
    )


def _explicit_alpha_source(df: pd.DataFrame) -> pd.Series:
    """Rows whose ``alpha_source`` the input table fills (before any default is derived)."""
    if "alpha_source" not in df:
        return pd.Series(False, index=df.index)
    src = df["alpha_source"]
    return src.notna() & (src.astype(str).str.strip() != "")


def _resolve_alpha(df: pd.DataFrame, allow_unknown_alpha: bool, violations: list) -> None:
    if "alpha" not in df:
        df["alpha"] = np.nan
    given = df["alpha"].notna()
    source = pd.Series(np.where(given, "given", ""), index=df.index, dtype=object)
    if "alpha_source" in df:
        source = df["alpha_source"].where(_explicit_alpha_source(df) & given, source)
    spec = df["k"] > 0
    for col, fn, label in (
        ("acceptance_marginal", laws.alpha_from_marginal, "marginal"),
        ("acceptance_length", laws.alpha_from_acceptance_length, "acceptance_length"),
    ):
        if col not in df:
            continue
        use = spec & df["alpha"].isna() & df[col].notna()
        if use.any():
            df.loc[use, "alpha"] = fn(df.loc[use, col].to_numpy(), df.loc[use, "k"].to_numpy())
            source[use] = label
    missing = spec & df["alpha"].isna()
    if missing.any():
        if allow_unknown_alpha:
            source[missing] = "unknown"
        else:
            violations.append(
                (
                    "alpha required where k > 0 (give alpha, acceptance_marginal or "
                    "acceptance_length, or fit with alpha inferred)",
                    "alpha",
                    _rows(missing),
                )
            )
    source[~spec] = "dense"
    df.loc[~spec, "alpha"] = np.nan
    df["alpha_source"] = source


def _fill_labels(df: pd.DataFrame) -> None:
    if "drafter" not in df:
        df["drafter"] = np.nan
    df["drafter"] = df["drafter"].astype(object)
    dense = df["k"] == 0
    df.loc[dense, "drafter"] = "none"
    df.loc[~dense & df["drafter"].isna(), "drafter"] = "unspecified"
    if "cell" not in df:
        df["cell"] = np.nan
    df["cell"] = df["cell"].astype(object)
    unlabeled = df["cell"].isna()
    if unlabeled.any():
        df.loc[unlabeled, "cell"] = cell_label(
            df.loc[unlabeled, "prefill"], df.loc[unlabeled, "decode"]
        ).to_numpy()
    for col in ("verifier", "hardware", "drafter", "cell"):
        df[col] = df[col].astype(str)
    df["k"] = df["k"].astype(int)
    if "concurrency" not in df:
        df["concurrency"] = np.nan
    closed = df["concurrency"].notna() & df["rps"].isna()
    df.loc[closed, "rps"] = df.loc[closed, "concurrency"] / df.loc[closed, "latency"]


def _load_level(df: pd.DataFrame) -> pd.Series:
    """A row's load level, ``closed:<concurrency>`` or ``open:<rps>``."""
    closed = df["concurrency"].notna()
    load = pd.Series(np.where(closed, df["concurrency"], df["rps"]), index=df.index).round(9)
    return pd.Series(np.where(closed, "closed:", "open:"), index=df.index) + load.astype(str)


#: Widest spread of a per-point alpha along one sweep that is read as measurement noise
#: (the acceptance measured at each load varies in the second or third decimal); alphas
#: further apart are separate settings, each its own sweep.
MEASURED_ALPHA_SPREAD = 0.05


def _mark_measured_alpha(df: pd.DataFrame, explicit: pd.Series) -> None:
    """Set ``alpha_source = "measured"`` where a given alpha varies along a load sweep.

    Only rows with an ``alpha`` and no ``alpha_source`` of their own (``explicit`` false) are
    looked at, per group (verifier, drafter, hardware, cell, k): their alpha is a setting
    when the group has one value, when every distinct value recurs at two or more load
    levels (forced-acceptance sweeps), or when its values lie more than
    :data:`MEASURED_ALPHA_SPREAD` apart (different settings, each at its own load); otherwise
    it was measured per point. Load levels of both loops count, as one configuration's
    closed-loop point (a GuideLLM synchronous run) and open-loop rates are one sweep of the
    model (``model.design.configuration_key``).
    """
    cand = (df["alpha_source"] == "given") & ~explicit.reindex(df.index, fill_value=False)
    if not cand.any():
        return
    keys = ["verifier", "drafter", "hardware", "cell", "k"]
    rows = df.loc[cand, keys].assign(
        _alpha=df.loc[cand, "alpha"].map(lambda a: f"{a:.6g}").to_numpy(),  # label rounding
        _load=_load_level(df[cand]).to_numpy(),
    )
    values = rows.groupby(keys)["_alpha"].transform("nunique").to_numpy()
    rows["_levels"] = rows.groupby([*keys, "_alpha"])["_load"].transform("nunique").to_numpy()
    fewest = rows.groupby(keys)["_levels"].transform("min").to_numpy()
    alpha = df.loc[cand, "alpha"].groupby([df.loc[cand, c] for c in keys])
    spread = (alpha.transform("max") - alpha.transform("min")).to_numpy()
    close = spread <= MEASURED_ALPHA_SPREAD
    measured = np.flatnonzero(cand.to_numpy())[(values >= 2) & (fewest < 2) & close]
    df.iloc[measured, df.columns.get_loc("alpha_source")] = "measured"


def _warn_single_load(data: pd.DataFrame) -> None:
    """One warning naming the configurations (sweep labels, either loop) with one load level."""
    if data.empty:
        return
    config = data["sweep"].str.replace(r"\|(open|closed)$", "", regex=True)
    levels = _load_level(data).groupby(config).nunique()
    single = list(levels.index[levels < 2])
    if not single:
        return
    shown = "; ".join(single[:3]) + (f"; and {len(single) - 3} more" if len(single) > 3 else "")
    given = config.isin(single) & (data["k"] > 0) & (data["alpha_source"] == "given")
    hint = (
        "; if alpha was measured per point, leave alpha_source empty or set it to 'measured'"
        if given.any()
        else ""
    )
    warnings.warn(
        f"{len(single)} of {len(levels)} configurations have a single load level, so their "
        "load-independent and load-dependent costs C1, C2 cannot be separated and rest on "
        f"the prior: {shown}. Sweep at least two loads per configuration{hint}",
        UserWarning,
        stacklevel=3,
    )


def _duplicates(df: pd.DataFrame, violations: list) -> pd.Series:
    key = [*CONFIG_COLUMNS, "prefill", "decode", "rps", "concurrency"]
    keyed = pd.util.hash_pandas_object(df[key], index=False)
    dup = keyed.duplicated(keep=False)
    reason = pd.Series("", index=df.index, dtype=object)
    if not dup.any():
        return reason
    conflicting: list = []
    for _, rows in df[dup].groupby(keyed[dup], sort=False):
        if rows["latency"].nunique() > 1:
            conflicting.extend(rows.index)
        else:
            first = rows.index[0]
            for r in rows.index[1:]:
                reason[r] = f"duplicate of row {first}"
    if conflicting:
        violations.append(
            (
                "conflicting duplicates: same configuration and load, different latency",
                "latency",
                conflicting,
            )
        )
    return reason


def validate_sweeps(
    df: pd.DataFrame,
    *,
    source: str | None = None,
    allow_unknown_alpha: bool = False,
    target_tolerance: float = 0.9,
    growth_factor: float = 2.0,
) -> SweepTable:
    """Check a sweep table, derive alpha, and split off the rows unfit for modelling.

    Parameters
    ----------
    df : pandas.DataFrame
        Raw sweep rows (see :data:`REQUIRED_COLUMNS`, :data:`OPTIONAL_COLUMNS`).
    source : str, optional
        Name used in error messages (defaults to ``df.attrs["source"]`` or ``"sweeps"``).
    allow_unknown_alpha : bool
        Accept SD rows with no acceptance information (``alpha_source = "unknown"``), for
        models that infer alpha.
    target_tolerance : float
        ``rate_shortfall`` threshold: achieved / target below this flags the row.
    growth_factor : float
        ``latency_growth`` threshold (see the module docstring).

    Returns
    -------
    SweepTable
        ``data`` (kept rows, with ``alpha``, ``alpha_source``, ``drafter``, ``cell`` filled)
        and ``excluded`` (rows left out, with ``reason``).

    Warns
    -----
    UserWarning
        Once, when kept configurations have a single load level (see the module docstring).

    Raises
    ------
    SweepValidationError
        Listing every violated rule with its field and rows.
    """
    source = source or df.attrs.get("source", "sweeps")
    df = strip_labels(df)
    if len(df) == 0:
        raise SweepValidationError(source, [("table is empty", "*", [])])
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise SweepValidationError(
            source, [(f"required column missing ({REQUIRED_COLUMNS[c]})", c, []) for c in missing]
        )
    df = df.copy()
    violations: list[tuple[str, str, list]] = []
    _coerce_numeric(df, violations)
    if not violations:
        _check_values(df, violations)
    if violations:
        raise SweepValidationError(source, violations)
    explicit = _explicit_alpha_source(df)  # before _resolve_alpha fills the defaults
    _resolve_alpha(df, allow_unknown_alpha, violations)
    _fill_labels(df)
    _mark_measured_alpha(df, explicit)
    dup_reason = _duplicates(df, violations)
    if violations:
        raise SweepValidationError(source, violations)

    df["closed"] = df["concurrency"].notna()
    df["sweep"] = sweep_labels(df)
    reasons = {
        name: pd.Series(False, index=df.index)
        for name in ("flagged", "preempted", "rate_shortfall", "latency_growth")
    }
    if "saturated" in df:
        sat = df["saturated"]
        if sat.dtype == object:
            sat = sat.astype(str).str.strip().str.lower().isin(["true", "1", "yes"])
        reasons["flagged"] = sat.fillna(False).astype(bool)
    if "preemptions" in df:
        reasons["preempted"] = df["preemptions"].fillna(0) > 0
    if "target_rps" in df:
        reasons["rate_shortfall"] = (
            ~df["closed"]
            & (df["target_rps"] > 0)
            & (df["rps"] < target_tolerance * df["target_rps"])
        )
    candidate = ~(reasons["flagged"] | reasons["preempted"] | reasons["rate_shortfall"])
    candidate &= dup_reason == ""
    reasons["latency_growth"] = _growth_flags(df[candidate], growth_factor).reindex(
        df.index, fill_value=False
    )

    text = pd.Series("", index=df.index, dtype=object)
    rule = pd.Series("", index=df.index, dtype=object)
    for name, mask in reasons.items():
        rule = rule.where(~mask, rule + np.where(rule == "", "", "+") + name)
        label = name
        if name == "flagged" and "saturation_reason" in df:
            detail = df["saturation_reason"].astype(object).fillna("").astype(str)
            label = np.where(detail != "", "saturated: " + detail, "saturated")
        elif name == "flagged":
            label = "saturated"
        text = text.where(~mask, text + np.where(text == "", "", "; ") + label)
    text = text.where(dup_reason == "", dup_reason)
    rule = rule.where(dup_reason == "", "duplicate")
    out = text != ""
    excluded = df[out].assign(reason=text[out], rule=rule[out])
    kept = df[~out].drop(columns=["closed"])
    excluded = excluded.drop(columns=["closed"])
    kept.attrs["source"] = source
    _warn_single_load(kept)
    return SweepTable(data=kept, excluded=excluded)
