"""The compiled rows' likelihood equals the one written with specbayes.laws (value, gradient)."""

import numpy as np
import pandas as pd
import pytensor
import pytensor.tensor as pt
import pytest
from conftest import row_coefs_at

from specbayes import laws
from specbayes.data import validate_sweeps
from specbayes.likelihood import GROUP_INPUTS, MOE_GROUP_INPUTS, moe_row_loglik, row_loglik
from specbayes.model import LatencyModel, build_design, forward_numpy, simulate_sweeps

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


def _logp_and_grad(m):
    """The model's log density and its gradient, one NUMBA-compiled function."""
    lp = m.logp()
    return pytensor.function(m.value_vars, [lp, *pt.grad(lp, m.value_vars)], mode="NUMBA")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"model": "sd", "seed": 3},
        # the other two compile the old core's graph twice more (~20 s each with a cold
        # compile cache): the slow tier's
        pytest.param(
            {"model": "sd", "seed": 3, "closed_loop": True, "unknown_alpha": True},
            marks=pytest.mark.slow,
        ),
        pytest.param({"model": "dense", "seed": 4}, marks=pytest.mark.slow),
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

    f_ref, f_fused = _logp_and_grad(ref), _logp_and_grad(fused)
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


# ---------------------------------------------------------------------------------------------
# the moe level: the coverage fixed point per row
# ---------------------------------------------------------------------------------------------


def _moe_costs(groups, grp, a_p, passes):
    """Per-row costs at zero coverage ``c1, c2, c3`` and the expert part ``s1, s2, s3``."""
    g = {k: v[grp] for k, v in groups.items()}
    c1 = a_p * g["c1p"] + passes * g["pass_c1"]
    c2v = a_p * g["c2p"] + passes * g["c2v"]
    c2d = passes * g["pass_c2d"]
    c3 = c2v * g["inv_knee_v"] + c2d * g["inv_knee_d"]
    s2 = passes * g["c2s"]
    return c1, c2v + c2d, c3, passes * g["c1s"], s2, s2 * g["inv_knee_v"]


def _moe_fixed_point(rps, k, m_ratio, costs, iterations=5000):
    """The softened map of the graph (``laws._moe_step``) iterated far past convergence."""
    c1, c2, c3, s1, s2, s3 = costs
    args = (rps, c1, s1, c2, s2, m_ratio, 1.0, k, c3, s3)
    cur = laws.latency(rps, c1, c2, c3, wall_softness=SOFTNESS)
    with np.errstate(all="ignore"):
        for _ in range(iterations):
            cur = laws._moe_step(*args, cur, np, SOFTNESS)
    return cur


def _moe_rows(n=300, n_groups=9, seed=0):
    """MoE rows across the regimes: open loop from light load to past the exact curved wall
    (soft plateau), a strong coverage feedback (slopes s up to ~0.7), closed loop, dense
    groups without a drafter and SD groups (k = 1, 3), three expert ratios."""
    rng = np.random.default_rng(seed)
    gi = np.arange(n_groups)
    groups = {
        "c1p": rng.uniform(0.01, 0.03, n_groups),
        "pass_c1": rng.uniform(0.008, 0.02, n_groups),
        "c2p": rng.uniform(0.002, 0.006, n_groups),
        "c2v": rng.uniform(5e-5, 2e-4, n_groups),
        "pass_c2d": np.where(gi % 3 == 0, 0.0, rng.uniform(1e-5, 5e-5, n_groups)),
        "inv_knee_v": 1 / rng.uniform(500, 3000, n_groups),
        "inv_knee_d": np.where(gi % 3 == 0, 0.0, 1 / rng.uniform(50, 500, n_groups)),
        "c1s": rng.uniform(0.01, 0.04, n_groups),
        "c2s": rng.uniform(5e-5, 3e-4, n_groups),
    }
    k_group = np.where(gi % 3 == 0, 0.0, rng.choice([1.0, 3.0], n_groups))
    grp = rng.integers(0, n_groups, n)
    k = k_group[grp]
    m_ratio = np.array([8 / 128, 4 / 32, 1 / 256])[grp % 3]
    a_p = rng.uniform(0.5, 2.0, n)
    passes = rng.uniform(100, 600, n)
    costs = _moe_costs(groups, grp, a_p, passes)
    c1, c2, c3, s1, s2, s3 = costs
    # loads up to 1.15 x the exact wall at full coverage: the last rows reach the plateau
    rps = laws.saturation_rps(c1 + s1, c2 + s2, c3 + s3) * rng.uniform(0.02, 1.15, n)
    closed = (rng.uniform(size=n) < 0.3).astype(float)
    rps = np.where(closed > 0, 0.0, rps)
    conc = np.where(closed > 0, rng.uniform(1, 300, n), 0.0)
    phi_c = laws.expert_coverage(conc * (k + 1.0), m_ratio, 1.0)
    mu = np.where(
        closed > 0,
        laws.closed_loop_latency(conc, c1 + phi_c * s1, c2 + phi_c * s2, c3 + phi_c * s3),
        _moe_fixed_point(rps, k, m_ratio, costs),
    )
    log_y = np.log(mu) + rng.normal(0, 0.03, n)
    return groups, grp, a_p, passes, rps, conc, closed, k, m_ratio, log_y


