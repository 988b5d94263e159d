r"""Hierarchical PyMC models of the latency law: ``dense``, ``sd`` and ``moe`` (docs/model.md §1–7).

The three levels share one machinery; they differ only in the coefficients they carry:

==========  ======================================================================
``dense``   ``c1p, c1v, c2p, c2v`` on ``k = 0`` rows: :math:`C = c_p + g\,c_v`
``sd``      adds the drafter pass ``c1d, c2d`` and fits dense and SD rows jointly
``moe``     adds ``c1s, c2s``, the per-verifier-pass cost at *full* expert coverage
==========  ======================================================================

Mean latency of a row (all formulas from :mod:`specbayes.laws`)
----------------------------------------------------------------
With :math:`w = g / E(\alpha, k)` verifier passes per request and :math:`a_p = p / \bar p_u`
(the row's prompt length relative to its unit's mean — prefill costs are linear in prefill,
docs/model.md §6):

.. math::

    C_1 = a_p c_{1p} + w\,(c_{1v} + k\,c_{1d}) \;[+\,\varphi(T)\,w\,c_{1s}], \qquad
    C_2 = a_p c_{2p} + w\,(c_{2v} + k\,c_{2d}) \;[+\,\varphi(T)\,w\,c_{2s}]

Open-loop rows (rate λ): :math:`\mu = C_1/(1 - \lambda C_2)`; closed-loop rows (N streams):
:math:`\mu = C_1 + N C_2` — the same coefficients (docs/model.md §1) — each with the batch
curvature below. For ``moe``,
:math:`\varphi(T) = 1 - (1 - m/M)^T` with :math:`T = \lambda\mu(k+1)` taken from the model's
own latency: :func:`specbayes.laws.moe_latency_implicit` finds the least fixed point inside
the graph without a gradient (monotone iterations from :math:`\varphi = 0`, then Newton) and
differentiates it by the implicit function theorem. For closed-loop MoE rows the batch is N,
so :math:`T = N(k+1)`.
The MoE split puts the coverage-dependent part on the verifier pass: :math:`C_{1u}, C_{2u}`
are the sd costs, :math:`C_{1s} = w\,c_{1s}`, :math:`C_{2s} = w\,c_{2s}`. Experts per token
``m`` and experts per layer ``M`` come from the columns ``experts_per_token`` /
``num_experts`` or from :mod:`specbayes.catalog`; verifiers with neither get
:math:`\varphi = 0` (their ``c*s`` stay at the prior).

Batch curvature (the knees)
---------------------------
Per-pass costs grow faster than linearly with the batch once a pass turns compute-bound, so
each row (:data:`CURVED_LEVELS`: every level) also carries
:math:`C_3 = C_{2,v}/K_v + C_{2,d}/K_d`
(:func:`laws.effective_curvature`: the verifier part :math:`a_p c_{2p} + w c_{2v}`
doubles its per-request cost at a batch of :math:`K_v` requests,
the drafter part :math:`w k c_{2d}` at :math:`K_d`), and the law is
:math:`L = C_1 + B C_2 + B^2 C_3` with :math:`B = \lambda L` (:func:`laws.latency`; closed
loop :math:`B = N`). In the ``moe`` level the expert part of a verifier pass bends at the
verifier's knee, :math:`C_{3s} = w c_{2s}/K_v`, inside the coverage fixed point (iterated in
one ``pytensor.scan``, :func:`laws.moe_latency_implicit`).
:math:`\log K_{v,h} = \kappa_v + a_v + e_h`,
:math:`\log K_{d,h} = \kappa_d + b_d + e_h` — levels ``knee_verifier_level``,
``knee_drafter_level`` with LogNormal priors (medians 2000 and 300 requests, sd 1), zero-sum
verifier, drafter and GPU effects of fixed scale ``knee_effect_sd`` = 0.5.
Why: on the open-loop rows of the paper's dense verifiers, least squares of the plain law
per configuration leave log rms 0.043 in the most loaded 10 % of each sweep and 0.020 in the
lowest quarter (0.007–0.023 between): the simulator's step cost bends up at large batches,
and the straight law compromises everywhere. With one knee per (verifier, GPU) and
per-configuration :math:`C_1, C_2`, rms 0.011 and 0.009 (in-sample latency R² 0.9943 →
0.9992); knees 800–3100 requests, lower on A100 than on H100.
Per-configuration fits of the sd rows put the knee of a cycle at ~3000 requests for
``k = 0`` falling to ~200 by ``k = 8`` — the drafter passes' knee. The knees are estimated in
the least-squares reference (units held fixed, a ridge toward the prior) before the units are
refitted at them.

With curvature the exact law has a *finite* latency at its wall (the saturation rate
:func:`laws.saturation_rps`) and no solution past it — a cliff in the likelihood: a fold of
the paper's dense verifiers diverged on 3,611 of 4,000 draws (R-hat 1.07 on the knees). The
graph therefore softens the wall (:data:`WALL_SOFTNESS`, :func:`laws.log_headroom`): rows
within 1 % (of :math:`(1-x)^2`) of it, or past it, see a smooth plateau instead; on that
fold 0 divergences, R-hat 1.01, and 5 of 1,350 rows (the last point of five A100 sweeps) had
some posterior mass past the exact wall — for those draws predictions and the planner
(exact law) call the row saturated.

Likelihood
----------
:math:`\log L_\mathrm{obs} \sim \mathcal N(\log\mu,\ \sigma_0 (1 - x)^{-\gamma})` (the variable
is a ``LogNormal`` named ``latency``), with the utilisation :math:`x = 1 - C_1/\mu`
(:math:`\lambda C_2` open loop and :math:`N C_2/\mu` closed loop without curvature) — the
noise may grow toward saturation, :math:`\gamma \ge 0`. The samplers run
:attr:`LatencyModel.sampling_model`, where this density is one compiled term,
``latency_loglik`` (:mod:`specbayes.likelihood`: value and gradient in one loop over the
rows — for ``moe`` with the coverage fixed point iterated to convergence — checked equal to
the graph); :attr:`LatencyModel.model` keeps the observed ``latency`` for inspection and for
the ``numpyro`` sampler.

Hierarchy (centred on the log scale)
------------------------------------
A *unit* is one (verifier, hardware, cell) for the verifier coefficients and one
(verifier, hardware, drafter, cell) for ``c1d, c2d``. With :math:`\theta = \log c`:

.. math::

    \theta_{j,u} \sim \mathcal N\big(\mu_j + \beta_j s_{v(u)} + \eta_{j,v(u)} + h_{j,h(u)}
                                     + (b_j + \zeta_{j,v(u)} + \xi_{j,h(u)})\, t_j(u),
                                     \ \tau_j\big)

* :math:`\mu_j` — level; prior :math:`\mathcal N(\hat\mu_j, 1)` around the least-squares
  reference scale of the data (log units: nearly flat, it only fixes units).
* :math:`s_v` — centred log verifier parameter count (drafter count for ``c*d``), used when
  known for at least 3 verifiers (drafters); :math:`\beta_j \sim \mathcal N(1, 0.5)`.
* :math:`\eta` — verifier effect (drafter effect for ``c*d``), ``ZeroSumNormal`` so a level
  and an effect are never redundant; present only when the factor has ≥ 2 levels; its scale
  is learned (HalfNormal) from ≥ 5 levels, fixed at the prior scale below that (a handful of
  levels cannot inform a scale, and a learned one would put a funnel in the posterior).
* :math:`h` — hardware effect, the same rules.
* :math:`t_j` — cell trend covariate (docs/model.md §6), centred over the data's units:
  ``log p`` for ``c1p, c2p``; ``log(p + g/2)`` (time-averaged KV) for ``c1v, c2v, c2d``;
  none for ``c1d, c1s, c2s``. The slope :math:`b_j` is free when the covariate takes ≥ 3
  distinct values, else fixed at its prior mean (e.g. 1 for ``c2v``: linear in KV size).
* :math:`\zeta, \xi` — verifier and hardware deviations of a free slope of a verifier
  coefficient that most units resolve (its scale, or its pair's, is learned; elsewhere 0)
  (``verifier_slope_effect``, ``hardware_slope_effect``; ``ZeroSumNormal`` with the fixed
  scale ``slope_effect_sd`` = 0.25). How a cost grows with the KV cache differs
  between GPUs (memory- vs compute-bound attention) and models (KV bytes per parameter):
  on curve_fit totals of the paper's dense verifiers the ``c2v`` slope is 0.17 lower on A100
  than on H100 for every verifier (0.44 vs 0.61 on average) and 0.26 lower for
  Llama-3.1-70B than for the other four. A joint least-squares
  check of :math:`C_2`'s cross-cell form over those 10 (verifier, GPU) groups: residual sd
  0.040 (log) with one common slope, 0.028 with these two effects — the level of the
  paper's per-group trends (0.025–0.029) — and nothing left for per-group slopes (0.027;
  ``benchmarks/law_misfit.py --part form``).
* :math:`\tau_j` — per-cell deviation scale: learned from ≥ 5 cells when most units pin
  coefficient ``j`` to better than ``cell_sd``, fixed at ``cell_sd`` otherwise. An unseen cell
  is predicted from the trend plus a deviation drawn from :math:`\mathcal N(0, \tau_j)`.
  A learned scale has the boundary-avoiding prior :math:`\tau_j \sim
  \mathrm{Gamma}(2,\ 2/\mathrm{cell\_sd})` (mean ``cell_sd``, density linear at 0): under a
  HalfNormal the density of :math:`\log\tau` falls only like :math:`\tau` toward 0, so a scale
  the data cannot tell from zero (``tau[c2d]`` on a paper MoE verifier: 1 % quantile 0.0004,
  median 0.019) had a long left tail into the funnel's neck (bulk ESS 61 of 600, tail ESS
  135 of 4000 for ``tau[c1v+c1s]``); the Gamma's :math:`\tau^2` halves that tail (at the
  default sampler settings bulk ESS 240 -> 605, tail 135 -> 463; ``benchmarks/fit_speed.md``).
  Where the data pin the scale the prior moves it by a few per cent.
* Pairs (:data:`SHARE_PAIRS`, pooled on their own axes at the levels of
  :data:`POOLED_PAIR_LEVELS`: ``dense`` and ``moe``) deviate in their own coordinates: the log total
  :math:`\kappa \sim \mathcal N(\operatorname{logaddexp}(m_a + \log w_a, m_b + \log w_b),
  \tau_\mathrm{pair})` with :math:`\tau_\mathrm{pair}` learned from ≥ 5 cells (every unit
  resolves its total), the logit share :math:`\ell \sim \mathcal N(m_b + \log w_b - m_a -
  \log w_a, \sqrt 2\,\mathrm{cell\_sd})` (its split is what the data cannot see, so its
  scale is never learned). Learning one scale per coefficient of a pair instead put a ridge
  between them (only a weighted sum of their squares is identified) and drove one to zero
  (460 leapfrog steps per draw); with the fixed prior scale on the coefficients, unseen-cell
  intervals were ~10x too wide (90 % intervals covered 100 % of held-out rows).
* *Minor* and *tied* coefficients: when most units cannot see a pair's split, its minor
  member (``c1p``, ``c2p`` in dense-only data) follows its physical cell trend — its cell
  slope is fixed at the prior mean (prefill cost linear in prefill length); free, it could
  only fit residuals of the total, and did so in more than one way (two modes, R-hat 1.74 on
  a leave-2-out fold of five paper verifiers). It is also *tied* (``structure['tied']``: no
  verifier or hardware effect, size slope fixed) unless the cells show it: across the cells
  of a (verifier, hardware) group prefill and decode vary independently, so the trend of the
  well-pinned totals separates the members (:func:`cross_cell_share`); a member explaining
  less than :data:`TIED_SHARE` of them is tied. On the paper's dense verifiers that is
  ``c1p`` (0.13 % of :math:`C_1`: one prefill beside g decode steps; its freed terms gave
  two modes, R-hat 1.73) but not ``c2p`` (36 % of :math:`C_2`: each request's prefill is
  compute-bound batch work). Tying ``c2p`` too left the :math:`C_2` trend unable to follow
  verifiers and GPUs: per-cell deviations of the C2 total from the trend of +0.35 in log
  units at (p, g) = (1024, 256) and −0.18 at (256, 1024), learned scale 0.22, held-out cells'
  C2 off by 18 % rms on a leave-1-out fold; untied, scale 0.035 and 4.6 % rms.

Why centred, and why whitened
-----------------------------
Each unit's coefficients are pinned by hundreds of precise sweep points, so the likelihood,
not the prior, dominates most of them — the regime where *centred* units sample well and
non-centred ones form funnels. What remains is the strong *correlation* between coefficients
of one workload (``c1p, c1v, c1d`` all enter one :math:`C_1`), which made a naive fit take
~30 leapfrog steps per draw and diverge from jittered starts. So the unit coefficients (and
latent alphas) are *sampled in whitened, partially non-centred coordinates*. Per block (one
verifier and cell, all its hardware and drafters), with :math:`H` the Gauss–Newton data
precision at the reference :math:`\hat\theta`, :math:`P` the prior precision of a unit
(``1/cell_sd²``; 1 for a logit alpha) and :math:`m` the hierarchical location,

.. math::

    \theta = (H + P)^{-1} H \hat\theta + (H + P)^{-1} P\, m + L z, \qquad
    L L^\top = (H + P)^{-1}

— the Gaussian approximation of the unit's conditional posterior, so :math:`z` is close to
standard normal *and* nearly independent of the hyper-parameters: well-measured directions are
effectively centred, directions the data do not see are non-centred, and everything in
between is weighted accordingly. ``z`` is flat; the hierarchical prior on :math:`\theta`
enters as a potential (the map is affine in ``z`` with a constant Jacobian, so no correction
is needed).

* :math:`\hat\theta` is an empirical-Bayes mode: per-block least squares on log latency
  from a feasible start, then two passes penalised toward the pooled group location
  (:func:`least_squares_reference`) — so a coefficient the data barely see (typically
  ``c1p``: prefill is ~1 % of a request's latency) sits where the hierarchy puts it, not at
  noise.
* Eigen-directions of :math:`H` with data-only sd above ``WEAK_LOG_SD`` (0.5 log units) are
  dropped from :math:`H`: the data cannot tell them from zero, and their curvature at
  :math:`\hat\theta` would mis-scale the rest of their range.
* *Adaptive centring* (:func:`adaptive_centring`): the whitening assumes the prior scale
  ``cell_sd``; a slot whose scale is learned is re-centred at the learned :math:`\tau` —
  :math:`\phi_j = (h_j\hat\phi_j + m_j/\tau^2)/(h_j + 1/\tau^2) + (s_j(\tau)/s_j(\mathrm{cell\_sd}))
  (Lz)_j` with :math:`s_j(t) = (h_j + 1/t^2)^{-1/2}` and :math:`h_j` its data precision — so
  a slot the data pin stays centred and one they barely see becomes :math:`m_j + \tau z`
  (non-centred) as :math:`\tau` moves; without it a learned scale near zero was a funnel
  (R-hat 1.13, bulk ESS 29 on one paper verifier; with it 1.00 / 272 at 31 steps per draw).
* At :math:`z = 0` every chain starts at a point where :math:`\lambda C_2 < 1` for every
  observed row (checked); the samplers' jitter of ±1 in ``z`` is one posterior sd.
* The reference above is only the first: its :math:`H` uses the rms residual as noise sd
  and a moment estimate of the noise growth, which on large sweep sets are far from the
  posterior's (paper dense verifiers: 0.13 vs :math:`\sigma_0 = 0.0076`, growth 0.65 vs
  2.5). With ``sampler_config={"start": "mode"}`` (the default from 10,000 rows on)
  :func:`specbayes.fit.fit` samples a
  second whitening (:func:`whitening`), built the same way at the posterior mode of this
  model, with the mode's noise model and knees (:mod:`specbayes.mode`); the structure stays
  the one decided here.

Pairs whose *sum* is pinned but whose split is not (:data:`SHARE_PAIRS`) — ``dense``:
:math:`c_{1p} + \bar g c_{1v}` within a cell (only :math:`C_1` is measured) and likewise
:math:`C_2`; ``moe``: :math:`c_{2v} + c_{2s}` once :math:`\varphi \approx 1` — form a curved
ridge in log space that mixed badly (R-hat 2, ~90 steps per draw). They are sampled as
(log total, logit share): :math:`\kappa = \log(w_a c_a + w_b c_b)`,
:math:`\ell = \log(w_b c_b) - \log(w_a c_a)`; the map to
:math:`(\log c_a, \log c_b)` has Jacobian determinant :math:`(1 - s) + s = 1`, so the
prior on the log coefficients needs no correction, and the ridge becomes an axis.

Latent alpha
------------
SD rows whose ``alpha_source`` is ``'unknown'`` get a latent alpha per
(verifier, drafter, cell), sampled as ``logit(alpha)`` with a ``Beta(a, b)`` prior (the
potential includes the logit Jacobian). Rows of the same key that do carry alpha inform it
through :math:`\operatorname{logit}\alpha_\mathrm{obs} \sim \mathcal N(\operatorname{logit}
\alpha, 0.05)`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd
from scipy import optimize
from threadpoolctl import threadpool_limits

from specbayes import laws

__all__ = [
    "COEFFICIENTS",
    "DEFAULT_PRIORS",
    "Design",
    "LatencyModel",
    "build_design",
    "forward_numpy",
    "simulate_sweeps",
]

#: Coefficients carried by each model level (verifier ones first, then drafter ones).
COEFFICIENTS: dict[str, tuple[str, ...]] = {
    "dense": ("c1p", "c1v", "c2p", "c2v"),
    "sd": ("c1p", "c1v", "c2p", "c2v", "c1d", "c2d"),
    "moe": ("c1p", "c1v", "c2p", "c2v", "c1s", "c2s", "c1d", "c2d"),
}
DRAFT_COEFS = ("c1d", "c2d")

#: Cell-trend covariate of each coefficient: 'p' = log prefill, 'kv' = log(p + g/2), None.
TREND: dict[str, str | None] = {
    "c1p": "p",
    "c2p": "p",
    "c1v": "kv",
    "c2v": "kv",
    "c1d": None,
    "c2d": "kv",
    "c1s": None,
    "c2s": None,
}

#: Default priors; ``fit(priors=...)`` merges a user dict over these (nested dicts merged).
DEFAULT_PRIORS: dict[str, Any] = {
    "level_sd": 1.0,  # sd of mu_j around the least-squares reference (log units)
    "verifier_sd": 0.5,  # verifier effect scale (HalfNormal scale when learned)
    "drafter_sd": 1.0,  # drafter effect scale
    "hardware_sd": 1.0,  # hardware effect scale
    "size_slope": (1.0, 0.5),  # Normal(mean, sd) slope on centred log parameter count
    "trend_slope": {  # Normal(mean, sd) slope on the cell covariate
        "c1p": (1.0, 0.5),
        "c2p": (1.0, 0.5),
        "c1v": (0.0, 0.5),
        "c2v": (1.0, 0.5),
        "c2d": (0.5, 0.5),
    },
    "slope_effect_sd": 0.25,  # sd of a verifier's / GPU's deviation from a free cell slope
    "cell_sd": 0.15,  # per-cell deviation: Gamma(2, 2/cell_sd) mean when learned, else the value
    "sigma": 0.1,  # HalfNormal scale of sigma0 (noise on log latency)
    "noise_growth": 0.5,  # HalfNormal scale of gamma (noise growth toward saturation)
    "alpha": (2.0, 2.0),  # Beta(a, b) prior of a latent alpha
    "alpha_obs_sd": 0.05,  # sd of an observed alpha on the logit scale (latent keys only)
    # knee batches of the batch curvature (requests at which a pass's per-request cost
    # doubles; laws.batch_curvature): LogNormal(log median, sd) levels, and the fixed sd of
    # the verifier / drafter / GPU effects on them (log units)
    "knee_verifier": (2000.0, 1.0),
    "knee_drafter": (300.0, 1.0),
    "knee_effect_sd": 0.5,
}

#: Factor with at least this many levels gets a learned effect scale.
LEARN_SCALE_MIN_LEVELS = 5
#: Covariate with at least this many distinct values gets a free slope.
SLOPE_MIN_VALUES = 3
#: Coefficient pairs whose *sum* the data pin but whose split they barely see, sampled as
#: (log total, logit share) — see :func:`least_squares_reference`.
SHARE_PAIRS: dict[str, tuple[tuple[str, str], ...]] = {
    "dense": (("c1p", "c1v"), ("c2p", "c2v")),
    "sd": (),
    "moe": (("c1v", "c1s"), ("c2v", "c2s")),
}
#: Levels whose pairs are also *pooled* on (log total, logit share) — per-cell deviation of
#: the total with a learned scale, of the share with a fixed one. Dense-only data: calibrated
#: unseen-cell intervals. MoE (Qwen3-30B-A3B, H100): one learned scale per member of
#: (c1v, c1s) formed a ridge (tau[c1v] bulk ESS 15, R-hat 1.13, 60 leapfrog steps/draw);
#: pooled on the pair's axes, 33 steps/draw and no ridge.
POOLED_PAIR_LEVELS = ("dense", "moe")
#: A pair's logit share deviates across cells with sd ``SHARE_SD_FACTOR * cell_sd`` (the sd
#: of a difference of two independent ``cell_sd`` deviations); its scale is never learned.
SHARE_SD_FACTOR = float(np.sqrt(2.0))
#: Data-only posterior sd (log units) above which a unit coefficient counts as unidentified.
WEAK_LOG_SD = 0.5
#: A pair's minor member keeps its verifier and hardware effects and size slope when it
#: explains at least this share of the pair's total across cells (:func:`cross_cell_share`):
#: c2p on the paper's dense verifiers (prefill is compute-bound batch work), not c1p (one
#: prefill beside g decode steps; freeing its terms gave two modes, R-hat 1.73).
TIED_SHARE = 0.05
#: Start of the knee levels above the least-squares knees (log units; see ``initial_point``).
KNEE_START_OFFSET = 1.0
#: Model levels with the batch curvature. ``moe``: its fixed point iterates the curved map
#: in one ``pytensor.scan`` (30 unrolled curved iterations compiled past 24 GB of memory).
CURVED_LEVELS = ("dense", "sd", "moe")
#: Most alternations of (knees | units) and (units | knees) in the least-squares reference.
KNEE_ALTERNATIONS = 2
#: Softness of the curved law's wall in the graph (:func:`laws.log_headroom`).
WALL_SOFTNESS = 0.01
#: Fixed-point iterations of the MoE map inside the graph.
MOE_ITERATIONS = 30


def merge_priors(priors: dict | None) -> dict:
    """Defaults merged with the user's dict (one level of nesting merged too)."""
    out = json.loads(json.dumps(DEFAULT_PRIORS))
    for key, value in (priors or {}).items():
        if key not in out:
            raise ValueError(f"unknown prior {key!r}; known: {sorted(out)}")
        if isinstance(out[key], dict) and isinstance(value, dict):
            out[key].update(value)
        else:
            out[key] = value
    return out


