r"""Prediction from a pooled fit for cells it never saw (the hierarchy's job).

For a held-out unit :math:`u^*` of a fitted group, each posterior draw gives

.. math::

    \log c_{u^*} = \mu_{g} + \beta \odot t_{u^*} + s \odot z, \quad z \sim \mathcal N(0, I)
    \qquad(:func:`~specbayes.model_next.hierarchy.log_coefficients`)

then each held-out configuration's costs through :func:`specbayes.laws.effective_costs`, its
sweep deviation :math:`\log C_{js} \sim \mathcal N(\log C_{js}^{\mathrm{eff}}, \tau_j)` (the
:math:`C_2` one truncated at the rows' own fastest open-loop rate, as in the graph: these rows
were measured unsaturated) and each row's log latency :math:`\mathcal N(\log C_1 - \log h,
\sigma)` (:func:`~specbayes.model_next.likelihood.log_mean_latency`).
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from specbayes import laws
from specbayes.model_next.design import Design
from specbayes.model_next.graph import _unit_workload
from specbayes.model_next.hierarchy import log_coefficients, trend_covariates
from specbayes.model_next.likelihood import log_mean_latency


def predict_new_cells(idata, train: Design, new: Design, seed: int = 0) -> np.ndarray:
    """Predictive draws (draw, obs) of log latency of ``new``'s rows from a pooled fit."""
    if train.structure != "pooled":
        raise ValueError("prediction for unseen cells needs the pooled structure")
    rng = np.random.default_rng(seed)
    post = idata.posterior.stack(sample=("chain", "draw"))
    coefs = train.coords["coef"]
    mu = post["coef_mu"].transpose("sample", "group", "coef").values
    slope_t = post["trend"].transpose("sample", "coef_t").values
    slope = np.zeros((mu.shape[0], len(coefs)))
    slope[:, [coefs.index(c) for c in train.coords["coef_t"]]] = slope_t
    cell_sd = np.zeros((mu.shape[0], len(coefs)))
    cols = [coefs.index(c) for c in post["coef_c"].values]
    cell_sd[:, cols] = post["cell_sd"].transpose("sample", "coef_c").values
    tau = post["tau"].transpose("sample", "cost").values
    sigma = post["sigma"].values
    n_draw = mu.shape[0]

    _, centre = trend_covariates(*_unit_workload(train), coefs)
    trend, _ = trend_covariates(*_unit_workload(new), coefs, centre=centre)
    group = np.array([train.coords["group"].index(u.rsplit("|", 1)[0]) for u in new.coords["unit"]])
    z = rng.standard_normal((n_draw, len(group), len(coefs)))
    log_c = log_coefficients(mu, slope, cell_sd, z, group, trend)  # (draw, unit, coef)
    c = np.exp(log_c)[:, new.sweep_unit]  # (draw, sweep, coef)
    full = {name: c[..., i] for i, name in enumerate(coefs)}
    alpha = np.where(np.isfinite(new.alpha), new.alpha, 0.5)
    c1_eff, c2_eff = laws.effective_costs(
        full["c1p"], full["c1v"], full.get("c1d", 0.0),
        full["c2p"], full["c2v"], full.get("c2d", 0.0),
        new.decode, alpha, new.k,
    )  # fmt: skip
    log_c1 = np.log(c1_eff) + tau[:, :1] * rng.standard_normal(c1_eff.shape)
    loc2 = np.log(c2_eff)
    upper = (new.log_wall[None, :] - loc2) / tau[:, 1:]
    log_c2 = loc2 + tau[:, 1:] * stats.truncnorm.rvs(-np.inf, upper, random_state=rng)
    mean = log_mean_latency(
        log_c1[:, new.obs_sweep], log_c2[:, new.obs_sweep], new.load, new.obs_closed
    )
    return mean + sigma[:, None] * rng.standard_normal(mean.shape)
