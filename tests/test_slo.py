"""SLOs on several statistics (``specbayes.slo``): parsing, checking against a fit, and the
per-draw load at which a metric SLO holds — the inverse of the metric model's formula."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from specbayes import laws
from specbayes.plan import Arm
from specbayes.slo import batch_at, check_slo, load_at, parse_slo, slo_loads


def test_parse_slo():
    assert parse_slo("20") == {"latency": 20.0}
    assert parse_slo("ttft_p99=2, itl_p99=0.05") == {"ttft_p99": 2.0, "itl_p99": 0.05}
    bad_specs = [("ttft_p99", "not a number"), ("ttft_p99=0", "positive"), ("a=1,a=2", "twice"),
                 ("=3", "NAME=SECONDS"), ("x=nan", "finite")]  # fmt: skip
    for bad, why in bad_specs:
        with pytest.raises(ValueError, match=why):
            parse_slo(bad)


class _Stub:
    """A fit that models one metric with fixed shares (rho_a, rho_b) for every k."""

    metrics = ("ttft_p99",)

    def __init__(self, rho_a: float, rho_b: float, n: int = 3):
        self.rho, self.n = (rho_a, rho_b), n

    def metric_shares(self, rows: pd.DataFrame, name: str):
        out = np.empty((self.n, 2, len(rows)))
        out[:, 0], out[:, 1] = np.log(self.rho[0]), np.log(self.rho[1])
        return out


def test_check_slo_names_what_the_fit_lacks():
    assert check_slo(_Stub(0.1, 0.5), {"latency": 5, "ttft_p99": 1}) == {
        "latency": 5,
        "ttft_p99": 1,
    }
    with pytest.raises(ValueError, match=r"--metrics itl_p99"):
        check_slo(_Stub(0.1, 0.5), {"itl_p99": 0.05})


def test_metric_slo_load_inverts_the_metric_formula():
    fit, arm = _Stub(0.02, 0.3), Arm("v", "h", prefill=100, decode=200)
    c1, c2, c3 = np.full((3, 1), 4.0), np.full((3, 1), 0.05), np.zeros((3, 1))
    target, unit = 0.005, 200.0  # TTFT's shares are of the per-token cost: s = g
    batch = batch_at(fit, arm, np.array([0]), "ttft_p99", target, c1, c2)
    np.testing.assert_allclose((0.02 * c1 + 0.3 * c2 * batch) / unit, target)  # met exactly
    streams = slo_loads(fit, arm, np.array([0]), {"ttft_p99": target}, (c1, c2, c3), True)
    np.testing.assert_allclose(streams["ttft_p99"], batch)
    rps = load_at(batch, c1, c2, c3, closed_loop=False)
    # open loop: at that rate Little's law with the law's latency gives back the batch
    np.testing.assert_allclose(rps * laws.latency(rps, c1, c2), batch)
    # an SLO below the idle server's value holds at no load
    none = batch_at(fit, arm, np.array([0]), "ttft_p99", 1e-4, c1, c2)
    np.testing.assert_array_equal(none, 0.0)


def test_open_loop_slo_past_the_curved_peak_holds_to_the_wall():
    c1, c2, c3 = np.array([4.0]), np.array([0.05]), np.array([1e-3])
    peak = np.sqrt(c1 / c3)
    got = load_at(2 * peak, c1, c2, c3, closed_loop=False)
    np.testing.assert_allclose(got, laws.saturation_rps(c1, c2, c3))


def test_moe_metric_slo_load_inverts_the_formula_with_the_expert_reads():
    """On the moe level a metric's zero-load part carries the expert reads at the batch's
    coverage: the SLO's batch is met exactly, the reads lower it below the linear law's, and
    the open-loop rate gives the batch back through the moe law's fixed point."""
    fit, arm = _Stub(0.02, 0.3), Arm("v", "h", prefill=100, decode=200)
    c1, c2, c3 = np.full((3, 1), 4.0), np.full((3, 1), 0.05), np.zeros((3, 1))
    experts = laws.Experts(np.full((3, 1), 6.0), 8 / 128, np.array([3]))
    target, unit = 0.005, 200.0
    batch = batch_at(fit, arm, np.array([3]), "ttft_p99", target, c1, c2, experts)
    phi = laws.expert_coverage(batch * 4, 8 / 128, 1.0)
    got = (0.02 * (c1 + phi * 6.0) + 0.3 * c2 * batch) / unit
    np.testing.assert_allclose(got, target, rtol=1e-9)
    assert np.all(batch < batch_at(fit, arm, np.array([3]), "ttft_p99", target, c1, c2))
    costs = (c1, c2, c3, experts)
    streams = slo_loads(fit, arm, np.array([3]), {"ttft_p99": target}, costs, True)
    np.testing.assert_allclose(streams["ttft_p99"], batch)
    rps = slo_loads(fit, arm, np.array([3]), {"ttft_p99": target}, costs, False)["ttft_p99"]
    np.testing.assert_allclose(rps * laws.latency(rps, c1, c2, experts=experts), batch,
                               rtol=1e-7)  # fmt: skip
    # an SLO below the idle server's value holds at no load
    none = batch_at(fit, arm, np.array([3]), "ttft_p99", 1e-4, c1, c2, experts)
    np.testing.assert_array_equal(none, 0.0)
