r"""The model graph: :func:`build_model` reads top to bottom as the math.

.. math::

    \log L_i \sim \mathcal N\big(\log C_{1,s(i)} - \log h(C_{1,s(i)}, C_{2,s(i)};
    \lambda_i \text{ or } N_i),\ \sigma\big)

Each sweep :math:`s` (one configuration over load) has its own costs :math:`C_{1s}, C_{2s}`
— the combinations the data identify, sampled as axes. How they relate to the six cycle
coefficients (:func:`specbayes.laws.effective_costs`) depends on the structure
(:mod:`specbayes.model.design`):

*anchored* (:func:`anchored_costs`) — a unit's dense costs and its SD sweeps' ratios
:math:`C_{jR} = C_{j,\mathrm{sd}}/C_{j,\mathrm{dense}}` are sampled; the prefill shares and,
where alpha is unknown, the tokens per cycle :math:`E` are prior-only positions inside their
feasible intervals; the coefficients are derived exactly (the decomposition holds, nothing
is sampled against a ridge);

*pooled* (:func:`pooled_costs`) — the coefficients follow the hierarchy
(:mod:`specbayes.model.hierarchy`) and each sweep's log costs are Normal around the
decomposition with scale :math:`\tau`.

In both, an open-loop sweep's :math:`\log C_2` is truncated above at
:math:`-\log\lambda_\max` (its fastest observed rate): saturation of an observed row is
outside the prior's support, not a NaN.
"""

from __future__ import annotations

import threading
from functools import partial

import numpy as np
import pandas as pd
import pymc as pm
import pytensor.tensor as pt

from specbayes import laws
from specbayes.model import marginal
from specbayes.model.design import Design
from specbayes.model.experts import expert_costs
from specbayes.model.hierarchy import log_coefficients, take_rows, trend_covariates
from specbayes.model.levels import (
    below_wall,
    c1_deviations,
    log_gamma_logp,
    log_gamma_random,
    sweep_level,
)
from specbayes.model.likelihood import (
    collapsed_logp,
    collapsed_random,
    log_mean_latency,
    log_row_scale,
)
from specbayes.model.metrics import check_metrics, metric_likelihood
from specbayes.model.priors import (
    COEFS,
    cell_centring,
    drafter_prefill_prior,
    group_level_prior,
    merge_priors,
    spec_seq_prior,
)
from specbayes.model.rows import rows_logp, rows_random
from specbayes.model.transforms import SHARE_AXIS, SOFTPLUS, LowerSoftplus, SoftplusTransform
from specbayes.model.truncated import TruncatedNormal

#: Held while :func:`build_model` builds a model. Two models built at once in one process (a
#: Dask cluster of threads) got densities that differ in floating-point order from the same
#: models built one after the other — not in value at 12 digits, but enough to send the
#: optimised start to another local optimum — so their draws depended on the threads' timing
#: (``benchmarks/model_core.md``, 2026-12-05). Sampling, the long part, is not held.
_BUILD_LOCK = threading.Lock()

#: Write the observed rows' density, where the law has no batch curvature or knee, as one
#: compiled pass over the rows (:mod:`specbayes.model.rows`: on the paper set's dense
#: verifiers 1.5x faster per gradient, ``benchmarks/likelihood_speed.md``); ``False`` writes
#: the same density with PyTensor (what the benchmark compares it with).
COMPILED_ROWS = True


def build_model(design: Design, priors: dict | None = None, metrics: tuple = ()) -> pm.Model:
    r"""The generative model of a dataset (every free variable has a proper prior).

    Parameters
    ----------
    design : Design
        From :func:`specbayes.model.design.build_design`.
    priors : dict, optional
        Overrides of :data:`specbayes.model.priors.DEFAULT_PRIORS`.
    metrics : tuple of str
        Per-point metrics to model beside the mean latency, sharing its costs and batch
        (:mod:`specbayes.model.metrics`): observed ``log_metric`` (dims ``metric_obs``).

    Returns
    -------
    pymc.Model
        With observed ``log_latency`` (dims ``obs``), its mean ``mu``, per-sweep costs
        ``log_c1``, ``log_c2`` (dims ``sweep``) and the coefficients as deterministics.
    """
    pr = merge_priors(priors)
    # one model built at a time in a process (:data:`_BUILD_LOCK`)
    with _BUILD_LOCK, pm.Model(coords=design.coords) as model:
        # data: one row per load point
        load = pm.Data("load", design.load, dims="obs")
        sweep = pm.Data("obs_sweep", design.obs_sweep, dims="obs")
        closed = pm.Data("closed", design.obs_closed, dims="obs")
        # log(n/n_ref): the requests each row's mean is taken over (0 where not reported)
        log_count = pm.Data("log_count", design.log_count, dims="obs")

        # per-sweep costs (the identified axes) and the coefficients behind them
        pr = {**pr, "sweeps": marginal.form(design, pr, metrics)}
        if design.structure == "anchored":
            log_c1, log_c2, split = anchored_costs(design, pr)
        else:
            log_c1, log_c2, split = pooled_costs(design, pr)
        if pr["sweeps"] == "marginal":  # integrated out: the costs are drawn after sampling
            growth_axis = _growth_axis(design)
            marginal.integrate_sweeps(design, pr, log_c1, log_c2, log_count, split, growth_axis)
            return model
        log_c1 = pm.Deterministic("log_c1", log_c1, dims="sweep")
        log_c2 = pm.Deterministic("log_c2", log_c2, dims="sweep")
        # the batch curvature (``inverse_knee``) or the knee (``knee``), where the priors ask
        c3, softness = sweep_curvature(design, pr, *split[:4]), pr["wall_softness"]
        c3_row = 0.0 if c3 is None else c3[sweep]
        knee = sweep_knee(design, pr, split[3], split[4])
        knee_row = None if knee is None else (knee[0][sweep], knee[1][sweep])
        # the moe level: each pass's expert reads at the coverage of the tokens it routes
        experts = _experts(design, pr, split[3], c3, knee)

        # likelihood: the latency law, multiplicative noise of scale sigma (1 - x)^-growth with
        # sigma^2 ~ IG(a, b) integrated out (drawn from its exact conditional after sampling)
        mu = pm.Deterministic(
            "mu",
            log_mean_latency(
                log_c1[sweep],
                log_c2[sweep],
                load,
                closed,
                c3_row,
                softness,
                knee=knee_row,
                experts=experts,
            ),
            dims="obs",
        )
        growth = pm.HalfNormal("noise_growth", **pr["noise_growth"], **_growth_axis(design))
        # the noise grows with the utilisation of the law without the knee: a row placed past
        # the knee's wall must not buy itself a wide noise (the law's own wall is a prior
        # bound, the knee's is not); nor with the expert coverage, which is no queue
        scale_mu = mu
        if knee is not None or experts is not None:
            scale_mu = pm.Deterministic(
                "noise_mu",
                log_mean_latency(log_c1[sweep], log_c2[sweep], load, closed, c3_row, softness),
                dims="obs",
            )
        a, b = (pt.as_tensor(np.float64(pr["noise"][p])) for p in ("alpha", "beta"))
        if COMPILED_ROWS and c3 is None and knee is None and experts is None:
            # the law alone: the same density in one compiled pass over the rows (rows.py)
            rows = dict(sweep=sweep, load=load, closed=closed)
            data = dict(sweep=design.obs_sweep, load=design.load, closed=design.obs_closed)
            pm.CustomDist(
                "log_latency", log_c1, log_c2, growth, log_count, a, b,
                logp=partial(rows_logp, **rows), random=partial(rows_random, **data),
                signature="(s),(s),(),(n),(),()->(n)", observed=design.log_latency, dims="obs",
            )  # fmt: skip
        else:
            pm.CustomDist(
                "log_latency", mu, log_row_scale(scale_mu, log_c1[sweep], growth, log_count),
                a, b, logp=collapsed_logp, random=collapsed_random,
                signature="(n),(n),(),()->(n)", observed=design.log_latency, dims="obs",
            )  # fmt: skip
        if metrics:
            metric_likelihood(design, pr, check_metrics(metrics), log_c1, log_c2, mu, experts)
    return model


