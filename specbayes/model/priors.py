r"""Prior configuration of the model: data, not code (as in pymc-marketing's model configs).

Every entry is a plain dict of distribution parameters; :func:`merge_priors` overlays a
user's dict on :data:`DEFAULT_PRIORS`. Scales are on the log scale of seconds unless said.

Anchored structure (a unit's costs are identified by its own sweeps)
    ``log_c1_dense``, ``log_c2_dense``
        Normal priors of :math:`\log C_1, \log C_2` of a dense sweep; :math:`\log C_2` is
        truncated above by :math:`-\log\lambda_\max` on open-loop sweeps (the wall).
    ``log_ratio``
        Normal prior of :math:`\log C_{1R}, \log C_{2R}` (SD over dense), truncated below by
        :math:`-\log E_\max` (no SD configuration beats a pass per ``E_max`` tokens).
    ``share_logit``
        Logit position of the prefill share :math:`\pi_j = c_{jp}/C_{j,\mathrm{dense}}` in its
        feasible interval.
    ``tokens_logit``
        Logit position of :math:`E` in :math:`(E_\mathrm{lo}, k + 1)` where alpha is unknown.
        :math:`E` is affine in the drafter's cost ratio :math:`c_{1d}/c_{1v}`, so this is
        also the drafter cost's position in its feasible interval; the mean −1 leans to
        cheap drafters (with mean 0 the measured acceptance lengths of both real DSpark
        cases fell below the 5 % posterior quantile of E).

Pooled structure (coefficients shared across sweeps)
    ``coef_mu``
        Normal prior of each group's log coefficient (one entry per coefficient).
    ``drafter_ratio``
        ``None`` (default): a drafter the catalog does not know takes the generic ``coef_mu``
        entries for ``c1d, c2d``. A dict ``{"alpha": a, "beta": b}`` instead makes its costs a
        ratio of the verifier's on the same GPU, :math:`c_{jd} = \rho_j c_{jv}`,
        :math:`\rho_j \sim \mathrm{Gamma}(a, b)` (``{"alpha": 2, "beta": 10}``: mode 0.1, 90 %
        within 0.04–0.47), sampled as its log (``drafter_log_ratio``). Zero-avoiding: with a
        latent alpha the rows stop constraining a drafter's cost once it adds little to a pass
        while every workload's alpha follows it down, and the generic log-normal's long left
        tail is where those fits mixed worst (R-hat 1.04, bulk ESS 133; with the ratio 0–8
        divergences, ESS 160–300, ``benchmarks/model_core.md``). Not the default: on the
        default tier's simulated set it cost one divergence and bulk ESS 370 at the test's
        seed, where the generic prior is healthy — neither makes latent alpha healthy yet.
    ``coef_mu_roofline_sigma``
        Log sd of a group's coefficient around its roofline magnitude
        (:func:`group_level_prior`, :mod:`specbayes.model.physics`), used instead of the
        generic ``coef_mu`` entry where the catalog knows the verifier and GPU. The prefill
        coefficient ``c1p`` is bounded by the rows only from above; around the generic centre
        with sd 2 its long left tail mixed slowly (``benchmarks/model_core.md``).
    ``c1p_tie``
        Log sd of a group's ``c1p`` around its ``c2p`` (plus the difference of their prior
        centres; ``None``: independent). The roofline makes the prompt's own prefill and the
        prefill every other request pays equal (both the prompt's compute); the rows resolve
        ``c2p`` (a large part of :math:`C_2`) but bound ``c1p`` (a few % of :math:`C_1`) only
        from above. A real server adds a per-request cost outside the GPU to ``c1p``
        (``physics.roofline_centres``' ``request_s``), which 0.5 allows.
    ``trend``
        Normal prior of the logit of a trended coefficient's share :math:`w` that grows
        linearly with its cell covariate (:mod:`specbayes.model.hierarchy`; median 0.82,
        90 % within 0.46–0.96: mostly proportional, with a part that is not).
    ``alpha_logit``
        Normal prior of the logit of a workload's latent acceptance rate, where its SD rows
        carry none: a drafter level (``mu``, ``sigma``) per (verifier, hardware, drafter) and
        a workload's offset from it (``cell_sigma``); marginally median 0.73, 90 % within
        0.35–0.93 for each workload (sd 1.0 on the logit), correlation 0.64 between two
        workloads of one drafter.
    ``cell_sd``
        Log-normal scale of a cell's deviation from its group's trend, LogNormal(log 3.5 %,
        0.5) (5–95 %: 1.5–8.0 %). Zero-avoiding: the rows of three or four cells per group
        barely tell a small scale from none, and below ~1 % the centred cells are the neck of
        a funnel. A HalfNormal sank into it; Gamma(2, 20) and then Gamma(4, 100), whose left
        tails fall only polynomially, still left divergent draws at a scale of 0.3 % in a
        validation fold of the demo with three cells per group; the log-normal's falls like
        a Gaussian in the log (``benchmarks/model_core.md``).
    ``tau``
        Gamma prior of the scale of a sweep's :math:`\log C_1` deviation from the cycle
        decomposition (zero-avoiding, mode 1 %), sampled — only where ``c1_dev`` is None (the
        model before 2026-12-06).
    ``c1_dev``
        InverseGamma(3, 6·10⁻⁵) prior of the variance :math:`\tau_{C_1}^2` of a sweep's
        :math:`\log C_1` deviation from the cycle decomposition, integrated out of the
        sampled density (:func:`specbayes.model.levels.c1_deviations`; its draws are
        taken from the exact conditional after sampling, ``tau``). It weighs as six sweeps
        deviating by 0.45 %: a pooled fit's tens to thousands of sweeps outweigh it. With the
        scale sampled on its log axis, it mixed worst on the demo and the two-drafter set (a
        long tail towards 0, where the rows cannot tell a small scale from none). Shape 3:
        the collapsed deviations' joint density is a scale mixture whose tails follow the
        shape (at 1 and 2 tails reached R-hat 1.02). Scale 6·10⁻⁵, not 6·10⁻⁶: a prior
        leaning to 0.14 % made a sharp peak at zero in the deviations' density, where noisy
        rows pin each sweep's C1 less tightly than the deviations' scale (the unseen-cell
        set, noise 2 %, scale 0.6 %: R-hat 1.35); ``benchmarks/model_core.md``. ``None``: the
        scale sampled with the ``tau`` prior.
    ``share_axis``
        Trend shares sampled on :class:`specbayes.model.transforms.ShareTransform`'s axis (a
        smooth clamp linear in the share) instead of the logit, the same prior; default
        ``("c2p",)``, the share that sits near 1 (a request's prefill cost growing with its
        prompt), where on the logit axis its posterior was a bent ridge with the small-prefill
        cells' coefficients. With every share on it the default tier's set diverged (``c1p``'s
        prior-only share met the clamp's wall). ``()``: every share on the logit axis.
    ``drafter_prefill``
        Log-normal prior of :math:`\rho`, the drafter's prefill over the verifier's per
        (verifier, hardware, drafter): an SD request's prefill is :math:`c_p(1 + \rho)`
        (:func:`specbayes.laws.effective_costs`; vLLM's proposer runs over the prompt too).
        Around the roofline's ratio (:func:`specbayes.model.physics.drafter_prefill_share`:
        3.4 % for Qwen3-14B's EAGLE-3 head, 11 % for a Qwen3-1.7B draft model) with log sd
        ``sigma`` (0.25: a ratio of two FLOP counts on one GPU, uncertain by the kernels'
        efficiency at the two sizes; the simulator's measured shares sit within 10 % of the
        roofline's). Where the catalog does not know the verifier, GPU or drafter: no share
        (``generic`` None, the default — the rows cannot tell it from the cycle costs, so a
        vague prior would only add a ridge), or one around ``generic`` with log sd
        ``generic_sigma``. ``None`` drops the term (the paper's decomposition). Its
        posterior is its prior; what it changes is the alpha read from the rows where alpha
        is unknown: on the serving simulator's two-drafter set the planner's best k matches
        the simulator's at 16 of 16 points (15 without), every seed healthy; at log sd 0.5
        one seed's fit diverged, in a chain at a small ``c1d`` of the EAGLE-3 head
        (``benchmarks/model_core.md``).
    ``c2_jitter``
        The fixed scale of a sweep's :math:`\log C_2` deviation: the rows do not resolve it
        (a learned scale sat at zero and mixed badly: ``benchmarks/model_core.md``), but a
        deviation keeps the wall a bound of :math:`C_2`'s prior instead of a NaN of the
        coefficients'.
    ``cell_coefs``
        Coefficients with a per-cell deviation beyond their trend; default the KV-bound
        ``c2v``. ``("c2v", "c2d")`` gives the drafter's cost per token one too: on the paper
        set's Qwen3-14B (two drafters, ~800 rows a cell) with its cells centred
        (``centred_cells=True``) held-out 90 % coverage 0.845 → 0.873 and healthy fold fits
        (bulk ESS 564–741); on the slow tests' simulated sets (a few dozen rows a cell) the
        centred ``c2d`` cells diverge (1,597 on three verifiers) and need ``centred_cells``
        ``{"c2v": 1.0, "c2d": 0.75}`` — which on Qwen3-14B mixes badly (ESS 47–104). Not the
        default while no one parametrisation is healthy on both (benchmarks/model_core.md,
        2026-12-06). Measured on the demo at the first design (seed 1): with a deviation for
        ``c1p`` too, 11 divergences (``c1p`` is a small part of :math:`C_1`, a cell's rows do
        not pin it); without ``c1p``, 9; without ``c1p, c1v, c1d``, still a ``c2p`` funnel;
        with ``c2v, c2d`` only, 2.
    ``centred_cells``
        How each cell coefficient is sampled: its log coefficient itself (centred; where a
        cell's own rows pin the coefficient, the non-centred form is a funnel in
        ``cell_sd``) or its standardised deviation (non-centred; where they pin it weakly,
        the centred form is the funnel). ``True``: all centred, ``False``: none, a tuple: the
        coefficients centred, or a dict of coefficients to centring weights in [0, 1], a
        weight between partly centred (:func:`cell_centring`,
        :func:`specbayes.model.graph._cell_level`); names left out are non-centred.
        Default ``True``. For ``c2d`` (see ``cell_coefs``), which a cell's rows identify only
        by the k-dependence of its SD sweeps: centred, the 24 draft cells of the slow tests'
        three-verifier set outweigh ``cell_sd``'s log-normal prior near 0 (two chains sat
        there: 1,597 divergences); non-centred, the demo diverged at large ``cell_sd`` (6)
        and the simulated sets mixed it slowly (bulk ESS 367–390); 0.5 left the demo 5
        divergences; 0.75 is healthy on those sets and the demo, but not on the paper's
        Qwen3-14B, whose ~800 rows a cell pin it (``benchmarks/model_core.md``, 2026-12-06).
    ``centred_sweeps``
        The same switch per sweep cost (``{"C1": bool, "C2": bool}``). ``C1`` centred by
        default: with its deviations' scale integrated out (``c1_dev``), a sweep's rows pin
        its log C1 about three times more tightly than that scale (≈ 0.008) does, and
        non-centred, a move of a verifier's ``c1v`` level is a coordinated move of every
        dense sweep's deviation — the ridge the per-cycle overhead of the paper's Qwen3-14B
        mixed slowly along (R-hat 1.02, bulk ESS 356; centred 1.01, 537), and one divergence
        of the two-drafter set (``benchmarks/model_core.md``, 2026-12-07). ``C2`` non-centred:
        at its fixed jitter a sweep's rows pin its C2 less tightly than the decomposition
        does.
    ``sweeps``
        ``None`` (default): each sweep's log C1 and log C2 integrated out of the sampled
        density wherever the model can carry it, sampled elsewhere
        (:func:`specbayes.model.marginal.form`). Integrated out (``"marginal"``, which asks
        for it and refuses where it cannot): the law taken to first order over each sweep's
        ~1 % conditional spread, the costs drawn from their conditional after sampling
        (:mod:`specbayes.model.marginal`; the noise scale and the C1 deviations' scale are
        then sampled) — two axes fewer per sweep, 369 sampled axes on the paper set's dense
        verifiers instead of ~13,500, sampled whitened at the mode
        (:mod:`specbayes.model.whitening`). It needs the pooled structure, the law alone (no
        curvature, knee or expert reads) and no per-point metrics; by default also a known
        alpha. ``"sampled"``: two sampled axes per sweep (as ``centred_sweeps`` says).

Both
    ``inverse_knee``
        ``None`` (default): the law as the paper has it, linear in the batch. A dict
        ``{"mu": m, "sigma": s}``: a batch curvature
        (:func:`specbayes.laws.token_knee_curvature`) whose knee of each (verifier, hardware)
        group is :math:`K_g = R/\omega_g` tokens per pass, :math:`R` the GPU's roofline ridge
        (:func:`specbayes.model.physics.ridge_tokens`), :math:`\log\omega_g \sim
        \mathcal N(m, s)`; one per group, shared by its dense and SD sweeps and its cells, so
        the rows of every sweep inform it and a verifier pass's ``k + 1`` tokens per sequence
        put an SD arm's knee ``k + 1`` times earlier. ``{"mu": -1.9, "sigma": 1.5}`` spans a
        knee at a fraction of the ridge to none in practice (the simulator's additive
        roofline); on the real B200 sweeps of ``data/real`` it is 3.5 times the ridge at the
        catalog's sustained fractions (~4.4 decode ridges since the ridge is the decode
        passes', :data:`specbayes.model.physics.DECODE_COMPUTE_SCALE`). Not
        the default: it makes the predictions beyond the measured loads honest for the real
        server and too pessimistic for the simulated ones, and over both it does not improve
        ``benchmarks/load_extrapolation.md`` (issue 43).
    ``knee``
        ``None`` (default) or ``{"ridges": {"mu", "sigma"}, "excess": {"mu", "sigma"}}``
        (:data:`KNEE`, ``specbayes fit --knee``; experimental): the law bends at a knee
        (:func:`specbayes.laws.knee_latency`) — past :math:`K_g` tokens per verifier pass,
        :math:`\log(K_g/R) \sim \mathcal N` in roofline ridges :math:`R`, each request
        costs :math:`\kappa_g (k + 1) w c_{2v}` more, :math:`\log\kappa_g \sim \mathcal N`
        (:func:`specbayes.model.graph.sweep_knee`). The form of the simulator's compute
        knee (a hinge in tokens per pass) and of the real servers' bend; on the bundled demo
        it finds the simulator's knee (~500 of its 553 tokens) and excess (~0.2) but its
        posterior has a second mode (``benchmarks/knee.md``).
    ``metric_share``, ``metric_share_sigma``
        Per metric family, the Normal prior (location, this log sd) of the dense and the SD
        level of :math:`\log\rho_a, \log\rho_b`, the metric's shares of :math:`C_1` and of
        :math:`C_2 B` (:mod:`specbayes.model.metrics`): about 1 for a latency percentile
        and for ITL times its :math:`g - 1` tokens; TTFT's prefill and queue a few % of them.
    ``metric_tau``
        Per metric family, the spread (log sd) of a sweep's :math:`\log\rho` around its arm's
        level — fixed, not learned (as ``c2_jitter``): with a handful of sweeps per arm a
        learned spread mixed slowly in every parametrisation tried. What ``data/real``
        suggests: TTFT's shares differ by ~0.6 between workloads and arms (its zero-load part
        is the prefill and a step, not the decode-dominated :math:`C_1`), ITL's by ~0.06.
        A configuration the fit never saw draws its shares with this spread.
    ``metric_noise``, ``metric_nu``
        Scale of the noise of a log metric (a HalfNormal scale per metric; with
        ``metric_excess``, the mean of a Gamma(2) prior per family) and the degrees of
        freedom of the Student-t noise.
    ``metric_excess``
        None (default): Student-t noise (``metric_nu``), one :math:`\sigma` per metric with
        a HalfNormal(``metric_noise``) prior. A number: the HalfNormal scale of :math:`K`,
        the mean upward excess of a tail statistic of one request in units of its Normal
        noise (:func:`~specbayes.model.metrics.log_metric_density`; 10 is what
        ``benchmarks/metric_model.md`` measured: the real B200 p99 TTFT's outliers ask for
        ~16, a simulated sweep for none).
    ``wall_softness``
        With curvature an open-loop row's law has a finite latency at its wall and none past
        it: the graph continues it by a smooth plateau within this distance of the wall
        (:func:`specbayes.laws.log_headroom`); predictions use the exact law.
    ``noise``
        InverseGamma(alpha, beta) prior of the variance :math:`\sigma^2` of the
        multiplicative observation noise (log latency); weak: its density is within ~2.5
        nats over :math:`\sigma \in (0.003, 0.05)`. It is integrated out of the sampled
        density (:func:`specbayes.model.likelihood.collapsed_logp`).
    ``noise_growth``
        HalfNormal scale of :math:`\gamma` in the row's noise scale
        :math:`\sigma (1 - x)^{-\gamma}` (:math:`x`: its utilisation). With constant noise a
        sweep's most loaded row, which alone pins its :math:`C_2`, is as precise as the
        idle ones; on the demo 21 of 504 rows then had Pareto k > 0.7 in ``az.loo``.
        In the anchored structure sampled on a softplus axis
        (:class:`specbayes.model.transforms.SoftplusTransform`; the prior is unchanged):
        under the log transform the steep upper side of a small sweep's :math:`\gamma`
        posterior was where its rare divergences happened.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

#: The six cycle coefficients, in the order of :func:`specbayes.laws.effective_costs`.
COEFS = ("c1p", "c1v", "c1d", "c2p", "c2v", "c2d")
#: Coefficients with a cell trend (docs/model.md §6) and their covariate: prefill tokens ``p``
#: or the time-averaged KV size ``p + g/2``; a log-log slope of 1 is "linear in".
TRENDED = {"c1p": "prefill", "c2p": "prefill", "c2v": "kv", "c2d": "kv"}
VERIFIER_COEFS = ("c1p", "c1v", "c2p", "c2v")
DRAFTER_COEFS = ("c1d", "c2d")

#: The batch curvature users switch on (``specbayes fit --curvature``, or
#: ``priors={"inverse_knee": KNEE_PRIOR}``): the knee from a fraction of the GPU's roofline
#: ridge to none in practice (see ``inverse_knee`` above, ``benchmarks/load_extrapolation.md``).
KNEE_PRIOR: dict[str, float] = {"mu": -1.9, "sigma": 1.5}

#: The knee users switch on (``specbayes fit --knee``, or ``priors={"knee": KNEE}``): where a
#: verifier pass turns compute-bound, in roofline ridges (median 3, 90 % within 1-9.5), and
#: the excess cost per request past it relative to its verifier cost (median 0.3, 90 % within
#: 0.06-1.6).
KNEE: dict[str, dict] = {
    "ridges": {"mu": float(np.log(3.0)), "sigma": 0.7},
    "excess": {"mu": float(np.log(0.3)), "sigma": 1.0},
}

#: The fixed cost of a speculative cycle, ``c1c`` of :func:`specbayes.laws.effective_costs`
#: (the pooled structure's default; ``priors={"cycle_overhead": None}`` drops it):
#: rejection sampling, the proposer's bookkeeping and a synchronisation per cycle in vLLM V1,
#: around 1 ms (ASSUMPTION: the simulator's ``EngineConfig.spec_step_overhead_s``, bounded
#: by measurements); median 1 ms, 90 % within 0.19-5.2 ms.
CYCLE_OVERHEAD: dict[str, float] = {"mu": float(np.log(1e-3)), "sigma": 1.0}

#: Its cost per sequence, ``c2c`` of :func:`specbayes.laws.effective_costs` at the trend's
#: centre cell (proportional to the context, :math:`\bar s = p + g/2`): log-normal around
#: :func:`specbayes.model.physics.spec_seq_centre` with log sd ``sigma`` where the
#: catalog knows the verifier and GPU; none where that centre is 0 (a kernel that packs the
#: GQA group); around ``generic`` (s; about a sequence's KV read at a few hundred tokens) with
#: ``generic_sigma`` where the catalog does not know the GPU (or the verifier on an FA2 GPU).
SPEC_SEQ_OVERHEAD: dict[str, float] = {
    "sigma": 1.0,
    "generic": 1e-4,
    "generic_sigma": 2.0,
}

#: The ``drafter_prefill`` prior: log sd around the roofline's ratio, and the centre and log
#: sd where the catalog does not know the drafter (``generic`` None: no share there).
DRAFTER_PREFILL: dict[str, float | None] = {"sigma": 0.25, "generic": None, "generic_sigma": 1.0}

DEFAULT_PRIORS: dict[str, dict] = {
    "noise": {"alpha": 1.0, "beta": 5e-5},
    "noise_growth": {"sigma": 0.5},
    # anchored
    "log_c1_dense": {"mu": np.log(2.0), "sigma": 2.0},
    "log_c2_dense": {"mu": np.log(0.02), "sigma": 2.5},
    "log_ratio": {"mu": 0.0, "sigma": 1.0},
    "share_logit": {"mu": -1.5, "sigma": 1.5},
    "tokens_logit": {"mu": -1.0, "sigma": 1.5},
    # pooled: typical single-GPU magnitudes (s; c2* per concurrent request), 2.0 log sd
    "coef_mu": {
        "c1p": {"mu": np.log(0.03), "sigma": 2.0},
        "c1v": {"mu": np.log(0.01), "sigma": 2.0},
        "c2p": {"mu": np.log(0.005), "sigma": 2.0},
        "c2v": {"mu": np.log(5e-5), "sigma": 2.0},
        "c1d": {"mu": np.log(0.002), "sigma": 2.0},
        "c2d": {"mu": np.log(1e-5), "sigma": 2.0},
    },
    # where the catalog knows the verifier and GPU: its roofline magnitudes, this log sd
    "coef_mu_roofline_sigma": 1.0,
    # moe: a verifier pass's expert reads at full coverage c1s (s), where the catalog does
    # not know the verifier or GPU (model/experts.py)
    "expert_cost": {"mu": np.log(0.01), "sigma": 2.0},
    # a drafter the catalog does not know: its costs relative to the verifier's
    "drafter_ratio": None,
    "c1p_tie": 0.5,
    "trend": {"mu": 1.5, "sigma": 1.0},
    "alpha_logit": {"mu": 1.0, "sigma": 0.8, "cell_sigma": 0.6},
    "cell_sd": {"mu": float(np.log(0.035)), "sigma": 0.5},
    "tau": {"alpha": 2.0, "beta": 100.0},
    # the C1 deviations' scale integrated out (None: sampled with the "tau" prior)
    "c1_dev": {"alpha": 3.0, "beta": 6e-5},
    # trend shares sampled on transforms.ShareTransform's axis (a smooth clamp), not the logit
    "share_axis": ("c2p",),
    "c2_jitter": 0.005,
    # batch curvature: inverse knee (roofline ridges) of each (verifier, hardware); None = off
    "inverse_knee": None,
    # the knee: per (verifier, hardware) tokens per pass (ridges) and excess; None = off
    "knee": None,
    # pooled: a fixed C1 cost of every speculative cycle per (verifier, hardware, drafter),
    # c1c of laws.effective_costs (log-normal, s); None = off (the paper's decomposition)
    "cycle_overhead": CYCLE_OVERHEAD,
    # ... and per concurrent sequence (c2c, proportional to the context); None = off
    "spec_seq_overhead": SPEC_SEQ_OVERHEAD,
    # the drafter's prefill over the verifier's, per (verifier, hardware, drafter) the
    # catalog knows, log-normal around physics.drafter_prefill_share; None = off
    "drafter_prefill": DRAFTER_PREFILL,
    "wall_softness": 0.01,
    # per-point metrics beside the mean latency (issue 45; specbayes.model.metrics). TTFT's
    # shares are of the per-token cost (metrics.log_unit): a few steps at zero load, more
    # with the queue (data/real: 3-4 dense, 10-40 SD; the load's 2-50)
    "metric_share": {
        "latency": {"a": 0.0, "b": 0.0},
        "ttft": {"a": float(np.log(3.0)), "b": float(np.log(10.0))},
        "itl": {"a": 0.0, "b": 0.0},
    },
    "metric_share_sigma": 2.0,
    "metric_tau": {"latency": 0.15, "ttft": 0.6, "itl": 0.1},
    "metric_noise": 0.3,
    "metric_nu": 4.0,
    "metric_excess": None,
    # parametrisation (a transform of the same model, not a different one)
    "centred_cells": True,
    "centred_sweeps": {"C1": True, "C2": False},
    # None: the pooled sweeps' costs integrated out of the sampled density where the model
    # can carry it (model/marginal.py), drawn after sampling; sampled elsewhere.
    # "marginal": integrated out or an error; "sampled": two sampled axes per sweep
    "sweeps": None,
    # coefficients with a per-cell deviation (the others follow their group and trend)
    "cell_coefs": ("c2v",),
}


def group_level_prior(design, pr: dict, centre: np.ndarray) -> dict[str, tuple]:
    r"""Location and scale of each group's log coefficients.

    Returns ``{"verifier": (loc, scale), "drafter": (loc, scale, relative, catalogued)}``: ``(group,
    coef_v)`` arrays of the verifier coefficients per (verifier, hardware) group and
    ``(draft_group, coef_d)`` arrays of the drafter coefficients per (verifier, hardware,
    drafter). Where the catalog knows the verifier and GPU (and the drafter, for ``c1d,
    c2d``), the location is the log roofline magnitude of
    :func:`specbayes.model.physics.roofline_centres` at the workload the group level
    stands for — the trend's centre, :math:`p^* = e^{\bar{\log p}}` and
    :math:`g^* = 2(e^{\overline{\log(p + g/2)}} - p^*)` — with scale
    ``coef_mu_roofline_sigma``; elsewhere the generic ``coef_mu`` entry for the verifier and,
    for the drafter, ``relative`` is True and ``loc`` is :math:`\log\rho` of
    ``drafter_ratio``: an offset from the verifier's own level. A parallel drafter's
    per-token cost depends on k: its centre is taken at the median k of its sweeps.
    ``catalogued`` marks the drafter coefficients located at the roofline.
    """
    p_star, g_star = centre_cell(design, centre)
    sweeps = design.extra["sweeps"]
    verifier = [
        _roofline(design, sweeps[sweeps["group"] == group], None, p_star, g_star)
        for group in design.coords["group"]
    ]
    drafter = [
        _roofline(design, _draft_sweeps(sweeps, label), label.rsplit("|", 1)[1], p_star, g_star)
        for label in design.coords["draft_group"]
    ]
    names_v, names_d = design.coords["coef_v"], design.coords["coef_d"]
    loc_v = np.array([[pr["coef_mu"][c]["mu"] for c in names_v]] * len(verifier))
    scale_v = np.array([[pr["coef_mu"][c]["sigma"] for c in names_v]] * len(verifier))
    loc_d = np.array([[pr["coef_mu"][c]["mu"] for c in names_d]] * len(drafter))
    scale_d = np.array([[pr["coef_mu"][c]["sigma"] for c in names_d]] * len(drafter))
    relative = np.full((len(drafter), len(names_d)), pr["drafter_ratio"] is not None)
    catalogued = np.zeros((len(drafter), len(names_d)), bool)
    known = pr["coef_mu_roofline_sigma"]
    for rows, loc, scale, names, rel in (
        (verifier, loc_v, scale_v, names_v, None),
        (drafter, loc_d, scale_d, names_d, relative),
    ):
        for i, centres in enumerate(rows):
            for j, c in enumerate(names):
                if centres and c in centres:
                    loc[i, j], scale[i, j] = np.log(centres[c]), known
                    if rel is not None:
                        rel[i, j], catalogued[i, j] = False, True
    return {
        "verifier": (loc_v.reshape(-1, len(names_v)), scale_v.reshape(-1, len(names_v))),
        "drafter": (loc_d.reshape(-1, 2), scale_d.reshape(-1, 2), relative, catalogued),
    }


def centre_cell(design, centre: np.ndarray) -> tuple[float, float]:
    r"""The cell :math:`(p^*, g^*)` the group levels stand for: the trend's centre,
    :math:`p^* = e^{\bar{\log p}}`, :math:`g^* = 2(e^{\overline{\log(p + g/2)}} - p^*)`."""
    coefs = design.coords["coef"]
    by_kind = {TRENDED.get(c): centre[j] for j, c in enumerate(coefs) if c in TRENDED}
    p_star = float(np.exp(by_kind.get("prefill", np.log(512.0))))
    kv_star = float(np.exp(by_kind.get("kv", np.log(p_star + 256.0))))
    return p_star, max(2.0 * (kv_star - p_star), 1.0)


def spec_seq_prior(design, pr: dict, centre: np.ndarray) -> tuple[list, np.ndarray, np.ndarray]:
    """The draft groups with a ``c2c`` and the log location and scale of each at the trend's
    centre cell (``spec_seq_overhead``; :func:`specbayes.model.physics.spec_seq_centre`;
    a group whose centre is 0 has none)."""
    from specbayes.model.physics import spec_seq_centre

    p_star, g_star = centre_cell(design, centre)
    return _draft_group_prior(
        design, pr["spec_seq_overhead"],
        lambda v, hw, name, tp, k: spec_seq_centre(v, hw, name, p_star, g_star, tp=tp, k=k or 1),
    )  # fmt: skip


def drafter_prefill_prior(design, pr: dict, centre: np.ndarray) -> tuple[list, Any, Any]:
    """The draft groups given a prefill share :math:`\\rho` (the ``drafter_prefill`` prior),
    and its log location and scale for each, at the trend's centre prompt
    (:func:`specbayes.model.physics.drafter_prefill_share`). Where the catalog does not
    know the verifier, GPU or drafter: around ``generic``, or — ``generic`` None, the
    default — no share (the group is left out)."""
    from specbayes.model.physics import drafter_prefill_share

    p_star, _ = centre_cell(design, centre)
    return _draft_group_prior(
        design, pr["drafter_prefill"],
        lambda v, hw, name, tp, k: drafter_prefill_share(v, hw, name, p_star, tp=tp),
    )  # fmt: skip


def _draft_group_prior(design, prior: dict, centre_of) -> tuple[list, Any, Any]:
    """The draft groups given a log-normal per-group prior and the log location and scale of
    each: around ``centre_of(verifier, hardware, drafter, tp, k)`` with log sd ``sigma``,
    around ``generic`` with ``generic_sigma`` where that is None (the catalog does not know
    the setting); a group is left out where the centre is 0, or None with ``generic`` None."""
    sweeps = design.extra["sweeps"]
    groups, loc, scale = [], [], []
    for label in design.coords["draft_group"]:
        verifier, hardware, tp, k = _setting(design, _draft_sweeps(sweeps, label))
        at = centre_of(verifier, hardware, label.rsplit("|", 1)[1], tp, k)
        if at == 0.0 or (at is None and prior.get("generic") is None):
            continue
        groups.append(label)
        loc.append(np.log(prior["generic"] if at is None else at))
        scale.append(prior["generic_sigma"] if at is None else prior["sigma"])
    return groups, np.array(loc), np.array(scale)


def _roofline(design, sweeps, drafter, p_star: float, g_star: float) -> dict | None:
    """Roofline centres of one group's sweeps (:func:`~.physics.roofline_centres`)."""
    from specbayes.model.physics import roofline_centres

    verifier, hardware, tp, k = _setting(design, sweeps)
    coverage = design.level == "moe"  # the experts' tangent is the coverage's c1s there
    return roofline_centres(
        verifier, hardware, drafter, p_star, g_star, tp=tp, k=k, coverage=coverage
    )


