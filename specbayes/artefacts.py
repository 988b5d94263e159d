"""Writing artefacts safely: strict JSON and output folders that appear whole or not at all.

Every JSON file the package writes goes through :func:`dumps`: ``NaN`` and ``±Infinity`` are
not JSON (``JSON.parse`` rejects them), so non-finite numbers become ``null`` and the
document says what ``null`` means. Output folders are written through :func:`staged_dir`:
files are written into a hidden sibling folder and moved into place only when everything
succeeded, so a failed command leaves nothing half-written behind.
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["NULL_MEANS", "check_out_dir", "dumps", "jsonable", "staged_dir"]

#: What ``null`` stands for in the JSON the package writes (written into each document).
NULL_MEANS = (
    "null marks a number that is not finite: an unbounded latency or speedup (the server is "
    "saturated in the draws concerned), a quantity with no defined draw (e.g. a break-even "
    "rate when no draw crosses), or an unmeasured value"
)


def jsonable(obj: Any) -> Any:
    """``obj`` with numpy scalars and arrays as Python values and non-finite floats as ``None``."""
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [jsonable(v) for v in obj.tolist()]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if obj is None or isinstance(obj, bool | int | str):
        return obj
    if hasattr(obj, "isoformat"):
        return obj.isoformat()
    return str(obj)


def dumps(obj: Any, *, indent: int | None = 2, note_nulls: bool = True) -> str:
    """Strict JSON text of ``obj`` (no ``NaN``/``Infinity``).

    Parameters
    ----------
    obj : Any
        Mappings, sequences, numbers, strings, numpy values.
    indent : int, optional
        Passed to :func:`json.dumps`.
    note_nulls : bool
        When ``obj`` is a mapping, add a ``"null_means"`` entry saying what ``null`` stands for.
    """
    data = jsonable(obj)
    if note_nulls and isinstance(data, dict):
        data = {**data, "null_means": NULL_MEANS}
    return json.dumps(data, indent=indent, allow_nan=False, ensure_ascii=False)


def check_out_dir(path: str | Path, option: str = "--out") -> Path:
    """``path`` as an output folder, or ``ValueError`` when it is an existing file."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(
            f"{option} {path}: is an existing file, not a folder — give a folder path "
            "(it is created if missing)"
        )
    return path


@contextlib.contextmanager
def staged_dir(out: str | Path) -> Iterator[Path]:
    """A temporary folder beside ``out`` whose files move into ``out`` on success.

    On an exception the temporary folder is removed and ``out`` is left as it was (created
    only if it did not exist and only on success). Files of the same names already in
    ``out`` are replaced; other files there are kept.
    """
    out = check_out_dir(out)
    parent = out.parent if str(out.parent) else Path(".")
    try:
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=parent))
    except OSError as exc:
        raise ValueError(
            f"--out {out}: cannot write there ({exc.strerror or exc}) — give a folder you can "
            "write to"
        ) from None
    try:
        yield tmp
        out.mkdir(parents=True, exist_ok=True)
        for item in sorted(tmp.iterdir()):
            target = out / item.name
            if target.is_dir() and not item.is_dir():
                raise ValueError(f"--out {out}: {target} is a folder; cannot replace it by a file")
            item.replace(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
