r"""Sweeps simulated from the model itself, with known coefficients.

The same functions as the graph and the prediction of unseen cells: the hierarchy
(:func:`specbayes.model.hierarchy.log_coefficients` on
:func:`~specbayes.model.hierarchy.trend_covariates`), the cycle decomposition
(:func:`specbayes.laws.effective_costs`), a sweep's deviation from it, the latency law and the
growing noise (:func:`specbayes.model.likelihood.log_mean_latency`,
:func:`~specbayes.model.likelihood.log_row_scale`):

.. math::

    \log c_{uj} &= \mu_{g(u)j} + \log(1 - w_j + w_j e^{t_{uj}}) + s_j z_{uj} \\
    \log C_{js} &= \log C^{\mathrm{eff}}_{js}(c_{u(s)}, c_{1c}, g, \alpha, k)
        + \tau_j \epsilon_{js} \\
    \log L_i &= \mu_i + \sigma (1 - x_i)^{-\gamma} \epsilon_i

Used by the tests (recovery of known coefficients) and the benchmarks.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from specbayes import laws
from specbayes.model.hierarchy import log_coefficients, trend_covariates
from specbayes.model.likelihood import log_mean_latency, log_row_scale
from specbayes.model.priors import COEFS, DEFAULT_PRIORS, DRAFTER_COEFS

#: Log coefficients (s) of an 8B verifier with a 1B drafter on one GPU at p = g = 512.
LEVEL_8B = {
    "c1p": np.log(0.02),
    "c1v": np.log(0.012),
    "c1d": np.log(0.0015),
    "c2p": np.log(0.004),
    "c2v": np.log(1.0e-4),
    "c2d": np.log(1.0e-5),
}
DEFAULT_CELLS = ((256, 256), (512, 512), (1024, 256), (256, 1024))
DEFAULT_LOADS = (0.05, 0.2, 0.35, 0.5, 0.65, 0.8)


def simulate_sweeps(
    *,
    level: str = "sd",
    verifiers: dict[str, float] | None = None,
    hardware: tuple[str, ...] = ("H100",),
    drafters: tuple[tuple[str, float], ...] = (("D1B", 1e9),),
    cells: tuple[tuple[int, int], ...] = DEFAULT_CELLS,
    alphas: tuple[float, ...] = (0.6, 0.8, 0.95),
    ks: tuple[int, ...] = (1, 3, 5),
    loads: tuple[float, ...] = DEFAULT_LOADS,
    share: float = 0.8,
    cell_sd: float = 0.05,
    tau: tuple[float, float] = (0.01, 0.005),
    sigma: float = 0.02,
    growth: float = 0.3,
    closed_loop: bool = False,
    unknown_alpha: bool = False,
    cycle_overhead: float = 1e-3,
    spec_seq_overhead: float = 1e-4,
    prefill_share: float = 0.0,
    seed: int = 0,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Simulate dense (and, for ``level="sd"``, SD) sweeps with known coefficients.

    Group levels are :data:`LEVEL_8B` scaled by the verifier's size (log-log slope 1 for the
    verifier coefficients), with a GPU factor ``N(0, 0.3)`` and a verifier factor
    ``N(0, 0.1)`` per coefficient; every trended coefficient has the share ``share`` growing
    with its cell covariate; the coefficients the model gives a cell deviation
    (``DEFAULT_PRIORS["cell_coefs"]``) deviate by ``N(0, cell_sd)``, the others sit on their
    group's trend, as in the model. Loads are fractions ``x`` of the
    configuration's saturation (open loop ``λ = x/C2``; closed loop the concurrency
    ``N = x/(1 - x) · C1/C2``, rounded). With ``unknown_alpha`` each (cell, drafter) has one
    acceptance rate (``alphas[(i + j) % len]`` for cell i, drafter j; in ``truth['alpha']``)
    and the SD rows carry none. Every SD cycle pays ``cycle_overhead`` (s), the model's
    ``c1c`` (:func:`specbayes.laws.effective_costs`), and on a GPU where vLLM runs
    FlashAttention 2 (the A100) ``c2c`` per sequence: ``spec_seq_overhead`` (s, the prior's
    generic centre) at the cells' centre context, proportional to the context ``p + g/2``
    (:func:`specbayes.model.physics.spec_seq_centre`); an SD request's prefill costs
    ``1 + prefill_share`` times the verifier's (the drafter's prefill, :math:`\rho`; 0 as in
    the default model, which has none).

    Returns
    -------
    sweeps : DataFrame
        The sweep schema (``verifier, hardware, drafter, cell, prefill, decode, k, alpha,
        rps | concurrency, latency``).
    truth : DataFrame
        One row per (verifier, hardware, cell, drafter) with the true coefficients
        ``c1p … c2d``, ``c1c`` and ``c2c`` (s) and ``prefill_share`` (one row per unit with
        drafter "none" at ``level="dense"``).
    """
    if level not in ("dense", "sd"):
        raise ValueError(f"level must be 'dense' or 'sd', got {level!r}")
    rng = np.random.default_rng(seed)
    verifiers = verifiers or {"V8B": 8e9}
    units = pd.DataFrame(
        [(v, h, p, g) for v in verifiers for h in hardware for p, g in cells],
        columns=["verifier", "hardware", "prefill", "decode"],
    )
    units["cell"] = units["prefill"].astype(str) + "x" + units["decode"].astype(str)
    groups = units["verifier"] + "|" + units["hardware"]
    group_names = list(dict.fromkeys(groups))
    names = [d[0] for d in drafters] if level == "sd" else ["none"]
    mu = _group_levels(group_names, verifiers, drafters, rng)  # (group, drafter, coef)
    trend, _ = trend_covariates(units["prefill"], units["decode"], list(COEFS))
    z = rng.normal(size=(len(units), len(names), len(COEFS)))
    group = groups.map({g: i for i, g in enumerate(group_names)}).to_numpy()
    scale = np.where([c in DEFAULT_PRIORS["cell_coefs"] for c in COEFS], cell_sd, 0.0)
    # one cell deviation of the verifier coefficients per unit, shared by its drafters
    verifier = np.array([c not in DRAFTER_COEFS for c in COEFS])
    z[:, :, verifier] = z[:, :1, verifier]
    shares = np.full(len(COEFS), share)
    coef = np.stack(
        [
            np.exp(log_coefficients(mu[:, j], shares, scale, z[:, j], group, trend))
            for j in range(len(names))
        ],
        axis=1,
    )  # (unit, drafter, coef)
    truth = units[["verifier", "hardware", "cell"]].loc[np.repeat(units.index, len(names))]
    truth = truth.reset_index(drop=True).assign(drafter=np.tile(names, len(units)))
    truth[list(COEFS)] = coef.reshape(-1, len(COEFS))
    truth["c1c"] = np.where(truth["drafter"] == "none", 0.0, cycle_overhead)
    per_seq = _spec_seq(units, spec_seq_overhead)  # (unit,)
    truth["c2c"] = np.where(truth["drafter"] == "none", 0.0, np.repeat(per_seq, len(names)))
    truth["prefill_share"] = np.where(truth["drafter"] == "none", 0.0, prefill_share)
    configs = _configurations(units, names, level, alphas, ks, unknown_alpha)
    if unknown_alpha:
        first = configs[configs["k"] > 0].groupby(["unit", "drafter"])["alpha"].first()
        truth["alpha"] = first.reindex(
            list(zip(np.repeat(units.index, len(names)), truth["drafter"], strict=True))
        ).to_numpy()
    cycle = (cycle_overhead, per_seq, prefill_share)
    rows = _rows(units, configs, coef, loads, tau, sigma, growth, closed_loop, cycle, rng)
    if unknown_alpha:
        rows.loc[rows["k"] > 0, "alpha"] = np.nan
    rows["verifier_params"] = rows["verifier"].map(verifiers)
    return rows, truth