def _experts(design: Design, pr: dict, passes, c3, knee):
    """The rows' ``experts`` argument of :func:`log_mean_latency` on the ``moe`` level
    (:func:`~specbayes.model.experts.expert_costs`), else ``None``."""
    if design.level != "moe":
        return None
    if c3 is not None or knee is not None:
        raise ValueError("the moe level has no batch curvature or knee: drop those priors")
    sweep = design.obs_sweep
    c1s = expert_costs(design, pr, passes)
    return c1s[sweep], design.extra["expert_ratio"][sweep], design.k[sweep]


def _growth_axis(design: Design) -> dict:
    """The sampled axis of ``noise_growth``: softplus in the anchored structure (a few rows per
    sweep: gamma's posterior reaches 0 and meets the wall described in
    :class:`SoftplusTransform`), PyMC's log axis in the pooled one (hundreds of rows pin gamma
    away from 0; there the softplus axis moved trajectories into the trend shares' and cell
    scale's thin regions: 1–2 divergences on the test and validation fits,
    ``benchmarks/model_core.md``). The model is the same either way."""
    return {"default_transform": SOFTPLUS} if design.structure == "anchored" else {}


def anchored_costs(design: Design, pr: dict) -> tuple:
    r"""Sweep costs of the anchored structure; the coefficients as derived deterministics.

    Returns :math:`\log C_1, \log C_2` per sweep and the parts of :math:`C_2`
    :func:`sweep_curvature` needs (:func:`_anchored_split`).

    Per unit :math:`u` (its dense sweep) and SD sweep :math:`s` of that unit, with
    :math:`q_s = g_s/g_u` (decode lengths) and :math:`E_\max` = :math:`E(\alpha,k)` or
    :math:`k+1` where alpha is unknown:

    .. math::

        \log C_{1u} &\sim \mathcal N, \qquad
        \log C_{2u} \sim \mathcal N_{(-\infty,\ -\log\lambda_{\max,u})} \\
        \log C_{jR,s} &\sim \mathcal N_{(\log(q_s/E_\max),\ \cdot)}, \quad
        \text{upper } -\log\lambda_{\max,s} - \log C_{2u} \text{ for } j = 2 \\
        \pi_{ju} &= \pi^{\max}_{ju}\,\mathrm{logistic}(\eta_{ju}), \qquad
        \pi^{\max}_{ju} = \min\big(1, \min_s \tfrac{C_{jR,s} - q_s/E_\max}{1 - q_s/E_\max}\big) \\
        \rho_{js} &= \frac{C_{jR,s} - \pi_{ju}}{1 - \pi_{ju}}, \qquad
        E_s = E_\mathrm{lo} + (k + 1 - E_\mathrm{lo})\,\mathrm{logistic}(\zeta_s),\quad
        E_\mathrm{lo} = \max(1, q_s/\rho_{1s}, q_s/\rho_{2s})

    and then, exactly, :math:`c_{jp} = \pi_j C_{ju}`, :math:`c_{jv} = (1-\pi_j) C_{ju}/g_u`,
    :math:`c_{jd} = (\rho_j E_s/q_s - 1)\,c_{jv}/k` — positive by construction, and
    :func:`specbayes.laws.effective_costs` of them returns :math:`C_{j,\mathrm{sd}}`.

    The sampler moves the ratios on :class:`LowerSoftplus`' axis (the prior is unchanged):
    on the default log axis above the floor a well-pinned SD cost
    :math:`\log C_{2u} + \log C_{2R}` against a loosely pinned dense one is a bent ridge,
    :math:`\log C_{2u} \approx \mathrm{const} - e^{u}`, which the mass matrix cannot
    straighten; a prior sd above the floor the axis is linear and the ridge straight
    (``benchmarks/model_core.md``, 2026-12-07).
    """
    units = design.unit_dense
    log_c1u = pm.Normal("log_c1_dense", **pr["log_c1_dense"], dims="unit")
    log_c2u = below_wall(
        "log_c2_dense", **pr["log_c2_dense"], wall=design.log_wall[units], dims="unit"
    )
    log_c1, log_c2 = log_c1u[design.sweep_unit], log_c2u[design.sweep_unit]
    if len(design.sd) == 0:
        _, c_p, c_v = _verifier_split(pr, log_c1u, log_c2u, design.decode[units], 1.0)
        return log_c1, log_c2, _anchored_split(design, c_p, c_v, None, None)

    sd, su = design.sd, design.sweep_unit[design.sd]
    q = design.decode[sd] / design.decode[units[su]]
    floor = q / design.e_max[sd]  # C_R of ideal speculation: every draft accepted, free drafter
    log_floor = np.log(floor)
    # the ratios' axis (docstring): linear a prior sd above the floor; where an open-loop
    # sweep bounds the C2 ratio above too, PyMC's interval axis
    axis = {"default_transform": LowerSoftplus(log_floor, pr["log_ratio"]["sigma"])}
    closed = np.all(np.isinf(design.log_wall[sd]))
    ratio_1 = TruncatedNormal(
        "log_c1_ratio", **pr["log_ratio"], lower=log_floor, dims="sd_sweep", **axis
    )
    ratio_2 = TruncatedNormal(
        "log_c2_ratio",
        **pr["log_ratio"],
        lower=log_floor,
        upper=design.log_wall[sd] - log_c2u[su],
        dims="sd_sweep",
        **(axis if closed else {}),
    )
    log_c1 = pt.set_subtensor(log_c1[sd], log_c1u[su] + ratio_1)
    log_c2 = pt.set_subtensor(log_c2[sd], log_c2u[su] + ratio_2)
    parts = _derive_coefficients(design, pr, log_c1u, log_c2u, ratio_1, ratio_2, q, floor)
    return log_c1, log_c2, _anchored_split(design, *parts)


