"""Shared pieces of the readers: the error type, checked field access, file loading, flags.

Every reader turns one benchmark (or one run) into a *row*: a plain dict whose keys are
sweep-schema columns (:data:`specbayes.data.REQUIRED_COLUMNS` /
:data:`specbayes.data.OPTIONAL_COLUMNS`). Field access goes through :class:`Fields`, so a
missing, non-numeric, NaN or out-of-range value becomes one :class:`IngestError` naming the
file and the full dotted path of the field — never a bare ``KeyError`` or a silent NaN.
"""

from __future__ import annotations

import gzip
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specbayes.data import PERCENTILE_LEVELS

__all__ = [
    "ERROR_THRESHOLD",
    "PERCENTILE_LEVELS",
    "RATE_TOLERANCE",
    "ROW_COLUMNS",
    "Fields",
    "IngestError",
    "LoadedFile",
    "check_number",
    "check_row",
    "flag",
    "load_file",
    "put_seconds",
]

#: Achieved / target rate below this flags an open-loop point as saturated (rate shortfall).
RATE_TOLERANCE: float = 0.9
#: Errored (or excess incomplete) requests above this fraction of the total flag a point.
ERROR_THRESHOLD: float = 0.05

#: Column order of the rows the readers produce (labels are added by the dispatcher).
ROW_COLUMNS: tuple[str, ...] = (
    "verifier",
    "drafter",
    "hardware",
    "cell",
    "tp",
    "k",
    "alpha",
    "prefill",
    "decode",
    "rps",
    "latency",
    "latency_p50",
    "latency_p90",
    "latency_p95",
    "latency_p99",
    "ttft",
    "ttft_p50",
    "ttft_p90",
    "ttft_p95",
    "ttft_p99",
    "itl",
    "itl_p50",
    "itl_p90",
    "itl_p95",
    "itl_p99",
    "tpot",
    "tpot_p50",
    "tpot_p90",
    "tpot_p95",
    "tpot_p99",
    "chunk_itl",
    "chunk_itl_p50",
    "chunk_itl_p90",
    "chunk_itl_p95",
    "chunk_itl_p99",
    "n_requests",
    "n_errored",
    "n_incomplete",
    "target_rps",
    "concurrency",
    "mean_batch",
    "saturated",
    "saturation_reason",
    "acceptance_marginal",
    "acceptance_length",
    "alpha_source",
    "latency_source",
    "strategy",
    "source",
)


class IngestError(ValueError):
    """A file could not be read into sweep rows; the message names the file and the field.

    Attributes
    ----------
    path : str
        The file (or file#benchmark) concerned.
    field : str or None
        Dotted path of the offending field, when one is to blame.
    """

    def __init__(self, path: str | Path, message: str, field: str | None = None) -> None:
        self.path = str(path)
        self.field = field
        where = f"field '{field}': " if field else ""
        super().__init__(f"{self.path}: {where}{message}")


_MISSING = object()


class Fields:
    """Checked access to a nested JSON/YAML mapping.

    Parameters
    ----------
    obj : Any
        The mapping (or list) to read from.
    path : str
        File name used in error messages.
    prefix : str
        Dotted path of ``obj`` inside the file (e.g. ``"benchmarks[2]"``).
    """

    def __init__(self, obj: Any, path: str | Path, prefix: str = "") -> None:
        self.obj = obj
        self.path = str(path)
        self.prefix = prefix

    def _name(self, key: str) -> str:
        return f"{self.prefix}.{key}" if self.prefix else key

    def error(self, message: str, key: str | None = None) -> IngestError:
        """An :class:`IngestError` for ``key`` (relative to this prefix)."""
        return IngestError(self.path, message, self._name(key) if key is not None else None)

    def raw(self, key: str, default: Any = _MISSING) -> Any:
        """Walk ``key`` (dots and ``[i]`` allowed); ``default`` when absent, else raise."""
        cur = self.obj
        for part in _split(key):
            if isinstance(part, int):
                ok = isinstance(cur, list) and -len(cur) <= part < len(cur)
                cur = cur[part] if ok else _MISSING
            elif isinstance(cur, dict):
                cur = cur.get(part, _MISSING)
            else:
                cur = _MISSING
            if cur is _MISSING:
                break
        if cur is _MISSING or cur is None:
            if default is not _MISSING:
                return default
            raise self.error("missing (required by this format)", key)
        return cur

    def has(self, key: str) -> bool:
        """Whether ``key`` exists and is not null."""
        return self.raw(key, None) is not None

    def sub(self, key: str) -> Fields:
        """A :class:`Fields` rooted at the mapping under ``key`` (raises if not a mapping)."""
        value = self.raw(key)
        if not isinstance(value, dict):
            raise self.error(f"expected a mapping, got {type(value).__name__}", key)
        return Fields(value, self.path, self._name(key))

    def num(
        self,
        key: str,
        default: Any = _MISSING,
        *,
        positive: bool = False,
        nonnegative: bool = False,
    ) -> float:
        """A finite number at ``key``; ``default`` (may be None) only when the key is absent."""
        value = self.raw(key, _MISSING if default is _MISSING else None)
        if value is None:
            return default
        return check_number(value, self, key, positive=positive, nonnegative=nonnegative)

    def text(self, key: str, default: Any = _MISSING) -> str:
        """A string at ``key``."""
        value = self.raw(key, _MISSING if default is _MISSING else None)
        if value is None:
            return default
        if not isinstance(value, str):
            raise self.error(f"expected text, got {type(value).__name__}", key)
        return value