# ---------------------------------------------------------------------------------------------
# design: labels, units, row arrays
# ---------------------------------------------------------------------------------------------


def _catalog_entry(kind: str, name: str) -> Any:
    """The catalog descriptor of a verifier (``kind='model'``) or drafter, or None."""
    try:
        from specbayes import catalog

        return catalog.load_model(name) if kind == "model" else catalog.load_drafter(name)
    except Exception:  # catalog absent, entry unknown: fall back gracefully
        return None


def _size_of(name: str, df: pd.DataFrame, col: str, column: str) -> float:
    """Parameter count: the data column ``column`` first, then :mod:`specbayes.catalog`.

    Verifiers use the catalog's ``active_parameters`` (= total for dense models), drafters
    their ``parameters``; NaN when neither source knows the model.
    """
    if column in df:
        vals = df.loc[df[col] == name, column].dropna()
        if len(vals):
            return float(vals.iloc[0])
    entry = _catalog_entry("model" if col == "verifier" else "drafter", name)
    try:
        value = entry.active_parameters if col == "verifier" else entry.parameters
        return float(value)
    except Exception:
        return float("nan")


def _experts_of(name: str, df: pd.DataFrame) -> tuple[float, float]:
    """(m, M) of a verifier from the data columns or the catalog; (0, 1) = not MoE."""
    sub = df[df["verifier"] == name]
    if "experts_per_token" in sub and "num_experts" in sub:
        m, big_m = sub["experts_per_token"].dropna(), sub["num_experts"].dropna()
        if len(m) and len(big_m) and float(big_m.iloc[0]) > 0:
            return float(m.iloc[0]), float(big_m.iloc[0])
    entry = _catalog_entry("model", name)
    if entry is not None and getattr(entry, "num_experts", 0):
        return float(entry.num_experts_per_tok), float(entry.num_experts)
    return 0.0, 1.0


@dataclass
class Design:
    """Everything the graph and the numpy forward need, derived deterministically from data.

    Attributes
    ----------
    model_name : str
    coefs : tuple of str
        Coefficients of this model level (order of the ``coef`` dim).
    data : DataFrame
        The fitted rows (index reset; row ``i`` is ``obs`` ``i``).
    verifiers, hardware, drafters, cells : list of str
        Levels (``drafters`` excludes ``'none'``).
    units : DataFrame
        One row per (verifier, hardware, cell): mean prefill ``p`` and decode ``g``.
    dunits : DataFrame
        One row per (verifier, hardware, drafter, cell) with SD rows.
    akeys : DataFrame
        (verifier, drafter, cell) keys whose alpha is latent.
    rows : dict of ndarray
        Per-row arrays (see :func:`build_design`).
    groups : dict of ndarray
        Coefficient groups, one per distinct (unit, dunit, k): ``unit``, ``dunit`` (-1: no
        drafter) and ``k``; ``rows["group"]`` maps each row to its group.
    """

    model_name: str
    coefs: tuple[str, ...]
    data: pd.DataFrame
    verifiers: list[str]
    hardware: list[str]
    drafters: list[str]
    cells: list[str]
    units: pd.DataFrame
    dunits: pd.DataFrame
    akeys: pd.DataFrame
    rows: dict[str, np.ndarray]
    verifier_size: np.ndarray
    drafter_size: np.ndarray
    trend_center: dict[str, float]
    groups: dict[str, np.ndarray] = field(default_factory=dict)
    structure: dict[str, Any] = field(default_factory=dict)

    @property
    def base_coefs(self) -> tuple[str, ...]:
        return tuple(c for c in self.coefs if c not in DRAFT_COEFS)

    @property
    def draft_coefs(self) -> tuple[str, ...]:
        return tuple(c for c in self.coefs if c in DRAFT_COEFS)

    @property
    def latent_alpha(self) -> bool:
        return len(self.akeys) > 0


def _trend_value(kind: str | None, p: Any, g: Any) -> Any:
    if kind == "p":
        return np.log(np.asarray(p, dtype=float))
    if kind == "kv":
        return np.log(np.asarray(p, dtype=float) + 0.5 * np.asarray(g, dtype=float))
    return np.zeros(np.shape(p))


def build_design(data: pd.DataFrame, model_name: str) -> Design:
    """Index the fitted rows into units, levels and row arrays.

    Parameters
    ----------
    data : DataFrame
        Validated sweep rows (``SweepTable.data``), already restricted to the rows this model
        fits (``k == 0`` for ``dense``).
    model_name : {'dense', 'sd', 'moe'}

    Returns
    -------
    Design

    Raises
    ------
    ValueError
        No rows; no configuration with two distinct load levels (C1 and C2 cannot be
        separated); or, for ``moe``, a verifier without expert routing.
    """
    if model_name not in COEFFICIENTS:
        raise ValueError(f"unknown model {model_name!r}; choose one of {sorted(COEFFICIENTS)}")
    df = data.reset_index(drop=True).copy()
    if len(df) == 0:
        raise ValueError("no rows to fit")
    df["closed"] = df["concurrency"].notna()
    load = np.where(df["closed"], df["concurrency"], df["rps"])
    cfg = ["verifier", "hardware", "drafter", "cell", "k", "closed"]
    # a given alpha is a configuration setting; a measured one varies point to point
    set_alpha = df["alpha"].where(df.get("alpha_source", "given") == "given").round(6)
    keys = [df[c] for c in cfg] + [set_alpha.fillna(-1.0)]
    nlev = pd.Series(np.round(load, 9)).groupby(keys).nunique()
    if nlev.max() < 2:
        raise ValueError(
            "every configuration has a single load level (one rate or concurrency): the "
            "load-independent and load-dependent costs C1, C2 cannot be separated; sweep "
            "at least two loads per configuration"
        )
    coefs = COEFFICIENTS[model_name]
    if model_name == "dense" and (df["k"] > 0).any():
        raise ValueError("the dense model fits k = 0 rows only")
    verifiers = sorted(df["verifier"].unique())
    hardware = sorted(df["hardware"].unique())
    drafters = sorted(d for d in df["drafter"].unique() if d != "none")
    cells = sorted(df["cell"].unique())

    units = (
        df.groupby(["verifier", "hardware", "cell"], sort=True)
        .agg(p=("prefill", "mean"), g=("decode", "mean"))
        .reset_index()
    )
    spec = df[df["k"] > 0]
    dunits = (
        spec.groupby(["verifier", "hardware", "drafter", "cell"], sort=True)
        .agg(p=("prefill", "mean"), g=("decode", "mean"))
        .reset_index()
    )
    unknown = spec[spec["alpha_source"] == "unknown"]
    akeys = (
        unknown[["verifier", "drafter", "cell"]]
        .drop_duplicates()
        .sort_values(["verifier", "drafter", "cell"])
    ).reset_index(drop=True)

    ukey = pd.MultiIndex.from_frame(units[["verifier", "hardware", "cell"]])
    unit_idx = ukey.get_indexer(pd.MultiIndex.from_frame(df[["verifier", "hardware", "cell"]]))
    dkey = pd.MultiIndex.from_frame(dunits[["verifier", "hardware", "drafter", "cell"]])
    dunit_idx = (
        dkey.get_indexer(pd.MultiIndex.from_frame(df[["verifier", "hardware", "drafter", "cell"]]))
        if len(dunits)
        else np.full(len(df), -1)
    )
    dunit_idx = np.where(df["k"].to_numpy() > 0, dunit_idx, -1)
    if len(akeys):
        akey = pd.MultiIndex.from_frame(akeys)
        alpha_idx = akey.get_indexer(pd.MultiIndex.from_frame(df[["verifier", "drafter", "cell"]]))
        alpha_idx = np.where(df["k"].to_numpy() > 0, alpha_idx, -1)
    else:
        alpha_idx = np.full(len(df), -1)

    closed = df["closed"].to_numpy()
    # rows sharing (unit, dunit, k) share their coefficients: the graph builds the
    # per-pass costs once per group and only the latency law per row
    grp_key = pd.MultiIndex.from_arrays([unit_idx, dunit_idx, df["k"].to_numpy()])
    grp_idx, grp_levels = pd.factorize(grp_key, sort=True)
    groups = {
        "unit": np.asarray(grp_levels.get_level_values(0), dtype=np.int64),
        "dunit": np.asarray(grp_levels.get_level_values(1), dtype=np.int64),
        "k": np.asarray(grp_levels.get_level_values(2), dtype=float),
    }
    known_alpha = df["alpha"].fillna(0.5).to_numpy(dtype=float)
    passes = laws.verifier_passes(
        df["decode"].to_numpy(dtype=float), known_alpha, df["k"].to_numpy(dtype=float)
    )
    experts = {v: _experts_of(v, df) for v in verifiers}
    dense_verifiers = [v for v in verifiers if experts[v][0] <= 0]
    if model_name == "moe" and dense_verifiers:
        # phi = 0 leaves c1s, c2s without data while their pairs' totals and shares still
        # carry c1v, c2v: a curved ridge (the demo's two dense verifiers: 207 divergences,
        # R-hat 1.08, bulk ESS 39)
        raise ValueError(
            f"the moe model fits MoE verifiers only; {', '.join(dense_verifiers)} "
            f"{'has' if len(dense_verifiers) == 1 else 'have'} no expert routing (no "
            "experts_per_token / num_experts columns and no MoE catalog entry): fit dense "
            "verifiers with model='sd'"
        )
    m_ratio = np.array([experts[v][0] / experts[v][1] for v in df["verifier"]], dtype=float)
    rows = {
        "unit": unit_idx.astype(np.int64),
        "dunit": dunit_idx.astype(np.int64),
        "akey": alpha_idx.astype(np.int64),
        "k": df["k"].to_numpy(dtype=float),
        "g": df["decode"].to_numpy(dtype=float),
        "a_p": df["prefill"].to_numpy(dtype=float) / units["p"].to_numpy()[unit_idx],
        "alpha": df["alpha"].fillna(0.5).to_numpy(dtype=float),
        "alpha_obs": df["alpha"].to_numpy(dtype=float),
        "rps": np.where(closed, 0.0, df["rps"].to_numpy(dtype=float)),
        "conc": np.where(closed, df["concurrency"].to_numpy(dtype=float), 0.0),
        "closed": closed.astype(float),
        "m_ratio": m_ratio,
        "latency": df["latency"].to_numpy(dtype=float),
        "rps_eff": df["rps"].to_numpy(dtype=float),
        "group": np.asarray(grp_idx, dtype=np.int64),
        "passes": np.where(alpha_idx >= 0, np.nan, passes),
        "verifier_idx": df["verifier"].map({v: i for i, v in enumerate(verifiers)}).to_numpy(),
        "hardware_idx": df["hardware"].map({h: i for i, h in enumerate(hardware)}).to_numpy(),
        "drafter_idx": df["drafter"]
        .map({x: i for i, x in enumerate(drafters)})
        .fillna(-1)
        .to_numpy(dtype=np.int64),
        # knee batches of the rows (set by least_squares_reference; no curvature until then)
        "knee_verifier": np.full(len(df), np.inf),
        "knee_drafter": np.full(len(df), np.inf),
    }
    vsize = np.array([_size_of(v, df, "verifier", "verifier_params") for v in verifiers])
    dsize = np.array([_size_of(d, df, "drafter", "drafter_params") for d in drafters])
    centers = {}
    for kind in ("p", "kv"):
        centers[kind] = float(np.mean(_trend_value(kind, units["p"], units["g"])))
    return Design(
        model_name=model_name,
        coefs=coefs,
        data=df.drop(columns=["closed"]),
        verifiers=verifiers,
        hardware=hardware,
        drafters=drafters,
        cells=cells,
        units=units,
        dunits=dunits,
        akeys=akeys,
        rows=rows,
        verifier_size=vsize,
        drafter_size=dsize,
        trend_center=centers,
        groups=groups,
    )


# ---------------------------------------------------------------------------------------------
# numpy forward model (shared by the least-squares start, prediction and the simulator)
# ---------------------------------------------------------------------------------------------