def _anchored_split(design: Design, c_p, c_v, c_d, tokens) -> tuple:
    r"""Per sweep :math:`(c_{2p}, c_{2v}, c_{2d}, w)` of the anchored structure: its unit's
    verifier coefficients, its drafter's :math:`c_{2d}` (0 dense) and its verifier passes
    :math:`w = g/E` (``tokens``: :math:`E` of the SD sweeps); and per group the geometric
    mean of its units' :math:`c_{2v}` (:func:`sweep_knee`)."""
    su = design.sweep_unit
    c2d = pt.zeros(len(design.k))
    passes = pt.as_tensor_variable(design.decode.astype(float))
    if c_d is not None:
        c2d = pt.set_subtensor(c2d[design.sd], c_d[:, 1])
        passes = pt.set_subtensor(passes[design.sd], design.decode[design.sd] / tokens)
    member = design.unit_group[None, :] == np.arange(len(design.coords["group"]))[:, None]
    weight = member / member.sum(axis=1, keepdims=True)
    c2v_group = pt.exp(pt.dot(weight, pt.log(c_v[:, 1])))
    return c_p[su, 1], c_v[su, 1], c2d, passes, c2v_group


def sweep_curvature(design: Design, pr: dict, c2p, c2v, c2d, passes):
    r"""Each sweep's batch curvature :math:`C_3`, or ``None`` without ``inverse_knee``.

    .. math::

        \log\omega_g \sim \mathcal N(m, s), \qquad K_g = R_{h(g)}/\omega_g, \qquad
        C_{3s} = \mathrm{token\_knee\_curvature}(c_{2p}, c_{2v}, c_{2d}, w_s, k_s; K_{g(s)})

    one knee :math:`K_g` (tokens per pass) per (verifier, hardware) around the GPU's roofline
    ridge :math:`R` (:func:`specbayes.model.physics.ridge_tokens`), shared by every
    sweep of the group: the rows of its dense and SD sweeps and its cells all inform it.
    Where they do not reach — loads beyond the measured ones — the prior's range of
    :math:`\omega`, from no curvature to a knee at a fraction of the ridge, is what the
    predictions carry (``benchmarks/load_extrapolation.md``).
    """
    if pr["inverse_knee"] is None:
        return None
    from specbayes.model.physics import ridge_tokens

    groups = design.coords["group"]
    ridge = np.array([ridge_tokens(g.split("|", 1)[1]) for g in groups])
    omega = pm.LogNormal("inverse_knee", **pr["inverse_knee"], dims="group")
    knee = pm.Deterministic("knee_tokens", ridge / omega, dims="group")
    group = design.unit_group[design.sweep_unit]
    c3 = laws.token_knee_curvature(
        c2p, c2v, c2d, design.decode, None, design.k, knee[group], passes=passes
    )
    return pm.Deterministic("c3", c3, dims="sweep")


def sweep_knee(design: Design, pr: dict, passes, c2v_group):
    r"""Each sweep's knee :math:`(B_K, \Delta)`, or ``None`` without the ``knee`` prior.

    .. math::

        \log(K_g/R_{h(g)}) \sim \mathcal N(m_K, s_K), \qquad
        \log\kappa_g \sim \mathcal N(m_\kappa, s_\kappa), \qquad
        (B_{K,s}, \Delta_s) = \mathrm{knee\_costs}(K_{g(s)}, \kappa_{g(s)}, \bar c_{2v,g(s)},
        w_s, k_s)

    one knee in tokens per verifier pass :math:`K_g` and one excess :math:`\kappa_g` per
    (verifier, hardware), around the GPU's roofline ridge :math:`R`
    (:func:`specbayes.model.physics.ridge_tokens`): past :math:`B_K = K/(k+1)` requests
    each request costs :math:`\Delta = \kappa(k+1)w\,\bar c_{2v}` more
    (:func:`specbayes.laws.knee_latency`). Every sweep of the group informs them — an SD arm
    reaches the knee :math:`k + 1` times sooner than its dense arm. :math:`\bar c_{2v}`
    (``knee_c2v``) is the group's verifier cost per request and pass — its level in the
    pooled structure, the geometric mean of its units' in the anchored one — not the cell's:
    the knee's extra is compute, the same per token in every cell, while a cell's
    :math:`c_{2v}` carries its own KV reads (with the cell's, the 256- and 1,024-token
    prompts wanted different excesses: ``benchmarks/knee.md``).
    """
    prior = pr.get("knee")
    if prior is None:
        return None
    from specbayes.model.physics import ridge_tokens

    groups = design.coords["group"]
    ridge = np.array([ridge_tokens(g.split("|", 1)[1]) for g in groups])
    at = pm.Normal("knee_log_ridges", **prior["ridges"], dims="group")
    knee_at = pm.Deterministic("knee_at", ridge * pt.exp(at), dims="group")
    excess = pm.LogNormal("knee_excess", **prior["excess"], dims="group")
    c2v_group = pm.Deterministic("knee_c2v", c2v_group, dims="group")
    group = design.unit_group[design.sweep_unit]
    batch, slope = laws.knee_costs(
        knee_at[group], excess[group], c2v_group[group], passes, design.k
    )
    return (
        pm.Deterministic("knee_batch", batch, dims="sweep"),
        pm.Deterministic("knee_slope", slope, dims="sweep"),
    )