def _moe_reference_graph(
    groups, passes, sigma0, gamma, grp, a_p, rps, conc, closed, k, m_ratio, log_y, iterations
):
    """The moe likelihood as the model graph writes it (:meth:`LatencyModel.build_model`:
    :func:`laws.moe_latency_implicit`, coverage, LogNormal density)."""
    import pymc as pm

    g = {key: v[grp] for key, v in groups.items()}
    c1 = laws.cycle_cost(a_p * g["c1p"], passes, g["pass_c1"])
    c2v = laws.cycle_cost(a_p * g["c2p"], passes, g["c2v"])
    c2d = passes * g["pass_c2d"]
    c2 = c2v + c2d
    c3 = c2v * g["inv_knee_v"] + c2d * g["inv_knee_d"]
    c1s, c2s = passes * g["c1s"], passes * g["c2s"]
    c3s = c2s * g["inv_knee_v"]
    rps, conc, k, mr = (pt.as_tensor(x) for x in (rps, conc, k, m_ratio))
    open_mu = laws.moe_latency_implicit(
        rps, c1, c1s, c2, c2s, mr, 1.0, k, c3u=c3, c3s=c3s, iterations=iterations,
        wall_softness=SOFTNESS,
    )  # fmt: skip
    phi_o = laws.expert_coverage(laws.routed_tokens(rps, open_mu, k), mr, 1.0)
    phi_c = laws.expert_coverage(conc * (k + 1.0), mr, 1.0)
    closed_mu = laws.closed_loop_latency(conc, c1 + phi_c * c1s, c2 + phi_c * c2s, c3 + phi_c * c3s)
    log_mu = pt.log(pt.switch(closed > 0, closed_mu, open_mu))
    c1_row = c1 + pt.switch(closed > 0, phi_c, phi_o) * c1s
    log_head = pt.minimum(pt.log(c1_row) - log_mu, 0.0)
    sigma = sigma0 * pt.exp(-gamma * log_head)
    return pm.logp(pm.LogNormal.dist(log_mu, sigma), np.exp(log_y)).sum()


@pytest.fixture(scope="module")
def moe_case():
    """The rows, the symbolic inputs and the graph references (value and gradient): the
    model's 30 plain iterations + one Newton step, and 300 iterations (converged)."""
    rows = _moe_rows()
    groups, grp, a_p, passes0, rps, conc, closed, k, m_ratio, log_y = rows
    sym = {key: pt.dvector(key) for key in MOE_GROUP_INPUTS}
    passes, sigma0, gamma = pt.dvector("passes"), pt.dscalar("sigma0"), pt.dscalar("gamma")
    wrt = [*sym.values(), passes, sigma0, gamma]
    data = (grp, a_p, rps, conc, closed, k, m_ratio, log_y)
    refs = {}
    for iterations in (laws.MOE_IMPLICIT_ITERATIONS, 300):
        ref = _moe_reference_graph(sym, passes, sigma0, gamma, *data, iterations=iterations)
        refs[iterations] = pytensor.function(wrt, [ref, *pt.grad(ref, wrt)])
    values = [groups[key] for key in MOE_GROUP_INPUTS] + [passes0, 0.04, 0.4]
    return {"rows": rows, "sym": sym, "wrt": wrt, "data": data, "values": values, "refs": refs}