def check_number(
    value: Any, fields: Fields, key: str, *, positive: bool = False, nonnegative: bool = False
) -> float:
    """``value`` as a finite float, or an :class:`IngestError` naming ``key``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                raise fields.error(f"expected a number, got {value!r}", key) from None
        else:
            raise fields.error(f"expected a number, got {type(value).__name__}", key)
    try:
        out = float(value)
    except OverflowError:
        out = math.inf
    if not math.isfinite(out):
        raise fields.error(f"must be finite, got {out}", key)
    if positive and out <= 0:
        raise fields.error(f"must be > 0, got {out}", key)
    if nonnegative and out < 0:
        raise fields.error(f"must be >= 0, got {out}", key)
    return out


def _split(key: str) -> list[str | int]:
    parts: list[str | int] = []
    for piece in key.split("."):
        while "[" in piece:
            head, _, rest = piece.partition("[")
            if head:
                parts.append(head)
            index, _, piece = rest.partition("]")
            parts.append(int(index))
        if piece:
            parts.append(piece)
    return parts


def check_row(row: dict, fields: Fields) -> dict:
    """Last guard of every reader: rate and latency finite and > 0, token counts finite.

    Raises
    ------
    IngestError
        Naming the field the offending value came from.
    """
    for column, origin in (
        ("latency", row.get("latency_source") or "latency"),
        ("rps", "request rate"),
        ("prefill", "prompt tokens"),
        ("decode", "output tokens"),
    ):
        value = row.get(column)
        if value is None or not math.isfinite(value) or value < 0:
            raise fields.error(f"gives {column} = {value!r} (must be finite and >= 0)", origin)
        if column in ("latency", "rps") and value <= 0:
            raise fields.error(f"gives {column} = {value!r} (must be > 0)", origin)
    return row


def put_seconds(row: dict, column: str, value_ms: float | None) -> None:
    """Set ``row[column]`` to ``value_ms`` converted to seconds (None stays None)."""
    row[column] = None if value_ms is None else value_ms / 1000.0


def flag(row: dict, reason: str) -> None:
    """Mark ``row`` saturated, appending ``reason`` to its ``saturation_reason``."""
    row["saturated"] = True
    old = row.get("saturation_reason") or ""
    row["saturation_reason"] = f"{old}; {reason}" if old else reason


@dataclass(frozen=True)
class LoadedFile:
    """A file's content, decoded.

    Attributes
    ----------
    path : str
        The file.
    kind : str
        ``"json"`` (one document), ``"jsonl"`` (one document per line), ``"yaml"``,
        ``"csv"`` or ``"parquet"``.
    data : Any
        The parsed document(s); for ``"csv"`` the text, for ``"parquet"`` the path.
    """

    path: str
    kind: str
    data: Any


def load_file(path: str | Path) -> LoadedFile:
    """Read and decode a benchmark file, detecting gzip, JSON, JSON Lines, YAML, CSV, parquet.

    The format is taken from the content, not the name: ``--append-result`` files end in
    ``.json`` but hold JSON Lines, and GuideLLM 0.5.2 writes JSON into ``*.yaml`` names.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    IngestError
        If the file is empty, truncated, or not text in any of these formats.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    if path.is_dir():
        candidate = path / "benchmarks.json"
        if not candidate.exists():
            raise IngestError(path, "is a directory without benchmarks.json")
        path = candidate
    blob = path.read_bytes()
    if blob[:2] == b"\x1f\x8b":
        try:
            blob = gzip.decompress(blob)
        except (OSError, EOFError) as exc:
            raise IngestError(path, f"truncated or corrupt gzip data ({exc})") from None
    if blob[:4] == b"PAR1":
        return LoadedFile(str(path), "parquet", str(path))
    if blob[:4] == b"PK\x03\x04":
        raise IngestError(
            path,
            "a zip archive (an Excel .xlsx workbook?), not a benchmark report — export the "
            "sheet as CSV (comma-separated) and ingest that",
        )
    try:
        text = blob.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise IngestError(path, "not a text file (nor gzip or parquet)") from None
    stripped = text.strip()
    if not stripped:
        raise IngestError(path, "file is empty")
    if stripped[0] in "{[":
        return _load_json(path, stripped)
    first = stripped.splitlines()[0]
    if first.count("\t") >= 2 and "," not in first:
        raise IngestError(
            path,
            "tab-separated, but CSV input is read comma-separated — save it with ',' as the "
            "separator (and '.' as the decimal mark)",
        )
    if "," in first and ":" not in first.split(",")[0]:
        return LoadedFile(str(path), "csv", text)
    return _load_yaml(path, text)


def _load_json(path: Path, text: str) -> LoadedFile:
    try:
        return LoadedFile(str(path), "json", json.loads(text))
    except json.JSONDecodeError as whole:
        lines = [ln for ln in text.splitlines() if ln.strip()]
        if len(lines) > 1:
            docs = []
            for number, line in enumerate(lines, 1):
                try:
                    docs.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise IngestError(
                        path,
                        f"invalid or truncated JSON on line {number} of a JSON Lines file "
                        f"({exc.msg} at column {exc.colno})",
                    ) from None
            return LoadedFile(str(path), "jsonl", docs)
        raise IngestError(
            path,
            f"invalid or truncated JSON ({whole.msg} at line {whole.lineno}, column {whole.colno})",
        ) from None


def _load_yaml(path: Path, text: str) -> LoadedFile:
    import yaml

    try:
        data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        raise IngestError(path, f"invalid or truncated YAML ({exc})".replace("\n", " ")) from None
    if not isinstance(data, dict | list):
        raise IngestError(
            path, "not a benchmark report (neither JSON, JSON Lines, YAML mapping nor CSV)"
        )
    return LoadedFile(str(path), "yaml", data)