def _derive_coefficients(design, pr, log_c1u, log_c2u, ratio_1, ratio_2, q, floor) -> tuple:
    """Prefill shares, tokens per cycle and the six coefficients (see :func:`anchored_costs`);
    returns the verifier's :math:`c_p, c_v` per (unit, cost), the drafter's :math:`c_d` per
    (SD sweep, cost) and the SD sweeps' tokens per cycle."""
    sd, su = design.sd, design.sweep_unit[design.sd]
    ratios = pt.stack([pt.exp(ratio_1), pt.exp(ratio_2)], axis=1)  # (sd_sweep, cost)
    bound = (ratios - floor[:, None]) / (1.0 - floor[:, None])
    member = su[None, :] == np.arange(len(design.unit_dense))[:, None]  # (unit, sd_sweep)
    share_max = pt.minimum(1.0, pt.min(pt.where(member[:, :, None], bound[None], 1.0), axis=1))
    g_u = design.decode[design.unit_dense]
    share, c_p, c_v = _verifier_split(pr, log_c1u, log_c2u, g_u, share_max)
    rho = (ratios - share[su]) / (1.0 - share[su])  # per-token SD/dense cost ratio

    unknown = ~np.isfinite(design.alpha[sd])
    tokens = pt.as_tensor_variable(design.e_max[sd])
    if unknown.any():
        zeta = pm.Normal("tokens_logit", **pr["tokens_logit"], dims="sd_unknown")
        e_lo = pt.maximum(1.0, pt.max(q[:, None] / rho, axis=1))[unknown]
        k1 = design.k[sd][unknown] + 1.0
        tokens = pt.set_subtensor(tokens[unknown], e_lo + (k1 - e_lo) * pm.math.sigmoid(zeta))
    tokens = pm.Deterministic("tokens_per_cycle", tokens, dims="sd_sweep")

    k = design.k[sd][:, None]
    c_d = (rho * tokens[:, None] / q[:, None] - 1.0) * c_v[su] / k
    coefs = pt.stack([c_p[su, 0], c_v[su, 0], c_d[:, 0], c_p[su, 1], c_v[su, 1], c_d[:, 1]], axis=1)
    pm.Deterministic("coefficients", coefs, dims=("sd_sweep", "coef"))
    return c_p, c_v, c_d, tokens


def _verifier_split(pr: dict, log_c1u, log_c2u, g_u: np.ndarray, share_max):
    r"""A unit's verifier coefficients from its dense costs and prefill share :math:`\pi_j`:
    :math:`c_{jp} = \pi_j C_{ju}`, :math:`c_{jv} = (1 - \pi_j) C_{ju}/g_u`, with
    :math:`\pi_j = \pi^\max_j\,\mathrm{logistic}(\eta_j)` a prior-only position (one dense
    sweep does not split its fixed cost between the prefill and the decode steps)."""
    eta = pm.Normal("share_logit", **pr["share_logit"], dims=("unit", "cost"))
    share = pm.Deterministic(
        "prefill_share", share_max * pm.math.sigmoid(eta), dims=("unit", "cost")
    )
    c_dense = pt.stack([pt.exp(log_c1u), pt.exp(log_c2u)], axis=1)  # (unit, cost)
    c_p, c_v = share * c_dense, (1.0 - share) * c_dense / g_u[:, None]
    pm.Deterministic(
        "unit_coef", pt.stack([c_p[:, 0], c_v[:, 0], c_p[:, 1], c_v[:, 1]], axis=1),
        dims=("unit", "coef_v"),
    )  # fmt: skip
    return share, c_p, c_v


