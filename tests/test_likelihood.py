"""The compiled rows' likelihood equals the one written with specbayes.laws (value, gradient)."""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

from specbayes import laws
from specbayes.data import validate_sweeps
from specbayes.likelihood import GROUP_INPUTS, row_loglik
from specbayes.model import LatencyModel, build_design, simulate_sweeps

SOFTNESS = 0.01


def _rows(n=400, n_groups=12, seed=0):
    """Rows across the law's regimes: open loop from light load to past the soft wall,
    closed loop, and groups without a drafter (inverse drafter knee 0)."""
    rng = np.random.default_rng(seed)
    groups = {
        "c1p": rng.uniform(0.01, 0.03, n_groups),
        "pass_c1": rng.uniform(0.008, 0.02, n_groups),
        "c2p": rng.uniform(0.002, 0.006, n_groups),
        "c2v": rng.uniform(5e-5, 2e-4, n_groups),
        "pass_c2d": np.where(np.arange(n_groups) % 3 == 0, 0.0, rng.uniform(1e-5, 5e-5, n_groups)),
        "inv_knee_v": 1 / rng.uniform(500, 3000, n_groups),
        "inv_knee_d": np.where(
            np.arange(n_groups) % 3 == 0, 0.0, 1 / rng.uniform(50, 500, n_groups)
        ),
    }
    grp = rng.integers(0, n_groups, n)
    a_p = rng.uniform(0.5, 2.0, n)
    passes = rng.uniform(100, 600, n)
    c1 = a_p * groups["c1p"][grp] + passes * groups["pass_c1"][grp]
    c2v = a_p * groups["c2p"][grp] + passes * groups["c2v"][grp]
    c2d = passes * groups["pass_c2d"][grp]
    c3 = c2v * groups["inv_knee_v"][grp] + c2d * groups["inv_knee_d"][grp]
    sat = laws.saturation_rps(c1, c2v + c2d, c3)
    # loads up to 1.02 x the exact wall: the last rows sit on the soft plateau
    rps = sat * rng.uniform(0.02, 1.02, n)
    closed = (rng.uniform(size=n) < 0.3).astype(float)
    conc = rng.uniform(1, 300, n)
    mu = np.where(
        closed > 0,
        laws.closed_loop_latency(conc, c1, c2v + c2d, c3),
        c1 / np.exp(laws.log_headroom(c1, c2v + c2d, rps, conc, np.zeros(n, bool), c3,
                                      wall_softness=SOFTNESS)),
    )  # fmt: skip
    log_y = np.log(mu) + rng.normal(0, 0.03, n)
    return groups, grp, a_p, passes, rps, conc, closed, log_y


def _reference_graph(groups, passes, sigma0, gamma, grp, a_p, rps, conc, closed, log_y):
    """The likelihood as the model graph writes it (laws functions, LogNormal density)."""
    import pymc as pm

    g = {k: v[grp] for k, v in groups.items()}
    c1 = laws.cycle_cost(a_p * g["c1p"], passes, g["pass_c1"])
    c2v = laws.cycle_cost(a_p * g["c2p"], passes, g["c2v"])
    c2d = passes * g["pass_c2d"]
    c3 = c2v * g["inv_knee_v"] + c2d * g["inv_knee_d"]
    log_head = laws.log_headroom(c1, c2v + c2d, rps, conc, closed > 0, c3, wall_softness=SOFTNESS)
    sigma = sigma0 * pt.exp(-gamma * log_head)
    return pm.logp(pm.LogNormal.dist(pt.log(c1) - log_head, sigma), np.exp(log_y)).sum()


@pytest.mark.parametrize("mode", ["FAST_RUN", "NUMBA"])
def test_value_and_gradient_match_the_laws_graph(mode):
    groups, grp, a_p, passes0, rps, conc, closed, log_y = _rows()
    sym = {k: pt.dvector(k) for k in GROUP_INPUTS}
    passes, sigma0, gamma = pt.dvector("passes"), pt.dscalar("sigma0"), pt.dscalar("gamma")
    wrt = [*sym.values(), passes, sigma0, gamma]
    fused = row_loglik(
        [sym[k] for k in GROUP_INPUTS], passes, sigma0, gamma, grp, a_p, rps, conc, closed,
        log_y, softness=SOFTNESS,
    )  # fmt: skip
    ref = _reference_graph(sym, passes, sigma0, gamma, grp, a_p, rps, conc, closed, log_y)
    f_fused = pytensor.function(wrt, [fused, *pt.grad(fused, wrt)], mode=mode)
    f_ref = pytensor.function(wrt, [ref, *pt.grad(ref, wrt)])
    values = [groups[k] for k in GROUP_INPUTS] + [passes0, 0.04, 0.4]
    got, want = f_fused(*values), f_ref(*values)
    assert np.isfinite(want[0])
    np.testing.assert_allclose(got[0], want[0], rtol=1e-11)
    for name, a, b in zip(
        [*GROUP_INPUTS, "passes", "sigma0", "gamma"], got[1:], want[1:], strict=True
    ):
        scale = np.max(np.abs(b)) + 1e-300
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-9 * scale, err_msg=name)


