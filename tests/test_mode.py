"""The posterior mode and the whitening at it (specbayes.mode): no sampling; the search on the
old core's sd level is the slow tier's (below)."""

from __future__ import annotations

import numpy as np
import pytest

from specbayes.data import validate_sweeps
from specbayes.mode import _value_point, mode_start
from specbayes.model import LatencyModel, build_design, simulate_sweeps

#: The tests of the module's search on the old core's sd level (issue 44 deletes that core):
#: the search and its compiles take ~35 s with a cold compile cache, so the slow tier's.
old_core_sd = pytest.mark.slow


@pytest.fixture(scope="module")
def searched():
    df, _ = simulate_sweeps(seed=11)
    lm = LatencyModel(build_design(validate_sweeps(df).data, "sd"))
    start_ls = lm.feasible_start()
    return lm, start_ls, *mode_start(lm)


def _z_gradient_and_curvature(lm: LatencyModel, point: dict, n_dirs: int = 12):
    """|d logp / dz| and the curvature -v'Hv of the sampling model along random unit
    directions v in z, at ``point`` (constrained values of the free variables)."""
    from pymc.blocking import DictToArrayBijection, RaveledVars

    m = lm.sampling_model
    x0 = DictToArrayBijection.map(_value_point(m, point))
    dlogp = m.compile_dlogp(jacobian=True)
    names = [name for name, _, size, _ in x0.point_map_info for _ in range(size)]
    z = np.array([name == "z" for name in names])

    def grad(x):
        return dlogp(DictToArrayBijection.rmap(RaveledVars(x, x0.point_map_info)))

    rng = np.random.default_rng(0)
    curv = []
    for _ in range(n_dirs):
        v = np.zeros(len(names))
        v[z] = rng.normal(size=z.sum())
        v /= np.linalg.norm(v)
        eps = 1e-4
        curv.append(-v @ (grad(x0.data + eps * v) - grad(x0.data - eps * v)) / (2 * eps))
    return np.linalg.norm(grad(x0.data)[z]), np.array(curv)


@old_core_sd
def test_mode_search_raises_the_density_and_keeps_the_structure(searched):
    lm, _, lm2, start, search = searched
    assert 2 <= len(search.rounds) <= 4
    first, last = search.rounds[0], search.rounds[-1]
    assert first["logp"] > first["logp_start"] + 10.0  # the least-squares start is not the mode
    assert abs(last["logp"] - last["logp_start"]) < 0.05 * abs(first["logp"] - first["logp_start"])
    assert lm2.structure is lm.structure
    assert lm2.design is lm.design
    assert set(start) == {rv.name for rv in lm2.model.free_RVs}


@old_core_sd
def test_start_is_exactly_at_the_mode_and_feasible(searched):
    _, _, lm2, start, _ = searched
    theta, saturated = lm2._start_state(start)
    assert not saturated.any()
    np.testing.assert_allclose(theta, lm2.param.ref, atol=1e-8)
    model = lm2.sampling_model
    assert np.isfinite(model.compile_logp()(_value_point(model, start)))


@old_core_sd
def test_whitened_coordinates_have_unit_curvature_at_the_mode(searched):
    """At the mode the log density is flat in z and its curvature along z is 1 (the
    whitening is the Gauss-Newton precision there, noise growth included); the
    least-squares whitening, built with the rms residual as noise sd, is far from that at
    its own start."""
    lm, start_ls, lm2, start, _ = searched
    g_mode, c_mode = _z_gradient_and_curvature(lm2, start)
    g_ls, c_ls = _z_gradient_and_curvature(lm, start_ls)
    assert g_mode < 1e-2 * g_ls
    np.testing.assert_allclose(c_mode, 1.0, atol=0.05)
    # at the least-squares start: not flat, and curvature far from 1 (some directions not
    # even convex there) — sd data of seed 11: median |c - 1| 0.8
    assert np.median(np.abs(c_ls - 1.0)) > 0.3