def pooled_costs(design: Design, pr: dict) -> tuple:
    r"""Sweep costs of the pooled structure: hierarchy → decomposition → per-sweep deviation
    (and, for :func:`sweep_curvature`, each sweep's :math:`c_{2p}, c_{2v}, c_{2d}, w`; for
    :func:`sweep_knee`, each group's level of :math:`c_{2v}`).

    .. math::

        \log c_{uj} &= \mu_{g(u)j} + \log(1 - w_j + w_j e^{t_{uj}}) + d_{uj}, \qquad
        d_{uj} \sim \mathcal N(0, s_j) \text{ (0 for coefficients without a cell level)}
        \quad(:func:`~specbayes.model.hierarchy.log_coefficients`) \\
        (C_{1s}^{\mathrm{eff}}, C_{2s}^{\mathrm{eff}}) &=
        \mathrm{effective\_costs}(c_{u(s)}, g_s, \alpha_s, k_s) \\
        \log C_{1s} &\sim \mathcal N(\log C_{1s}^{\mathrm{eff}}, \tau_1), \qquad
        \log C_{2s} \sim \mathcal N_{(-\infty, -\log\lambda_{\max,s})}
        (\log C_{2s}^{\mathrm{eff}}, \tau_2)

    The verifier coefficients :math:`c_{1p}, c_{1v}, c_{2p}, c_{2v}` live on units
    (verifier, hardware, cell) with group levels per (verifier, hardware); the drafter
    coefficients :math:`c_{1d}, c_{2d}` on draft units (one more index: the drafter) with
    group levels per (verifier, hardware, drafter) — several drafters of one verifier each
    have their own, pooled across its cells by the same trend shares :math:`w` and cell
    scales :math:`s`. :math:`\mu` is centred at the roofline magnitudes where the catalog
    knows the verifier, GPU and drafter (:func:`~specbayes.model.priors.group_level_prior`),
    :math:`\tau_1` learned — integrated out (:func:`~specbayes.model.levels.c1_deviations`;
    sampled where the ``c1_dev`` prior is None) — and :math:`\tau_2` a fixed jitter; each
    sweep's log C1 is sampled centred, its log C2 non-centred
    (:func:`~specbayes.model.levels.sweep_level`, ``centred_sweeps``).
    """
    coefs = design.coords["coef"]
    trend, centre = trend_covariates(*_unit_workload(design), coefs)
    prior = group_level_prior(design, pr, centre)
    # the share of each trended coefficient that grows with its cell covariate
    share_t = _trend_shares(design, pr)
    share = _scatter(share_t, [coefs.index(c) for c in design.coords["coef_t"]], len(coefs))
    # cell deviations only where a cell's own rows pin the coefficient (c1p is a small part
    # of C1 — its cells follow the prefill trend alone)
    deviating = [c for c in coefs if c in pr["cell_coefs"]]
    pm.Model.get_context().add_coord("coef_c", deviating)
    cell_sd = pm.LogNormal("cell_sd", **pr["cell_sd"], dims="coef_c")
    cell_sd = _scatter(cell_sd, [coefs.index(c) for c in deviating], len(coefs))
    parts = {"verifier": design.coords["coef_v"], "drafter": design.coords["coef_d"]}
    cols = {part: [coefs.index(c) for c in names if c in coefs] for part, names in parts.items()}

    mu_v = _group_levels(design, pr, *prior["verifier"])
    log_cv = pm.Deterministic(
        "log_coef",
        _cell_level(pr, "unit", design.coords["coef_v"], mu_v, design.unit_group,
                    trend[:, cols["verifier"]], share[cols["verifier"]],
                    cell_sd[cols["verifier"]]),
        dims=("unit", "coef_v"),
    )  # fmt: skip
    c_v = take_rows(pt.exp(log_cv), design.sweep_unit, len(design.coords["coef_v"]))
    c_d = pt.zeros((len(design.k), 2))
    if design.coords["draft_unit"] and design.level != "dense":
        mu_d = _drafter_levels(design, pr, mu_v, *prior["drafter"])
        log_cd = pm.Deterministic(
            "log_coef_draft",
            _cell_level(pr, "draft_unit", design.coords["coef_d"], mu_d, design.draft_group_of,
                        trend[design.draft_unit_of][:, cols["drafter"]],
                        share[cols["drafter"]], cell_sd[cols["drafter"]]),
            dims=("draft_unit", "coef_d"),
        )  # fmt: skip
        # dense sweeps take any draft unit's values: k = 0 multiplies them by nothing
        c_d = take_rows(pt.exp(log_cd), np.maximum(design.sweep_draft, 0),
                      len(design.coords["coef_d"]))  # fmt: skip
    passes = laws.verifier_passes(design.decode, _sweep_alpha(design, pr), design.k)
    c1_eff, c2_eff = laws.effective_costs(
        c_v[:, 0], c_v[:, 1], c_d[:, 0], c_v[:, 2], c_v[:, 3], c_d[:, 1],
        design.decode, None, design.k, passes, c1c=_cycle_overhead(design, pr),
        c2c=_spec_seq_overhead(design, pr, trend, centre),
        prefill_share=_drafter_prefill(design, pr, centre),
    )  # fmt: skip
    if pr["sweeps"] == "marginal":  # the sweeps integrated out (marginal.py): no latents
        log_c1 = pm.Deterministic("log_c1_eff", pt.log(c1_eff), dims="sweep")
        log_c2 = pm.Deterministic("log_c2_eff", pt.log(c2_eff), dims="sweep")
        return log_c1, log_c2, (None, None, None, passes, None)
    # C1's deviation scale is learned (integrated out, drawn after sampling by
    # sampling.add_collapsed; sampled where c1_dev is None); C2's is a fixed jitter
    centred = pr["centred_sweeps"]
    jitter = pm.Data("c2_jitter", np.float64(pr["c2_jitter"]))
    if pr["c1_dev"] is None:
        tau_c1 = pm.Gamma("tau_c1", **pr["tau"])
        tau = pm.Deterministic("tau", pt.stack([tau_c1, jitter]), dims="cost")
        log_c1 = sweep_level("log_c1_sweep", pt.log(c1_eff), tau[0], None, centred["C1"])
    else:
        log_c1 = c1_deviations(pt.log(c1_eff), pr["c1_dev"], centred["C1"])
    log_c2 = sweep_level("log_c2_sweep", pt.log(c2_eff), jitter, design.log_wall, centred["C2"])
    c2v_group = pt.exp(mu_v[:, design.coords["coef_v"].index("c2v")])
    return log_c1, log_c2, (c_v[:, 2], c_v[:, 3], c_d[:, 1], passes, c2v_group)


def _trend_shares(design: Design, pr: dict):
    r"""The trended coefficients' shares :math:`w_j`, :math:`\mathrm{logit}\,w_j \sim
    \mathcal N(m, s)` (``trend``), dims ``coef_t``.

    Sampled on the logit axis; those in ``share_axis`` (default ``("c2p",)``) on
    :class:`~specbayes.model.transforms.ShareTransform`'s (the same prior): a request's
    prefill cost per concurrent request grows about in proportion to its prompt
    (``docs/model.md``), so its share sits near 1, where the logit axis stretches a posterior
    that the small-prefill cells pin linearly in :math:`w` into a skewed, bent ridge (the
    two-drafter set's worst-mixing variable, ``benchmarks/model_core.md``). Shares the rows
    leave to the prior (``c1p``) keep the logit axis: on the clamp's axis their prior's tail
    near 1 is a steep wall (10 divergences on the default tier's set with every share on it).
    """
    names = design.coords["coef_t"]
    unknown = sorted(set(pr["share_axis"]) - set(COEFS))
    if unknown:
        raise ValueError(f"share_axis names {unknown}, not coefficients; known: {list(COEFS)}")
    model = pm.Model.get_context()
    near_one = [c for c in names if c in pr["share_axis"]]
    rest = [c for c in names if c not in near_one]
    parts = {}
    if rest:
        model.add_coord("coef_t_logit", rest)
        w = pm.math.sigmoid(pm.Normal("trend_logit", **pr["trend"], dims="coef_t_logit"))
        parts.update({c: w[i] for i, c in enumerate(rest)})
    for c in near_one:
        parts[c] = pm.LogitNormal(f"trend_{c}", **pr["trend"], default_transform=SHARE_AXIS)
    return pm.Deterministic("trend", pt.stack([parts[c] for c in names]), dims="coef_t")


