r"""Per-point serving metrics beside the mean latency: TTFT, ITL and latency percentiles.

Every request's times are sums of engine steps, and a step's cost is linear in the running
batch — the same mechanism as the latency law :math:`L = C_1 + B C_2` (Kong et al. 2026;
docs/model.md §1, §11). So each reported statistic of a metric at a load point — the mean or
a percentile of TTFT, of the time per output token after the first (ITL), of the end-to-end
latency — is modelled as the same two costs rescaled:

.. math::

    m_i = \frac{1}{s_i}\big(\rho_{a,s}\, C_{1,s} + \rho_{b,s}\, C_{2,s}\, B_i\big),
    \qquad B_i = \lambda_i L_i \ \text{(open loop)}, \quad B_i = N_i \ \text{(closed)}

with :math:`C_{1,s}, C_{2,s}` the sweep's own costs and :math:`L_i` the law's mean latency
of the row (so the metric rises toward the same wall; on the ``moe`` level :math:`C_{1,s}`
with the expert reads at the row's coverage, :func:`log_fixed_cost`), :math:`s_i` the
metric's unit (:math:`g - 1` output tokens for ITL, :math:`g` for TTFT, 1 for latency
percentiles; :func:`log_unit`) and :math:`\rho_{a,s}, \rho_{b,s} > 0` the metric's shares of
the zero-load and the load-dependent cost: for TTFT a few engine steps — the prefill and the
queue for a batch slot — whatever the output length (a :math:`\rho_b` that grows with the
percentile), for ITL the decode step (about 1, higher for its tail and burstier under SD: a
verify pass emits :math:`E` tokens at once), for a latency
percentile about 1 at p50 and a tail factor that grows with utilisation where
:math:`\rho_b > \rho_a`. The shares are partially pooled over sweeps per metric, around a
level for dense and one for SD sweeps, with a spread :math:`\tau` fixed per family
(``metric_tau`` in :mod:`specbayes.model.priors`):

.. math::

    \log\rho_{j,s} \sim \mathcal N(\mu_{j,\mathrm{arm}(s)}, \tau_{\mathrm{family}})

The observed statistic is Student-t (ν = 4) on the log scale around :math:`\log m_i`, its
scale widened for a percentile of few requests (:func:`log_width`; the real B200 p99 TTFT
jumps 15× at a few streams, where a point holds 72–337 requests). With
``priors={"metric_excess": K0}`` it is instead :math:`\log m_i` plus Normal noise of scale
:math:`\sigma_f w_i` — one :math:`\sigma_f` per family — plus, for a tail percentile, an
upward excess, exponential with mean :math:`K_j \sigma_f w_i / (1 + n_i(1 - q))`
(:func:`excess_scale`, :func:`log_metric_density`): a p99 with only a few requests beyond it
sits on them, and one stall lifts it; the law's curve is then the statistic of a long run,
the lower envelope of the short ones (opt-in: its health on simulated sweeps is marginal,
``benchmarks/metric_model.md``). What the data do not carry is not modelled: a fit learns only
the metrics it is given (``metrics=``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from specbayes import laws
from specbayes.data import PERCENTILE_LEVELS

#: The statistics a fit can model, by family (column prefix), with the unit of their shares
#: (:func:`log_unit`): per request (latency percentiles), per engine step (TTFT), per output
#: token after the first (ITL: GuideLLM's ITL, vLLM/SGLang's TPOT).
FAMILIES: dict[str, str] = {"latency": "request", "ttft": "step", "itl": "token"}

#: Every column name the metric model accepts (``latency`` itself is the law's).
METRIC_COLUMNS: tuple[str, ...] = tuple(
    name
    for family in FAMILIES
    for name in ((family,) if family != "latency" else ())
    + tuple(f"{family}_p{q}" for q in PERCENTILE_LEVELS)
)

TERMS = ("a", "b")
ARMS = ("dense", "sd")


def family(name: str) -> str:
    """The family of a metric column (``"ttft_p99"`` → ``"ttft"``)."""
    return name.split("_p")[0]


def check_metrics(metrics: Any) -> tuple[str, ...]:
    """The metric names a fit is asked for, checked.

    Raises
    ------
    ValueError
        A name that is not one of :data:`METRIC_COLUMNS` (the message lists them).
    """
    if metrics is None:
        return ()
    names = (metrics,) if isinstance(metrics, str) else tuple(metrics)
    bad = [m for m in names if m not in METRIC_COLUMNS]
    if bad:
        raise ValueError(
            f"unknown metric(s) {bad}: the metric model covers {list(METRIC_COLUMNS)} "
            "(the mean latency is the law's own)"
        )
    return tuple(dict.fromkeys(names))


def log_unit(name: str, decode: Any) -> Any:
    r"""Log of the metric's unit :math:`s`: :math:`\log(g - 1)` per output token after the
    first (ITL), :math:`\log g` per engine step (TTFT), 0 per request (latency percentiles).

    A first token waits for a few engine steps — the one its prefill rides with and the one
    running when it arrives — whatever the output length, while :math:`C_1, C_2` are sums
    over a request's :math:`g` tokens: TTFT's shares are of the per-token cost, a dense
    step's (an SD step is :math:`E` tokens'), so they carry across workloads of other output
    lengths (``benchmarks/moe_metrics.md``: per request, a share learned on four cells
    missed the others' p99 TTFT by 65 %)."""
    g = np.asarray(decode, float)
    unit = FAMILIES[family(name)]
    if unit == "token":
        return np.log(np.maximum(g - 1.0, 1.0))
    if unit == "step":
        return np.log(np.maximum(g, 1.0))
    return np.zeros_like(g)


def log_metric_mean(log_c1, log_c2, log_batch, log_rho_a, log_rho_b, log_s, xp=np):
    r""":math:`\log m = \log(\rho_a C_1 + \rho_b C_2 B) - \log s`, stably (log-sum-exp);
    ``xp`` is NumPy or ``pytensor.tensor`` — the one formula for the graph and prediction."""
    return xp.logaddexp(log_rho_a + log_c1, log_rho_b + log_c2 + log_batch) - log_s


def log_fixed_cost(log_c1: Any, log_batch: Any, experts: Any = None, xp=np) -> Any:
    r"""Log of the zero-load cost a metric takes its share :math:`\rho_a` of: :math:`\log C_1`,
    or on the ``moe`` level :math:`\log(C_1 + \varphi(B(k + 1))\,X)` — the law's part that
    does not scale with the running sequences, its expert reads at the coverage of the
    :math:`B(k + 1)` tokens a pass routes (:class:`specbayes.laws.Experts` ``(X, m/M, k)``
    per row; docs/model.md §5). A pass at batch :math:`B` pays them whatever the metric: the
    decode step behind ITL reads the experts its batch touches, and so does the step a
    prompt's prefill rides with."""
    if experts is None:
        return log_c1
    share, ratio, k = experts
    with np.errstate(divide="ignore"):
        coverage = laws.expert_coverage(xp.exp(log_batch) * (k + 1.0), ratio, 1.0)
        return xp.logaddexp(log_c1, xp.log(coverage) + xp.log(share))


def log_batch(mu: Any, load: Any, closed: Any, xp=np) -> Any:
    r"""Log running batch of each row: :math:`\log N` closed loop, :math:`\log\lambda + \mu`
    open loop (Little's law with the law's mean latency :math:`e^\mu`)."""
    return xp.log(load) + xp.where(closed, 0.0, mu)


def long_table(data: pd.DataFrame, metrics: tuple[str, ...]) -> pd.DataFrame:
    """One row per observed (metric, fitted row): ``metric`` (index into ``metrics``),
    ``obs``, ``log_y`` (the statistic, log), ``log_s`` (its unit, :func:`log_unit`),
    ``log_w`` (:func:`log_width`) and ``excess`` (:func:`excess_scale`).
    Rows without the column, or a per-token metric of a one-token output, carry none."""
    parts = []
    for j, name in enumerate(metrics):
        if name not in data:
            continue
        y = data[name].to_numpy(float)
        log_s = log_unit(name, data["decode"])
        keep = np.isfinite(y) & (y > 0)
        if FAMILIES[family(name)] == "token":
            keep &= data["decode"].to_numpy(float) > 1.0
        obs = np.flatnonzero(keep)
        log_w = log_width(name, data.get("n_requests"))
        excess = excess_scale(name, data.get("n_requests"))
        parts.append(
            pd.DataFrame(
                {
                    "metric": j,
                    "obs": obs,
                    "log_y": np.log(y[obs]),
                    "log_s": log_s[obs],
                    "log_w": np.broadcast_to(log_w, y.shape)[obs],
                    "excess": np.broadcast_to(excess, y.shape)[obs],
                }
            )
        )
    if not parts:
        return pd.DataFrame({c: [] for c in ("metric", "obs", "log_y", "log_s", "log_w",
                                             "excess")})  # fmt: skip
    return pd.concat(parts, ignore_index=True)


def _level(name: str) -> float:
    """The statistic's level q: 0.99 for ``*_p99``; a mean counts as a median (1/2)."""
    return int(name.rsplit("_p", 1)[1]) / 100.0 if "_p" in name else 0.5


def log_width(name: str, n_requests: Any) -> Any:
    r"""Log of a row's noise scale relative to the metric's :math:`\sigma`:
    :math:`\tfrac12\log(1 + 1/(n (1 - q)))` for a statistic at level :math:`q` of
    :math:`n` requests (:math:`q = 1/2` for a mean). A percentile is an order statistic:
    its sampling variance grows as :math:`q(1-q)/n` over the density at it, so a p99 of 50
    requests (about the largest) is far noisier than one of 1,000, while a median barely
    moves (order-statistic asymptotics; without ``n_requests`` the factor is 1)."""
    if n_requests is None:
        return 0.0
    level = _level(name)
    n = np.asarray(n_requests, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        extra = np.where(np.isfinite(n) & (n > 0), 1.0 / (n * (1.0 - level)), 0.0)
    return 0.5 * np.log1p(extra)


#: Percentile levels from which a statistic can sit on a few stalled requests
#: (:func:`excess_scale`); below it (medians) the noise is Normal alone.
TAIL_LEVEL = 0.9


def excess_scale(name: str, n_requests: Any) -> Any:
    r"""A row's share of its tail excess (:func:`log_metric_density`): :math:`1/(1 + n(1 - q))`
    for a tail statistic (level :math:`q \ge` :data:`TAIL_LEVEL`) of :math:`n` requests (1
    without a count), 0 for a median or a mean.

    A percentile beyond which only a few requests lie sits on them: a stall (a warm-up, a
    preemption, a recompilation) that holds a few requests lifts the p99 of 72 requests
    (0.7 beyond it) to their time, and barely moves the p99 of 900 (9 beyond it). So a tail
    measurement exceeds the law's statistic by an excess that is large only where
    :math:`n(1 - q)` is small (the real B200 p99 TTFT: 1.2–1.5 s at 2–16 streams between
    0.05–0.4 s points, SD arms only, 72–337 requests); a median's hundreds of requests on
    either side average it out."""
    level = _level(name)
    if level < TAIL_LEVEL:
        return 0.0 if n_requests is None else np.zeros(np.shape(n_requests))
    if n_requests is None:
        return 1.0
    n = np.asarray(n_requests, dtype=float)
    beyond = np.where(np.isfinite(n) & (n > 0), n * (1.0 - level), 0.0)
    return 1.0 / (1.0 + beyond)


def log_metric_density(y: Any, mu: Any, sigma: Any, excess: Any, share: np.ndarray, xp=np) -> Any:
    r"""Pointwise log density of an observed log metric: Normal around ``mu`` (scale
    ``sigma``) plus an exponential excess of mean ``excess * share`` (:func:`log_exgauss`)
    where the row's :func:`excess_scale` ``share`` is positive (a tail statistic), the Normal
    alone where it is 0 — a choice fixed by the rows, never by a parameter. ``excess`` is
    :math:`K\sigma` per row (the ``metric_excess`` ratio times the row's noise scale).
    ``xp`` is NumPy or ``pytensor.tensor``: one formula for the graph and the stored
    log-likelihood."""
    tail = np.asarray(share) > 0
    # the unused branch stays finite (and so does its gradient)
    safe = xp.where(tail, excess * np.where(tail, share, 1.0), 1.0)
    normal = -0.5 * ((y - mu) / sigma) ** 2 - xp.log(sigma) - 0.5 * np.log(2.0 * np.pi)
    return xp.where(tail, log_exgauss(y, mu, sigma, safe, xp=xp), normal)


def log_exgauss(y: Any, mu: Any, sigma: Any, nu: Any, xp=np) -> Any:
    r"""Log density of :math:`y = \mu + \sigma z + x`, :math:`z \sim \mathcal N(0, 1)`,
    :math:`x \sim \mathrm{Exponential}(\text{mean } \nu)` (exponentially modified Gaussian):

    .. math::

        \log p = -\log\nu + \frac{\mu - y}{\nu} + \frac{\sigma^2}{2\nu^2}
        + \log\Phi\Big(\frac{y - \mu - \sigma^2/\nu}{\sigma}\Big)

    ``xp`` is NumPy or ``pytensor.tensor`` (one formula for the graph and the stored
    log-likelihood; no switch to the Normal at small :math:`\nu`, whose jump in the density
    a sampler would feel)."""
    if xp is np:
        from scipy.special import log_ndtr

        tail = log_ndtr((y - mu - sigma**2 / nu) / sigma)
    else:
        from pymc.distributions.dist_math import normal_lcdf

        tail = normal_lcdf(mu + sigma**2 / nu, sigma, y)
    return -xp.log(nu) + (mu - y) / nu + 0.5 * (sigma / nu) ** 2 + tail


def exgauss_draws(mu: Any, sigma: Any, nu: Any, rng) -> np.ndarray:
    """Draws of :func:`log_exgauss`'s variable (a measurement of the log metric)."""
    shape = np.broadcast(mu, sigma, nu).shape
    return mu + sigma * rng.standard_normal(shape) + rng.exponential(1.0, shape) * nu


def prior_centres(metrics: tuple[str, ...], pr: dict) -> np.ndarray:
    """(metric, term) prior locations of :math:`\\log\\rho` from ``pr["metric_share"]``."""
    return np.array([[pr["metric_share"][family(m)][t] for t in TERMS] for m in metrics])


def metric_likelihood(
    design, pr: dict, metrics: tuple[str, ...], log_c1, log_c2, mu, experts=None
) -> None:
    r"""Add the metric shares and the observed ``log_metric`` to the model in context.

    ``log_c1, log_c2`` per sweep and ``mu`` per row are the latency model's tensors: the
    metrics share its costs and its batch; ``experts`` (the ``moe`` level) the rows'
    ``(X, m/M, k)``, whose reads join the zero-load cost (:func:`log_fixed_cost`)."""
    import pymc as pm
    import pytensor.tensor as pt

    table = long_table(design.data, metrics)
    missing = [m for j, m in enumerate(metrics) if not (table["metric"] == j).any()]
    if missing:
        raise ValueError(
            f"no fitted row reports {missing}: fit only the metrics the data carry "
            f"(columns present: {[m for m in METRIC_COLUMNS if m in design.data]})"
        )
    model = pm.modelcontext(None)
    model.add_coord("metric_name", list(metrics))
    model.add_coord("metric_term", list(TERMS))
    model.add_coord("metric_arm", list(ARMS))
    model.add_coord("metric_obs", np.arange(len(table)))
    spread, arm = pr["metric_share_sigma"], (design.k > 0).astype(int)
    centre = prior_centres(metrics, pr)[:, None, :] * np.ones((1, len(ARMS), 1))
    share_mu = pm.Normal(
        "metric_share_mu", centre, spread, dims=("metric_name", "metric_arm", "metric_term")
    )
    # the spread of a share across configurations is a prior constant per family: with a
    # handful of sweeps per arm a learned spread mixed slowly in every form tried (centred,
    # non-centred, per family; bulk ESS 260-520 on data/real, benchmarks/metric_model.md)
    tau = np.array([pr["metric_tau"][family(name)] for name in metrics])
    log_rho = pm.Normal(
        "metric_log_share",
        share_mu[:, arm, :].dimshuffle(0, 2, 1),
        tau[:, None, None],
        dims=("metric_name", "metric_term", "sweep"),
    )
    m, obs = table["metric"].to_numpy(int), table["obs"].to_numpy(int)
    s = design.obs_sweep[obs]
    batch = log_batch(mu[obs], design.load[obs], design.obs_closed[obs], pt)
    rows_experts = None if experts is None else tuple(x[obs] for x in experts)
    fixed = log_fixed_cost(log_c1[s], batch, rows_experts, pt)
    loc = log_metric_mean(
        fixed, log_c2[s], batch, log_rho[m, 0, s], log_rho[m, 1, s], table["log_s"].values, pt
    )
    y = table["log_y"].to_numpy(float)
    if pr["metric_excess"] is None:
        sigma = pm.HalfNormal("metric_sigma", pr["metric_noise"], dims="metric_name")
        scale = sigma[m] * np.exp(table["log_w"].to_numpy(float))
        pm.StudentT("log_metric", nu=pr["metric_nu"], mu=loc, sigma=scale, observed=y,
                    dims="metric_obs")  # fmt: skip
        return
    # a tail percentile of few requests sits on its slowest ones: Normal noise plus an upward
    # excess of mean K sigma w / (1 + n (1 - q)) (excess_scale). One noise scale per family
    # (the engine's run-to-run variability of TTFT, of ITL, ...), widened per statistic by its
    # order-statistic factor w (log_width): a family's median pins the scale its p99 would
    # otherwise trade against the excess. The scale's prior avoids 0 (a statistic of finitely
    # many requests always varies; at sigma -> 0 the density has an edge at the curve), and
    # the excess is in units of the noise, K, so its shape does not change with the noise's
    # size (an absolute excess diverged where sigma was small: benchmarks/metric_model.md)
    families = list(dict.fromkeys(family(name) for name in metrics))
    model.add_coord("metric_family", families)
    noise = pr["metric_noise"]
    by_family = pm.Gamma("metric_family_sigma", 2.0, 2.0 / noise, dims="metric_family")
    member = [families.index(family(name)) for name in metrics]
    sigma = pm.Deterministic("metric_sigma", by_family[member], dims="metric_name")
    scale = sigma[m] * np.exp(table["log_w"].to_numpy(float))
    ratio = pm.HalfNormal("metric_excess", pr["metric_excess"], dims="metric_name")
    share = table["excess"].to_numpy(float)
    pm.CustomDist(
        "log_metric", loc, scale, ratio[m] * scale,
        logp=lambda value, mu, sd, ex: log_metric_density(value, mu, sd, ex, share, xp=pt),
        dist=lambda mu, sd, ex, size: pm.Normal.dist(mu, sd, size=size)
        + pm.Exponential.dist(1.0, size=size) * ex * share,
        observed=y, dims="metric_obs",
    )  # fmt: skip


def nearest_sweep(sweeps: list[str], sweep_alpha, configs: pd.Series, alpha) -> np.ndarray:
    """Index of each row's fitted sweep (-1: none): its own configuration, else the fitted
    sweep of the same workload, drafter and k with the nearest alpha (a measured alpha's
    sweep is labelled ``alpha=measured``; the shares scale costs that already carry alpha)."""
    sweep_of = pd.Index(sweeps).get_indexer(configs)
    strip = r"\|alpha=[^|]*$"
    fitted = pd.Series(sweeps).str.replace(strip, "", regex=True).to_numpy()
    bare = pd.Series(configs).str.replace(strip, "", regex=True).to_numpy()
    alpha = np.asarray(alpha, dtype=float)
    for i in np.flatnonzero(sweep_of < 0):
        same = np.flatnonzero(fitted == bare[i])
        if len(same):
            gap = np.abs(np.nan_to_num(np.asarray(sweep_alpha)[same] - alpha[i], nan=0.0))
            sweep_of[i] = same[np.argmin(gap)]
    return sweep_of


def share_draws(post, metrics: tuple[str, ...], name: str, sweep_of, arm, configs, rng, tau: float):
    r"""(sample, term, row) draws of :math:`\log\rho_a, \log\rho_b` of metric ``name``.

    A row of a fitted sweep (``sweep_of >= 0``) takes that sweep's shares; one of a
    configuration the fit never saw takes its arm's level plus a fresh deviation, one per
    configuration (``configs``) shared by its rows.

    ``post`` is the stacked posterior (sample first); ``arm`` is 1 for SD rows."""
    j = metrics.index(name)
    n = post.sizes["sample"]
    sweep_of, arm = np.asarray(sweep_of), np.asarray(arm, int)
    out = np.empty((n, len(TERMS), len(sweep_of)))
    seen = sweep_of >= 0
    out[:, :, seen] = post["metric_log_share"].values[:, j][:, :, sweep_of[seen]]
    if (~seen).any():
        level = post["metric_share_mu"].values[:, j]  # (sample, arm, term)
        keys, idx = np.unique(np.asarray(configs)[~seen], return_inverse=True)
        z = rng.standard_normal((n, len(TERMS), len(keys)))[:, :, idx]
        out[:, :, ~seen] = level[:, arm[~seen], :].transpose(0, 2, 1) + tau * z
    return out


def student_noise(sigma, nu: float, shape, rng):
    """Draws of the metric's Student-t observation noise (log scale)."""
    return sigma * rng.standard_t(nu, size=shape)


def measurement_draws(loc, sigma, ratio, share, nu: float, rng) -> np.ndarray:
    """Draws of a measured log metric around ``loc``: Student-t (``nu``) noise of scale
    ``sigma`` where ``ratio`` is None, else Normal noise plus the tail excess of mean
    ``ratio * sigma * share`` (:func:`log_metric_density`'s variable)."""
    if ratio is None:
        return loc + student_noise(sigma, nu, np.shape(loc), rng)
    return exgauss_draws(loc, sigma, ratio * sigma * share, rng)


def stored_groups(design, metrics: tuple[str, ...], post, pr: dict, rng) -> dict:
    """``log_metric``'s pointwise log likelihood and posterior predictive of the fitted rows,
    (chain, draw, metric_obs), from the posterior's own shares and ``mu`` — the density the
    sampler used (:func:`metric_likelihood`) under the fit's merged priors ``pr``:
    Student-t with ``metric_nu`` degrees of freedom, or (``metric_excess`` set) the excess
    form, :func:`log_metric_density`."""
    from scipy import stats

    table = long_table(design.data, metrics)
    m, obs = table["metric"].to_numpy(int), table["obs"].to_numpy(int)
    s = design.obs_sweep[obs]
    log_c1, log_c2 = post["log_c1"].values[..., s], post["log_c2"].values[..., s]
    batch = log_batch(post["mu"].values[..., obs], design.load[obs], design.obs_closed[obs])
    experts = None
    if "expert_c1" in post:  # the moe level (graph.py's rows' reads)
        experts = (post["expert_c1"].values[..., s], design.extra["expert_ratio"][s], design.k[s])
    shares = post["metric_log_share"].values  # (chain, draw, metric, term, sweep)
    loc = log_metric_mean(
        log_fixed_cost(log_c1, batch, experts), log_c2, batch, shares[..., m, 0, s],
        shares[..., m, 1, s], table["log_s"].values,
    )  # fmt: skip
    sigma = post["metric_sigma"].values[..., m] * np.exp(table["log_w"].to_numpy(float))
    y = table["log_y"].to_numpy(float)
    share = table["excess"].to_numpy(float)
    ratio = None if pr["metric_excess"] is None else post["metric_excess"].values[..., m]
    if ratio is None:
        ll = stats.t.logpdf(y, pr["metric_nu"], loc=loc, scale=sigma)
    else:  # the excess is in units of the row's noise scale
        ll = log_metric_density(y, loc, sigma, ratio * sigma, share)
    pp = measurement_draws(loc, sigma, ratio, share, pr["metric_nu"], rng)
    return {"log_likelihood": ll, "posterior_predictive": pp, "observed": y, "table": table}