@pytest.mark.slow
def test_nutpie_density_serves_every_whitening_of_one_compile(searched):
    """Compiled once from the least-squares model, nutpie's density evaluates the
    mode-whitened model after ``use`` (its whitening enters as shared data): the same log
    density, gradient and deterministics as each model's own graph compile, and the
    sampler's start is the requested point."""
    from specbayes.mode import GraphDensity, NutpieDensity

    lm, start_ls, lm2, start, _ = searched
    density = NutpieDensity(lm)
    for model_lm, point in ((lm, start_ls), (lm2, start), (lm, start_ls)):
        density.use(model_lm)
        graph = GraphDensity(model_lm.sampling_model, point)
        x = graph.flatten(point)
        np.testing.assert_array_equal(density.flatten(point), x)
        f_graph, g_graph = graph.objective(x)
        f_nutpie, g_nutpie = density.objective(x)
        assert np.isfinite(f_graph)
        np.testing.assert_allclose(f_nutpie, f_graph, rtol=1e-9)
        np.testing.assert_allclose(g_nutpie, g_graph, rtol=1e-6, atol=1e-6 * np.abs(g_graph).max())
        np.testing.assert_allclose(
            density.point(x)["log_coef"], graph.point(x)["log_coef"], rtol=1e-10
        )
    # its callbacks release the GIL: the Hessian's differences on two threads are the same
    from specbayes.mode import block_hessian
    from specbayes.model import _blocks

    z, blocks = density.slices["z"][0], _blocks(lm.design)[1]
    np.testing.assert_array_equal(
        block_hessian(density.objective, x, z, blocks, threads=2),
        block_hessian(density.objective, x, z, blocks, threads=1),
    )
    # the data of the first model differ from the second's: the checks above were not vacuous
    assert not np.allclose(
        lm.whitening_data()["whitening_factor"], lm2.whitening_data()["whitening_factor"]
    )
    density.use(lm2)
    compiled = density.for_sampling(start)
    x0 = density.flatten(start)
    assert np.abs(compiled.initial_point_func(0) - x0).max() <= 1.0
    np.testing.assert_array_equal(
        compiled.shared_data["whitening_factor"], lm2.whitening_data()["whitening_factor"]
    )


@pytest.mark.slow
def test_cli_fit_with_start_mode_records_the_search(tmp_path, capsys):
    from specbayes.cli import main
    from specbayes.fit import load_fit

    df, _ = simulate_sweeps(model="moe", seed=7)
    path = tmp_path / "sweeps.csv"
    df.to_csv(path, index=False)
    out = tmp_path / "fit.nc"
    args = ["fit", str(path), "--out", str(out), "--model", "moe", "--core", "legacy"]
    args += ["--start", "mode", "--quiet"]
    assert main([*args, "--draws", "20", "--tune", "20", "--chains", "2"]) == 0
    assert "min bulk ESS" in capsys.readouterr().out
    rounds = load_fit(out).config["mode_search"]["rounds"]
    assert len(rounds) >= 2 and rounds[0]["logp"] > rounds[0]["logp_start"]
    assert load_fit(out).config["sampler_config"]["start"] == "mode"


def test_start_setting_defaults_to_auto_and_rejects_others():
    from specbayes.fit import MODE_START_ROWS, SAMPLER_DEFAULTS, _merge_config

    assert SAMPLER_DEFAULTS["start"] == "auto"
    assert 3_000 < MODE_START_ROWS <= 19_462  # between the sizes measured each way
    with pytest.raises(ValueError, match="start must be"):
        _merge_config({"start": "median"})


@pytest.mark.slow
def test_auto_start_resolves_by_row_count(monkeypatch):
    """``start="auto"`` takes the least-squares start below MODE_START_ROWS fitted rows and
    the mode from there on, and records which one it took."""
    import specbayes.fit as fit_module

    df, _ = simulate_sweeps(seed=7)
    config = {"draws": 10, "tune": 10, "chains": 1}
    small = fit_module._fit_legacy(df, sampler_config=config, progress=False)
    assert small.config["sampler_config"]["start"] == "least_squares"
    assert small.config["mode_search"] is None
    monkeypatch.setattr(fit_module, "MODE_START_ROWS", 10)
    large = fit_module._fit_legacy(df, sampler_config=config, progress=False)
    assert large.config["sampler_config"]["start"] == "mode"
    assert large.config["mode_search"]["rounds"]


@pytest.mark.slow
def test_auto_start_takes_the_mode_for_the_moe_level():
    """The moe level starts at the mode whatever its size (MODE_START_LEVELS)."""
    import specbayes.fit as fit_module

    df, _ = simulate_sweeps(model="moe", seed=7)
    config = {"draws": 10, "tune": 10, "chains": 1}
    f = fit_module.fit(df, model="moe", sampler_config=config, progress=False, core="legacy")
    assert len(f.data) < fit_module.MODE_START_ROWS
    assert f.config["sampler_config"]["start"] == "mode"
    assert f.config["mode_search"]["rounds"]