def _spec_seq_overhead(design: Design, pr: dict, trend: np.ndarray, centre: np.ndarray):
    r"""Each sweep's cost per sequence of a speculative cycle :math:`c_{2c}`, or 0.

    With the ``spec_seq_overhead`` prior: one :math:`\log c^*_{2c} \sim \mathcal N(m, s)` per
    (verifier, hardware, drafter) at the trend's centre cell (``spec_seq_group``: the groups
    whose GPU runs a verification's queries unpacked, or that the catalog does not know), from
    :func:`~specbayes.model.priors.spec_seq_prior`, scaled to a workload by its context,
    :math:`c_{2c} = c^*_{2c}\,\bar s_u/\bar s^*` with :math:`\bar s = p + g/2` (the
    attention work a verification computes unpacked grows with the context it attends to:
    :func:`specbayes.model.physics.spec_seq_centre`).
    """
    if pr.get("spec_seq_overhead") is None or not design.coords["draft_unit"]:
        return 0.0
    if design.level == "dense":  # dense sweeps pay no speculative cycle
        return 0.0
    groups, loc, scale = spec_seq_prior(design, pr, centre)
    if not groups:
        return 0.0
    # 0 where the kernel packs the GQA group
    c2c = _per_sweep_lognormal(design, "spec_seq_overhead", "spec_seq_group", groups, loc, scale)
    context = np.exp(trend[:, design.coords["coef"].index("c2v")])[design.sweep_unit]
    return c2c * context


def _drafter_prefill(design: Design, pr: dict, centre: np.ndarray):
    r"""Each sweep's drafter prefill share :math:`\rho` (0 on dense sweeps).

    With the ``drafter_prefill`` prior: one :math:`\log\rho \sim \mathcal N(m, s)` per
    (verifier, hardware, drafter) (:func:`~specbayes.model.priors.drafter_prefill_prior`),
    the same in every cell: the drafter's prompt compute over the verifier's, which the
    cells' prompt lengths barely move (3.36–3.32 % for an EAGLE-3 head from 256 to 4,096
    tokens, 10.8–11.7 % for a draft model). An SD request's prefill then costs
    :math:`c_p(1 + \rho)` (:func:`specbayes.laws.effective_costs`).
    """
    if pr.get("drafter_prefill") is None or not design.coords["draft_unit"]:
        return 0.0
    if design.level == "dense":
        return 0.0
    groups, loc, scale = drafter_prefill_prior(design, pr, centre)
    if not groups:
        return 0.0
    # 0 for a drafter the catalog does not know
    rho = _per_sweep_lognormal(design, "drafter_prefill", "prefill_group", groups, loc, scale)
    return rho * (design.k > 0)


def _per_sweep_lognormal(design: Design, name: str, coord: str, groups: list, loc, scale):
    """One log-normal ``name`` per draft group in ``groups`` (dims ``coord``), as each sweep's
    value through its draft group (0 for a group not in ``groups``)."""
    pm.Model.get_context().add_coord(coord, groups)
    value = pm.LogNormal(name, loc, scale, dims=coord)
    index = [design.coords["draft_group"].index(g) for g in groups]
    value = _scatter(value, index, len(design.coords["draft_group"]))
    return value[design.draft_group_of[np.maximum(design.sweep_draft, 0)]]


def _cycle_overhead(design: Design, pr: dict):
    r"""Each sweep's fixed C1 cost per speculative cycle :math:`c_{1c}`, or 0.

    With the ``cycle_overhead`` prior: one :math:`\log c_{1c} \sim \mathcal N(m, s)` per
    (verifier, hardware, drafter) — the speculative step's own work (rejection sampling,
    the proposer's bookkeeping), the same in every cell — paid by its SD sweeps' cycles
    (:func:`specbayes.laws.effective_costs`). Without it, a cycle at k = 0 costs a dense step
    (the paper's decomposition) and a fixed per-cycle cost is left to ``k c_{1d}`` and the
    sweeps' C1 deviations.

    Sampled on a softplus axis scaled by the prior's median, :math:`c_{1c} = m\,
    \mathrm{softplus}(u)` (:class:`SoftplusTransform`; the LogNormal prior is unchanged): the
    rows pin :math:`c_{1c}` additively — an SD sweep's cycle pays
    :math:`c_{1v} + c_{1c} + k c_{1d}`, its dense sweep's step :math:`c_{1v}`, so
    :math:`c_{1c}` is a difference of well-measured costs of which it is a few per cent,
    known to about the same precision in seconds whatever its size. Its posterior is then
    near-Gaussian in seconds (skewness −0.04 to 0.31 at seed 6 of the held-out-cell test) and
    left-skewed on the log axis (−0.46 to −1.17), most where it reaches towards 0: there the
    log axis bent its ridge against :math:`\mu_{c_{1v}}` and :math:`c_{1d}` (correlations
    −0.74, −0.43), which the mass matrix does not straighten, and ``cycle_overhead`` mixed
    worst (bulk ESS 315; ``benchmarks/model_core.md``, 2026-12-06). The softplus axis is
    linear above :math:`m` and logarithmic below it, where the prior's own tail decides.
    """
    prior = pr.get("cycle_overhead")
    if prior is None or not design.coords["draft_unit"] or design.level == "dense":
        return 0.0
    axis = SoftplusTransform(np.exp(np.asarray(prior["mu"], float)))
    c1c = pm.LogNormal("cycle_overhead", **prior, dims="draft_group", default_transform=axis)
    # dense sweeps take any draft group's value: effective_costs pays it only where k > 0
    return c1c[design.draft_group_of[np.maximum(design.sweep_draft, 0)]]


