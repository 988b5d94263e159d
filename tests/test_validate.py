"""Leave-n-out folds, held-out scores and degenerate folds."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from test_baseline import synthetic

from specbayes import validate


def test_folds_hold_out_n_cells_per_group_and_skip_small_groups():
    df = synthetic()
    folds, skipped = validate.make_folds(df, n=2, repeats=10, seed=0)
    assert len(folds) == 6  # C(4, 2) subsets, all of them since fewer than repeats
    for f in folds:
        held = df[f.mask(df)]
        assert held.cell.nunique() == 2
    assert len({f.held_out for f in folds}) == 6
    folds, skipped = validate.make_folds(df, n=4, repeats=3)
    assert folds == [] and "only 4 cell(s)" in skipped.reason.item()


def test_heldout_scores_calibrated_predictive():
    rng = np.random.default_rng(0)
    mu = np.exp(rng.normal(0, 1, 500))
    pred = mu[None, :] * np.exp(0.1 * rng.standard_normal((2000, 500)))
    y = mu * np.exp(0.1 * rng.standard_normal(500))
    ll = -0.5 * ((np.log(y) - np.log(mu)) / 0.1) ** 2 - np.log(0.1 * np.sqrt(2 * np.pi) * y)
    s = validate.heldout_scores(y, mu, pred, np.tile(ll, (4, 1)))
    assert s["cov90"] == pytest.approx(0.9, abs=0.04)
    assert s["cov50"] == pytest.approx(0.5, abs=0.06)
    assert s["r2_log"] > 0.95
    assert s["elpd"] == pytest.approx(ll.sum())
    assert np.histogram(s["pit"], bins=5, range=(0, 1))[0].min() > 60


def test_baseline_leave_n_out_and_degenerate_groups():
    df = synthetic(noise=0.02)
    one_cell = df[df.cell == "256x256"].assign(verifier="Lonely")
    res = validate.leave_n_out(
        pd.concat([df, one_cell], ignore_index=True),
        n=(1, 2),
        repeats=2,
        methods=("baseline",),
        n_jobs=1,
    )
    assert set(res.overall.n) == {1, 2}
    assert (res.overall.r2_log > 0.95).all()
    assert (res.skipped.verifier == "Lonely").sum() == 2
