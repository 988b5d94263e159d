"""A check shared by the JAX tests: the gradient NumPyro samples with equals PyMC's."""

from __future__ import annotations

import numpy as np
import pytest


def assert_jax_gradient_is_pymcs(model) -> None:
    """At ``model``'s initial point the JAX log density equals PyTensor's (relative 1e-10)
    and its JAX gradient is finite and equals PyTensor's ``compile_dlogp`` (relative 1e-6;
    entries that are zero up to rounding compare on the gradient's scale). Call after
    ``parallel.jax_chain_method`` registered the erfcx lowering."""
    import jax
    from pymc.sampling.jax import get_jaxified_logp

    point = model.initial_point()
    names = [v.name for v in model.value_vars]
    logp = get_jaxified_logp(model)
    values = [jax.numpy.asarray(point[n]) for n in names]  # jax arrays: .at[] for subtensors
    assert float(logp(values)) == pytest.approx(float(model.compile_logp()(point)), rel=1e-10)
    grads = jax.grad(logp)(values)  # x64: pymc's import
    got = np.concatenate([np.ravel(np.asarray(g)) for g in grads])
    want = model.compile_dlogp()(point)
    assert np.isfinite(want).all()
    assert np.isfinite(got).all(), [
        n for n, g in zip(names, grads, strict=True) if not np.isfinite(g).all()
    ]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-12 * np.abs(want).max())