def test_rows_cover_every_branch():
    """The test rows above hit the soft plateau and both loops (else the match means less)."""
    groups, grp, a_p, passes, rps, _, closed, _ = _rows()
    g = {k: v[grp] for k, v in groups.items()}
    c1 = a_p * g["c1p"] + passes * g["pass_c1"]
    c2v = a_p * g["c2p"] + passes * g["c2v"]
    c2d = passes * g["pass_c2d"]
    c3 = c2v * g["inv_knee_v"] + c2d * g["inv_knee_d"]
    free = 1 - rps * (c2v + c2d)
    rho = 1 - 4 * rps**2 * c1 * c3 / free**2
    opened = closed == 0
    assert (opened & (rho < SOFTNESS)).sum() >= 5
    assert (opened & (rho >= SOFTNESS)).sum() >= 100
    assert (closed > 0).sum() >= 50
    assert (g["inv_knee_d"] == 0).sum() >= 50


def test_saturated_row_gives_minus_infinity():
    groups, grp, a_p, passes, rps, conc, closed, log_y = _rows(n=50)
    rps = rps.copy()
    closed = np.zeros_like(closed)
    i = 7
    c2 = a_p[i] * groups["c2p"][grp[i]] + passes[i] * (
        groups["c2v"][grp[i]] + groups["pass_c2d"][grp[i]]
    )
    rps[i] = 1.5 / c2  # past 1 / C2: no headroom at all
    out = row_loglik(
        [groups[k] for k in GROUP_INPUTS], passes, 0.04, 0.4, grp, a_p, rps, conc, closed,
        log_y, softness=SOFTNESS,
    ).eval()  # fmt: skip
    assert out == -np.inf


def test_needs_seven_group_arrays():
    with pytest.raises(ValueError, match="group_costs needs 7 arrays"):
        row_loglik([np.ones(2)] * 6, np.ones(3), 0.1, 0.1, [0, 1, 0], *[np.ones(3)] * 5,
                   softness=0.0)  # fmt: skip


@pytest.mark.parametrize(
    "kwargs",
    [
        {"model": "sd", "seed": 3},
        {"model": "sd", "seed": 3, "closed_loop": True, "unknown_alpha": True},
        {"model": "dense", "seed": 4},
    ],
    ids=["sd-open", "sd-closed-latent-alpha", "dense"],
)
def test_sampling_model_equals_the_graph_model(kwargs):
    """The model the samplers run (compiled likelihood) has the graph model's density and
    gradient at points around the least-squares start."""
    df, _ = simulate_sweeps(**kwargs)
    data = validate_sweeps(df, allow_unknown_alpha=True).data
    lm = LatencyModel(build_design(data, kwargs["model"]))
    ref, fused = lm.model, lm.sampling_model
    assert "latency_loglik" in fused.named_vars and "latency" not in fused.named_vars
    assert [v.name for v in ref.value_vars] == [v.name for v in fused.value_vars]

    def logp_and_grad(m):
        lp = m.logp()
        return pytensor.function(m.value_vars, [lp, *pt.grad(lp, m.value_vars)], mode="NUMBA")

    f_ref, f_fused = logp_and_grad(ref), logp_and_grad(fused)
    start = ref.initial_point()
    start.update({k: v for k, v in lm.initial_point().items() if k in start})
    rng = np.random.default_rng(0)
    for step in (0.0, 0.05, 0.2):
        point = [
            start[v.name] + step * rng.normal(size=np.shape(start[v.name])) for v in ref.value_vars
        ]
        want, got = f_ref(*point), f_fused(*point)
        assert np.isfinite(want[0])
        np.testing.assert_allclose(got[0], want[0], rtol=1e-10)
        for a, b in zip(got[1:], want[1:], strict=True):
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-8 * (np.max(np.abs(b)) + 1))