@pytest.mark.parametrize("mode", ["FAST_RUN", "NUMBA"])
def test_moe_value_and_gradient_match_the_laws_graph(moe_case, mode):
    """Against the converged graph to rounding; against the model's graph (30 iterations and
    a Newton step: its gradient is off by about the distance to the fixed point, ~1e-6 here
    where the slope reaches 0.7) to 1e-4."""
    c = moe_case
    sym, wrt = c["sym"], c["wrt"]
    fused = moe_row_loglik(
        [sym[key] for key in MOE_GROUP_INPUTS], *wrt[-3:], *c["data"], softness=SOFTNESS
    )
    f_fused = pytensor.function(wrt, [fused, *pt.grad(fused, wrt)], mode=mode)
    got = f_fused(*c["values"])
    names = [*MOE_GROUP_INPUTS, "passes", "sigma0", "gamma"]
    for iterations, (rtol_value, rtol_grad) in (
        (300, (1e-10, 1e-9)),
        (laws.MOE_IMPLICIT_ITERATIONS, (1e-6, 1e-4)),
    ):
        want = c["refs"][iterations](*c["values"])
        assert np.isfinite(want[0])
        np.testing.assert_allclose(got[0], want[0], rtol=rtol_value)
        for name, a, b in zip(names, got[1:], want[1:], strict=True):
            scale = np.max(np.abs(b)) + 1e-300
            np.testing.assert_allclose(
                a, b, rtol=0, atol=rtol_grad * scale, err_msg=f"{name} ({iterations} it.)"
            )


def test_moe_gradient_matches_finite_differences(moe_case):
    """The implicit-function gradient is the derivative of the kernel's own value."""
    c = moe_case
    sym, wrt = c["sym"], c["wrt"]
    fused = moe_row_loglik(
        [sym[key] for key in MOE_GROUP_INPUTS], *wrt[-3:], *c["data"], softness=SOFTNESS
    )
    f_value = pytensor.function(wrt, fused)
    f_grad = pytensor.function(wrt, pt.grad(fused, wrt))
    values = c["values"]
    grads = f_grad(*values)
    rng = np.random.default_rng(1)
    for i in range(len(values)):
        x = np.asarray(values[i], dtype=float)
        direction = rng.normal(size=x.shape) * np.maximum(np.abs(x), 1e-12)
        eps = 1e-6
        up = [*values[:i], x + eps * direction, *values[i + 1 :]]
        down = [*values[:i], x - eps * direction, *values[i + 1 :]]
        numeric = (f_value(*up) - f_value(*down)) / (2 * eps)
        analytic = np.sum(grads[i] * direction)
        np.testing.assert_allclose(analytic, numeric, rtol=1e-5, err_msg=str(wrt[i]))


def test_moe_rows_cover_every_branch(moe_case):
    """The moe test rows reach the soft plateau at their fixed point, have a strong coverage
    feedback, closed-loop, dense and SD rows (else the match above means less)."""
    groups, grp, a_p, passes, rps, _, closed, k, m_ratio, _ = moe_case["rows"]
    costs = _moe_costs(groups, grp, a_p, passes)
    c1, c2, c3, s1, s2, s3 = costs
    mu = _moe_fixed_point(rps, k, m_ratio, costs)
    phi = laws.expert_coverage(laws.routed_tokens(rps, mu, k), m_ratio, 1.0)
    big = (c1 + phi * s1, c2 + phi * s2, c3 + phi * s3)
    free = 1 - rps * big[1]
    rho = 1 - 4 * rps**2 * big[0] * big[2] / free**2
    d = laws.latency_sensitivities(rps, *big, wall_softness=SOFTNESS)
    beta = -np.log1p(-m_ratio) * rps * (k + 1) * (1 - phi) * mu
    slope = beta * (d[0] * s1 + d[1] * s2 + d[2] * s3)
    opened = closed == 0
    assert np.isfinite(mu).all()
    assert (opened & (rho < SOFTNESS)).sum() >= 5
    assert (opened & (rho < 0)).sum() >= 3  # past the exact wall
    assert (opened & (slope > 0.5)).sum() >= 5
    assert (opened & (phi < 0.5)).sum() >= 20
    assert (closed > 0).sum() >= 50
    assert ((k == 0) & opened).sum() >= 50 and ((k > 0) & opened).sum() >= 50