def _group_levels(names: list[str], verifiers: dict, drafters, rng) -> np.ndarray:
    """Log group levels ``(group, drafter, coef)``: :data:`LEVEL_8B` scaled by size, GPU and
    verifier factors (one GPU factor per GPU, shared by its verifiers and drafters); the
    verifier coefficients are the same for every drafter of a group."""
    base = np.array([LEVEL_8B[c] for c in COEFS])
    gpus = sorted({n.split("|")[1] for n in names})
    gpu_factor = {h: rng.normal(0.0, 0.3, size=len(COEFS)) for h in gpus}
    drafter = np.array([c in DRAFTER_COEFS for c in COEFS])
    out = np.empty((len(names), max(len(drafters), 1), len(COEFS)))
    for i, name in enumerate(names):
        v, h = name.split("|")
        # the first drafter shares the verifier's factor (one drafter: as before drafters)
        factor = gpu_factor[h] + rng.normal(0.0, 0.1, size=len(COEFS))
        level = base + np.log(verifiers[v] / 8e9) + factor
        for j, (_, size) in enumerate(drafters):
            if j:
                factor = gpu_factor[h] + rng.normal(0.0, 0.1, size=len(COEFS))
            out[i, j] = np.where(drafter, base + np.log(size / 1e9) + factor, level)
    return out


