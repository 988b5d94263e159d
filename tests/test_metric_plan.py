"""SD's speedup on a chosen metric and its break-even (``specbayes.metric_plan``), on a
stand-in fit whose metric is a known function of the load."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from specbayes.metric_plan import metric_speedup
from specbayes.plan import Arm


class _Stub:
    """Metric = a + b N per arm, 200 draws with a little spread in b."""

    metrics = ("itl_p99",)

    def __init__(self, dense=(0.02, 1e-4), sd=(0.008, 4e-4)):
        self.lines = {0: dense, 1: sd}
        self.spread = np.linspace(0.95, 1.05, 200)[:, None]

    def metric(self, rows: pd.DataFrame, name: str) -> xr.DataArray:
        a, b = self.lines[int(rows["k"].iloc[0] > 0)]
        n = rows["concurrency"].to_numpy(float)[None, :]
        return xr.DataArray(a + b * self.spread * n, dims=("sample", "row"))


ARM = Arm("v", "h", prefill=100, decode=200, drafter="d", alpha=0.7, k=3)


def test_speedup_and_break_even_on_a_metric():
    n = np.array([1, 10, 20, 40, 60, 80])
    out = metric_speedup(_Stub(), ARM, "itl_p99", concurrency=n)
    t = out["speedup"]
    np.testing.assert_allclose(t["median"], (0.02 + 1e-4 * n) / (0.008 + 4e-4 * n), rtol=0.03)
    assert t["p_faster"].iloc[0] == 1.0 and t["p_faster"].iloc[-1] == 0.0
    be = out["break_even"].iloc[0]
    # 0.02 + 1e-4 N = 0.008 + 4e-4 N at N = 40 (the middle draw); the spread moves it a little
    assert 35 < be["concurrency_median"] < 45 and be["p_cross"] == 1.0


def test_no_crossing_inside_the_grid_and_clear_errors():
    out = metric_speedup(_Stub(sd=(0.008, 1e-5)), ARM, "itl_p99", concurrency=[1, 8, 64])
    assert out["break_even"].iloc[0]["p_cross"] == 0.0
    assert np.isnan(out["break_even"].iloc[0]["concurrency_median"])
    with pytest.raises(ValueError, match="SD arm"):
        metric_speedup(_Stub(), Arm("v", "h", prefill=1, decode=2), "itl_p99", concurrency=[1])
    with pytest.raises(ValueError, match="exactly one"):
        metric_speedup(_Stub(), ARM, "itl_p99", rps=[1], concurrency=[1])
