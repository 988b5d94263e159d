"""Bundled datasets in ``data/`` (see ``data/README.md`` for provenance)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

#: The repository's data directory (the package is installed editable from the checkout).
DATA_DIR = Path(__file__).resolve().parents[1] / "data"


def dataset_path(name: str) -> Path:
    """Path of bundled dataset ``name`` (``demo``, ``paper``, or ``real/<file>``)."""
    path = DATA_DIR / name
    return path if path.suffix else path.with_suffix(".parquet")


def load_dataset(name: str) -> pd.DataFrame:
    """Read a bundled dataset as a raw sweep table (validate it with ``validate_sweeps``)."""
    path = dataset_path(name)
    if not path.exists():
        raise FileNotFoundError(
            f"{path}: bundled dataset '{name}' not found (rebuild it as data/README.md says)"
        )
    df = pd.read_csv(path) if path.suffix == ".csv" else pd.read_parquet(path)
    df.attrs["source"] = str(path)
    return df