def _drafter_levels(design: Design, pr: dict, mu_v, loc, scale, relative, catalogued):
    r"""Group log drafter coefficients per (verifier, hardware, drafter), ``coef_mu_draft``.

    Where the catalog knows the drafter: :math:`\mathcal N(\text{loc}, \text{scale})` around
    its roofline magnitude, as the coefficient :math:`c = e^\mu` itself
    (``coef_draft_roofline``, log-normal) sampled on a softplus axis scaled by the prior's
    median (:class:`SoftplusTransform`; the prior is unchanged). The rows pin a drafter's costs
    additively — a few per cent of a cycle, known to about the same precision in seconds
    whatever their size — and, with alpha unknown, along a ridge with every workload's
    acceptance (a dearer draft token, more of them accepted). On the log axis that ridge bent
    where the cost shrinks toward 0 (the acceptance stops following it), and the EAGLE-3
    head's levels mixed worst on the two-drafter set (bulk ESS 226–284 at three
    seeds of four; ``benchmarks/model_core.md``, 2026-12-06 11:05). A drafter the catalog
    does not know, with ``drafter_ratio`` off, takes the generic ``coef_mu`` entry
    (``coef_mu_draft_generic``) on the log axis: its prior spans orders of magnitude, so its
    median is no scale for a softplus axis (on one held-out-cell set the axis there left a
    chain stuck from its start: 1,228 divergences).

    Elsewhere relative to the verifier's level on that GPU,
    :math:`\mu_{c_{jd}} = \mu_{c_{jv}} + \log\rho_j` with the cost ratio
    :math:`\rho_j \sim \mathrm{Gamma}` (``drafter_ratio``): zero-avoiding, because the rows
    stop constraining a drafter's cost once it adds little to a pass while every workload's
    latent alpha can follow it down — on the log axis an unbounded ridge.
    """
    coef_v, groups = design.coords["coef_v"], design.coords["group"]
    group = [groups.index(g.rsplit("|", 1)[0]) for g in design.coords["draft_group"]]
    verifier = mu_v[group][:, [coef_v.index("c1v"), coef_v.index("c2v")]]
    labels = [
        f"{g}|{c}" for g in design.coords["draft_group"] for c in design.coords["coef_d"]
    ]  # flat (draft_group, coef_d)
    rel = np.flatnonzero(relative.ravel())
    known = np.flatnonzero(catalogued.ravel())  # never relative (group_level_prior)
    generic = np.flatnonzero(~relative.ravel() & ~catalogued.ravel())
    flat = pt.zeros(relative.size)
    if len(rel):
        pm.Model.get_context().add_coord("drafter_rel", [labels[i] for i in rel])
        log_ratio = pm.CustomDist(
            "drafter_log_ratio",
            float(pr["drafter_ratio"]["alpha"]),
            float(pr["drafter_ratio"]["beta"]),
            logp=log_gamma_logp,
            random=log_gamma_random,
            dims="drafter_rel",
        )
        flat = pt.set_subtensor(flat[rel], verifier.ravel()[rel] + log_ratio)
    if len(known):
        pm.Model.get_context().add_coord("drafter_known", [labels[i] for i in known])
        loc_k, scale_k = loc.ravel()[known], scale.ravel()[known]
        cost = pm.LogNormal(
            "coef_draft_roofline", loc_k, scale_k, dims="drafter_known",
            default_transform=SoftplusTransform(np.exp(loc_k)),
        )  # fmt: skip
        flat = pt.set_subtensor(flat[known], pt.log(cost))
    if len(generic):
        pm.Model.get_context().add_coord("drafter_generic", [labels[i] for i in generic])
        level = pm.Normal(
            "coef_mu_draft_generic", loc.ravel()[generic], scale.ravel()[generic],
            dims="drafter_generic",
        )  # fmt: skip
        flat = pt.set_subtensor(flat[generic], level)
    return pm.Deterministic(
        "coef_mu_draft", flat.reshape(relative.shape), dims=("draft_group", "coef_d")
    )


def _cell_level(pr: dict, dim: str, names: list, mu, group: np.ndarray, trend, share, cell_sd):
    r"""Log coefficients ``names`` of every ``dim`` member (a unit or a draft unit):
    :func:`~specbayes.model.hierarchy.log_coefficients` of its group level ``mu``, trend
    and — for the coefficients in ``cell_coefs`` — a cell deviation of scale ``cell_sd``.

    Centred (weight 1 in ``centred_cells``): the cell's log coefficient itself is sampled,
    :math:`\log c_{uj} \sim \mathcal N(\mu_{g(u)j} + \log(1 - w_j + w_j e^{t_{uj}}), s_j)`
    (``cell_coef``) — the quantity a cell's rows pin, so the data fix it whatever the group
    level and trend share do. Sampling the deviation :math:`d_{uj}` instead (``cell_dev``,
    before 2026-12-05) left every move of the trend share or the level to be compensated by
    all of a group's deviations at once: on the default tier's one-group set
    ``trend_logit[c2v]`` had posterior correlation 0.81 / −0.65 with two of them and was
    the worst-mixing variable at every seed (``benchmarks/model_core.md``). Weight
    :math:`\lambda < 1` (``cell_z``): :math:`x_{uj} \sim \mathcal N(0, s_j^\lambda)`,
    :math:`d_{uj} = s_j^{1 - \lambda} x_{uj}` — standardised deviations at 0, partly so
    between (Papaspiliopoulos, Roberts & Sköld 2007), for a coefficient the rows pin
    weakly, such as ``c2d``. One level may mix both.
    """
    weight = cell_centring(pr)  # validates centred_cells even without cells
    deviating = [c for c in names if c in pr["cell_coefs"]]
    dev = pt.zeros((len(group), len(names)))
    if not deviating:
        return log_coefficients(mu, share, 0.0, dev, group, trend)
    suffix = "" if dim == "unit" else "_draft"
    model = pm.Model.get_context()
    centred = [c for c in deviating if weight[c] == 1.0]
    free = [c for c in deviating if weight[c] < 1.0]
    if free:
        coord = f"coef_z{suffix or '_unit'}"
        model.add_coord(coord, free)
        cols = [names.index(c) for c in free]
        lam = np.array([weight[c] for c in free])  # 0: the plain standardised deviation
        x = pm.Normal(f"cell_z{suffix}", 0.0, cell_sd[cols] ** lam, dims=(dim, coord))
        dev = pt.set_subtensor(dev[:, cols], x * cell_sd[cols] ** -lam)  # scaled by s below
    # the centred columns' deviations stay 0 here: their location is the trend
    loc = log_coefficients(mu, share, cell_sd, dev, group, trend)
    if not centred:
        return loc
    coord = f"coef_c{suffix or '_unit'}"
    model.add_coord(coord, centred)
    cols = [names.index(c) for c in centred]
    cell = pm.Normal(f"cell_coef{suffix}", loc[:, cols], cell_sd[cols], dims=(dim, coord))
    return pt.set_subtensor(loc[:, cols], cell)


