"""The real B200 closed-loop data of data/real: ingest, validate, fit L = C1 + N·C2, compare.

Uses the committed table (no ../shared needed); the rebuild check runs only when the
shared transcription is present.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from specbayes.data import validate_sweeps
from specbayes.ingest import ingest_files
from specbayes.ingest.speculators import (
    DEFAULT_SOURCE,
    compare_sd_dense,
    convert_speculators,
    fit_closed_loop,
    format_comparison,
)

REAL = Path(__file__).resolve().parents[1] / "data" / "real"
TABLE = REAL / "speculators_qwen3.8-27b_b200_sweeps.csv"


@pytest.fixture(scope="module")
def real() -> pd.DataFrame:
    return ingest_files([TABLE])


def test_real_table_shape_and_labels(real):
    assert len(real) == 48
    assert set(real.drafter) == {"none", "dspark", "mtp"}
    assert set(real.k) == {0, 2, 7}
    assert set(real.cell) == {"HumanEval", "math_reasoning"}
    assert (real.hardware == "B200").all() and (real.concurrency > 0).all()
    assert sorted(set(real.concurrency)) == [1, 2, 4, 8, 16, 32, 64, 128]
    # Little's law: L = mean active concurrency / completed rate
    np.testing.assert_allclose(real.latency, real.mean_batch / real.rps, rtol=1e-12)
    # SD rows carry the acceptance length, alpha is derived from it
    sd = real[real.k > 0]
    assert (sd.alpha_source == "acceptance_length").all()
    assert ((sd.alpha > 0) & (sd.alpha <= 1)).all()
    # the two DSpark N = 128 points queue inside the server: flagged, kept
    flagged = real[real.saturated]
    assert set(zip(flagged.drafter, flagged.concurrency, strict=True)) == {("dspark", 128.0)}
    assert len(flagged) == 2


def test_real_table_validates_and_lists_exclusions(real):
    table = validate_sweeps(real)
    assert len(table.data) + len(table.excluded) == 48
    assert set(real.index[real.saturated]) <= set(table.excluded.index)
    assert table.excluded.reason.str.len().gt(0).all()


def test_dense_closed_loop_fits_latency_law(real):
    fits = fit_closed_loop(real)
    dense = fits[fits.k == 0].set_index("cell")
    assert set(dense.index) == {"HumanEval", "math_reasoning"}
    assert (dense.r2 >= 0.95).all(), dense
    assert (dense.c1 > 0).all() and (dense.c2 > 0).all()
    assert dense.loc["HumanEval", "c1"] == pytest.approx(8.54, abs=0.01)
    assert dense.loc["HumanEval", "c2"] == pytest.approx(0.0763, abs=0.001)
    assert dense.loc["math_reasoning", "c1"] == pytest.approx(3.43, abs=0.01)
    # every arm follows the law up to its saturated points
    assert (fits.r2 >= 0.95).all(), fits
    dspark = fits[fits.drafter == "dspark"]
    assert (dspark.n_max == 64).all() and (dspark.n_saturated == 1).all()


def test_sd_versus_dense_at_each_concurrency(real):
    table = compare_sd_dense(real)
    assert len(table) == 2 * 2 * 8  # 2 datasets x 2 SD arms x 8 concurrencies
    np.testing.assert_allclose(table.speedup, table.latency_dense / table.latency_sd)
    # SD wins at every unsaturated point of this data; DSpark loses where it saturates
    assert table[~table.saturated].sd_faster.all()
    lost = table[~table.sd_faster]
    assert set(zip(lost.drafter, lost.concurrency, strict=True)) == {("dspark", 128.0)}
    text = format_comparison(table)
    assert "HumanEval: dspark (k=7) vs dense" in text and "dense faster (saturated point)" in text


@pytest.mark.shared
@pytest.mark.skipif(not DEFAULT_SOURCE.exists(), reason="../shared/real is absent")
def test_committed_table_rebuilds_from_the_transcription():
    rebuilt = convert_speculators(DEFAULT_SOURCE)
    committed = pd.read_csv(TABLE)
    assert list(rebuilt.columns) == list(committed.columns)
    for col in rebuilt.columns:
        if rebuilt[col].dtype.kind in "fi":
            np.testing.assert_allclose(rebuilt[col], committed[col], rtol=1e-15, err_msg=col)
        else:
            a = rebuilt[col].astype(object).fillna("").astype(str).tolist()
            b = committed[col].astype(object).fillna("").astype(str).tolist()
            assert a == b, col


def test_real_table_keeps_the_published_percentiles(real):
    """Median/p99 TTFT and median ITL per point; the source prints no other level."""
    assert real[["ttft_p50", "ttft_p99", "itl_p50"]].notna().all().all()
    assert (real.ttft_p50 <= real.ttft_p99).all()
    for col in ("ttft", "ttft_p90", "ttft_p95", "itl_p90", "itl_p99", "latency_p99"):
        assert real[col].isna().all(), col
    validate_sweeps(real)


@pytest.mark.shared
@pytest.mark.skipif(not DEFAULT_SOURCE.exists(), reason="../shared/real is absent")
def test_real_percentiles_equal_the_transcription():
    raw = pd.read_csv(DEFAULT_SOURCE)
    rows = convert_speculators(DEFAULT_SOURCE)
    for metric, column in (
        ("median_ttft_ms", "ttft_p50"),
        ("p99_ttft_ms", "ttft_p99"),
        ("median_itl_ms", "itl_p50"),
    ):
        published = sorted(raw.loc[raw.metric == metric, "value"].astype(float) / 1000)
        np.testing.assert_allclose(sorted(rows[column]), published, rtol=1e-15, err_msg=column)
