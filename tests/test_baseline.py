"""The curve_fit baseline (the paper's method) recovers known coefficients."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import REPO, TRUE_COEFS

from specbayes import baseline, laws
from specbayes.data import validate_sweeps

CELLS = [(p, g) for p in (256, 1024) for g in (256, 1024)]


def cell_coefs(p: float, g: float) -> dict:
    """Coefficients following docs/model.md §6 trends: c*p ~ prefill, c*v ~ p + g/2."""
    c = dict(TRUE_COEFS)
    c["c1p"] = 5e-5 * p
    c["c2p"] = 2e-6 * p
    c["c2v"] = TRUE_COEFS["c2v"] * (p + 0.5 * g) / 1536
    return c


def synthetic(noise: float = 0.0, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for p, g in CELLS:
        c = cell_coefs(p, g)
        for k, a in [(0, np.nan), (2, 0.6), (2, 0.9), (5, 0.6), (5, 0.9)]:
            c1, c2 = laws.effective_costs(*c.values(), g, 0.5 if k == 0 else a, k)
            for r in np.linspace(0.05, 0.85, 9) / c2:
                lat = laws.latency(r, c1, c2) * np.exp(noise * rng.standard_normal())
                rows.append(
                    dict(
                        verifier="V",
                        hardware="H",
                        drafter="d" if k else "none",
                        prefill=p,
                        decode=g,
                        k=k,
                        alpha=a,
                        rps=r,
                        latency=lat,
                    )
                )
    return validate_sweeps(pd.DataFrame(rows)).data


def test_configuration_fits_recover_c1_c2():
    df = synthetic()
    fits = baseline.fit_configurations(df)
    assert fits.ok.all() and len(fits) == 4 * 5
    row = fits[(fits.cell == "1024x1024") & (fits.k == 0)].iloc[0]
    c1, c2 = laws.effective_costs(*cell_coefs(1024, 1024).values(), 1024, 0.5, 0)
    assert row.c1 == pytest.approx(c1, rel=1e-5) and row.c2 == pytest.approx(c2, rel=1e-5)
    assert fits.r2.min() > 0.9999


def test_closed_loop_configuration_fit():
    n = np.array([1, 2, 4, 8, 16, 32.0])
    df = pd.DataFrame(
        dict(
            verifier="V",
            hardware="B200",
            prefill=200,
            decode=700,
            k=0,
            rps=np.nan,
            concurrency=n,
            latency=8.0 + 0.05 * n,
        )
    )
    fits = baseline.fit_configurations(validate_sweeps(df).data)
    assert fits.c1.item() == pytest.approx(8.0, rel=1e-6)
    assert fits.c2.item() == pytest.approx(0.05, rel=1e-5)


def test_cycle_fit_reproduces_latency_and_trends_predict_unseen_cells():
    df = synthetic(noise=0.01, seed=1)
    coefs = baseline.fit_cycle_coefficients(df)
    assert coefs.ok.all() and (coefs.r2_log > 0.99).all()
    held = df.cell == "1024x256"
    trends = baseline.fit_trends(baseline.fit_cycle_coefficients(df[~held]))
    pred = baseline.predict_trends(trends, df[held])
    assert np.isfinite(pred).all()
    assert baseline.r_squared(np.log(df[held].latency), np.log(pred)) > 0.99


def test_measured_alpha_sweeps_are_fitted_as_one_configuration():
    from specbayes.data import read_sweeps

    table = validate_sweeps(read_sweeps(REPO / "data/real/speculators_qwen3.8-27b_b200_sweeps.csv"))
    fits = baseline.fit_configurations(table.data)
    assert len(fits) == 6 and fits.ok.all() and (fits.n >= 7).all()
    assert (fits.r2 > 0.95).all()


# --- dense-only data: trends of the identified aggregates C1, C2 ------------------------------

GRID = (256, 512, 768, 1024)
#: Dense trend terms (a, b, c, d) of C_j = a + b p + c g + d g (p + g/2), from docs/model.md §6
#: trend forms c_jp = a + b p, c_jv = c + d (p + g/2).
DENSE_TRUTH = dict(C1=(0.02, 4e-5, 8e-3, 2e-6), C2=(1e-3, 1.5e-6, 3e-5, 4e-8))


def dense_cell_costs(p: float, g: float) -> tuple[float, float]:
    """Dense (C1, C2) of a cell through laws.effective_costs (k = 0) on trend coefficients."""
    (a1, b1, c1, d1), (a2, b2, c2, d2) = DENSE_TRUTH["C1"], DENSE_TRUTH["C2"]
    kv = p + 0.5 * g
    coefs = dict(
        c1p=a1 + b1 * p, c1v=c1 + d1 * kv, c1d=0.0, c2p=a2 + b2 * p, c2v=c2 + d2 * kv, c2d=0.0
    )
    c1, c2 = laws.effective_costs(*coefs.values(), g, 0.5, 0)
    return float(c1), float(c2)


def dense_rows(noise: float = 0.0, seed: int = 0, synchronous: bool = True) -> pd.DataFrame:
    """Dense-only sweeps on a 4 x 4 cell grid: an open-loop rate sweep per cell (and a
    synchronous N = 1 closed-loop point, as the paper's sweeps have)."""
    rng = np.random.default_rng(seed)
    rows = []
    base = dict(verifier="V", hardware="H", drafter="none", k=0, alpha=np.nan)
    for p in GRID:
        for g in GRID:
            c1, c2 = dense_cell_costs(p, g)
            eps = np.exp(noise * rng.standard_normal(9))
            for r, e in zip(np.linspace(0.05, 0.85, 8) / c2, eps[:8], strict=True):
                lat = float(laws.latency(r, c1, c2)) * e
                rows.append(dict(base, prefill=p, decode=g, rps=r, latency=lat))
            if synchronous:
                lat = float(laws.closed_loop_latency(1.0, c1, c2)) * eps[-1]
                rows.append(
                    dict(base, prefill=p, decode=g, rps=1.0 / lat, concurrency=1.0, latency=lat)
                )
    return validate_sweeps(pd.DataFrame(rows)).data.reset_index(drop=True)


def test_dense_only_cells_fit_c1_c2_jointly_over_open_and_closed_rows():
    df = dense_rows()
    cells = baseline.fit_cycle_coefficients(df)
    assert len(cells) == 16 and cells.dense_ok.all() and not cells.sd.any()
    pg = zip(cells.prefill, cells.decode, strict=True)
    truth = np.array([dense_cell_costs(p, g) for p, g in pg])
    np.testing.assert_allclose(cells[["C1", "C2"]].to_numpy(float), truth, rtol=1e-6)


def test_dense_trend_recovers_the_terms_and_is_chosen_for_dense_only_groups():
    trends = baseline.fit_trends(baseline.fit_cycle_coefficients(dense_rows()))
    assert set(trends.form) == {"dense"} and set(trends.coef) == {"C1", "C2"}
    for name, truth in DENSE_TRUTH.items():
        got = trends.set_index("coef").loc[name, list(baseline.DENSE_TERMS)].to_numpy(float)
        np.testing.assert_allclose(got, truth, rtol=1e-5)
    # a group with SD rows keeps the six-coefficient trends
    assert set(baseline.fit_trends(baseline.fit_cycle_coefficients(synthetic())).form) == {"cycle"}


@pytest.mark.parametrize("held", [("512x768",), ("256x1024", "768x512"), ("*",)])
def test_dense_trend_predicts_held_out_cells(held):
    df = dense_rows(noise=0.01, seed=3)
    if held == ("*",):  # four cells spread over the grid, two of them at its edge
        held = ("256x256", "512x1024", "768x256", "1024x768")
    test = df.cell.isin(held)
    # exactly the path of validate._run_fold
    trends = baseline.fit_trends(baseline.fit_cycle_coefficients(df[~test]))
    pred = baseline.predict_trends(trends, df[test])
    assert np.isfinite(pred).all()
    y = df[test].latency.to_numpy()
    assert baseline.r_squared(y, pred) > 0.99
    assert baseline.r_squared(np.log(y), np.log(pred)) > 0.99


def test_dense_trend_drops_terms_it_cannot_identify():
    # two cells at the same decode: intercept and prefill only
    cells = pd.DataFrame(dict(prefill=[256.0, 1024.0], decode=512.0, C1=[1.0, 2.0], C2=0.1))
    fit = baseline.fit_dense_trend(cells)
    assert fit["C1"]["slope_decode"] == 0.0 and fit["C1"]["slope_decode_kv"] == 0.0
    assert fit["C1"]["intercept"] + 1024 * fit["C1"]["slope_prefill"] == pytest.approx(2.0)
    one = baseline.fit_dense_trend(cells.iloc[:1])
    assert one["C2"]["intercept"] == pytest.approx(0.1) and one["C2"]["n_cells"] == 1


def test_dense_trend_knows_no_sd_rows():
    df = dense_rows()
    trends = baseline.fit_trends(baseline.fit_cycle_coefficients(df))
    sd = df.iloc[:3].assign(k=2, alpha=0.8, drafter="d")
    assert np.isnan(baseline.predict_trends(trends, sd)).all()


def test_dense_trend_on_the_paper_slice():
    from specbayes.datasets import load_dataset

    data = load_dataset("paper")
    rows = data[(data.verifier == "Qwen3-8B") & (data.hardware == "H100-SXM") & (data.k == 0)]
    df = validate_sweeps(rows).data
    held = df.cell.isin(["256x512", "512x1024", "768x768", "1024x256"])
    trends = baseline.fit_trends(baseline.fit_cycle_coefficients(df[~held]))
    pred = baseline.predict_trends(trends, df[held])
    y = df[held].latency.to_numpy()
    assert baseline.r_squared(y, pred) > 0.98
    assert baseline.r_squared(np.log(y), np.log(pred)) > 0.99