def _sweep_alpha(design: Design, pr: dict):
    r"""Per sweep acceptance :math:`\alpha`: given, or its draft unit's latent one.

    .. math::

        \mathrm{logit}\,\alpha_{ud} = m_{d} + \delta_{ud}, \qquad
        m_d \sim \mathcal N(\mu, \sigma_m), \quad \delta_{ud} \sim \mathcal N(0, \sigma_c)

    one per workload :math:`u` and drafter :math:`d` (its sweeps at several k identify it
    through :math:`E(\alpha, k)`), around a level :math:`m_d` of the drafter on that verifier
    and GPU: a drafter's acceptance is correlated across workloads (prior correlation
    :math:`\sigma_m^2/(\sigma_m^2 + \sigma_c^2)`), so a workload swept at one k borrows from
    the drafter's others. What the rows resolve worst is every workload's alpha rising with
    the drafter's cost per draft token (posterior correlation 0.96–0.98); the level is that
    common move's own axis, which alone did not make those fits healthy — the drafter cost's
    zero-avoiding prior did most (``benchmarks/model_core.md``).
    """
    given = np.where(np.isfinite(design.alpha), design.alpha, 0.5)  # dense rows: unused
    latent = design.coords["draft_latent"]
    if not latent:
        return given
    units = design.coords["draft_unit"]
    draft_group = design.draft_group_of[[units.index(u) for u in latent]]
    groups = [design.coords["draft_group"][g] for g in sorted(set(draft_group))]
    pm.Model.get_context().add_coord("drafter_latent", groups)
    group_of = pd.Index(groups).get_indexer(np.array(design.coords["draft_group"])[draft_group])
    prior = pr["alpha_logit"]
    level = pm.Normal("alpha_level", prior["mu"], prior["sigma"], dims="drafter_latent")
    offset = pm.Normal("alpha_offset", 0.0, prior["cell_sigma"], dims="draft_latent")
    logit = pm.Deterministic("alpha_logit", level[group_of] + offset, dims="draft_latent")
    alpha_u = pm.Deterministic("alpha", pm.math.sigmoid(logit), dims="draft_latent")
    idx = design.extra["sweep_latent"]
    return pt.where(idx >= 0, alpha_u[np.maximum(idx, 0)], given)


def _group_levels(design: Design, pr: dict, loc: np.ndarray, sd: np.ndarray):
    r"""Group log verifier coefficients :math:`\mu_{gj} \sim \mathcal N(\text{loc}, \text{sd})`.

    With ``c1p_tie`` the prompt's own prefill follows the prefill others pay,
    :math:`\mu_{g,c_{1p}} \sim \mathcal N(\mu_{g,c_{2p}} + \ell_{c_{1p}} - \ell_{c_{2p}},
    \text{tie})` (:math:`\ell` = loc; the roofline makes them equal; the rows resolve
    :math:`c_{2p}`, not :math:`c_{1p}`)."""
    coefs = list(design.coords["coef_v"])
    tie = pr["c1p_tie"]
    if tie is None:
        return pm.Normal("coef_mu", mu=loc, sigma=sd, dims=("group", "coef_v"))
    rest = [c for c in coefs if c != "c1p"]
    pm.Model.get_context().add_coord("coef_rest", rest)
    j_rest = [coefs.index(c) for c in rest]
    base = pm.Normal(
        "coef_mu_rest", mu=loc[:, j_rest], sigma=sd[:, j_rest], dims=("group", "coef_rest")
    )
    i1, i2 = coefs.index("c1p"), coefs.index("c2p")
    # one contiguous constant: a column view of loc is a strided array, which numba cannot
    # freeze into the compiled graph — it then recompiles the whole graph at every fit (10 s)
    gap = np.ascontiguousarray(loc[:, i1] - loc[:, i2])
    c1p = pm.Normal("coef_mu_c1p", base[:, rest.index("c2p")] + gap, tie, dims="group")
    full = pt.zeros((len(design.coords["group"]), len(coefs)))
    full = pt.set_subtensor(full[:, j_rest], base)
    full = pt.set_subtensor(full[:, i1], c1p)
    return pm.Deterministic("coef_mu", full, dims=("group", "coef_v"))


def _scatter(values, columns: list[int], size: int):
    """A length-``size`` vector with ``values`` at ``columns`` and zeros elsewhere."""
    return pt.set_subtensor(pt.zeros(size)[columns], values)


def _unit_workload(design: Design) -> tuple[np.ndarray, np.ndarray]:
    """Prefill and decode tokens of each unit (means over its sweeps)."""
    n = len(design.coords["unit"])
    p = np.bincount(design.sweep_unit, design.prefill, n) / np.bincount(design.sweep_unit, None, n)
    g = np.bincount(design.sweep_unit, design.decode, n) / np.bincount(design.sweep_unit, None, n)
    return p, g