def test_lbfgs_backs_off_a_wall_next_to_the_minimum():
    """The minimum sits 0.01 from a wall where the objective is infinite (a row at
    lambda C2 >= 1); unit steps from the start overshoot it."""
    from specbayes.mode import lbfgs

    scale = np.array([100.0, 1.0, 0.01])
    target = np.array([0.99, -1.0, 3.0])

    def objective(x):
        if x[0] >= 1.0:
            return np.inf, np.zeros_like(x)
        return float(np.sum(scale * (x - target) ** 2)), 2 * scale * (x - target)

    x, f, iterations = lbfgs(objective, np.zeros(3))
    np.testing.assert_allclose(x, target, atol=1e-4)
    assert f < 1e-8 and iterations < 1000


@old_core_sd
def test_block_hessian_equals_the_dense_hessian(searched):
    """The coloured differences (one gradient per block slot and per hyper-parameter) give
    the same matrix as differencing every coordinate: whitened units meet other
    blocks' only through the hyper-parameters."""
    from specbayes.mode import GraphDensity, block_hessian
    from specbayes.model import _blocks

    lm, start_ls, *_ = searched
    density = GraphDensity(lm.sampling_model, start_ls)
    objective, x0, slices = density.objective, density.flatten(start_ls), density.slices
    blocks = _blocks(lm.design)[1]
    z = slices["z"][0]
    assert len(blocks) > 1  # the colouring mixes blocks
    assert max(len(b) for b in blocks) + len(x0) - (z.stop - z.start) < len(x0)
    sparse = block_hessian(objective, x0, z, blocks)
    h, grad = 1e-6, objective(x0)[1]  # the same forward differences, column by column
    dense = np.column_stack([(objective(x0 + h * e)[1] - grad) / h for e in np.eye(len(x0))])
    dense = 0.5 * (dense + dense.T)
    np.testing.assert_allclose(sparse, dense, atol=1e-6 * np.abs(dense).max())


@old_core_sd
def test_newton_round_converges_to_the_lbfgs_mode(searched):
    """The rounds after the first are Newton's, and they end at the mode a long L-BFGS
    search finds from the same start."""
    from specbayes.mode import find_mode

    lm, start_ls, _, _, search = searched
    assert search.rounds[0]["method"] == "lbfgs"
    assert search.rounds[-1]["method"] == "newton" and search.rounds[-1]["converged"]
    # both from the least-squares start in the same coordinates: the same log density
    _, info = find_mode(lm, start_ls, "lbfgs", max_iter=50000)
    _, newton_info = find_mode(lm, start_ls, "newton")
    assert newton_info["converged"]
    assert abs(newton_info["logp"] - info["logp"]) < 0.05


def test_newton_leaves_a_saddle_and_backs_off_a_wall():
    """f = 1000 ((x^2 - 1)^2 + 10 (y - 0.999)^2) with a wall at y >= 1: from x = 0.05
    (negative curvature) to the minimum at x = 1, y = 0.999, reporting convergence."""
    from specbayes.mode import newton

    def objective(p):
        x, y = p
        if y >= 1.0:
            return np.inf, np.zeros(2)
        f = (x**2 - 1) ** 2 + 10 * (y - 0.999) ** 2
        return 1e3 * f, 1e3 * np.array([4 * x * (x**2 - 1), 20 * (y - 0.999)])

    def hessian(p):
        return 1e3 * np.diag([12 * p[0] ** 2 - 4, 20.0])

    p, _, iterations, converged = newton(objective, hessian, np.array([0.05, -3.0]))
    assert converged and iterations < 50
    np.testing.assert_allclose(p, [1.0, 0.999], atol=1e-4)


def test_mode_start_keeps_the_lbfgs_point_when_newton_meets_a_wall(monkeypatch):
    """If the Hessian's differences cross a wall, the search stops with the first round's
    point (whitened there) and records why."""
    import specbayes.mode as mode

    def wall(*args, **kwargs):
        raise FloatingPointError("the Hessian's differences cross a wall of the law")

    monkeypatch.setattr(mode, "block_hessian", wall)
    df, _ = simulate_sweeps(seed=11)
    lm = LatencyModel(build_design(validate_sweeps(df).data, "sd"))
    lm2, start, search = mode.mode_start(lm)
    assert [r["method"] for r in search.rounds] == ["lbfgs", "newton"]
    assert "wall" in search.rounds[-1]["error"]
    theta, saturated = lm2._start_state(start)
    assert not saturated.any()
    np.testing.assert_allclose(theta, lm2.param.ref, atol=1e-8)