def forward_numpy(
    coef: dict[str, np.ndarray],
    rows: dict[str, np.ndarray],
    alpha: np.ndarray,
    *,
    moe: bool = False,
    converged: bool = True,
    wall_softness: float = 0.0,
    passes: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    r"""Mean latency and utilisation of rows, given per-row coefficients (numpy, broadcasting).

    Parameters
    ----------
    coef : dict of ndarray
        Per-row coefficients ``c1p, ...`` (seconds; missing drafter/MoE ones = 0), already
        scaled (prefill coefficients by ``a_p``), and the knee batches ``knee_verifier``,
        ``knee_drafter`` (requests; missing = ``inf``, no batch curvature).
    rows : dict of ndarray
        ``g, k, rps, conc, closed, m_ratio`` (see :func:`build_design`).
    alpha : ndarray
        Per-row acceptance probability.
    moe : bool
        Apply the coverage split (needs ``c1s, c2s``).
    converged : bool
        MoE: the least fixed point (:func:`laws.moe_latency`) if true, else the unrolled
        iteration the graph uses.
    wall_softness : float
        The graph's soft curved wall (:data:`WALL_SOFTNESS`), for the whitening's slopes at
        the least-squares point; 0 (exact law, ``inf`` past the wall) for the least-squares
        passes and predictions. Not with ``moe`` and ``converged``.
    passes : ndarray, optional
        The rows' verifier passes :func:`laws.verifier_passes` (of ``g``, ``alpha`` and
        ``k``) where the caller has them already; computed here if not given.

    Returns
    -------
    mu, x : ndarray
        Mean latency (``inf`` when saturated) and utilisation :math:`x = 1 - C_1/\mu`
        (:func:`laws.log_headroom`).
    """
    z = np.zeros(1)
    get = coef.get
    k, g = rows["k"], rows["g"]
    w = laws.verifier_passes(g, alpha, k) if passes is None else passes
    knee_v, knee_d = get("knee_verifier", np.inf), get("knee_drafter", np.inf)
    c2p, c2v, c2d = get("c2p", z), get("c2v", z), get("c2d", z)
    c3 = laws.effective_curvature(c2p, c2v, c2d, g, alpha, k, knee_v, knee_d, passes=w)
    c1, c2 = laws.effective_costs(
        get("c1p", z), get("c1v", z), get("c1d", z), c2p, c2v, c2d, g, alpha, k, passes=w
    )
    closed = rows["closed"] > 0
    if moe:
        c1s, c2s = w * get("c1s", z), w * get("c2s", z)
        c3s = c2s / knee_v  # the expert part of a verifier pass has the verifier's knee
        big_m = 1.0
        m = rows["m_ratio"]
        if converged:
            if wall_softness:
                raise ValueError("the converged MoE fixed point uses the exact wall")
            open_mu = laws.moe_latency(rows["rps"], c1, c1s, c2, c2s, m, big_m, k, c3u=c3, c3s=c3s)
        else:
            open_mu = laws.moe_latency_unrolled(
                rows["rps"],
                c1,
                c1s,
                c2,
                c2s,
                m,
                big_m,
                k,
                c3u=c3,
                c3s=c3s,
                iterations=MOE_ITERATIONS,
                wall_softness=wall_softness,
            )
        phi_c = laws.expert_coverage(rows["conc"] * (k + 1.0), m, big_m)
        closed_mu = laws.closed_loop_latency(
            rows["conc"], c1 + phi_c * c1s, c2 + phi_c * c2s, c3 + phi_c * c3s
        )
        with np.errstate(all="ignore"):
            phi_o = laws.expert_coverage(laws.routed_tokens(rows["rps"], open_mu, k), m, big_m)
        c1_open = c1 + phi_o * c1s
        c1_closed = c1 + phi_c * c1s
    else:
        open_mu = laws.latency(rows["rps"], c1, c2, c3, wall_softness=wall_softness)
        closed_mu = laws.closed_loop_latency(rows["conc"], c1, c2, c3)
        c1_open = c1_closed = c1
    mu = np.where(closed, closed_mu, open_mu)
    with np.errstate(all="ignore"):
        x = 1.0 - np.where(closed, c1_closed, c1_open) / mu
    return mu, x


# ---------------------------------------------------------------------------------------------
# least-squares reference and whitening
# ---------------------------------------------------------------------------------------------


@dataclass
class Parametrisation:
    """Flat parameter vector layout and its whitening (see the module docstring)."""

    n: int
    base_index: np.ndarray  # (n_units, n_base) -> flat index
    draft_index: np.ndarray  # (n_dunits, 2)
    alpha_index: np.ndarray  # (n_akeys,)
    ref: np.ndarray  # least-squares theta (log coefficients, logit alphas)
    white_idx: np.ndarray  # (n, B) flat indices of the block (padded with n -> zero slot)
    white_val: np.ndarray  # (n, B) rows of L
    shrink_val: np.ndarray  # (n, B) rows of M = (H + P)^-1 P
    const: np.ndarray  # (H + P)^-1 H theta_ls
    weak: np.ndarray  # parameters the data cannot tell from zero (a pair: if either is)
    data_prec: np.ndarray  # per slot: diagonal of the block's (resolved) data precision H
    prior_prec: np.ndarray  # per slot: the prior precision the whitening assumed
    marginal_prec: np.ndarray  # per slot: data precision marginal over its block (others' priors)
    pair_a: np.ndarray  # flat slots holding log totals of SHARE_PAIRS
    pair_b: np.ndarray  # flat slots holding logit shares
    pair_lwa: np.ndarray  # log weight of the first coefficient in the total
    pair_lwb: np.ndarray  # log weight of the second
    prior_loc_alpha: float
    sigma_hat: float
    gamma_hat: float  # moment estimate of the noise growth (rows weighted by it)
    block_of: np.ndarray
    knee_verifier: np.ndarray  # (verifier, hardware) least-squares log knee (NaN: no rows)
    knee_drafter: np.ndarray  # (drafter, hardware)

    def whitening_matrix(self):
        """``L`` as a sparse (n, n) matrix: its rows are ``white_val`` at ``white_idx``."""
        from scipy.sparse import csr_matrix

        inside = self.white_idx < self.n
        rows = np.broadcast_to(np.arange(self.n)[:, None], self.white_idx.shape)[inside]
        return csr_matrix(
            (self.white_val[inside], (rows, self.white_idx[inside])), shape=(self.n, self.n)
        )


def _layout(design: Design) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[np.ndarray]]:
    """Flat indices of every parameter, grouped in blocks of one (verifier, cell)."""
    nb, nd = len(design.base_coefs), len(design.draft_coefs)
    base_index = np.zeros((len(design.units), nb), dtype=np.int64)
    draft_index = np.zeros((len(design.dunits), nd), dtype=np.int64)
    alpha_index = np.zeros(len(design.akeys), dtype=np.int64)
    blocks: list[np.ndarray] = []
    nxt = 0
    keys = design.units[["verifier", "cell"]].drop_duplicates().itertuples(index=False)
    for v, c in keys:
        members = []
        for u in np.flatnonzero((design.units["verifier"] == v) & (design.units["cell"] == c)):
            base_index[u] = np.arange(nxt, nxt + nb)
            members.extend(range(nxt, nxt + nb))
            nxt += nb
        if nd and len(design.dunits):
            sel = (design.dunits["verifier"] == v) & (design.dunits["cell"] == c)
            for du in np.flatnonzero(sel):
                draft_index[du] = np.arange(nxt, nxt + nd)
                members.extend(range(nxt, nxt + nd))
                nxt += nd
        if len(design.akeys):
            sel = (design.akeys["verifier"] == v) & (design.akeys["cell"] == c)
            for a in np.flatnonzero(sel):
                alpha_index[a] = nxt
                members.append(nxt)
                nxt += 1
        blocks.append(np.array(members, dtype=np.int64))
    return base_index, draft_index, alpha_index, blocks


def _blocks(design: Design):
    """:func:`_layout` as ``(base, draft, alpha)`` indices and blocks, with each flat slot's
    block, each row's block and the latent-alpha slots."""
    base_index, draft_index, alpha_index, blocks = _layout(design)
    n = sum(len(members) for members in blocks)
    block_of = np.zeros(n, dtype=np.int64)
    for b, members in enumerate(blocks):
        block_of[members] = b
    row_block = block_of[base_index[design.rows["unit"], 0]]
    is_alpha = np.zeros(n, dtype=bool)
    is_alpha[alpha_index] = len(alpha_index) > 0
    return (base_index, draft_index, alpha_index), blocks, block_of, row_block, is_alpha


def _row_slots(design: Design, base_index, draft_index, alpha_index, rows_sel) -> dict:
    """Flat theta index of each row's coefficients and latent alpha (``-1``: the row has
    none; ``alpha`` only where there are latent alphas)."""
    r = design.rows
    u, du = r["unit"][rows_sel], r["dunit"][rows_sel]
    idx = {}
    for j, name in enumerate(design.base_coefs):
        idx[name] = base_index[u, j]
    for j, name in enumerate(design.draft_coefs):
        slot = draft_index[np.maximum(du, 0), j] if len(draft_index) else 0
        idx[name] = np.where(du >= 0, slot, -1)
    if len(alpha_index):
        ak = r["akey"][rows_sel]
        idx["alpha"] = np.where(ak >= 0, alpha_index[np.maximum(ak, 0)], -1)
    return idx


def _row_coefs(
    theta: np.ndarray, design: Design, base_index, draft_index, alpha_index, rows_sel
) -> tuple[dict, np.ndarray, dict]:
    """Per-row coefficients and alpha from a flat theta; also the flat index of each."""
    r = design.rows
    idx = _row_slots(design, base_index, draft_index, alpha_index, rows_sel)
    coef = {}
    for name in design.base_coefs:
        coef[name] = np.exp(theta[idx[name]])
    for name in design.draft_coefs:
        coef[name] = np.where(idx[name] >= 0, np.exp(theta[np.maximum(idx[name], 0)]), 0.0)
    a_p = r["a_p"][rows_sel]
    for name in ("c1p", "c2p"):
        coef[name] = coef[name] * a_p
    coef["knee_verifier"] = r["knee_verifier"][rows_sel]
    coef["knee_drafter"] = r["knee_drafter"][rows_sel]
    alpha = r["alpha"][rows_sel].copy()
    if "alpha" in idx:
        has = idx["alpha"] >= 0
        alpha = np.where(has, _sigmoid(theta[np.maximum(idx["alpha"], 0)]), alpha)
    return coef, alpha, idx


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _sub(rows: dict, sel: np.ndarray) -> dict:
    return {k: v[sel] for k, v in rows.items()}


def _group_factors(design: Design) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Verifier, hardware and drafter index of each coefficient group (drafter ``-1`` where
    the group has no drafter unit). A group is one (unit, dunit, k), so its rows share them."""
    r, n = design.rows, len(design.groups["unit"])
    out = []
    for name in ("verifier_idx", "hardware_idx", "drafter_idx"):
        col = np.asarray(r[name], dtype=np.int64)
        per_group = np.full(n, -1, dtype=np.int64)
        per_group[r["group"]] = col
        if name == "drafter_idx":
            per_group = np.where(design.groups["dunit"] >= 0, per_group, -1)
            col = np.where(design.groups["dunit"][r["group"]] >= 0, col, -1)
        if not np.array_equal(per_group[r["group"]], col):
            raise AssertionError(f"rows of one coefficient group differ in {name}")
        out.append(per_group)
    return tuple(out)


def _graph_softness(design: Design) -> float:
    """The wall softness of the model graph (:data:`WALL_SOFTNESS` on curved levels)."""
    return WALL_SOFTNESS if design.model_name in CURVED_LEVELS else 0.0


@dataclass
class _BlockPoint:
    """One evaluation of :meth:`_BlockRows.point`: per-row coefficients, alpha, expected
    tokens ``e`` and verifier passes ``w``, mean latency ``mu``, utilisation ``x``, the rows
    past the wall (``bad``) and the log residuals ``res``."""

    coef: dict
    alpha: np.ndarray
    e: np.ndarray
    w: np.ndarray
    mu: np.ndarray
    x: np.ndarray
    bad: np.ndarray
    res: np.ndarray


class _BlockRows:
    """Residuals of some rows and their Jacobian in some parameters (see
    :func:`_residual_jacobian`), with what does not depend on theta worked out once.

    That is the rows' data, the flat theta slots their coefficients read (gathered once per
    evaluation), where each (row, coefficient) lands in the Jacobian and, unless alpha is
    latent, alpha, the expected tokens and the verifier passes. The least-squares passes
    evaluate one block's rows a few hundred times per solve.
    """

    def __init__(self, design: Design, layout, rows_sel, params, softness: float = 0.0):
        self.coefs = design.coefs
        self.moe = design.model_name == "moe"
        self.softness = softness
        self.n_rows = len(rows_sel)
        self.rows = rows = _sub(design.rows, rows_sel)
        self.log_latency = np.log(rows["latency"])
        idx = _row_slots(design, *layout, rows_sel)
        self.alpha_slot = idx.get("alpha")
        # coefficient of (row, name) = [exp(theta[slots]), 0][take[name]] (0: no such slot)
        self.slots = np.unique(np.concatenate([idx[name] for name in self.coefs]))
        self.slots = self.slots[self.slots >= 0]
        self.take = {
            name: np.where(idx[name] >= 0, np.searchsorted(self.slots, idx[name]), len(self.slots))
            for name in self.coefs
        }
        if self.alpha_slot is None:
            self.alpha = rows["alpha"].copy()
            self.e = laws.expected_tokens(self.alpha, rows["k"])
            self.w = rows["g"] / self.e
        # flat theta index -> column of the Jacobian (-1: not one of the parameters); per
        # name the rows with a column and their flat positions in the (row, column) matrix
        params = np.asarray(params, dtype=np.int64)
        self.n_params = len(params)
        size = 1 + max(int(np.max(a, initial=-1)) for a in (params, *idx.values()))
        columns = np.full(size, -1, dtype=np.int64)
        columns[params] = np.arange(len(params))
        self.scatter = {}
        for name in (*self.coefs, "alpha"):
            if name not in idx:
                continue
            col = np.where(idx[name] >= 0, columns[idx[name]], -1)
            at = np.flatnonzero(col >= 0)
            self.scatter[name] = (at, at * self.n_params + col[at])

    def point(self, theta: np.ndarray) -> _BlockPoint:
        """The rows' coefficients, mean latency and residuals at a flat ``theta``."""
        rows = self.rows
        value = np.append(np.exp(theta[self.slots]), 0.0)
        coef = {name: value[self.take[name]] for name in self.coefs}
        for name in ("c1p", "c2p"):
            coef[name] = coef[name] * rows["a_p"]
        coef["knee_verifier"] = rows["knee_verifier"]
        coef["knee_drafter"] = rows["knee_drafter"]
        if self.alpha_slot is None:
            alpha, e, w = self.alpha, self.e, self.w
        else:
            has = self.alpha_slot >= 0
            logit = theta[np.maximum(self.alpha_slot, 0)]
            alpha = np.where(has, _sigmoid(logit), rows["alpha"])
            e = laws.expected_tokens(alpha, rows["k"])
            w = rows["g"] / e
        mu, x = forward_numpy(
            coef, rows, alpha, moe=self.moe, converged=False, wall_softness=self.softness, passes=w
        )
        bad = ~np.isfinite(mu) | (x >= 1.0 - 1e-9)
        with np.errstate(all="ignore"):
            res = self.log_latency - np.log(mu)
        return _BlockPoint(coef, alpha, e, w, mu, x, bad, res)

    def jacobian(self, pt: _BlockPoint) -> np.ndarray:
        """The Jacobian of ``pt``'s log mean latency in the parameters, (rows, params).

        Gauss–Newton form: the MoE coverage phi is held at its current value.
        """
        rows, coef, alpha, e, w, mu = self.rows, pt.coef, pt.alpha, pt.e, pt.w, pt.mu
        kv, kd = coef["knee_verifier"], coef["knee_drafter"]
        k, g = rows["k"], rows["g"]
        closed = rows["closed"] > 0
        zero = np.zeros_like(w)
        # the verifier pass's part of C1 and C2 per pass (with MoE, at the coverage phi)
        c1_pass = laws.pass_cost(coef["c1v"], coef.get("c1d", zero), k)
        c2_pass = coef["c2v"]
        if self.moe:
            phi = np.where(
                closed,
                laws.expert_coverage(rows["conc"] * (k + 1.0), rows["m_ratio"], 1.0),
                laws.expert_coverage(laws.routed_tokens(rows["rps"], mu, k), rows["m_ratio"], 1.0),
            )
            phi = np.where(np.isfinite(phi), phi, 1.0)
            c1_pass = c1_pass + phi * coef["c1s"]
            c2_pass = c2_pass + phi * coef["c2s"]
        wk = w * k
        c1 = laws.cycle_cost(coef["c1p"], w, c1_pass)
        c2v_part = laws.cycle_cost(coef["c2p"], w, c2_pass)
        c2d_part = wk * coef.get("c2d", zero)
        c2 = c2v_part + c2d_part
        c3 = laws.batch_curvature(c2v_part, c2d_part, kv, kd)
        conc = rows["conc"]
        # d log mu / d (C1, C2, C3): open loop through the (soft-walled) quadratic root of
        # laws.latency, closed loop mu = C1 + N C2 + N^2 C3
        o1, o2, o3 = laws.latency_sensitivities(
            rows["rps"], c1, c2, c3, wall_softness=self.softness
        )
        with np.errstate(all="ignore"):
            d1 = np.where(closed, 1.0 / mu, o1)
            d2 = np.where(closed, conc / mu, o2)
            d3 = np.where(closed, conc**2 / mu, o3)
            d2v = d2 + d3 / kv  # through C2's verifier part, which also sets C3
            d2d = d2 + d3 / kd
        # d log mu / d log coefficient = slope * weight * coefficient (weight None: 1)
        ws = w * phi if self.moe else None
        weights = {
            "c1p": (d1, None),
            "c1v": (d1, w),
            "c1d": (d1, wk),
            "c1s": (d1, ws),
            "c2p": (d2v, None),
            "c2v": (d2v, w),
            "c2d": (d2d, wk),
            "c2s": (d2v, ws),
        }
        jac = np.zeros(self.n_rows * self.n_params)
        for name in self.coefs:
            d, a = weights[name]
            at, flat = self.scatter[name]
            jac[flat] = (d * coef[name] if a is None else d * a * coef[name])[at]
        at, flat = self.scatter.get("alpha", ((), ()))
        if len(at):
            eps = 1e-6
            a0 = np.clip(alpha, 1e-6, 1 - 1e-6)
            de = (laws.expected_tokens(a0 + eps, k) - laws.expected_tokens(a0 - eps, k)) / (2 * eps)
            dw = -g * de / e**2 * a0 * (1 - a0)
            dlogmu_dw = d1 * c1_pass + d2v * c2_pass + d2d * k * coef.get("c2d", zero)
            jac[flat] = (dlogmu_dw * dw)[at]
        return jac.reshape(self.n_rows, self.n_params)


def _residual_jacobian(theta, design, layout, rows_sel, params, softness=0.0, jacobian=True):
    """Residuals log(L_obs) - log(mu) and their Jacobian in the block's parameters.

    Gauss–Newton form: the MoE coverage phi is held at its current value. ``softness``: the
    curved wall of the law (0: exact, as the least-squares passes fit it; the whitening
    takes the graph's soft wall, whose slopes stay finite at a point on the exact wall).
    ``jacobian=False`` skips the Jacobian (returned as ``None``). :class:`_BlockRows` holds
    the work that does not depend on theta, for repeated evaluations.
    """
    block = _BlockRows(design, layout, rows_sel, params, softness)
    pt = block.point(theta)
    return pt.res, block.jacobian(pt) if jacobian else None, pt.bad, pt.x


