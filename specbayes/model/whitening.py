r"""Sampling the integrated model in coordinates whitened at its mode.

nutpie begins its warmup knowing nothing of the posterior's scales: its first mass matrix comes
from the gradient at the start, and its diagonal and low-rank parts are learnt from the draws
as the warmup goes. Until they are, the trees are deep. On the paper's dense verifiers with the
sweeps integrated out (369 axes) that early warmup was three quarters of the leapfrog steps of
a fit — 42,000–55,000 per chain against 15,000 for the 1,000 draws (``benchmarks/
fit_speed.md``). The mode is already found before sampling (:func:`~specbayes.model.sampling.
optimised_start`), and the curvature there is the Laplace approximation's precision, so the
sampler is handed the posterior in the coordinates that approximation makes standard:

.. math::

    x = \hat x + L z, \qquad L L^\top = H^{-1}, \qquad
    H = -\nabla^2 \log p(\hat x),

with :math:`H` from central differences of the compiled gradient (``2 d`` gradients) and
:math:`L = V \Lambda^{-1/2}` from its eigendecomposition. The density is the same one:
:math:`p_z(z) = p(\hat x + L z)\,|L|`, a constant Jacobian, so nothing the fit reports changes
— the draws are mapped back to the model's variables by nutpie's expand callback. nutpie still
adapts its mass matrix in :math:`z`, where a Gaussian posterior is the identity.

Only the integrated model (:mod:`specbayes.model.marginal`) is sampled this way: its axes are
the hierarchy's (hundreds), where a dense :math:`d \times d` factor costs less per gradient than
the density; a sampled-sweeps model has two axes per sweep (13,000 on the paper's dense
verifiers), too many for a dense factor.
"""

from __future__ import annotations

import numpy as np

from specbayes.model.sampling import compiled_density, compiled_point

__all__ = ["EIGEN_FLOOR", "HESSIAN_STEP", "WhiteningError", "factor", "hessian", "whitened"]

#: Central-difference step of the Hessian, in the model's unconstrained units (the posterior
#: sds of the paper's dense verifiers' axes are 3·10⁻⁴ and wider).
HESSIAN_STEP = 1e-5

#: Smallest curvature kept along an eigenvector of :math:`H` (a posterior sd of at most 10
#: unconstrained units): a direction the mode leaves flat or curved the wrong way (the search
#: stopped short of the mode) is given this scale, and nutpie's adaptation learns the rest.
EIGEN_FLOOR = 1e-2


class WhiteningError(FloatingPointError):
    """The Hessian at the mode could not be computed (the density is not finite nearby)."""


def hessian(logp_and_grad, x: np.ndarray, step: float = HESSIAN_STEP) -> np.ndarray:
    """The symmetric Hessian of the log density at ``x`` (central differences of the
    gradient ``logp_and_grad(x)[1]``, one axis at a time)."""
    d = x.size
    out = np.empty((d, d))
    for i in range(d):
        e = np.zeros(d)
        e[i] = step
        try:
            out[:, i] = (logp_and_grad(x + e)[1] - logp_and_grad(x - e)[1]) / (2 * step)
        except FloatingPointError as exc:
            raise WhiteningError(f"the density is not finite within {step} of the mode") from exc
    return (out + out.T) / 2


def factor(precision: np.ndarray) -> np.ndarray:
    """:math:`L = V \\Lambda^{-1/2}` with :math:`L L^\\top = H^{-1}` for the symmetric
    ``precision`` :math:`H = V \\Lambda V^\\top`, each eigenvalue at least
    :data:`EIGEN_FLOOR`."""
    eigenvalues, vectors = np.linalg.eigh(precision)
    return vectors / np.sqrt(np.maximum(eigenvalues, EIGEN_FLOOR))


def whitened(compiled, centre: np.ndarray, jitter: float = 1.0):
    """nutpie's model of ``compiled`` (a :func:`nutpie.compile_pymc_model` result) in
    whitened coordinates about ``centre``, each chain started at ``z`` uniform in
    ``±jitter`` (about a posterior sd of the mode along each principal axis).

    The log density and its gradient are nutpie's compiled C callback
    (:func:`~specbayes.model.sampling.compiled_density`); where it is not finite the
    function returns ``-inf``, which nutpie counts as a divergence, as with the callback
    itself (an exception from a Python density stops nutpie's sampler).

    Returns
    -------
    nutpie.compiled_pyfunc.PyFuncModel
        Its draws, mapped back by nutpie's expand callback, carry the model's variables.
    """
    from nutpie.compiled_pyfunc import from_pyfunc

    density = compiled_density(compiled)
    scale = factor(-hessian(density, centre))
    d = centre.size

    def logp(z):
        try:
            value, grad = density(centre + scale @ z)
        except FloatingPointError:
            return -np.inf, np.zeros(d)
        return value, scale.T @ grad

    def start(seed):
        return np.random.default_rng(seed).uniform(-jitter, jitter, d)

    names, _, shapes = compiled.shape_info
    return from_pyfunc(
        d, lambda: logp, lambda *seeds: lambda z: compiled_point(compiled, centre + scale @ z),
        [np.dtype("float64")] * len(names), [tuple(s) for s in shapes], list(names),
        coords=compiled.coords, dims=compiled.dims, make_initial_point_fn=start,
    )  # fmt: skip
