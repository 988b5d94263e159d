"""The planner on a fit with the experimental knee (``priors={"knee": KNEE}``).

One real fit (the B200 HumanEval sweeps of ``data/real``, ~45 s with 2 x 200 draws), so the
tests are ``slow``; the knee's laws themselves are checked fast in tests/test_laws_knee.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from specbayes import laws, plan

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import small_sweeps

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def knee_fit():
    from specbayes.fit import fit
    from specbayes.model.priors import KNEE

    case = small_sweeps.real_case("HumanEval", "dspark")
    options = dict(draws=200, tune=200, chains=2, seed=1)
    return fit(case.table, "sd", sampler_config=options, priors={"knee": KNEE}, progress=False)


@pytest.fixture(scope="module")
def arm(knee_fit):
    row = knee_fit.data[knee_fit.data.k > 0].iloc[0]
    return plan.Arm(
        row.verifier, row.hardware, row.prefill, row.decode, row.drafter, row.cell, k=int(row.k)
    )


def test_the_planner_answers_with_the_knee(knee_fit, arm):
    (coefs,) = plan.coefficient_draws(knee_fit, arm)  # no longer refused
    assert {"knee_at", "knee_excess", "knee_c2v"} <= set(coefs)
    *_, knee_s, knee_d = plan._sd_and_dense(knee_fit, arm)
    assert knee_s is not None and knee_d is not None
    # SD reaches the knee k + 1 times sooner (in requests)
    np.testing.assert_allclose(knee_s[0] * (arm.k + 1), knee_d[0])

    sp = plan.speedup(knee_fit, arm, concurrency=[1, 8, 64, 256])
    assert np.all(np.isfinite(sp["median"]))
    assert sp["median"].iloc[0] > 1 and np.all(np.diff(sp["median"]) < 0)

    be = plan.break_even(knee_fit, arm, closed_loop=True)
    assert np.isfinite(be["n_star_median"].item()) and be["n_star_median"].item() > 8
    open_be = plan.break_even(knee_fit, arm)
    assert 0 < open_be["rps_star_median"].item() < open_be["dense_saturation_rps_median"].item()

    cap = plan.capacity(knee_fit, arm, 30.0, closed_loop=True, ks=[0, arm.k])
    assert np.all(cap["capacity_streams"] > 0) and np.all(np.isfinite(cap["throughput_rps"]))
    cap_open = plan.capacity(knee_fit, arm, 30.0, ks=[0, arm.k])
    sat = laws.saturation_rps(*plan.effective_cost_draws(knee_fit, arm, k=[0, arm.k])[:2])
    assert np.all(cap_open["capacity_rps"] > 0)
    assert np.all(cap_open["capacity_rps"] < np.median(sat, axis=0))  # below the knee-less wall


def test_the_knee_lowers_sds_speedup_at_high_concurrency(knee_fit, arm):
    c1s, c2s, c3s, c1d, c2d, c3d, *_ = plan._sd_and_dense(knee_fit, arm)
    n = np.array([1.0, 256.0])[None, :]
    costs = [c[:, None] for c in (c1s, c2s, c1d, c2d, c3s, c3d)]
    without = laws.closed_loop_speedup(n, *costs)
    with_knee = plan.speedup(knee_fit, arm, concurrency=[1, 256]).attrs["draws"]
    # at one stream neither arm is near its knee; at 256 SD is past its own (K/(k+1) requests)
    np.testing.assert_allclose(with_knee[:, 0], without[:, 0], rtol=0.02)
    assert np.median(with_knee[:, 1]) < np.median(without[:, 1])
    assert np.mean(with_knee[:, 1] < without[:, 1]) > 0.9