def _knee_tables(design: Design, priors: dict) -> tuple[np.ndarray, np.ndarray]:
    """Prior log knees as (verifier, hardware) and (drafter, hardware) tables."""
    nv, nh, nd = len(design.verifiers), len(design.hardware), len(design.drafters)
    kv = np.full((nv, nh), np.log(priors["knee_verifier"][0]))
    kd = np.full((nd, nh), np.log(priors["knee_drafter"][0]))
    return kv, kd


def _set_row_knees(design: Design, kv: np.ndarray, kd: np.ndarray) -> None:
    """Write the knee batches of every row into ``design.rows`` (inf for a row without
    a drafter: its drafter part of C2 is 0)."""
    r = design.rows
    r["knee_verifier"] = np.exp(kv[r["verifier_idx"], r["hardware_idx"]])
    di = r["drafter_idx"]
    r["knee_drafter"] = np.where(
        di >= 0, np.exp(kd[np.maximum(di, 0), r["hardware_idx"]]) if kd.size else np.inf, np.inf
    )


def _knee_prior_rows(design: Design, priors: dict) -> tuple[np.ndarray, np.ndarray]:
    """The prior knees in every row (levels without curvature: ``inf``, the plain law)."""
    kv, kd = _knee_tables(design, priors)
    if design.model_name not in CURVED_LEVELS:
        kv, kd = np.full(kv.shape, np.inf), np.full(kd.shape, np.inf)
    _set_row_knees(design, kv, kd)
    return kv, kd


def _law_fits(lam: np.ndarray, logy: np.ndarray, mask: np.ndarray, start: np.ndarray):
    r"""Batched least squares of the curved law, one :math:`(C_1, C_2, C_3)` per row of ``lam``.

    Row :math:`n` of the padded ``(configurations, rows)`` arrays is one configuration
    (``mask``: its real rows); for each, Levenberg–Marquardt minimises over
    :math:`p = \log(C_1, C_2, C_3)`

    .. math::

        S(p) = \tfrac12 \sum_j m_j r_j^2, \qquad
        r_j = \log y_j - \log L(\lambda_j; e^{p_1}, e^{p_2}, e^{p_3})

    (:func:`laws.latency`; :math:`r_j = 10` where the law is infinite, past its wall), with
    the analytic Jacobian :math:`J_{ji} = -e^{p_i}\,\partial\log L_j/\partial C_i`
    (:func:`laws.latency_sensitivities`; 0 past the wall). Each iteration solves, for all
    unfinished configurations at once,

    .. math::  \big(J^\top J + \mu I\big)\,\delta = -J^\top r

    (:math:`\mu_0 = 10^{-3} \max_i (J^\top J)_{ii}` at the start) and takes
    :math:`p + \delta` where it lowers :math:`S` (then :math:`\mu \leftarrow \mu/3`), else
    keeps :math:`p` (:math:`\mu \leftarrow 2\mu`). A configuration stops when a step lowers
    :math:`S` by less than :math:`10^{-10} S`, when its step is below
    :math:`10^{-10}(1 + \lVert p\rVert)`, or after 100 trial points. The damping is
    isotropic (a spherical trust region in :math:`p`, as SciPy's ``trf`` with unit scale):
    Marquardt's :math:`\mu\,\mathrm{diag}(J^\top J)` barely damps the weakly seen
    :math:`\log C_3`, whose long first steps park a fit on the wall far from its optimum.
    Where the optimum lies on the wall itself (the most loaded row at
    :math:`\rho = 0`, slopes unbounded) the iterations creep along it and stop short of it.

    Returns
    -------
    p : ndarray, shape (configurations, 3)
        The log costs.
    res : ndarray, shape (configurations, rows)
        The residuals :math:`r_j` there (0 outside ``mask``).
    """

    def evaluate(sel, p):
        c = [np.exp(p[:, i, None]) for i in range(3)]
        with np.errstate(all="ignore"):
            mu = laws.latency(lam[sel], *c)
            ok = mask[sel] & np.isfinite(mu)
            res = np.where(ok, logy[sel] - np.log(np.where(ok, mu, 1.0)), 10.0)
            sens = laws.latency_sensitivities(lam[sel], *c)
            jac = np.stack([-ci * si for ci, si in zip(c, sens, strict=True)], axis=-1)
        ok = ok[..., None] & np.isfinite(jac)
        return np.where(mask[sel], res, 0.0), np.where(ok, jac, 0.0)

    p = np.array(start, dtype=float)
    every = np.arange(len(p))
    res, jac = evaluate(every, p)
    cost = 0.5 * np.sum(res**2, axis=1)
    # mu in units of the steepest direction's curvature at the start
    damping = 1e-3 * np.max(np.einsum("nmi,nmi->ni", jac, jac), axis=1)
    active = np.ones(len(p), dtype=bool)
    for _ in range(100):
        a = np.flatnonzero(active)
        if not a.size:
            break
        ja = jac[a]
        jtj = np.einsum("nmi,nmj->nij", ja, ja)
        grad = np.einsum("nmi,nm->ni", ja, res[a])
        lhs = jtj + damping[a, None, None] * np.eye(3)
        flat = ~(damping[a] > 0) | ~np.isfinite(lhs).all(axis=(1, 2))  # no slope: no step
        lhs[flat], grad[flat] = np.eye(3), 0.0
        try:
            step = -np.linalg.solve(lhs, grad[..., None])[..., 0]
        except np.linalg.LinAlgError:  # a singular batch member: the pseudo-inverse
            step = -(np.linalg.pinv(lhs) @ grad[..., None])[..., 0]
        trial = p[a] + step
        res_t, jac_t = evaluate(a, trial)
        cost_t = 0.5 * np.sum(res_t**2, axis=1)
        better = cost_t < cost[a]  # False for a NaN cost
        done = better & (cost[a] - cost_t <= 1e-10 * cost[a])
        done |= np.linalg.norm(step, axis=1) <= 1e-10 * (1.0 + np.linalg.norm(p[a], axis=1))
        take = a[better]
        p[take], cost[take] = trial[better], cost_t[better]
        res[take], jac[take] = res_t[better], jac_t[better]
        damping[a] = np.where(better, damping[a] / 3.0, damping[a] * 2.0)
        active[a[done]] = False
    return p, res


def _config_knees(design: Design, theta: np.ndarray, layout, priors: dict):
    r"""Log knees from per-configuration fits of the curved law (the reference's start).

    Each open-loop configuration (rows of one coefficient group and alpha) with at least
    four rates gets its own :math:`(C_1, C_2, C_3)` by least squares on log latency
    (:func:`laws.latency`; all configurations in one batch, :func:`_law_fits`, from
    :math:`C_1 = \min y`, :math:`C_2 = 0.5/\max\lambda`, :math:`C_3 = 10^{-4} C_2`; a fit
    with a row past the wall is dropped); with the split of its :math:`C_2` into verifier
    and drafter parts from the current units, :math:`C_3 = C_{2,v}/K_v + C_{2,d}/K_d` gives
    :math:`K_v` from dense configurations and then :math:`K_d` from SD ones. Per (verifier,
    GPU) and (drafter, GPU) the median, clipped to 3 prior sd around the prior median; the
    prior median where no configuration informs it. Units and knees trade off along a ridge
    that alternating fits climb slowly (0.04 log units per alternation on simulated sweeps),
    so the knees start here.
    """
    r = design.rows
    kv, kd = _knee_tables(design, priors)
    coef, alpha, _ = _row_coefs(theta, design, *layout, np.arange(len(design.data)))
    w = laws.verifier_passes(r["g"], alpha, r["k"])
    c2_v = coef["c2p"] + w * coef["c2v"]
    c2_d = w * r["k"] * coef.get("c2d", 0.0)
    share_d = c2_d / (c2_v + c2_d)
    logy = np.log(r["latency"])
    open_ = r["closed"] == 0
    key = pd.MultiIndex.from_arrays([r["group"], np.round(alpha, 6)])
    # configuration of each open-loop row (-1: a key pandas drops), its rows in table order
    rows = np.flatnonzero(open_)
    config = pd.Series(rows).groupby(key[open_]).ngroup().to_numpy(dtype=np.int64)
    rows, config = rows[config >= 0], config[config >= 0]
    n_config = int(config.max()) + 1 if len(config) else 0
    lam_key = np.round(r["rps"][rows], 9)
    order = np.lexsort((lam_key, config))
    cs, ls = config[order], lam_key[order]
    first = np.ones(len(cs), dtype=bool)
    first[1:] = (cs[1:] != cs[:-1]) | (ls[1:] != ls[:-1])
    fitted = np.bincount(cs[first], minlength=n_config) >= 4  # distinct rates
    keep, renumber = fitted[config], np.cumsum(fitted) - 1  # fitted ones as 0, 1, ...
    rows, config = rows[keep], renumber[config[keep]]
    # padded (configuration, slot) arrays, a configuration's rows in table order
    order = np.argsort(config, kind="stable")
    rows, config = rows[order], config[order]
    counts = np.bincount(config, minlength=int(fitted.sum()))
    slot = np.arange(len(rows)) - (np.cumsum(counts) - counts)[config]
    shape = (len(counts), int(counts.max(initial=0)))
    mask = np.zeros(shape, dtype=bool)
    mask[config, slot] = True
    lam, y, row_of = np.zeros(shape), np.zeros(shape), np.zeros(shape, dtype=np.int64)
    lam[config, slot], y[config, slot], row_of[config, slot] = r["rps"][rows], logy[rows], rows
    c2_0 = 0.5 / np.where(mask, lam, -np.inf).max(axis=1, initial=-np.inf)
    start = np.stack(
        [np.where(mask, y, np.inf).min(axis=1, initial=np.inf), np.log(c2_0), np.log(c2_0 / 1e4)]
    )
    p, res = _law_fits(lam, y, mask, start.T)
    good = np.isfinite(p).all(axis=1) & ~(res >= 10.0).any(axis=1)
    dense_knees: dict[tuple[int, int], list[float]] = {}  # (verifier, GPU) -> log K_v
    sd_fits: list[tuple[int, float, float]] = []  # (first row, C2, C3) of SD configurations
    for n in np.flatnonzero(good):
        c2g, c3g = np.exp(p[n, 1]), np.exp(p[n, 2])
        i = row_of[n, 0]
        if r["k"][i] == 0:
            key_v = (r["verifier_idx"][i], r["hardware_idx"][i])
            dense_knees.setdefault(key_v, []).append(np.log(c2g / c3g))
        else:
            sd_fits.append((i, c2g, c3g))

    def clipped_median(vals, pass_name):  # within 3 prior sd of the prior median
        med, sd = priors[f"knee_{pass_name}"]
        return np.clip(np.median(vals), np.log(med) - 3 * sd, np.log(med) + 3 * sd)

    for (v, h), vals in dense_knees.items():
        kv[v, h] = clipped_median(vals, "verifier")
    d_vals: dict[tuple[int, int], list[float]] = {}
    for i, c2g, c3g in sd_fits:
        v, h, dr, sd_ = r["verifier_idx"][i], r["hardware_idx"][i], r["drafter_idx"][i], share_d[i]
        inv = (c3g - c2g * (1 - sd_) / np.exp(kv[v, h])) / (c2g * sd_)  # 1 / K_d
        if dr >= 0 and sd_ > 0.05 and inv > 0:
            d_vals.setdefault((dr, h), []).append(-np.log(inv))
    for (dr, h), vals in d_vals.items():
        kd[dr, h] = clipped_median(vals, "drafter")
    _set_row_knees(design, kv, kd)
    return kv, kd


def _fit_knees(design: Design, theta: np.ndarray, layout, priors: dict):
    r"""Least-squares log knees per (verifier, GPU) and (drafter, GPU), units held fixed.

    Minimises the log residuals of every row plus a ridge toward the prior median (its sd
    the prior's), so a knee the data cannot see — no row near saturation — stays at the
    prior. The Jacobian is sparse (a knee moves only its own rows) and found by finite
    differences. Writes the knees into ``design.rows`` and returns the tables.
    """
    from scipy.optimize import least_squares

    r = design.rows
    kv0, kd0 = _knee_tables(design, priors)
    vi, hi, di = r["verifier_idx"], r["hardware_idx"], r["drafter_idx"]
    v_cells = np.unique(vi * kv0.shape[1] + hi)
    spec = (di >= 0) & (r["k"] > 0) & bool(design.draft_coefs)
    d_cells = np.unique(di[spec] * kv0.shape[1] + hi[spec]) if spec.any() else np.zeros(0, int)
    nv = len(v_cells)
    rows_all = np.arange(len(design.data))
    coef, alpha, _ = _row_coefs(theta, design, *layout, rows_all)
    base = {c: v for c, v in coef.items() if not c.startswith("knee")}
    row_v = np.searchsorted(v_cells, vi * kv0.shape[1] + hi)
    row_d = np.where(spec, np.searchsorted(d_cells, np.maximum(di, 0) * kv0.shape[1] + hi), -1)
    moe = design.model_name == "moe"
    logy = np.log(r["latency"])
    prior_v, sd_v = np.log(priors["knee_verifier"][0]), float(priors["knee_verifier"][1])
    prior_d, sd_d = np.log(priors["knee_drafter"][0]), float(priors["knee_drafter"][1])

    def residuals(p):
        kv_row = np.exp(p[:nv][row_v])
        kd_row = np.exp(p[nv:][np.maximum(row_d, 0)]) if len(d_cells) else np.ones(len(row_d))
        c = dict(base, knee_verifier=kv_row, knee_drafter=np.where(spec, kd_row, np.inf))
        mu, _ = forward_numpy(c, r, alpha, moe=moe, converged=False)
        with np.errstate(all="ignore"):
            return np.where(np.isfinite(mu), logy - np.log(mu), 1e3)

    start = np.concatenate([np.full(nv, prior_v), np.full(len(d_cells), prior_d)])
    # the ridge in units of the typical residual at the start (a prior of the knee's sd)
    sig = max(float(np.sqrt(np.mean(np.minimum(residuals(start), 1.0) ** 2))), 1e-3)

    def fun(p):
        ridge = np.concatenate([(p[:nv] - prior_v) / sd_v, (p[nv:] - prior_d) / sd_d]) * sig
        return np.concatenate([residuals(p), ridge])

    sparsity = np.zeros((len(rows_all) + nv + len(d_cells), nv + len(d_cells)), dtype=bool)
    sparsity[rows_all, row_v] = True
    sparsity[rows_all[spec], nv + row_d[spec]] = True
    sparsity[len(rows_all) + np.arange(nv + len(d_cells)), np.arange(nv + len(d_cells))] = True
    # (scipy's sparse trust-region step needs at least two parameters)
    sparse = sparsity if len(start) > 2 else None
    sol = least_squares(fun, start, jac_sparsity=sparse, method="trf", max_nfev=50)
    kv, kd = np.full(kv0.shape, np.nan), np.full(kd0.shape, np.nan)  # NaN: no rows
    kv.flat[v_cells] = sol.x[:nv]
    if len(d_cells):
        kd.flat[d_cells] = sol.x[nv:]
    _set_row_knees(design, kv, kd)
    return kv, kd


def _start_values(design: Design, layout, blocks) -> np.ndarray:
    """A feasible heuristic start for every block: C2 small enough that x <= 0.3 everywhere."""
    base_index, draft_index, alpha_index = layout
    n = sum(len(b) for b in blocks)
    theta = np.zeros(n)
    r = design.rows
    lat, rate, g = r["latency"], r["rps_eff"], r["g"]
    a_prior = merge_priors(None)["alpha"]
    for u in range(len(design.units)):
        sel = r["unit"] == u
        dense = sel & (r["k"] == 0)
        use = dense if dense.any() else sel
        lmin = np.min(lat[use])
        gm = float(np.mean(g[use]))
        c2_target = 0.3 / max(float(np.max(rate[sel])), 1e-9)
        vals = {
            "c1p": 0.3 * lmin,
            "c1v": 0.7 * lmin / gm,
            "c2p": 0.3 * c2_target,
            "c2v": 0.7 * c2_target / gm,
            "c1s": 0.1 * lmin / gm,
            "c2s": 0.1 * c2_target / gm,
        }
        for j, name in enumerate(design.base_coefs):
            theta[base_index[u, j]] = np.log(vals[name])
        for du in np.flatnonzero(
            (design.dunits["verifier"] == design.units.at[u, "verifier"])
            & (design.dunits["hardware"] == design.units.at[u, "hardware"])
            & (design.dunits["cell"] == design.units.at[u, "cell"])
        ):
            kmax = max(float(np.max(r["k"][r["dunit"] == du])), 1.0)
            for j, name in enumerate(design.draft_coefs):
                base = vals["c1v"] if name == "c1d" else vals["c2v"]
                theta[draft_index[du, j]] = np.log(base / (5.0 * kmax))
    for a in range(len(design.akeys)):
        theta[alpha_index[a]] = np.log(a_prior[0] / a_prior[1])
    return theta


def _pooled_location(design, theta, base_index, draft_index, alpha_index, priors) -> np.ndarray:
    """Hierarchical location of every parameter given the current unit values.

    Per coefficient and (verifier, hardware) group [drafter: (drafter, hardware)], the mean
    of ``theta - slope0 * t`` over the group's cells plus ``slope0 * t`` of the unit, with
    ``slope0`` the prior mean slope of the cell trend; latent alphas at their prior location.
    """
    loc = np.zeros(len(theta))
    a, b_ = priors["alpha"]
    loc[alpha_index] = np.log(a / b_) if len(alpha_index) else 0.0
    for table, index, coefs, keys in (
        (design.units, base_index, design.base_coefs, ["verifier", "hardware"]),
        (design.dunits, draft_index, design.draft_coefs, ["drafter", "hardware"]),
    ):
        if not len(table) or not coefs:
            continue
        groups = table.groupby(keys, sort=False).indices
        for j, c in enumerate(coefs):
            kind = TREND[c]
            slope0 = priors["trend_slope"].get(c, (0.0, 0.0))[0]
            t = _trend_value(kind, table["p"], table["g"]) if kind else np.zeros(len(table))
            val = theta[index[:, j]] - slope0 * t
            for members in groups.values():
                loc[index[members, j]] = val[members].mean() + slope0 * t[members]
    return loc


