"""The integrated model is sampled in coordinates whitened at its mode (specbayes.model.whitening):
the same density, a constant Jacobian apart, in which a Gaussian posterior is standard."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import nutpie
import pymc as pm
import pytest

from specbayes.model import sampling
from specbayes.model.whitening import EIGEN_FLOOR, factor, hessian, whitened

REPO = Path(__file__).resolve().parents[1]
COV = np.array([[1.0, 0.8, 0.0], [0.8, 1.0, -0.1], [0.0, -0.1, 0.04]])
MEAN = np.array([1.0, -2.0, 0.5])


@pytest.fixture(scope="module")
def gaussian():
    """A correlated Gaussian with scales 1 and 0.2 — and a coordinate of another name and
    shape, with a transform (``scale``), to check the draws are mapped back by variable."""
    with pm.Model(coords={"axis": ["a", "b", "c"]}) as model:
        pm.MvNormal("x", mu=MEAN, cov=COV, dims="axis")
        pm.LogNormal("scale", mu=0.0, sigma=0.5)
    compiled = nutpie.compile_pymc_model(model, jitter_rvs=set())
    density = sampling.compiled_density(compiled)
    centre, _ = sampling.optimised_start(density, compiled.initial_point_func(0))
    return compiled, centre


def test_the_hessian_of_a_quadratic_is_its_matrix():
    a = np.array([[4.0, 1.0], [1.0, 3.0]])
    h = hessian(lambda x: (-0.5 * x @ a @ x, -a @ x), np.array([0.3, -0.7]))
    np.testing.assert_allclose(h, -a, atol=1e-6)


def test_a_gaussian_is_standard_in_the_whitened_coordinates(gaussian):
    """At any z the gradient is -z (the Laplace approximation is exact for a Gaussian), and
    log densities differ as the model's do at the mapped points."""
    compiled, centre = gaussian
    logp = whitened(compiled, centre)._make_logp_func()
    rng = np.random.default_rng(0)
    z0, z1 = rng.normal(size=(2, centre.size))
    (v0, g0), (v1, g1) = logp(z0), logp(z1)
    np.testing.assert_allclose(g0, -z0, atol=1e-5)
    np.testing.assert_allclose(g1, -z1, atol=1e-5)
    np.testing.assert_allclose(v1 - v0, -0.5 * (z1 @ z1 - z0 @ z0), atol=1e-6)


def test_the_factor_inverts_the_precision_and_floors_a_flat_direction():
    precision = np.array([[4.0, 1.0], [1.0, 3.0]])
    scale = factor(precision)
    np.testing.assert_allclose(scale @ scale.T, np.linalg.inv(precision), atol=1e-12)
    # a direction the mode leaves flat or curved the wrong way: the floor's scale, not a NaN
    for flat in (np.diag([4.0, 0.0]), np.diag([4.0, -1.0])):
        sds = np.sqrt(np.diag(factor(flat) @ factor(flat).T))
        np.testing.assert_allclose(sds, [0.5, 1 / np.sqrt(EIGEN_FLOOR)])


def test_whitened_draws_are_the_models_variables_with_its_moments(gaussian):
    compiled, centre = gaussian
    trace = nutpie.sample(
        whitened(compiled, centre), draws=500, tune=300, chains=2, cores=1, seed=3,
        progress_bar=False,
    )  # fmt: skip
    post = trace.posterior
    assert set(post.data_vars) == set(compiled.shape_info[0])  # as the compiled model's draws
    assert post["x"].dims == ("chain", "draw", "axis")
    assert list(post["axis"].values) == ["a", "b", "c"]
    x = post["x"].values.reshape(-1, 3)
    np.testing.assert_allclose(x.mean(0), MEAN, atol=0.15)
    np.testing.assert_allclose(np.cov(x.T), COV, atol=0.15)
    assert float(post["scale"].min()) > 0  # the constrained value, not the log
    assert int(trace.sample_stats.diverging.sum()) == 0


@pytest.mark.slow
def test_without_a_finite_curvature_the_fit_samples_unwhitened(monkeypatch):
    """compile_model on an integrated model whose Hessian fails: the plain compiled model."""
    import pandas as pd

    from specbayes.data import validate_sweeps
    from specbayes.model import build_design, build_model, whitening
    from specbayes.model.sampling import initial_points

    def fails(*args, **kwargs):
        raise whitening.WhiteningError("no finite curvature")

    df = pd.read_parquet(REPO / "data/demo.parquet")
    df = df[(df["verifier"] == "Llama-3.1-8B") & df["cell"].isin(["256x256", "1024x1024"])]
    model = build_model(build_design(validate_sweeps(df.reset_index(drop=True))))
    assert "lin_c0" in model.named_vars
    monkeypatch.setattr(whitening, "whitened", fails)
    compiled = sampling.compile_model(model)
    assert hasattr(compiled, "initial_point_func")  # nutpie's compiled PyMC model
    assert np.isfinite(sampling.compiled_density(compiled)(initial_points(compiled)(1))[0])
