"""Readers of real measurements: GuideLLM reports, ``vllm bench serve`` results, SGLang
``bench_serving`` lines and plain sweep tables, all into the sweep table of docs/model.md §9.

>>> from specbayes.ingest import ingest_files
>>> df = ingest_files(["benchmarks.json"], hardware="H100-SXM")  # doctest: +SKIP

:func:`read` reads one file (tool and version detected from the content);
:func:`ingest_files` reads many and applies configuration labels (keyword arguments or a
sidecar file). Malformed input raises :class:`IngestError` (a ``ValueError``) naming the
file and the field. Saturated points are kept and flagged (``saturated``,
``saturation_reason``); :func:`specbayes.data.validate_sweeps` then excludes them with the
reason listed.
"""

from specbayes.ingest._common import ERROR_THRESHOLD, RATE_TOLERANCE, ROW_COLUMNS, IngestError
from specbayes.ingest.reader import LABELS, detect_format, ingest_files, load_sidecar, read

__all__ = [
    "ERROR_THRESHOLD",
    "LABELS",
    "RATE_TOLERANCE",
    "ROW_COLUMNS",
    "IngestError",
    "compare_sd_dense",
    "detect_format",
    "fit_closed_loop",
    "ingest_files",
    "load_sidecar",
    "read",
]


def __getattr__(name: str):
    # lazy, so ``python -m specbayes.ingest.speculators`` runs without a double import
    if name in ("compare_sd_dense", "fit_closed_loop"):
        from specbayes.ingest import speculators

        return getattr(speculators, name)
    raise AttributeError(f"module 'specbayes.ingest' has no attribute {name!r}")