def pooled_pairs(model_name: str) -> tuple[tuple[str, str], ...]:
    """The :data:`SHARE_PAIRS` of a level whose hierarchy lives on the pair's axes."""
    return SHARE_PAIRS[model_name] if model_name in POOLED_PAIR_LEVELS else ()


def pooled_coefs(model_name: str) -> set[str]:
    """Coefficients that belong to one of :func:`pooled_pairs` (pooled on the pair's axes)."""
    return {c for pair in pooled_pairs(model_name) for c in pair}


def pair_log_weight(coef: str, g: Any, model_name: str = "dense") -> Any:
    r"""Log weight of a coefficient in its pair's total: :math:`\log g` for ``c1v, c2v`` in
    the ``dense`` totals :math:`C = c_p + g c_v`, else 0 (``moe``: :math:`c_v + c_s`)."""
    if model_name == "dense" and coef in ("c1v", "c2v"):
        return np.log(np.asarray(g, dtype=float))
    return np.zeros(np.shape(g))


def pair_name(a: str, b: str) -> str:
    """Name of a pair's total in the ``tau_coef`` dim, e.g. ``'c1p+c1v'``."""
    return f"{a}+{b}"


def _share_pairs(design: Design, base_index: np.ndarray):
    """Flat slots and log weights of the (total, share) pairs of this model level.

    The total of a pair (a, b) is :math:`w_a c_a + w_b c_b` at the unit's mean workload:
    ``dense`` — :math:`c_{1p} + \bar g c_{1v}` (i.e. :math:`C_1`) and likewise :math:`C_2`;
    ``moe`` — :math:`c_{1v} + c_{1s}` (the per-pass cost at full coverage) and likewise c2.
    """
    pa, pb, lwa, lwb = [], [], [], []
    coefs = list(design.base_coefs)
    for a, b in SHARE_PAIRS[design.model_name]:
        ja, jb = coefs.index(a), coefs.index(b)
        for u in range(len(design.units)):
            pa.append(base_index[u, ja])
            pb.append(base_index[u, jb])
            gu = float(design.units["g"].iloc[u])
            lwa.append(float(pair_log_weight(a, gu, design.model_name)))
            lwb.append(float(pair_log_weight(b, gu, design.model_name)))
    return (
        np.array(pa, dtype=np.int64),
        np.array(pb, dtype=np.int64),
        np.array(lwa),
        np.array(lwb),
    )


def to_share(theta, pa, pb, lwa, lwb, xp=np):
    """Log coefficients -> sampling coordinates: pair slots become (log total, logit share)."""
    ua, ub = theta[pa] + lwa, theta[pb] + lwb
    if xp is np:
        out = theta.copy()
        out[pa] = np.logaddexp(ua, ub)
        out[pb] = ub - ua
        return out
    out = xp.set_subtensor(theta[pa], xp.logaddexp(ua, ub))
    return xp.set_subtensor(out[pb], ub - ua)


def from_share(phi, pa, pb, lwa, lwb, xp=np):
    r"""Inverse of :func:`to_share` (unit Jacobian: :math:`\det = (1 - s) + s = 1`)."""
    kappa, ell = phi[pa], phi[pb]
    softplus = (lambda x: np.logaddexp(0.0, x)) if xp is np else xp.softplus
    ta = kappa - softplus(ell) - lwa
    tb = kappa - softplus(-ell) - lwb
    if xp is np:
        out = phi.copy()
        out[pa], out[pb] = ta, tb
        return out
    out = xp.set_subtensor(phi[pa], ta)
    return xp.set_subtensor(out[pb], tb)


# One BLAS thread: the blocks' small SVDs and products only lose on more (on two, beside
# another busy process on 2 cores, the passes took 16-18x as long), and the result does not
# depend on the machine's thread count — it does otherwise: the knee fits differ by ~1e-8
# between one and two threads, and blocks the trust region leaves unconverged at
# ``max_nfev`` carry that to 215 of 1,472 reference slots moving by more than 0.01 on the
# paper's dense verifiers.
@threadpool_limits.wrap(limits=1, user_api="blas")
def least_squares_reference(design: Design, priors: dict | None = None) -> Parametrisation:
    """Per-block least squares (log scale) and the Gauss–Newton whitening around it.

    Each block — one (verifier, cell) with all its hardware, drafters and latent alphas — is
    fitted by :func:`scipy.optimize.least_squares` on :math:`\\log L_\\mathrm{obs} -
    \\log\\mu` from a feasible start; infeasible trial points (some
    :math:`\\lambda C_2 \\ge 1`) return a huge residual so the trust region retreats. A tiny
    ridge toward the start keeps directions the data cannot see well posed. The whitening
    factor is the Cholesky factor of :math:`(J^\\top J/\\hat\\sigma^2 + P)^{-1}`, with
    :math:`P` the prior precision of a unit (``cell_sd``) and of a latent logit-alpha (1).

    Raises
    ------
    RuntimeError
        If the least-squares point of a block is not strictly feasible.
    """
    from scipy.optimize import least_squares

    priors = merge_priors(priors)
    layout, blocks, _, row_block, is_alpha = _blocks(design)
    base_index, draft_index, alpha_index = layout
    theta = _start_values(design, layout, blocks)
    feasible_start = theta.copy()
    cell_sd = float(priors["cell_sd"])
    prior_sd = np.where(is_alpha, 1.0, cell_sd)
    residuals = np.zeros(len(design.data))
    utilisation = np.zeros(len(design.data))
    # noise sd of each row relative to sigma0: (1 - x)^-gamma (the likelihood's noise growth)
    row_scale = np.ones(len(design.data))

    def solve(b: int, target: np.ndarray, weight: np.ndarray) -> None:
        members = blocks[b]
        rows_sel = np.flatnonzero(row_block == b)
        scale = row_scale[rows_sel]
        block = _BlockRows(design, layout, rows_sel, members)
        ridge = np.diag(weight)
        last: dict = {}  # the latest point: trf takes the Jacobian where it evaluated last

        def point(p):
            if "p" not in last or not np.array_equal(last["p"], p):
                th = theta.copy()
                th[members] = p
                last["p"], last["pt"] = p.copy(), block.point(th)
            return last["pt"]

        def fun(p):
            pt = point(p)
            res = np.where(pt.bad, 1e3, pt.res / scale)
            return np.concatenate([res, weight * (p - target)])

        def jac(p):
            pt = point(p)
            jm = block.jacobian(pt)
            # a row on the exact curved wall has unbounded slopes: no step direction from it
            bad = pt.bad | ~np.isfinite(jm).all(axis=1)
            jm = np.where(bad[:, None], 0.0, -jm / scale[:, None])
            return np.vstack([jm, ridge])

        start = theta[members]
        if block.point(theta).bad.any():  # new knees can put the block's last point past
            start = feasible_start[members]  # the curved wall
        sol = least_squares(fun, start, jac=jac, method="trf", x_scale="jac", max_nfev=200)
        pt = point(sol.x)
        if pt.bad.any():
            raise RuntimeError(f"least-squares start infeasible in block {b}")
        theta[members] = sol.x
        residuals[rows_sel] = pt.res / scale
        utilisation[rows_sel] = pt.x

    def solve_pass(target: np.ndarray, weight: np.ndarray) -> None:
        """Every block toward ``target`` with ridge ``weight`` (flat vectors; a block's rows
        read only its own parameters, so the blocks of a pass are independent)."""
        for b, members in enumerate(blocks):
            solve(b, target[members], weight[members])

    # pass 1: plain least squares per block (a tiny ridge keeps unseen directions put), at
    # the prior knees; then the knees given the units, and pass 1 again at those knees
    knees = _knee_prior_rows(design, priors)
    solve_pass(theta.copy(), np.full(len(theta), 1e-3))
    curved = design.model_name in CURVED_LEVELS
    if curved:
        knees = _config_knees(design, theta, layout, priors)
        solve_pass(theta.copy(), np.full(len(theta), 1e-3))
    for _ in range(KNEE_ALTERNATIONS if curved else 0):
        previous = np.concatenate([np.ravel(k) for k in knees])
        knees = _fit_knees(design, theta, layout, priors)
        solve_pass(theta.copy(), np.full(len(theta), 1e-3))
        change = np.abs(np.concatenate([np.ravel(k) for k in knees]) - previous)
        if np.nanmax(change, initial=0.0) < 0.02:
            break
    # the noise growth toward saturation, from the pass-1 residuals: rows weighted by it in
    # passes 2-3 and in the whitening, so the reference is the mode at the typical gamma
    gamma_hat = _noise_growth(residuals, utilisation)
    row_scale = np.clip(1.0 - utilisation, 1e-6, 1.0) ** -gamma_hat
    residuals = residuals / row_scale
    # passes 2-3: penalised toward the pooled location (an empirical-Bayes mode), so that
    # coefficients the data barely see sit where the hierarchy puts them, not at noise
    for _ in range(2):
        sig = float(max(np.sqrt(np.mean(residuals**2)), 1e-3))
        target = _pooled_location(design, theta, base_index, draft_index, alpha_index, priors)
        solve_pass(target, sig / prior_sd)
    sigma_hat = float(max(np.sqrt(np.mean(residuals**2)), 1e-3))
    return whitening(design, theta, row_scale, sigma_hat, gamma_hat, knees, priors)


