"""Each sweep's log costs around the cycle decomposition, and truncated log-cost priors.

:func:`c1_deviations` (``C1``: a learned deviation scale, integrated out) and
:func:`sweep_level` (``C2``: a fixed jitter, truncated at the open-loop wall) each in a
centred or non-centred form — the same distribution on another axis
(``priors["centred_sweeps"]``); :func:`below_wall` the truncated Normal of a log ``C2``;
:func:`log_gamma_logp` a Gamma-distributed ratio on its log axis.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt

from specbayes.model.likelihood import collapsed_logp, collapsed_random
from specbayes.model.truncated import TruncatedNormal


def c1_deviations(loc, prior: dict, centred: bool):
    r"""Each sweep's :math:`\log C_1`: its decomposition ``loc`` plus a deviation
    :math:`d_s \sim \mathcal N(0, \tau_{C_1})` with :math:`\tau_{C_1}^2 \sim
    \mathrm{InverseGamma}(a, b)` integrated out (the deviations' density is
    :func:`collapsed_logp` with unit row scales; :math:`\tau_{C_1}` is drawn from its exact
    conditional after sampling, :func:`specbayes.model.sampling.add_collapsed`). With
    the scale sampled, its log axis mixed worst on the demo and the two-drafter set (a long
    tail towards 0, where the data cannot tell a small scale from none;
    ``benchmarks/model_core.md``); integrated out there is no scale to mix.

    Centred (default): :math:`\log C_{1s}` itself is sampled (each sweep's rows pin it more
    tightly than :math:`\tau_{C_1}` does); non-centred: the deviations.
    """
    a, b = (pt.as_tensor(np.float64(prior[p])) for p in ("alpha", "beta"))
    zero = pt.zeros_like(loc)
    # the sampled variable: log C1 around loc (centred) or the deviation around 0
    name, mu = ("log_c1_sweep", loc) if centred else ("log_c1_dev", zero)
    value = pm.CustomDist(
        name, mu, zero, a, b, logp=collapsed_logp, random=collapsed_random,
        signature="(s),(s),(),()->(s)", dims="sweep",
    )  # fmt: skip
    if not centred:
        return loc + value
    pm.Deterministic("log_c1_dev", value - loc, dims="sweep")
    return value


def sweep_level(name: str, loc, tau, wall: np.ndarray | None, centred: bool):
    r"""A sweep's log cost :math:`\mathcal N(\mathrm{loc}, \tau)`, truncated above at ``wall``.

    Centred, or as :math:`\mathrm{loc} + \tau z` with :math:`z` truncated at
    :math:`(\mathrm{wall} - \mathrm{loc})/\tau` — the same distribution, another geometry: the
    non-centred form suits a sweep whose rows pin its cost less tightly than ``tau`` does.
    """
    if wall is None or np.all(np.isinf(wall)):
        if centred:
            return pm.Normal(name, loc, tau, dims="sweep")
        return loc + tau * pm.Normal(f"{name}_z", 0.0, 1.0, dims="sweep")
    if centred:
        return TruncatedNormal(name, loc, tau, upper=wall, dims="sweep")
    z = TruncatedNormal(f"{name}_z", 0.0, 1.0, upper=(wall - loc) / tau, dims="sweep")
    return loc + tau * z


def below_wall(name: str, mu, sigma, wall: np.ndarray, dims: str):
    r"""Log :math:`C_2` prior: Normal truncated above at the wall :math:`-\log\lambda_\max`.

    A plain Normal where every wall is infinite (closed loop): PyMC's ``TruncatedNormal``
    with only infinite bounds mislabels its value variable."""
    if np.all(np.isinf(wall)):
        return pm.Normal(name, mu, sigma, dims=dims)
    return TruncatedNormal(name, mu, sigma, upper=wall, dims=dims)


def log_gamma_logp(value, a, b):
    r"""Log density of :math:`u = \log\rho`, :math:`\rho \sim \mathrm{Gamma}(a, b)` (rate
    :math:`b`): :math:`a \log b - \log\Gamma(a) + a u - b e^{u}`. The log ratio is the
    sampled value itself: a ``Gamma`` on its log axis followed by ``log`` left PyTensor a
    ``log(exp(·))`` that it rewrote or not depending on the process's string hashing, so
    two processes sampled different chains from one seed."""
    return a * pt.log(b) - pt.gammaln(a) + a * value - b * pt.exp(value)


def log_gamma_random(a, b, rng=None, size=None):
    """Draws of :func:`log_gamma_logp`'s :math:`u = \\log\\rho`."""
    return np.log(rng.gamma(a, 1.0 / b, size=size))
