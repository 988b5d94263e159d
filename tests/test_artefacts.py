"""The artefacts: every JSON document the package writes is strict JSON (``JSON.parse``
accepts it), and the fit artefact's posterior holds only the quantities a user reads.

``plan.json`` (test_cli_errors), ``headline.json`` (test_report) and the fit's ``config``
attribute (test_cli_errors) are checked where they are made; this module checks the writer
they share and the validate command's ``in_sample.json`` / ``overall.json``, whose scores are
NaN or infinite when a fold has no defined score.
"""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from specbayes.artefacts import NULL_MEANS, dumps


def strict(text: str):
    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_dumps_writes_null_for_non_finite_numbers_and_says_so():
    doc = strict(dumps({"a": np.nan, "b": [np.inf, -np.inf, np.float32(1.5)], "c": np.int64(3)}))
    assert doc == {"a": None, "b": [None, None, 1.5], "c": 3, "null_means": NULL_MEANS}
    assert strict(dumps([math.nan], note_nulls=False)) == [None]


def test_validate_writes_strict_json(tmp_path, monkeypatch):
    from specbayes import plots
    from specbayes.commands import validate

    for name in ("plot_heldout", "plot_pareto_k", "plot_coverage", "plot_pit"):
        monkeypatch.setattr(plots, name, lambda *a, **k: plt.figure())
    overall = pd.DataFrame({"method": ["specbayes", "baseline"], "r2": [0.99, np.nan],
                            "elpd": [-np.inf, 1.0]})  # fmt: skip
    empty = pd.DataFrame()
    res = SimpleNamespace(
        folds=overall, overall=overall, predictions=overall, skipped=overall.iloc[:0], pit={},
        metric_folds=empty, metric_overall=empty, metric_predictions=empty,
    )  # fmt: skip
    checks = {"elpd_loo": np.nan, "bfmi_min": np.float64(np.inf), "n_obs": np.int64(4)}
    validate._write(tmp_path / "v", res, checks, np.array([0.1, np.nan]))
    in_sample = strict((tmp_path / "v" / "in_sample.json").read_text())
    assert in_sample["elpd_loo"] is None and in_sample["bfmi_min"] is None
    assert in_sample["n_obs"] == 4 and in_sample["null_means"] == NULL_MEANS
    rows = strict((tmp_path / "v" / "overall.json").read_text())["overall"]
    assert rows[1]["r2"] is None and rows[0]["elpd"] is None and rows[0]["r2"] == 0.99


def test_internal_variables_leave_the_posterior_with_their_coordinates():
    """Two or more verifiers add zero-sum effects, whose transformed values carry auto-named
    dims and coordinates: none of them may stay in ``posterior`` (az.summary's rows)."""
    import arviz as az
    import xarray as xr

    from specbayes.artefacts import split_internal

    chain, draw = np.arange(2), np.arange(3)
    post = xr.Dataset(
        {
            "verifier_effect": (("chain", "draw", "verifier"), np.zeros((2, 3, 2))),
            "verifier_effect_zerosum__": (
                ("chain", "draw", "verifier_effect_zerosum___dim_0"), np.zeros((2, 3, 1))
            ),
            "sigma0_log__": (("chain", "draw"), np.zeros((2, 3))),
            "z": (("chain", "draw", "param"), np.zeros((2, 3, 4))),
        },
        coords={"chain": chain, "draw": draw, "verifier": ["a", "b"],
                "verifier_effect_zerosum___dim_0": [0], "param": np.arange(4)},
    )  # fmt: skip
    idata = az.InferenceData(posterior=post)
    moved = split_internal(idata)["unconstrained_posterior"]
    assert set(idata.posterior.data_vars) == {"verifier_effect"}
    assert set(idata.posterior.dims) == {"chain", "draw", "verifier"}
    assert set(idata.posterior.coords) == {"chain", "draw", "verifier"}
    assert {"verifier_effect_zerosum__", "sigma0_log__", "z"} == set(moved.data_vars)
    assert "z_param" in moved.dims