def _covariance_root(h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(H^{-1}, L)`` with :math:`L L^\top = H^{-1}` for a block precision ``H``.

    ``L`` is the Cholesky factor where the inverse factors; a block whose precision spans
    more orders of magnitude than the inverse keeps positive definite in floating point (the
    tight per-sweep fits of the rebuilt paper data, at the mode) takes the symmetric root
    from the eigenvalues of ``H`` instead — any root gives the same Gaussian whitening.
    """
    cov = np.linalg.inv(h)
    cov = 0.5 * (cov + cov.T)
    try:
        return cov, np.linalg.cholesky(cov)
    except np.linalg.LinAlgError:
        evals, evecs = np.linalg.eigh(0.5 * (h + h.T))
        evals = np.maximum(evals, evals.max() * np.finfo(float).eps)
        cov = (evecs / evals) @ evecs.T
        return cov, (evecs / np.sqrt(evals)) @ evecs.T


def whitening(
    design: Design,
    theta: np.ndarray,
    row_scale: np.ndarray,
    sigma_hat: float,
    gamma_hat: float,
    knees: tuple[np.ndarray, np.ndarray],
    priors: dict,
) -> Parametrisation:
    r"""The Gauss–Newton whitening of every block around a reference point ``theta``.

    Per block (one verifier and cell), with :math:`J` the Jacobian of the rows' log
    residuals in the block's sampling coordinates, each row divided by its noise scale
    ``row_scale`` (:math:`(1 - x)^{-\gamma}`) and :math:`\hat\sigma` the noise sd,
    :math:`H = J^\top J/\hat\sigma^2` (directions it resolves worse than
    :data:`WEAK_LOG_SD` dropped) and :math:`P` the prior precision: ``L`` is the Cholesky
    factor of :math:`(H + P)^{-1}` and the centring
    :math:`\phi = (H+P)^{-1} H \phi_\mathrm{ref} + (H+P)^{-1} P m + L z`.
    ``knees`` (log knee tables, also written into ``design.rows``) are those of ``theta``.
    """
    priors = merge_priors(priors)
    layout, blocks, block_of, row_block, is_alpha = _blocks(design)
    base_index, draft_index, alpha_index = layout
    n = len(theta)
    cell_sd = float(priors["cell_sd"])
    _set_row_knees(design, *knees)

    # whitening per block
    bmax = max(len(m) for m in blocks)
    white_idx = np.full((n, bmax), n, dtype=np.int64)
    white_val = np.zeros((n, bmax))
    shrink_val = np.zeros((n, bmax))
    const = np.zeros(n)
    weak = np.zeros(n, dtype=bool)
    data_prec = np.zeros(n)
    marginal_prec = np.zeros(n)
    prior_prec = np.zeros(n)
    n_weak = np.zeros(len(blocks), dtype=np.int64)
    pa, pb, lwa, lwb = _share_pairs(design, base_index)
    phi_ref = to_share(theta, pa, pb, lwa, lwb)
    # d theta / d phi at the reference (identity outside the pairs)
    tmat_a = {int(i): (int(j), k) for k, (i, j) in enumerate(zip(pa, pb, strict=True))}
    share = 1.0 / (1.0 + np.exp(-phi_ref[pb]))
    for b, members in enumerate(blocks):
        rows_sel = np.flatnonzero(row_block == b)
        # the graph's soft wall: a least-squares point on the exact wall (an observed
        # latency above the most the curved law reaches at its rate) has unbounded exact
        # slopes — 1e149 on two paper rows, and a Cholesky failure
        _, jm, _, _ = _residual_jacobian(
            theta, design, layout, rows_sel, members, _graph_softness(design)
        )
        jm = jm / row_scale[rows_sel, None]
        pos = {int(gi): i for i, gi in enumerate(members)}
        tmat = np.eye(len(members))
        for gi in members:
            if int(gi) in tmat_a:
                gj, k = tmat_a[int(gi)]
                ia, ib = pos[int(gi)], pos[gj]
                # theta_a = kappa - softplus(ell) - lwa ; theta_b = kappa - softplus(-ell) - lwb
                tmat[ia, ia], tmat[ia, ib] = 1.0, -share[k]
                tmat[ib, ia], tmat[ib, ib] = 1.0, 1.0 - share[k]
        jm = jm @ tmat
        h = jm.T @ jm / sigma_hat**2
        # directions the block's data cannot resolve (data-only sd along an eigenvector of
        # the data precision > WEAK_LOG_SD, e.g. c1p alone) are prior-dominated: drop their
        # data curvature, so they are sampled non-centred around the hierarchical location
        # while the resolved combinations stay whitened
        evals, evecs = np.linalg.eigh(0.5 * (h + h.T))
        unresolved = evals < 1.0 / WEAK_LOG_SD**2
        h = (evecs[:, ~unresolved] * evals[~unresolved]) @ evecs[:, ~unresolved].T
        n_weak[b] = int(unresolved.sum())
        weak[members] = np.abs(evecs[:, unresolved]).max(axis=1, initial=0.0) > 0.5
        # prior precision in the sampling coordinates: a unit's log coefficient or a pair's
        # log total 1/cell_sd^2, a pair's logit share 1/(2 cell_sd^2) (SHARE_SD_FACTOR), a
        # latent logit alpha 1
        prec = np.where(is_alpha[members], 1.0, 1.0 / cell_sd**2)
        if pooled_pairs(design.model_name):
            prec = np.where(np.isin(members, pb), prec / SHARE_SD_FACTOR**2, prec)
            pmat = np.diag(prec)
        else:  # independent priors on the log coefficients, mapped to the pair's axes
            pmat = tmat.T @ np.diag(prec) @ tmat
        h += pmat
        cov, chol = _covariance_root(h)
        # the diagonal of the block's data precision (the slot's precision given the rest of
        # its block). Tried: the precision marginal over the block, 1/cov_jj - P_jj — it helped
        # one MoE scale (tau[c2d] ESS 28 -> 64 of 600) but cost the paper dense-verifier fit
        # (min bulk ESS 493 -> 280 of 2000 at 500 draws)
        data_prec[members] = np.diag(h) - prec
        # ... and the precision marginal over the block: what a unit alone tells about slot j
        marginal_prec[members] = np.maximum(1.0 / np.diag(cov) - np.diag(pmat), 0.0)
        prior_prec[members] = prec
        shrink = cov @ pmat  # (H + P)^-1 P
        ref_b = phi_ref[members]
        const[members] = ref_b - shrink @ ref_b  # (H+P)^-1 H phi_ref
        for i, gi in enumerate(members):
            white_idx[gi, : len(members)] = members
            white_val[gi, : len(members)] = chol[i]
            shrink_val[gi, : len(members)] = shrink[i]
    # a pair sampled as (log total, logit share) is unresolved as a whole when its share is:
    # the hierarchical prior acts on both log coefficients, not on the total
    pair_weak = weak[pa] | weak[pb]
    weak[pa] = pair_weak
    weak[pb] = pair_weak
    return Parametrisation(
        n=n,
        base_index=base_index,
        draft_index=draft_index,
        alpha_index=alpha_index,
        ref=theta,
        white_idx=white_idx,
        white_val=white_val,
        shrink_val=shrink_val,
        const=const,
        weak=weak,
        data_prec=data_prec,
        marginal_prec=marginal_prec,
        prior_prec=prior_prec,
        pair_a=pa,
        pair_b=pb,
        pair_lwa=lwa,
        pair_lwb=lwb,
        prior_loc_alpha=float(np.log(priors["alpha"][0] / priors["alpha"][1])),
        sigma_hat=sigma_hat,
        gamma_hat=gamma_hat,
        block_of=block_of,
        knee_verifier=knees[0],
        knee_drafter=knees[1],
    )


def adaptive_centring(
    phi, lz, m, tau, slots, par: Parametrisation, xp, data_prec=None, reference=None
):
    r"""Re-centre whitened slots at their learned hierarchical scale.

    The whitening fixes the prior precision of a slot at :math:`P = 1/\mathrm{cell\_sd}^2`.
    When the learned scale :math:`\tau` is far from it, a slot the data pin (data precision
    :math:`h \gg 1/\tau^2`) should be centred and one they barely see non-centred
    (:math:`h_j = H_{jj}`, the slot's data precision given the rest of its block). With
    :math:`\hat\phi` the least-squares value, :math:`m` the hierarchical location and
    :math:`(Lz)_j` the whitened noise of slot ``j``,

    .. math::

        \phi_j = \frac{h_j \hat\phi_j + m_j/\tau^2}{h_j + 1/\tau^2}
                 + \frac{s_j(\tau)}{s_j(\mathrm{cell\_sd})}\,(Lz)_j,
        \qquad s_j(t) = (h_j + 1/t^2)^{-1/2}

    — the slot's conditional posterior at :math:`\tau` (exact for a slot alone). Each
    transformed slot rescales one row of :math:`L`, so the map keeps a closed-form
    log-Jacobian :math:`\sum_j \log s_j(\tau) - \log s_j(\mathrm{cell\_sd})`, returned
    for a potential.

    ``data_prec`` and ``reference`` (:math:`h_j` and :math:`\hat\phi_j` of the slots) default
    to ``par``'s; the model passes them as data (:meth:`LatencyModel.whitening_data`).

    Returns
    -------
    phi, log_jacobian
    """
    h = par.data_prec[slots] if data_prec is None else data_prec
    sd0 = 1.0 / xp.sqrt(h + par.prior_prec[slots])
    if reference is None:
        reference = to_share(par.ref, par.pair_a, par.pair_b, par.pair_lwa, par.pair_lwb)[slots]
    prec = 1.0 / tau**2
    sd = 1.0 / xp.sqrt(h + prec)
    mean = (h * reference + m[slots] * prec) / (h + prec)
    new = mean + (sd / sd0) * lz[slots]
    if xp is np:
        phi = phi.copy()
        phi[slots] = new
    else:
        phi = xp.set_subtensor(phi[slots], new)
    return phi, xp.sum(xp.log(sd / sd0))


def draw_pair(loc_a, loc_b, lwa, lwb, tau_total, share_sd, rng) -> tuple[Any, Any]:
    r"""Log coefficients of a :data:`SHARE_PAIRS` pair for cells the fit never saw.

    The hierarchical prior of a pair lives in its sampling coordinates: with
    :math:`u_a = \mathrm{loc}_a + \log w_a`, :math:`u_b = \mathrm{loc}_b + \log w_b`,

    .. math::

        \kappa \sim \mathcal N(\operatorname{logaddexp}(u_a, u_b), \tau_\mathrm{pair}),
        \quad \ell \sim \mathcal N(u_b - u_a, \mathrm{share\_sd}),
        \quad \theta_a = \kappa - \operatorname{softplus}(\ell) - \log w_a,
        \quad \theta_b = \kappa - \operatorname{softplus}(-\ell) - \log w_b.

    Parameters
    ----------
    loc_a, loc_b : ndarray, shape (sample, unit)
        Hierarchical locations (log seconds).
    lwa, lwb : ndarray, shape (unit,)
        Log weights in the total (:func:`pair_log_weight`).
    tau_total : ndarray, shape (sample,)
    share_sd : float
    rng : numpy.random.Generator

    Returns
    -------
    theta_a, theta_b : ndarray, shape (sample, unit)
    """
    ua, ub = loc_a + lwa[None, :], loc_b + lwb[None, :]
    kappa = np.logaddexp(ua, ub) + np.asarray(tau_total)[:, None] * rng.standard_normal(ua.shape)
    ell = ub - ua + share_sd * rng.standard_normal(ua.shape)
    theta_a = kappa - np.logaddexp(0.0, ell) - lwa[None, :]
    theta_b = kappa - np.logaddexp(0.0, -ell) - lwb[None, :]
    return theta_a, theta_b


def _noise_growth(residuals: np.ndarray, x: np.ndarray) -> float:
    r"""Moment estimate of :math:`\gamma` in :math:`\operatorname{sd} = \sigma_0 (1-x)^{-\gamma}`.

    Least squares of :math:`\log r^2` on :math:`-2\log(1 - x)` (the slope is
    :math:`\gamma`; the log-chi-square offset only moves the intercept), clipped to [0, 2].
    """
    ok = np.isfinite(residuals) & np.isfinite(x) & (x < 1.0) & (np.abs(residuals) > 0)
    if ok.sum() < 10:
        return 0.0
    u = -2.0 * np.log1p(-np.clip(x[ok], 0.0, 1.0 - 1e-6))
    if np.ptp(u) < 1e-6:
        return 0.0
    slope = np.polyfit(u, np.log(residuals[ok] ** 2), 1)[0]
    return float(np.clip(slope, 0.0, 2.0))


# ---------------------------------------------------------------------------------------------
# structure decisions and the PyMC model
# ---------------------------------------------------------------------------------------------


def effect_basis(covariate: np.ndarray) -> np.ndarray:
    r"""Orthonormal basis :math:`Q` (levels × levels − 2) of the complement of
    :math:`\operatorname{span}\{\mathbf 1, s\}`.

    An effect :math:`\eta = Q\,\eta_\mathrm{raw}` with i.i.d. Normal raw entries sums to zero
    (like ``ZeroSumNormal``) and is uncorrelated with the size covariate ``s`` across levels, so
    the level, the size slope and the effects are separately identified.
    """
    s = np.asarray(covariate, dtype=float)
    span = np.stack([np.ones_like(s), s - s.mean()], axis=1)
    q, _ = np.linalg.qr(span, mode="complete")
    return q[:, 2:]


def unresolved_coefficients(design: Design, param: Parametrisation) -> list[str]:
    """Coefficients that the least-squares reference resolves in *no* unit (``param.weak``
    in every unit that carries them).

    Along such a coefficient only the hierarchy decides, and the reference's per-block least
    squares leaves it wherever a nearly flat direction drifts: on the real B200 sweeps (one
    SD arm per drafter) ``c1d`` at :math:`e^{-11.5}` s in all four drafter units, 3.4 log
    units below the posterior mode, where a drafter pass no longer moves any row. When a
    drafter coefficient is among them, :func:`specbayes.fit.fit` starts at the posterior mode
    (``HIDDEN_DRAFT_SETTINGS``).
    """
    out = []
    for c in design.coefs:
        table = design.dunits if c in DRAFT_COEFS else design.units
        if len(table) and param.weak[coefficient_slots(design, param, c)].all():
            out.append(c)
    return out


def coefficient_slots(design: Design, param: Parametrisation, coef: str) -> np.ndarray:
    """Flat slots of ``coef`` in every unit that carries it (drafter units for ``c*d``)."""
    if coef in DRAFT_COEFS:
        return param.draft_index[:, design.draft_coefs.index(coef)]
    return param.base_index[:, design.base_coefs.index(coef)]


def cross_cell_share(design: Design, param: Parametrisation, pair: int, member: str) -> float:
    r"""Share of a pair's total that its prefill member explains *across* cells.

    Within a cell the data pin only the total :math:`T_u` of pair ``pair`` (e.g.
    :math:`C_2 = c_{2p} + g\,c_{2v}`); across the cells of one (verifier, hardware) group,
    prefill and decode vary independently, so the totals' trend separates the members. Per
    group with more cells than terms (full-rank design), non-negative least squares of
    :math:`T_u \approx A\,p_u + g_u (B + D\,(p_u + g_u/2))` (relative errors, the members'
    physical trends) gives each unit's prefill share :math:`A p_u / \hat T_u`; the median over
    units is returned (0 when ``member`` has no prefill trend or no group has enough cells).
    """
    if TREND.get(member) != "p" or not len(design.units):
        return 0.0
    n_u = len(design.units)
    sl = slice(pair * n_u, (pair + 1) * n_u)
    ref_phi = to_share(param.ref, param.pair_a, param.pair_b, param.pair_lwa, param.pair_lwb)
    total = np.exp(ref_phi[param.pair_a[sl]])  # the pair's log total at the reference
    units = design.units.assign(total=total)
    shares = []
    for _, grp in units.groupby(["verifier", "hardware"], sort=False):
        p, g, t = (grp[c].to_numpy(dtype=float) for c in ("p", "g", "total"))
        x = np.stack([p, g, g * (p + g / 2)], axis=1)
        scale = x.max(axis=0)
        # more cells than terms, and cells that vary prefill and decode independently
        if len(grp) <= x.shape[1] or np.linalg.matrix_rank(x / scale) < x.shape[1]:
            continue
        coef, _ = optimize.nnls(x / scale / t[:, None], np.ones_like(t))
        fitted = x / scale @ coef
        ok = fitted > 0
        shares.append(coef[0] * p[ok] / scale[0] / fitted[ok])
    return float(np.median(np.concatenate(shares))) if shares else 0.0


def decide_structure(
    design: Design, param: Parametrisation | None = None, priors: dict | None = None
) -> dict[str, Any]:
    """Which effects, slopes and scales exist (rules in the module docstring).

    With ``param``, a per-cell scale ``tau_j`` is learned only if most units resolve
    coefficient ``j`` (``param.weak``) and pin it to better than ``cell_sd`` (marginal data
    sd): a scale learned from prior-dominated units is a funnel (tau and the units it scales
    trade off with nothing in the data to stop them).
    """
    s: dict[str, Any] = {}
    cell_sd = float(merge_priors(priors)["cell_sd"])
    nv, nh, nd = len(design.verifiers), len(design.hardware), len(design.drafters)
    s["verifier_effect"] = nv >= 2
    s["verifier_scale_learned"] = nv >= LEARN_SCALE_MIN_LEVELS
    s["hardware_effect"] = nh >= 2
    s["hardware_scale_learned"] = nh >= LEARN_SCALE_MIN_LEVELS
    s["drafter_effect"] = nd >= 2 and bool(design.draft_coefs)
    s["drafter_scale_learned"] = nd >= LEARN_SCALE_MIN_LEVELS
    s["verifier_size"] = bool(nv >= 3 and np.all(np.isfinite(design.verifier_size)))
    s["drafter_size"] = bool(
        design.draft_coefs and nd >= 3 and np.all(np.isfinite(design.drafter_size))
    )
    slopes, taus = [], []
    paired = pooled_coefs(design.model_name)
    for c in design.coefs:
        kind = TREND[c]
        table = design.dunits if c in DRAFT_COEFS else design.units
        if kind is not None and len(table):
            vals = np.round(_trend_value(kind, table["p"], table["g"]), 3)
            if len(np.unique(vals)) >= SLOPE_MIN_VALUES:
                slopes.append(c)
        resolved = True
        if param is not None and len(table):
            index = coefficient_slots(design, param, c)
            # most units must pin the coefficient more tightly than the prior deviation scale
            # (marginal data sd < cell_sd): units that see it only to +-0.3 cannot tell a
            # scale of 0.15 from zero — tau[c1p] on a paper MoE verifier (median unit sd 0.34)
            # mixed at bulk ESS 20 of 600
            pinned = param.marginal_prec[index] > 1.0 / cell_sd**2
            resolved = float(np.mean(param.weak[index] | ~pinned)) < 0.5
        if c in paired:
            continue  # the pair's total carries the learned scale (below)
        if len(table) and table["cell"].nunique() >= LEARN_SCALE_MIN_LEVELS and resolved:
            taus.append(c)
    # a pair's log total is resolved in every unit (its split is what the data cannot see):
    # its per-cell scale is learned; the share's deviation keeps the fixed prior scale
    for a, b in pooled_pairs(design.model_name):
        if len(design.units) and design.units["cell"].nunique() >= LEARN_SCALE_MIN_LEVELS:
            taus.append(pair_name(a, b))
    # the minor member of a pair whose split the units cannot see (c1p, c2p in dense-only
    # data) follows its physical cell trend: no free cell slope (it could only fit residuals
    # of the total, and did so in several ways: two modes, R-hat 1.74). It is *tied* — no
    # verifier or hardware effect, size slope fixed — unless the cells show it: a share of
    # at least TIED_SHARE of the totals' variation across cells (cross_cell_share)
    minor, tied = [], []
    if param is not None:
        ref_phi = to_share(param.ref, param.pair_a, param.pair_b, param.pair_lwa, param.pair_lwb)
        n_u = len(design.units)
        for i, (a, b) in enumerate(pooled_pairs(design.model_name)):
            sl = slice(i * n_u, (i + 1) * n_u)
            if n_u and float(np.mean(param.weak[param.pair_b[sl]])) >= 0.5:
                share_b = float(np.median(_sigmoid(ref_phi[param.pair_b[sl]])))
                m = a if share_b > 0.5 else b
                minor.append(m)
                if cross_cell_share(design, param, i, m) < TIED_SHARE:
                    tied.append(m)
    slopes = [c for c in slopes if c not in minor]
    s["tied"] = tied
    s["free_slopes"] = slopes
    s["learned_tau"] = taus
    # a free cell slope of a verifier coefficient varies by verifier and GPU (zero-sum
    # effects, fixed scale: a handful of groups cannot pin a scale) where the units resolve
    # the coefficient (its scale, or its pair's, is learned): a group's own cells then pin
    # its slope. Not for c1p in sd data (65 % of the paper's units cannot see it; its one
    # common slope already mixes slowest, R-hat 1.016 at 4 x 500 draws) nor for the drafter
    # coefficients (c2d's trend is weak)
    resolved = set(taus) | {
        c for pair in pooled_pairs(design.model_name) for c in pair if pair_name(*pair) in taus
    }
    s["slope_effects"] = (
        [c for c in slopes if c not in DRAFT_COEFS and c in resolved]
        if s["verifier_effect"] or s["hardware_effect"]
        else []
    )
    return s


class LatencyModel:
    """Holds the ``pm.Model`` of one model level built from a :class:`Design`.

    Parameters
    ----------
    design : Design
    priors : dict, optional
        Merged over :data:`DEFAULT_PRIORS`.
    param : Parametrisation, optional
        Least-squares reference and whitening (computed when absent).
    structure : dict, optional
        Which effects, scales and slopes are sampled (:func:`decide_structure` from
        ``param`` when absent; :func:`specbayes.mode.whiten_at` keeps the first decision).
    """

    def __init__(
        self,
        design: Design,
        priors: dict | None = None,
        param: Parametrisation | None = None,
        structure: dict | None = None,
    ):
        self.design = design
        self.priors = merge_priors(priors)
        self.param = param or least_squares_reference(design, self.priors)
        self.structure = structure or decide_structure(design, self.param, self.priors)
        design.structure = self.structure

    @cached_property
    def model(self):
        """The ``pm.Model`` with the observed ``latency`` written with :mod:`specbayes.laws`."""
        return self.build_model()

    @cached_property
    def sampling_model(self):
        """The model the samplers run: :attr:`model` with the rows' likelihood as one compiled
        term (:meth:`build_model`, ``kernel=True``)."""
        return self.build_model(kernel=True)

    # -- helpers ----------------------------------------------------------------------------
    def reference_levels(self) -> dict[str, float]:
        """Mean least-squares log coefficient per coefficient (centre of the level prior)."""
        d, p = self.design, self.param
        out = {}
        for j, c in enumerate(d.base_coefs):
            out[c] = float(np.mean(p.ref[p.base_index[:, j]]))
        for j, c in enumerate(d.draft_coefs):
            out[c] = float(np.mean(p.ref[p.draft_index[:, j]])) if len(d.dunits) else -10.0
        return out

    def coords(self) -> dict[str, list]:
        d = self.design
        units = d.units
        coords = {
            "coef": list(d.coefs),
            "verifier": d.verifiers,
            "hardware": d.hardware,
            "cell": d.cells,
            "unit": [f"{a}|{b}|{c}" for a, b, c in units[["verifier", "hardware", "cell"]].values],
            "base_coef": list(d.base_coefs),
            "param": list(range(self.param.n)),
            "obs": list(range(len(d.data))),
        }
        if d.draft_coefs and len(d.dunits):
            coords["drafter"] = d.drafters
            coords["draft_coef"] = list(d.draft_coefs)
            coords["dunit"] = [
                "|".join(r) for r in d.dunits[["verifier", "hardware", "drafter", "cell"]].values
            ]
        if d.latent_alpha:
            coords["alpha_key"] = ["|".join(r) for r in d.akeys.values]
        if self.structure["free_slopes"]:
            coords["slope_coef"] = self.structure["free_slopes"]
        if self.structure.get("slope_effects"):
            coords["slope_effect_coef"] = self.structure["slope_effects"]
        if self.structure["learned_tau"]:
            coords["tau_coef"] = self.structure["learned_tau"]
        return coords

    def initial_point(self) -> dict[str, np.ndarray]:
        """Deterministic start: z = 0 (the least-squares point), hypers at their references."""
        d, s = self.design, self.structure
        ref = self.reference_levels()
        init: dict[str, Any] = {
            "z": np.zeros(self.param.n),
            "mu": np.array([ref[c] for c in d.coefs]),
            "sigma0": np.array(self.param.sigma_hat),
            "gamma": np.array(max(self.param.gamma_hat, 0.01)),
        }
        if s["free_slopes"]:
            init["trend_slope"] = np.array(
                [self.priors["trend_slope"][c][0] for c in s["free_slopes"]]
            )
        if s["learned_tau"]:
            init["tau"] = np.full(len(s["learned_tau"]), self.priors["cell_sd"] * 0.5)
        # knee levels KNEE_START_OFFSET above the largest least-squares knee of the groups
        # with rows: less curvature than the reference keeps every row feasible at z = 0
        # (where the units sit a little off the reference, shrunk toward their location)
        # even when the data put their most loaded rows near the curved law's wall
        if d.model_name not in CURVED_LEVELS:
            return init
        init["knee_verifier_level"] = np.array(
            np.nanmax(self.param.knee_verifier) + KNEE_START_OFFSET
        )
        if d.draft_coefs and len(d.dunits) and self.param.knee_drafter.size:
            init["knee_drafter_level"] = np.array(
                np.nanmax(self.param.knee_drafter) + KNEE_START_OFFSET
            )
        return init

    def feasible_start(self) -> dict[str, np.ndarray]:
        """:meth:`initial_point`, with ``z`` moved to the least-squares point itself when a
        row is saturated at ``z = 0``.

        ``z = 0`` is the least-squares point shrunk toward the hierarchy's location; a unit
        whose most loaded row sits close to its wall can cross it there (the paper's dense
        verifiers: nutpie found no valid jittered start). The least-squares point keeps every
        row feasible by construction, and ``phi`` is affine in ``z`` slot by slot
        (:func:`adaptive_centring` rescales a slot's row of ``L``), so
        a step ``L^{-1} ((phi_ls - phi_0) / b)`` reaches it exactly; only the blocks
        (verifier, cell) holding a saturated row move there, the others stay where
        :meth:`initial_point` puts them.
        A row is saturated where the graph's mean latency is not finite.
        """
        init = self.initial_point()
        theta0, saturated = self._start_state(init)
        if not saturated.any():
            return init
        par = self.param
        # only the blocks (verifier, cell) of the saturated rows move: L is block-diagonal
        row_block = par.block_of[par.base_index[self.design.rows["unit"], 0]]
        moved = np.isin(par.block_of, row_block[saturated])
        step = self.z_step(init, theta0, par.ref)
        start = dict(init, z=init["z"] + np.where(moved, step, 0.0))
        if self._start_state(start)[1].any():
            raise RuntimeError("no feasible start: rows saturated at the least-squares point")
        return start

    def z_step(self, point: dict, theta_from: np.ndarray, theta_to: np.ndarray) -> np.ndarray:
        r"""The change of ``z`` that moves the flat coefficients from ``theta_from`` (their
        value at ``point``) to ``theta_to``, the other free variables held at ``point``.

        ``phi`` is affine in ``z`` slot by slot — :func:`adaptive_centring` rescales a slot's
        row of ``L`` by :math:`b_j` — so the step is :math:`L^{-1}((\phi_{to} -
        \phi_{from}) / b)`, exact.
        """
        from scipy.sparse.linalg import spsolve

        par = self.param
        pairs = (par.pair_a, par.pair_b, par.pair_lwa, par.pair_lwb)
        b = np.ones(par.n)  # slope of phi_j in (L z)_j
        slots, which = self.learned_scale_slots()
        if len(slots):
            h = par.data_prec[slots]
            tau = np.asarray(point["tau"], dtype=float)[which]
            b[slots] = np.sqrt((h + par.prior_prec[slots]) / (h + 1.0 / tau**2))
        delta = to_share(theta_to, *pairs) - to_share(theta_from, *pairs)
        return np.asarray(spsolve(par.whitening_matrix(), delta / b))

    def _start_state(self, point: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """The flat log coefficients (logit alphas) at a start ``point`` (values of the free
        variables; the others at the model's initial point) and the rows saturated there
        (the graph's mean latency not finite)."""
        import pytensor
        import pytensor.tensor as pt

        m, par = self.model, self.param
        values = {
            rv.name: np.asarray(point[rv.name], dtype=float)
            for rv in m.free_RVs
            if rv.name in point
        }
        missing = [rv for rv in m.free_RVs if rv.name not in point]
        default = m.initial_point() if missing else {}
        for rv in missing:
            value = default[m.rvs_to_values[rv].name]
            transform = m.rvs_to_transforms.get(rv)
            if transform is not None:
                value = transform.backward(pt.as_tensor(value), *rv.owner.inputs).eval()
            values[rv.name] = np.asarray(value, dtype=float)
        names = ["log_coef"] + (["log_coef_draft"] if "log_coef_draft" in m.named_vars else [])
        names += ["alpha"] if "alpha" in m.named_vars else []
        log_mu = m["latency"].owner.inputs[2]  # LogNormal(rng, size, mu, sigma)
        fn = pytensor.function(
            m.free_RVs,
            [m[n] for n in names] + [log_mu],
            on_unused_input="ignore",
            mode="FAST_COMPILE",
        )
        *coefs, log_mu = fn(*[values[rv.name] for rv in m.free_RVs])
        out = dict(zip(names, coefs, strict=True))
        theta = np.zeros(par.n)
        theta[par.base_index] = out["log_coef"]
        if "log_coef_draft" in out:
            theta[par.draft_index] = out["log_coef_draft"]
        if "alpha" in out:
            theta[par.alpha_index] = np.log(out["alpha"] / (1.0 - out["alpha"]))
        return theta, ~np.isfinite(log_mu)

    def whitening_data(self) -> dict[str, np.ndarray]:
        r"""The values of the model's whitening, entered as ``pm.Data``.

        The graph's structure depends only on the design and the structure; the point it is
        whitened at (:attr:`param`: the least-squares reference, or a mode) enters as these
        shared arrays, so one compiled log density serves every whitening
        (:func:`specbayes.mode.mode_start` sets them round after round, and the sampler
        starts from the last): ``whitening_factor`` (rows of :math:`L`),
        ``whitening_shrink`` (rows of :math:`(H + P)^{-1}P`), ``whitening_const``
        (:math:`(H + P)^{-1} H \phi_\mathrm{ref}`), ``level_reference`` (the centre of the
        ``mu`` prior, :meth:`reference_levels`) and, where a scale is learned,
        ``centring_data_prec`` and ``centring_reference`` (:func:`adaptive_centring`).
        """
        par = self.param
        levels = self.reference_levels()
        out = {
            "whitening_factor": par.white_val,
            "whitening_shrink": par.shrink_val,
            "whitening_const": par.const,
            "level_reference": np.array([levels[c] for c in self.design.coefs]),
        }
        slots, _ = self.learned_scale_slots()
        if len(slots):
            ref_phi = to_share(par.ref, par.pair_a, par.pair_b, par.pair_lwa, par.pair_lwb)
            out["centring_data_prec"] = par.data_prec[slots]
            out["centring_reference"] = ref_phi[slots]
        return out

    def learned_scale_slots(self) -> tuple[np.ndarray, np.ndarray]:
        """Sampling slots whose hierarchical scale is learned, and which scale.

        Returns
        -------
        slots, which : ndarray of int
            Flat slots (a plain coefficient's, or a pair's log total) and, for each, its
            position in ``structure['learned_tau']`` (the ``tau_coef`` dim).
        """
        d, par, learned = self.design, self.param, self.structure["learned_tau"]
        slots, which = [], []
        in_pair = {c for pair in SHARE_PAIRS[d.model_name] for c in pair}
        for j, c in enumerate(d.base_coefs):
            if c in learned and c not in in_pair:  # a pair's slots hold (total, share)
                slots.append(par.base_index[:, j])
                which.append(np.full(len(d.units), learned.index(c)))
        for j, c in enumerate(d.draft_coefs):
            if c in learned and len(d.dunits):
                slots.append(par.draft_index[:, j])
                which.append(np.full(len(d.dunits), learned.index(c)))
        n_u = len(d.units)
        for i, (a, b) in enumerate(pooled_pairs(d.model_name)):
            if pair_name(a, b) in learned:
                slots.append(par.pair_a[i * n_u : (i + 1) * n_u])
                which.append(np.full(n_u, learned.index(pair_name(a, b))))
        if not slots:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        return np.concatenate(slots).astype(np.int64), np.concatenate(which).astype(np.int64)

    @property
    def paired(self) -> set[str]:
        """Coefficients sampled and pooled as part of a :data:`SHARE_PAIRS` pair."""
        return pooled_coefs(self.design.model_name)

    def trend_matrix(self, table: pd.DataFrame, coefs) -> np.ndarray:
        """Centred cell-trend covariates ``t_j`` of the units in ``table``, shape (units, coefs)."""
        d = self.design
        cols = []
        for c in coefs:
            kind = TREND[c]
            if kind is None:
                cols.append(np.zeros(len(table)))
            else:
                cols.append(_trend_value(kind, table["p"], table["g"]) - d.trend_center[kind])
        return np.stack(cols, axis=1) if cols else np.zeros((len(table), 0))

    def _knee_groups(self, pm, pt):
        r"""Log knee batches of every coefficient group (inside the model context):
        log-normal levels plus zero-sum verifier, drafter and GPU effects of fixed scale
        (``knee_effect_sd``),

        .. math::  \log K_{v,h} = \kappa_v + a_v + e_h, \qquad
                   \log K_{d,h} = \kappa_d + b_d + e_h,

        deterministic ``log_knee_verifier`` (verifier, hardware) and ``log_knee_drafter``
        (drafter, hardware). A group has one verifier, GPU and drafter
        (:func:`_group_factors`), so the knees are taken once per group; the rows gather
        them by their group index. Returns ``(log K_v, log K_d, has_drafter)`` per group
        (``log K_d`` is 0 where the group has no drafter, ``has_drafter`` says where)."""
        d, pr = self.design, self.priors
        vi, hi, di = _group_factors(d)
        sd = float(pr["knee_effect_sd"])

        def effect(name: str, dim: str):
            """Zero-sum effect over a factor's levels (zeros when it has only one)."""
            n = len(self.coords()[dim])
            return pm.ZeroSumNormal(name, sd, dims=dim) if n > 1 else pt.zeros(n)

        def knees(pass_name: str, dim: str):
            med, level_sd = pr[f"knee_{pass_name}"]
            level = pm.Normal(f"knee_{pass_name}_level", np.log(med), level_sd)
            return pm.Deterministic(
                f"log_knee_{pass_name}",
                level + effect(f"knee_{pass_name}_effect", dim)[:, None] + e_h[None, :],
                dims=(dim, "hardware"),
            )

        e_h = effect("knee_hardware_effect", "hardware")
        log_kv = knees("verifier", "verifier")[vi, hi]
        if not (d.draft_coefs and len(d.dunits)):
            return log_kv, pt.zeros(len(vi)), np.zeros(len(vi), dtype=bool)
        log_kd = knees("drafter", "drafter")[np.maximum(di, 0), hi]
        has_d = di >= 0
        return log_kv, pt.switch(pt.as_tensor(has_d), log_kd, 0.0), has_d

    # -- the graph --------------------------------------------------------------------------
    def build_model(self, kernel: bool = False):
        """Build the ``pm.Model`` (see the module docstring for the math).

        ``kernel=True`` (the sampling model): the rows' likelihood is one
        :class:`specbayes.likelihood.RowLogLikelihood` term (``moe``:
        :class:`specbayes.likelihood.MoeRowLogLikelihood`, the coverage fixed point iterated to
        convergence) named ``latency_loglik`` (value and gradient in one compiled pass)
        instead of the observed ``latency`` built from :mod:`specbayes.laws`; same density,
        same free variables.
        """
        import pymc as pm
        import pytensor.tensor as pt

        from specbayes.likelihood import moe_row_loglik, row_loglik

        d, s, pr, par = self.design, self.structure, self.priors, self.param
        r = d.rows
        coefs = list(d.coefs)
        ci = {c: i for i, c in enumerate(coefs)}
        has_draft = bool(d.draft_coefs) and len(d.dunits) > 0
        with pm.Model(coords=self.coords()) as model:
            # the whitening's values (shared: one compiled density for every whitening)
            white = {
                name: pt.specify_shape(pm.Data(name, v), v.shape)
                for name, v in self.whitening_data().items()
            }
            # row covariates (pm.Data so they can be swapped)
            g = pm.Data("decode", r["g"], dims="obs")
            k = pm.Data("k", r["k"], dims="obs")
            a_p = pm.Data("prefill_ratio", r["a_p"], dims="obs")
            rps = pm.Data("rps", r["rps"], dims="obs")
            conc = pm.Data("concurrency", r["conc"], dims="obs")
            closed = pm.Data("closed", r["closed"], dims="obs")

            # hyper-parameters
            mu = pm.Normal("mu", mu=white["level_reference"], sigma=pr["level_sd"], dims="coef")
            if s["free_slopes"]:
                means = np.array([pr["trend_slope"][c][0] for c in s["free_slopes"]])
                sds = np.array([pr["trend_slope"][c][1] for c in s["free_slopes"]])
                slope_free = pm.Normal("trend_slope", means, sds, dims="slope_coef")
            slope = []
            for c in coefs:
                if c in s["free_slopes"]:
                    slope.append(slope_free[s["free_slopes"].index(c)])
                else:
                    slope.append(pt.as_tensor(float(pr["trend_slope"].get(c, (0.0, 0.0))[0])))
            slope = pt.stack(slope)
            if s["learned_tau"]:
                tau_free = pm.Gamma("tau", alpha=2.0, beta=2.0 / pr["cell_sd"], dims="tau_coef")
            tau = []
            for c in coefs:
                if c in s["learned_tau"]:
                    tau.append(tau_free[s["learned_tau"].index(c)])
                else:
                    tau.append(pt.as_tensor(float(pr["cell_sd"])))
            tau = pt.stack(tau)

            def effect(name, dim, on, learned, scale, covariate=None, keep=None):
                """Effect matrix (on, dim); rows of ``on`` outside ``keep`` are zero."""
                sc = pm.HalfNormal(f"{name}_scale", scale) if learned else scale
                n_on, n_lev = len(self.coords()[on]), len(self.coords()[dim])
                rows = np.flatnonzero(keep) if keep is not None else np.arange(n_on)
                if covariate is None and len(rows) == n_on:
                    return pm.ZeroSumNormal(name, sigma=sc, dims=(on, dim))
                if covariate is None:
                    raw = pm.ZeroSumNormal(f"{name}_raw", sigma=sc, shape=(len(rows), n_lev))
                    full = pt.set_subtensor(pt.zeros((n_on, n_lev))[rows], raw)
                    return pm.Deterministic(name, full, dims=(on, dim))
                # orthogonal to the level *and* the size covariate: otherwise a zero-sum
                # effect can carry a linear trend in log size, and slope and effects trade
                # off along a ridge only the effect prior bounds (R-hat 2.5 on paper data)
                basis = effect_basis(covariate)
                raw = pm.Normal(f"{name}_raw", 0.0, sc, shape=(len(rows), basis.shape[1]))
                full = pt.set_subtensor(pt.zeros((n_on, basis.shape[1]))[rows], raw)
                return pm.Deterministic(name, full @ basis.T, dims=(on, dim))

            bidx = [ci[c] for c in d.base_coefs]
            untied = np.array([0.0 if c in s.get("tied", ()) else 1.0 for c in d.base_coefs])
            loc_b = pt.zeros((len(d.units), len(bidx))) + mu[bidx][None, :]
            uv = d.units["verifier"].map({v: i for i, v in enumerate(d.verifiers)}).to_numpy()
            uh = d.units["hardware"].map({h: i for i, h in enumerate(d.hardware)}).to_numpy()
            vsize = np.log(d.verifier_size) if s["verifier_size"] else None
            if s["verifier_effect"]:
                ve = effect(
                    "verifier_effect",
                    "verifier",
                    "base_coef",
                    s["verifier_scale_learned"],
                    pr["verifier_sd"],
                    vsize,
                    keep=untied > 0,
                )
                loc_b = loc_b + ve[:, uv].T
            if s["hardware_effect"]:
                he = effect(
                    "hardware_effect",
                    "hardware",
                    "coef",
                    s["hardware_scale_learned"],
                    pr["hardware_sd"],
                    keep=np.array([c not in s.get("tied", ()) for c in coefs]),
                )
                loc_b = loc_b + he[bidx][:, uh].T
            if s["verifier_size"]:
                ls = np.log(d.verifier_size) - np.mean(np.log(d.verifier_size))
                beta = pm.Normal(
                    "size_slope", pr["size_slope"][0], pr["size_slope"][1], dims="base_coef"
                )
                beta_eff = pt.switch(untied > 0, beta, float(pr["size_slope"][0]))
                loc_b = loc_b + beta_eff[None, :] * ls[uv][:, None]
            slope_b = pt.zeros((len(d.units), len(bidx))) + slope[bidx][None, :]
            if s.get("slope_effects"):
                cols = [d.base_coefs.index(c) for c in s["slope_effects"]]
                dev = pt.zeros((len(d.units), len(cols)))
                for name, on, idx in (
                    ("verifier_slope_effect", "verifier", uv),
                    ("hardware_slope_effect", "hardware", uh),
                ):
                    if s[f"{on}_effect"]:
                        eff = pm.ZeroSumNormal(
                            name, sigma=pr["slope_effect_sd"], dims=("slope_effect_coef", on)
                        )
                        dev = dev + eff[:, idx].T
                slope_b = pt.set_subtensor(slope_b[:, cols], slope_b[:, cols] + dev)
            loc_b = loc_b + slope_b * self.trend_matrix(d.units, d.base_coefs)

            if has_draft:
                didx = [ci[c] for c in d.draft_coefs]
                loc_d = pt.zeros((len(d.dunits), len(didx))) + mu[didx][None, :]
                dd = d.dunits["drafter"].map({v: i for i, v in enumerate(d.drafters)}).to_numpy()
                dh = d.dunits["hardware"].map({h: i for i, h in enumerate(d.hardware)}).to_numpy()
                if s["drafter_effect"]:
                    de = effect(
                        "drafter_effect",
                        "drafter",
                        "draft_coef",
                        s["drafter_scale_learned"],
                        pr["drafter_sd"],
                        np.log(d.drafter_size) if s["drafter_size"] else None,
                    )
                    loc_d = loc_d + de[:, dd].T
                if s["hardware_effect"]:
                    loc_d = loc_d + he[didx][:, dh].T
                if s["drafter_size"]:
                    ds = np.log(d.drafter_size) - np.mean(np.log(d.drafter_size))
                    beta_d = pm.Normal(
                        "drafter_size_slope",
                        pr["size_slope"][0],
                        pr["size_slope"][1],
                        dims="draft_coef",
                    )
                    loc_d = loc_d + beta_d[None, :] * ds[dd][:, None]
                loc_d = loc_d + slope[didx][None, :] * self.trend_matrix(d.dunits, d.draft_coefs)

            # whitened, partially non-centred unit coefficients:
            # theta = (H+P)^-1 H theta_ls + (H+P)^-1 P m(hyper) + L z
            z = pm.Flat("z", dims="param")
            m_flat = pt.zeros(par.n + 1)
            m_flat = pt.set_subtensor(m_flat[par.base_index.ravel()], loc_b.ravel())
            if has_draft:
                m_flat = pt.set_subtensor(m_flat[par.draft_index.ravel()], loc_d.ravel())
            if d.latent_alpha:
                m_flat = pt.set_subtensor(m_flat[par.alpha_index], par.prior_loc_alpha)
            pairs = (par.pair_a, par.pair_b, par.pair_lwa, par.pair_lwb)
            if len(par.pair_a):
                m_flat = to_share(m_flat, *pairs, xp=pt)
            # whitened coordinates: phi = (H+P)^-1 H phi_ls + (H+P)^-1 P m + L z
            z_pad = pt.concatenate([z, pt.zeros(1)])
            lz = pt.sum(white["whitening_factor"] * z_pad[par.white_idx], axis=1)
            phi = (
                white["whitening_const"]
                + pt.sum(white["whitening_shrink"] * m_flat[par.white_idx], axis=1)
                + lz
            )
            # slots whose per-cell scale is learned: re-centred at the learned scale (the
            # whitening assumed cell_sd), see adaptive_centring
            slots, which = self.learned_scale_slots()
            if len(slots):
                phi, log_jac = adaptive_centring(
                    phi,
                    lz,
                    m_flat,
                    tau_free[which],
                    slots,
                    par,
                    pt,
                    data_prec=white["centring_data_prec"],
                    reference=white["centring_reference"],
                )
                pm.Potential("adaptive_centring_jacobian", log_jac)
            theta = from_share(phi, *pairs, xp=pt) if len(par.pair_a) else phi
            th_base = pm.Deterministic(
                "log_coef", theta[par.base_index], dims=("unit", "base_coef")
            )
            # the hierarchical prior: a plain coefficient N(location, tau_j) in log units; a
            # pair in its sampling coordinates (unit Jacobian): log total N(., tau_pair),
            # logit share N(., SHARE_SD_FACTOR * cell_sd)
            plain = [j for j, c in enumerate(d.base_coefs) if c not in self.paired]
            if plain:
                pm.Potential(
                    "unit_prior",
                    pm.logp(
                        pm.Normal.dist(loc_b[:, plain], tau[bidx][plain][None, :]),
                        th_base[:, plain],
                    ).sum(),
                )
            n_u = len(d.units)
            for i, (a, b) in enumerate(pooled_pairs(d.model_name)):
                sl = slice(i * n_u, (i + 1) * n_u)
                sl_a, sl_b = par.pair_a[sl], par.pair_b[sl]
                name = pair_name(a, b)
                tau_pair = (
                    tau_free[s["learned_tau"].index(name)]
                    if name in s["learned_tau"]
                    else float(pr["cell_sd"])
                )
                share_sd = SHARE_SD_FACTOR * float(pr["cell_sd"])
                pm.Potential(
                    f"pair_prior_{a}_{b}",
                    pm.logp(pm.Normal.dist(m_flat[sl_a], tau_pair), phi[sl_a]).sum()
                    + pm.logp(pm.Normal.dist(m_flat[sl_b], share_sd), phi[sl_b]).sum(),
                )
            if has_draft:
                th_draft = pm.Deterministic(
                    "log_coef_draft", theta[par.draft_index], dims=("dunit", "draft_coef")
                )
                pm.Potential(
                    "draft_unit_prior",
                    pm.logp(pm.Normal.dist(loc_d, tau[didx][None, :]), th_draft).sum(),
                )

            # latent alpha
            alpha_row = pt.as_tensor(r["alpha"])
            if d.latent_alpha:
                la = theta[par.alpha_index]
                a_, b_ = pr["alpha"]
                # Beta(a, b) on alpha + log Jacobian of the logit: a log(alpha) + b log(1-alpha)
                pm.Potential(
                    "alpha_prior",
                    (a_ * pt.log(pt.sigmoid(la)) + b_ * pt.log(pt.sigmoid(-la))).sum(),
                )
                alpha_lat = pm.Deterministic("alpha", pt.sigmoid(la), dims="alpha_key")
                has = r["akey"] >= 0
                alpha_row = pt.switch(
                    pt.as_tensor(has), alpha_lat[np.maximum(r["akey"], 0)], alpha_row
                )
                obs_a = has & np.isfinite(r["alpha_obs"])
                if obs_a.any():
                    lo = np.clip(r["alpha_obs"][obs_a], 1e-4, 1 - 1e-4)
                    pm.Potential(
                        "alpha_observed",
                        pm.logp(
                            pm.Normal.dist(la[r["akey"][obs_a]], pr["alpha_obs_sd"]),
                            np.log(lo / (1 - lo)),
                        ).sum(),
                    )

            # the cycle decomposition (formulas from laws): per-pass costs once per
            # coefficient group (unit, dunit, k), only the latency law per row
            gr = d.groups
            gu, gk = gr["unit"], gr["k"]
            cg = pt.exp(th_base)[gu]
            cb = {name: cg[:, j] for j, name in enumerate(d.base_coefs)}
            c1d_g = c2d_g = pt.zeros(len(gu))
            if has_draft:
                isd = pt.as_tensor((gr["dunit"] >= 0).astype(float))
                cdg = pt.exp(th_draft)[np.maximum(gr["dunit"], 0)]
                c1d_g, c2d_g = cdg[:, 0] * isd, cdg[:, 1] * isd
            grp = pm.Data("group_idx", r["group"], dims="obs")
            passes = pm.Data("passes", np.nan_to_num(r["passes"]), dims="obs")
            if d.latent_alpha:
                lat = np.isnan(r["passes"])
                passes = pt.switch(pt.as_tensor(lat), laws.verifier_passes(g, alpha_row, k), passes)
            pass_c1 = laws.pass_cost(cb["c1v"], c1d_g, gk)
            curved = d.model_name in CURVED_LEVELS
            if curved:  # batch curvature from the knees of the row's verifier and drafter
                log_kv, log_kd, has_d = self._knee_groups(pm, pt)
            sigma0 = pm.HalfNormal("sigma0", pr["sigma"])
            gamma = pm.HalfNormal("gamma", pr["noise_growth"])
            if kernel:
                # the same likelihood as below, value and gradient in one compiled pass
                inv_kv = pt.exp(-log_kv) if curved else pt.zeros(len(gu))
                inv_kd = (
                    pt.switch(pt.as_tensor(has_d), pt.exp(-log_kd), 0.0)
                    if curved
                    else pt.zeros(len(gu))
                )
                costs = (cb["c1p"], pass_c1, cb["c2p"], cb["c2v"], gk * c2d_g, inv_kv, inv_kd)
                softness = WALL_SOFTNESS if curved else 0.0
                # the rows' data as constants, not the pm.Data above: the sampling model is
                # never pointed at other rows (predictions use the graph model), and constant
                # arrays reach the compiled kernel as contiguous arrays — on the paper's dense
                # verifiers the log density and gradient took 2.9 ms instead of 3.6 ms
                row_data = (r["group"], r["a_p"], r["rps"], r["conc"], r["closed"])
                row_passes = passes if d.latent_alpha else np.nan_to_num(r["passes"])
                if d.model_name == "moe":  # the coverage fixed point per row
                    loglik = moe_row_loglik(
                        (*costs, cb["c1s"], cb["c2s"]),
                        row_passes,
                        sigma0,
                        gamma,
                        *row_data,
                        r["k"],
                        r["m_ratio"],
                        np.log(r["latency"]),
                        softness=softness,
                    )
                else:
                    loglik = row_loglik(
                        costs,
                        row_passes,
                        sigma0,
                        gamma,
                        *row_data,
                        np.log(r["latency"]),
                        softness=softness,
                    )
                pm.Potential("latency_loglik", loglik)
                return model
            c1p_row = a_p * cb["c1p"][grp]
            c2p_row = a_p * cb["c2p"][grp]
            c1 = laws.cycle_cost(c1p_row, passes, pass_c1[grp])
            c2_verifier = laws.cycle_cost(c2p_row, passes, cb["c2v"][grp])
            c2_drafter = passes * (gk * c2d_g)[grp]
            c2 = c2_verifier + c2_drafter
            if curved:
                knee_v = pt.exp(log_kv)[grp]
                knee_d = pt.switch(pt.as_tensor(has_d), pt.exp(log_kd), np.inf)[grp]
                c3 = laws.batch_curvature(c2_verifier, c2_drafter, knee_v, knee_d)
            if d.model_name == "moe":
                c1s, c2s = passes * cb["c1s"][grp], passes * cb["c2s"][grp]
                # the expert part of a verifier pass bends at the verifier's knee
                c3s = c2s / knee_v if curved else 0.0
                c3u = c3 if curved else 0.0
                mr = pt.as_tensor(r["m_ratio"])
                open_mu = laws.moe_latency_implicit(
                    rps,
                    c1,
                    c1s,
                    c2,
                    c2s,
                    mr,
                    1.0,
                    k,
                    c3u=c3u,
                    c3s=c3s,
                    wall_softness=WALL_SOFTNESS if curved else 0.0,
                )
                phi_o = laws.expert_coverage(laws.routed_tokens(rps, open_mu, k), mr, 1.0)
                phi_c = laws.expert_coverage(conc * (k + 1.0), mr, 1.0)
                closed_mu = laws.closed_loop_latency(
                    conc, c1 + phi_c * c1s, c2 + phi_c * c2s, c3u + phi_c * c3s
                )
                log_mu = pt.log(pt.switch(closed > 0, closed_mu, open_mu))
                # headroom C1 / mu (laws.log_headroom), with C1 at the row's coverage
                c1_row = c1 + pt.switch(closed > 0, phi_c, phi_o) * c1s
                log_head = pt.minimum(pt.log(c1_row) - log_mu, 0.0)
            else:
                # log L = log C1 - log h, open and closed loop alike (laws.log_headroom)
                log_head = laws.log_headroom(
                    c1,
                    c2,
                    rps,
                    conc,
                    r["closed"] > 0,
                    c3 if curved else 0.0,  # a level without curvature: the plain law
                    wall_softness=WALL_SOFTNESS if curved else 0.0,
                )
                log_mu = pt.log(c1) - log_head
            sigma_row = sigma0 * pt.exp(-gamma * log_head)
            pm.LogNormal("latency", mu=log_mu, sigma=sigma_row, observed=r["latency"], dims="obs")
        return model


# ---------------------------------------------------------------------------------------------
# simulation from the model (recovery tests, benchmarks)
# ---------------------------------------------------------------------------------------------


def simulate_sweeps(
    *,
    model: str = "sd",
    verifiers: dict[str, float] | None = None,
    hardware: tuple[str, ...] = ("H100",),
    drafters: dict[str, float] | None = None,
    cells: tuple[tuple[int, int], ...] = ((256, 256), (512, 512), (1024, 256), (256, 1024)),
    alphas: tuple[float, ...] = (0.6, 0.8, 0.95),
    ks: tuple[int, ...] = (1, 3, 5),
    loads: tuple[float, ...] = (0.05, 0.2, 0.35, 0.5, 0.65, 0.8),
    sigma: float = 0.02,
    gamma: float = 0.3,
    cell_sd: float = 0.05,
    closed_loop: bool = False,
    unknown_alpha: bool = False,
    experts: tuple[int, int] = (8, 128),
    slope_sd: float = 0.0,
    knees: tuple[float, float] | None = None,
    seed: int = 0,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Sweeps drawn from the model itself, with known coefficients.

    Coefficients follow the hierarchy: per-coefficient levels typical of an 8B model on one
    GPU, scaled by verifier size (slope 1 in log parameter count), hardware factors, the cell
    trends of :data:`TREND` with their default slopes, and per-cell deviations
    ``N(0, cell_sd)``. Loads are fractions of the configuration's saturation
    (``x = λ C2``); closed loop uses the concurrency giving those utilisations. With
    ``unknown_alpha`` the SD rows carry no alpha (as GuideLLM's) and each workload has one
    acceptance rate — cell ``i`` gets ``alphas[i % len(alphas)]``, recorded in
    ``truth['alpha']`` — since the model's latent alpha is one per (verifier, drafter, cell).
    With ``slope_sd > 0`` each verifier and each GPU shifts the KV-cache slopes of the
    per-pass costs ``c1v, c2v`` by ``N(0, slope_sd)`` (the model's slope effects), recorded in
    ``truth.attrs['slope_effects'][factor][level][coef]``. ``knees`` are the knee batches
    (verifier, drafter) of the batch curvature (:func:`laws.batch_curvature`; default the
    prior medians of :data:`DEFAULT_PRIORS`; ``(inf, inf)`` for the plain law), recorded in
    ``truth.attrs['knees']``; loads are then fractions of :func:`laws.saturation_rps`.

    Returns
    -------
    sweeps : DataFrame
        The sweep schema (``verifier, hardware, drafter, cell, prefill, decode, k, alpha,
        rps | concurrency, latency``; MoE adds ``experts_per_token, num_experts``).
    truth : DataFrame
        One row per (verifier, hardware, drafter, cell) with the true ``c1p … c2d``
        (and ``c1s, c2s``) in seconds.
    """
    rng = np.random.default_rng(seed)
    if knees is None:
        knees = (DEFAULT_PRIORS["knee_verifier"][0], DEFAULT_PRIORS["knee_drafter"][0])
    verifiers = verifiers or {"V8B": 8e9}
    drafters = drafters or {"D1B": 1e9}
    level = {  # log seconds at 8B, p = g = 512 (kv = 768)
        "c1p": np.log(0.02),
        "c1v": np.log(0.012),
        "c2p": np.log(0.004),
        "c2v": np.log(1.0e-4),
        "c1d": np.log(0.0015),
        "c2d": np.log(1.0e-5),
        "c1s": np.log(0.004),
        "c2s": np.log(3.0e-5),
    }
    slopes = {c: DEFAULT_PRIORS["trend_slope"].get(c, (0.0, 0.0))[0] for c in level}
    center = {"p": np.log(512.0), "kv": np.log(768.0)}
    hw_factor = {h: rng.normal(0, 0.3, size=len(level)) for h in hardware}
    # slope deviations from their own stream, so that slope_sd = 0 keeps every seed's data
    srng = np.random.default_rng([seed, 7])
    trended = [c for c in level if TREND[c] == "kv" and c not in DRAFT_COEFS]
    slope_dev = {
        factor: {
            name: {c: float(srng.normal(0, slope_sd)) if slope_sd > 0 else 0.0 for c in trended}
            for name in names
        }
        for factor, names in (("verifier", list(verifiers)), ("hardware", list(hardware)))
    }
    rows, truth = [], []
    for v, vsize in verifiers.items():
        v_dev = rng.normal(0, 0.1, size=len(level))
        for h in hardware:
            for ci, (p, g) in enumerate(cells):
                cell = f"{p}x{g}"
                theta = {}
                for j, c in enumerate(level):
                    kind = TREND[c]
                    t = (_trend_value(kind, p, g) - center[kind]) if kind else 0.0
                    size = np.log(vsize / 8e9) if c not in DRAFT_COEFS else 0.0
                    b = slopes[c]
                    if c in trended:
                        b += slope_dev["verifier"][v][c] + slope_dev["hardware"][h][c]
                    theta[c] = (
                        level[c]
                        + size
                        + v_dev[j]
                        + hw_factor[h][j]
                        + b * t
                        + rng.normal(0, cell_sd)
                    )
                # a workload has one acceptance rate: with alpha unknown (latent per verifier,
                # drafter, cell), each cell gets one of ``alphas`` instead of all of them
                cell_alphas = (alphas[ci % len(alphas)],) if unknown_alpha else alphas
                for dname, dsize in [("none", 0.0), *drafters.items()]:
                    th = dict(theta)
                    if dname != "none":
                        for c in DRAFT_COEFS:
                            th[c] = theta[c] + np.log(dsize / 1e9)
                    coef = {c: float(np.exp(val)) for c, val in th.items()}
                    truth.append(
                        {"verifier": v, "hardware": h, "drafter": dname, "cell": cell, **coef}
                    )
                    if unknown_alpha:
                        truth[-1]["alpha"] = np.nan if dname == "none" else cell_alphas[0]
                    configs = (
                        [(np.nan, 0)]
                        if dname == "none"
                        else [(a, kk) for a in cell_alphas for kk in ks]
                    )
                    for a, kk in configs:
                        rrows = {
                            "g": np.full(len(loads), float(g)),
                            "k": np.full(len(loads), float(kk)),
                            "m_ratio": np.full(len(loads), experts[0] / experts[1]),
                        }
                        cc = {c: np.full(len(loads), coef[c]) for c in coef}
                        if model == "dense":
                            cc["c1d"] = cc["c2d"] = np.zeros(len(loads))
                        aa = np.full(len(loads), 0.5 if np.isnan(a) else a)
                        c1, c2 = laws.effective_costs(
                            cc["c1p"],
                            cc["c1v"],
                            cc["c1d"],
                            cc["c2p"],
                            cc["c2v"],
                            cc["c2d"],
                            rrows["g"],
                            aa,
                            rrows["k"],
                        )
                        cc["knee_verifier"] = np.full(len(loads), float(knees[0]))
                        cc["knee_drafter"] = np.full(len(loads), float(knees[1]))
                        c3 = laws.effective_curvature(
                            cc["c2p"], cc["c2v"], cc["c2d"], rrows["g"], aa, rrows["k"], *knees
                        )
                        if model == "moe":
                            w = rrows["g"] / laws.expected_tokens(aa, rrows["k"])
                            c2 = c2 + w * cc["c2s"]
                            c3 = c3 + w * cc["c2s"] / knees[0]
                        if closed_loop:
                            # concurrency giving utilisation x: N C2 / (C1 + N C2) = x
                            conc = np.maximum(
                                1.0, np.round(np.asarray(loads) / (1 - np.asarray(loads)) * c1 / c2)
                            )
                            conc = np.unique(conc)
                            rrows = {kk2: vv[: len(conc)] for kk2, vv in rrows.items()}
                            cc = {c: vv[: len(conc)] for c, vv in cc.items()}
                            aa = aa[: len(conc)]
                            rrows["rps"] = np.zeros(len(conc))
                            rrows["conc"] = conc
                            rrows["closed"] = np.ones(len(conc))
                        else:
                            rrows["rps"] = np.asarray(loads) * laws.saturation_rps(c1, c2, c3)
                            rrows["conc"] = np.zeros(len(loads))
                            rrows["closed"] = np.zeros(len(loads))
                        rc = dict(cc)
                        mu, x = forward_numpy(rc, rrows, aa, moe=(model == "moe"))
                        noise = sigma * (1 - np.clip(x, 0, 0.99)) ** (-gamma)
                        lat = mu * np.exp(rng.normal(0, 1, size=len(mu)) * noise)
                        for i in range(len(mu)):
                            row = {
                                "verifier": v,
                                "hardware": h,
                                "drafter": dname,
                                "cell": cell,
                                "prefill": float(p),
                                "decode": float(g),
                                "k": int(kk),
                                "alpha": a,
                                "latency": float(lat[i]),
                                "verifier_params": vsize,
                            }
                            if closed_loop:
                                row["concurrency"] = float(rrows["conc"][i])
                                row["rps"] = np.nan
                            else:
                                row["rps"] = float(rrows["rps"][i])
                            if unknown_alpha and dname != "none":
                                row["alpha"] = np.nan
                            if model == "moe":
                                row["experts_per_token"] = experts[0]
                                row["num_experts"] = experts[1]
                            rows.append(row)
    df = pd.DataFrame(rows)
    if model == "dense":
        df = df[df["k"] == 0].reset_index(drop=True)
    truth_df = pd.DataFrame(truth)
    if model != "moe":
        truth_df = truth_df.drop(columns=["c1s", "c2s"])
    truth_df.attrs["slope_effects"] = slope_dev
    truth_df.attrs["knees"] = {"verifier": float(knees[0]), "drafter": float(knees[1])}
    return df, truth_df
