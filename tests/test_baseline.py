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
    """Coefficients following DESIGN §1.6 trends: c*p ~ prefill, c*v ~ p + g/2."""
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