def _configurations(units, names, level, alphas, ks, unknown_alpha) -> pd.DataFrame:
    """One row per configuration: every unit's dense sweep and its SD (drafter, alpha, k)
    sweeps."""
    rows = []
    for u in range(len(units)):
        rows.append({"unit": u, "drafter": "none", "slot": 0, "k": 0, "alpha": np.nan})
        if level == "dense":
            continue
        for j, name in enumerate(names):
            cell_alphas = (alphas[(u + j) % len(alphas)],) if unknown_alpha else alphas
            rows += [
                {"unit": u, "drafter": name, "slot": j, "k": k, "alpha": a}
                for a in cell_alphas
                for k in ks
            ]
    return pd.DataFrame(rows)


def _spec_seq(units: pd.DataFrame, at_centre: float) -> np.ndarray:
    """Each unit's ``c2c``: ``at_centre`` at the cells' centre context, proportional to the
    context, where the GPU runs FlashAttention 2 (catalog), else 0."""
    from specbayes.model.physics import spec_seq_centre

    # the context relative to the cells' centre, as the model's KV trend covariate has it
    context = np.exp(trend_covariates(units["prefill"], units["decode"], ["c2v"])[0][:, 0])
    fa2 = [spec_seq_centre(v, h, None, 512, 512) != 0.0 for v, h in
           zip(units["verifier"], units["hardware"], strict=True)]  # fmt: skip
    return np.where(fa2, at_centre * context, 0.0)


def _rows(units, configs, coef, loads, tau, sigma, growth, closed, cycle, rng) -> pd.DataFrame:
    """The load points of every configuration, with latencies drawn from the model."""
    u = configs["unit"].to_numpy()
    unit = units.iloc[u].reset_index(drop=True)
    k = configs["k"].to_numpy(float)
    alpha = configs["alpha"].fillna(0.5).to_numpy()
    g = unit["decode"].to_numpy(float)
    c = {name: coef[u, configs["slot"].to_numpy(), j] for j, name in enumerate(COEFS)}
    c1, c2 = laws.effective_costs(
        c["c1p"], c["c1v"], c["c1d"], c["c2p"], c["c2v"], c["c2d"], g, alpha, k,
        c1c=cycle[0], c2c=cycle[1][u], prefill_share=cycle[2],
    )  # fmt: skip
    log_c1 = np.log(c1) + tau[0] * rng.normal(size=len(k))
    log_c2 = np.log(c2) + tau[1] * rng.normal(size=len(k))
    x = np.asarray(loads, float)
    if closed:  # concurrency at utilisation x: N C2 / (C1 + N C2) = x
        load = np.maximum(1.0, np.round(x / (1.0 - x) * np.exp(log_c1 - log_c2)[:, None]))
    else:
        load = x / np.exp(log_c2)[:, None]
    n = load.shape[1]
    log_c1_row, log_c2_row = np.repeat(log_c1, n), np.repeat(log_c2, n)
    mu = log_mean_latency(log_c1_row, log_c2_row, load.ravel(), np.full(load.size, closed))
    scale = sigma * np.exp(log_row_scale(mu, log_c1_row, growth))
    frame = unit.loc[np.repeat(np.arange(len(k)), n)].reset_index(drop=True)
    frame["drafter"] = np.repeat(configs["drafter"].to_numpy(), n)
    frame["k"] = np.repeat(k, n).astype(int)
    frame["alpha"] = np.repeat(configs["alpha"].to_numpy(), n)
    frame["rps"] = np.nan if closed else load.ravel()
    if closed:
        frame["concurrency"] = load.ravel()
        keys = ["verifier", "hardware", "cell", "drafter", "k", "alpha", "concurrency"]
        frame = frame.drop_duplicates(keys)
    frame["latency"] = np.exp(mu + scale * rng.normal(size=len(mu)))[frame.index]
    frame[["prefill", "decode"]] = frame[["prefill", "decode"]].astype(float)
    return frame.reset_index(drop=True)