def _draft_sweeps(sweeps, label: str):
    """The sweeps of a draft group ``"verifier|hardware|drafter"``."""
    group, name = label.rsplit("|", 1)
    return sweeps[(sweeps["group"] == group) & (sweeps["drafter"] == name)]


def _setting(design, sweeps) -> tuple[str, str, int, int | None]:
    """Verifier, hardware, tensor-parallel degree (median over the rows) and median draft
    length of the SD sweeps (None without any) of one group's sweeps."""
    rows = design.data[design.data["_config"].isin(sweeps.index)]
    tp = int(rows["tp"].median()) if "tp" in rows and rows["tp"].notna().any() else 1
    spec = sweeps[sweeps["k"] > 0]
    k = int(spec["k"].median()) if len(spec) else None
    return sweeps["verifier"].iloc[0], sweeps["hardware"].iloc[0], max(tp, 1), k


#: ``metric_excess`` of ``specbayes fit --tail-excess``: the scale measured on ``data/real``
#: and the simulated sweeps (``benchmarks/metric_model.md``).
TAIL_EXCESS = 10.0


def cell_centring(pr: dict) -> dict[str, float]:
    """Centring weight of each of ``pr``'s cell coefficients (its ``centred_cells``): 1
    centred, 0 non-centred (:func:`specbayes.model.graph._cell_level`).

    Raises
    ------
    ValueError
        If ``centred_cells`` is neither a bool, a tuple (list, set) of names in
        :data:`COEFS` nor a dict of such names to weights in [0, 1].
    """
    centred = pr["centred_cells"]
    weights = None
    if isinstance(centred, (bool, np.bool_)):
        weights = {}.fromkeys(COEFS, float(centred))
    elif isinstance(centred, (tuple, list, set, frozenset)):
        weights = {c: 1.0 for c in centred}
    elif isinstance(centred, dict):
        weights = centred
    ok = weights is not None and all(
        c in COEFS and isinstance(w, (int, float)) and 0.0 <= w <= 1.0 for c, w in weights.items()
    )
    if not ok:
        raise ValueError(
            "centred_cells must be a bool, a tuple of coefficient names or a dict of them to "
            f"weights in [0, 1] (names in {COEFS}); got {centred!r}"
        )
    return {c: float(weights.get(c, 0.0)) for c in pr["cell_coefs"]}


def merge_priors(priors: dict | None = None) -> dict:
    """Return :data:`DEFAULT_PRIORS` with ``priors`` overlaid (nested dicts merged per key).

    Raises
    ------
    KeyError
        If ``priors`` names an entry the model does not have.
    """
    merged = copy.deepcopy(DEFAULT_PRIORS)
    for key, value in (priors or {}).items():
        if key not in merged:
            raise KeyError(f"unknown prior {key!r}; known: {sorted(merged)}")
        if isinstance(value, dict) and isinstance(merged[key], dict):
            for sub, v in value.items():
                if isinstance(v, dict) and isinstance(merged[key].get(sub), dict):
                    merged[key][sub].update(v)
                else:
                    merged[key][sub] = v
        else:
            merged[key] = value
    return merged