def test_moe_saturated_row_gives_minus_infinity():
    """A row whose iterate reaches the wall through its coverage (finite at phi = 0)."""
    groups, grp, a_p, passes, rps, conc, closed, k, m_ratio, log_y = _moe_rows(n=50)
    closed = np.zeros_like(closed)
    rps = rps.copy()
    c1, c2, c3, s1, s2, s3 = _moe_costs(groups, grp, a_p, passes)
    i = int(np.argmax(s2 / c2))
    rps[i] = 2.0 / (2.0 * c2[i] + s2[i])  # lambda C2 < 1 at phi = 0, > 1 at phi = 1
    assert np.isfinite(laws.latency(rps[i], c1[i], c2[i], c3[i], wall_softness=SOFTNESS))
    row = (c1[i], c2[i], c3[i], s1[i], s2[i], s3[i])
    assert np.isinf(_moe_fixed_point(rps[i], k[i], m_ratio[i], row))  # the graph's map too
    args = ([groups[key] for key in MOE_GROUP_INPUTS], passes, 0.04, 0.4, grp, a_p)
    out = moe_row_loglik(
        *args, rps, conc, closed, k, m_ratio, log_y, softness=SOFTNESS
    ).eval()  # fmt: skip
    assert out == -np.inf
    # and the same rows finite at half the rate of the exact wall at full coverage
    rps[i] = 0.5 * laws.saturation_rps(c1[i] + s1[i], c2[i] + s2[i], c3[i] + s3[i])
    out = moe_row_loglik(
        *args, rps, conc, closed, k, m_ratio, log_y, softness=SOFTNESS
    ).eval()  # fmt: skip
    assert np.isfinite(out)


def test_moe_needs_nine_group_arrays():
    with pytest.raises(ValueError, match="group_costs needs 9 arrays"):
        moe_row_loglik([np.ones(2)] * 7, np.ones(3), 0.1, 0.1, [0, 1, 0], *[np.ones(3)] * 7,
                       softness=0.0)  # fmt: skip


def _exact_law_latency(lm, point):
    """The rows' latency at ``point`` with the exact curved wall (``inf`` past it), from the
    model's deterministic coefficients and :func:`forward_numpy` (converged fixed point)."""
    r = lm.design.rows
    coef = row_coefs_at(lm, point)
    return forward_numpy(coef, r, r["alpha"], moe=True)[0]


@pytest.mark.slow
def test_moe_sampling_model_equals_the_graph_model():
    """The moe sampling model (compiled fixed point) has the graph model's density and
    gradient: open-loop sweeps up to 93 % of saturation and closed-loop sweeps in one design,
    at points around the start and at one with a lower verifier knee that puts rows past the
    exact curved wall (on the soft plateau)."""
    kwargs = {"model": "moe", "seed": 2}
    df_open, _ = simulate_sweeps(**kwargs, loads=(0.05, 0.35, 0.65, 0.85, 0.93))
    df_closed, _ = simulate_sweeps(**kwargs, closed_loop=True)
    data = validate_sweeps(pd.concat([df_open, df_closed], ignore_index=True)).data
    lm = LatencyModel(build_design(data, "moe"))
    assert (lm.design.rows["closed"] > 0).sum() >= 50
    assert (lm.design.rows["closed"] == 0).sum() >= 50
    ref, fused = lm.model, lm.sampling_model
    assert "latency_loglik" in fused.named_vars and "latency" not in fused.named_vars
    assert [v.name for v in ref.value_vars] == [v.name for v in fused.value_vars]

    f_ref, f_fused = _logp_and_grad(ref), _logp_and_grad(fused)
    start = ref.initial_point()
    start.update({k: v for k, v in lm.feasible_start().items() if k in start})
    rng = np.random.default_rng(0)
    points = [
        [start[v.name] + step * rng.normal(size=np.shape(start[v.name])) for v in ref.value_vars]
        for step in (0.0, 0.05, 0.2)
    ]
    # more curvature: the most loaded open rows past the exact wall, on the soft plateau
    walled = [
        start[v.name] - (2.5 if v.name == "knee_verifier_level" else 0.0) for v in ref.value_vars
    ]
    past = ~np.isfinite(_exact_law_latency(lm, walled))
    assert past.sum() >= 3 and (lm.design.rows["closed"][past] == 0).all()
    for point in [*points, walled]:
        want, got = f_ref(*point), f_fused(*point)
        assert np.isfinite(want[0])
        np.testing.assert_allclose(got[0], want[0], rtol=1e-9)
        for v, a, b in zip(ref.value_vars, got[1:], want[1:], strict=True):
            np.testing.assert_allclose(
                a, b, rtol=0, atol=1e-7 * (np.max(np.abs(b)) + 1), err_msg=v.name
            )
