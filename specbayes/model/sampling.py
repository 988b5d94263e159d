r"""The one default sampler configuration, and a health summary of a fit.

:data:`SAMPLER_CONFIG` is used for every dataset (no settings rules): nutpie (compiled once
per model, numba backend), 4 chains × (1000 tune + 1000 draws), ``target_accept`` 0.9, and
nutpie's low-rank modified mass matrix (it learns the few strong posterior correlations —
a SD sweep's ratio against its dense sweep's cost — that a diagonal one cannot). Every
chain starts near the posterior's bulk: at the maximum of the sampled density found by
L-BFGS from the model's support point, jittered by :data:`START_JITTER` on the sampled axes
(:func:`compile_model`, :func:`optimised_start`) — checked by a short scouting run: where a
scouting chain ends trapped far below the best one, every chain begins where its scouting
chain ended, a trapped one where the best did (:func:`scouted_starts`). Every bounded
variable has an interval transform, so any such start is feasible.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
import warnings

import arviz as az
import numpy as np
import pymc as pm
from scipy.optimize import minimize

from specbayes.model.marginal import integrated

#: Half-width of the uniform jitter added to the optimised start on every sampled
#: (unconstrained) axis to start each chain (:func:`compile_model`); PyMC's default is 1.
START_JITTER = 0.1

#: The same with the knee (``priors["knee"]``): its likelihood has local optima in the knee's
#: position (each a few measured batches crossing the turn), and the energy of a ±0.1 start —
#: ~10 posterior widths on the tightly pinned axes — threw one or two chains of four into
#: them in warmup, where they stayed (log density ~170 below the bulk: no posterior mass).
#: From ±0.02 the demo's knee fit was healthy at three seeds of three; from ±0.1 at none
#: (``benchmarks/knee.md``).
KNEE_START_JITTER = 0.02

#: Most density evaluations of :func:`optimised_start` over all its L-BFGS runs; it stops
#: earlier when converged. The pooled structure's maximum is badly conditioned: a fold of the
#: paper's Llama-3.1-8B (1,433 sampled axes) took ~14,000 iterations to converge (~4 s), and
#: at 5,000 stopped ~18,000 nats below the bulk (``benchmarks/model_core.md``, 2026-12-06
#: 23:45).
START_MAXITER = 50_000

#: :func:`optimised_start` restarts L-BFGS from where it stopped until a run gains less than
#: this (nats): L-BFGS also stops when one step gains almost nothing relative to the density
#: (``ftol``), which a stale curvature memory causes far from the maximum — the paper's dense
#: verifiers' search stopped after 17 iterations at log density −273,279 with the gradient at
#: 18,232, and its restart gained 403,000 (``benchmarks/fit_speed.md``, 2026-12-07 01:19).
START_RESTART_GAIN = 1.0

#: Warmup iterations of the scouting run that precedes every nutpie fit
#: (:func:`scouted_starts`): the chains of the paper's Qwen3-32B (6,624 rows, one seed) reached
#: their final log density within 100–200 warmup iterations, where the early ones are the
#: costly ones (127–1,023 leapfrog steps each against 31 in the bulk).
SCOUT_TUNE = 200

#: A scouting chain is trapped when its log density over its last quarter lies more than this
#: many standard deviations below the best chain's; the standard deviation is that of a
#: d-dimensional Gaussian posterior's log density, :math:`\sqrt{d/2}` (:func:`scouted_starts`).
SCOUT_TRAP_SD = 5.0

SAMPLER_CONFIG: dict = {
    "chains": 4,
    "tune": 1000,
    "draws": 1000,
    "target_accept": 0.9,
    "low_rank_modified_mass_matrix": True,
    "cores": 2,
}


#: The options a user may set over :data:`SAMPLER_CONFIG` (and ``sampler``): fewer or more
#: chains and draws for a quick look or a large fit, and how many cores run the chains. Every
#: bar of the project is met at the defaults.
SAMPLER_OPTIONS = ("chains", "draws", "tune", "cores", "sampler")


def check_options(options: dict | None) -> dict:
    """``options`` if every key is in :data:`SAMPLER_OPTIONS` (``None`` values dropped).

    Raises
    ------
    ValueError
        Naming the unknown keys and the allowed ones.
    """
    options = {k: v for k, v in (options or {}).items() if v is not None}
    unknown = sorted(set(options) - set(SAMPLER_OPTIONS))
    if unknown:
        raise ValueError(
            f"sampler options {unknown} are not settable — the model has one sampler "
            f"configuration; settable: {', '.join(SAMPLER_OPTIONS)} (and seed)"
        )
    if options.get("sampler", "nutpie") not in ("nutpie", "numpyro"):
        raise ValueError(f"sampler must be 'nutpie' or 'numpyro', got {options['sampler']!r}")
    return options


def compile_model(model: pm.Model):
    """nutpie's compiled form of ``model`` (reuse it across seeds), each chain started at
    :func:`optimised_start` plus a uniform jitter of half-width :data:`START_JITTER`
    (:data:`KNEE_START_JITTER` with the knee).

    Why not PyMC's start (the support point, i.e. the prior centres, jittered by ±1 on
    every axis): the posterior of a group's log coefficients is ~100× narrower than its
    prior, so the chains began at log density −9e6 to −1e7 on the three-verifier simulated
    set and found the bulk, or not, in early warmup. One chain of four stuck in a region it
    never left (step size 1e-14, 961 divergences, R-hat 1.6) — also from the support point
    ±0.1 at that seed — and on one verifier of the paper set (Llama-3.1-8B, 6,624 rows)
    chains settled in different places (R-hat > 2, 145–450 steps per draw). From the
    optimised start both are healthy (three seeds; 31 steps per draw) and sample faster
    (``benchmarks/model_core.md``, 2026-12-05). Why a jitter: the chains should not start as
    one, and nutpie scales its first mass matrix by the gradient, which is exactly 0 on a
    prior-only position at its prior mean ("invalid initial point"). The numpyro sampler
    keeps PyMC's start.
    """
    import nutpie

    compiled = nutpie.compile_pymc_model(model, jitter_rvs=set())
    t0 = time.perf_counter()
    centre, search = optimised_start(compiled_density(compiled), compiled.initial_point_func(0))
    if integrated(model):  # the sweeps integrated out: linearised where they sit
        from specbayes.model.marginal import (
            RELINEARISE_ROUNDS,
            linearised_in_reads,
            relinearise,
        )
        from specbayes.model.whitening import WhiteningError, whitened

        for _ in range(RELINEARISE_ROUNDS):
            compiled = relinearise(model, compiled, compiled_point(compiled, centre))
            centre, search = optimised_start(compiled_density(compiled), centre)
        # few axes (the hierarchy's): sampled whitened at the mode, each chain started about
        # a posterior sd from it along every principal axis — but not on the moe level, where
        # it cost time and did not help health: the paper's MoE verifiers 97 s whitened, 92 s
        # not (its warmup saves less than its Python callback costs); four cells of
        # Qwen3-30B-A3B one divergence (the neck of the cells' scale) at 2 seeds of 6
        # whitened, 1 of 4 not (benchmarks/fit_speed.md, 2026-12-07 23:30)
        try:
            white = None if linearised_in_reads(model) else whitened(compiled, centre)
        except WhiteningError:  # no finite curvature at the start: sampled as it is
            white = None
        if white is not None:
            initial_points(white).seconds = time.perf_counter() - t0
            initial_points(white).search = search
            return white
    seconds = time.perf_counter() - t0
    jitter = KNEE_START_JITTER if "knee_at" in model.named_vars else START_JITTER

    def start(seed):
        return centre + np.random.default_rng(seed).uniform(-jitter, jitter, centre.shape)

    start.seconds = seconds  # reported apart from the compile (``sample``'s ``start_s``)
    start.search = search
    return dataclasses.replace(compiled, initial_point_func=start)


def compiled_density(compiled):
    """``x -> (logp, grad)`` by the C callback nutpie's sampler calls, through :mod:`ctypes`.

    Not ``compiled.logp_func``: that PyTensor function compiles the whole graph with numba a
    second time, for Python's argument types, on its first call (~10 s on the paper set's
    dense verifiers; the old core measured 31.5 s before it made the same change). A callback
    that reports a value or gradient that is not finite (codes 3, 4) or fails (1) raises
    ``FloatingPointError`` — :func:`optimised_start` reads it as outside the domain.
    """
    callback = compiled.compiled_logp_func.ctypes

    def logp_and_grad(x):
        x = np.ascontiguousarray(x, dtype=np.float64)
        grad, logp = np.empty_like(x), np.empty(())
        code = callback(x.size, _pointer(x), _pointer(grad), _pointer(logp),
                        compiled.user_data.ctypes.data)  # fmt: skip
        if code != 0:
            raise FloatingPointError(f"the compiled density returned code {code}")
        return float(logp), grad

    return logp_and_grad


def compiled_point(compiled, x: np.ndarray) -> dict[str, np.ndarray]:
    """Every variable of the model (free and deterministic, constrained) at nutpie's
    unconstrained position ``x``, by the expand callback its sampler calls (:mod:`ctypes`,
    as :func:`compiled_density`)."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    flat = np.empty(compiled.n_expanded)
    code = compiled.compiled_expand_func.ctypes(
        x.size, flat.size, _pointer(x), _pointer(flat), compiled.user_data.ctypes.data
    )
    if code != 0:
        raise FloatingPointError(f"nutpie's expand callback failed (code {code})")
    names, slices, shapes = compiled.shape_info
    return {n: flat[w].reshape(sh) for n, w, sh in zip(names, slices, shapes, strict=True)}


def _pointer(a: np.ndarray):
    """``a``'s data as a C ``double *`` (``a`` float64 and contiguous)."""
    import ctypes

    return a.ctypes.data_as(ctypes.POINTER(ctypes.c_double))


def optimised_start(logp_and_grad, x0: np.ndarray) -> tuple[np.ndarray, dict]:
    """The maximum of the sampled density (unconstrained axes) found by L-BFGS from ``x0``.

    ``logp_and_grad(x)`` returns the log density and its gradient
    (:func:`compiled_density`). Not a point estimate the fit reports — only where the chains
    begin: a few thousand evaluations of the compiled density (seconds), against warmups
    that spent hundreds of iterations finding the bulk. Where the search ends non-finite, ``x0``.

    Returns
    -------
    x : ndarray
        The start.
    search : dict
        ``start_iterations`` and ``start_runs`` (L-BFGS runs: each restarts from where the
        last stopped until one gains less than :data:`START_RESTART_GAIN`),
        ``start_converged`` (so, within :data:`START_MAXITER` evaluations) and
        ``start_logp`` — stored in the fit's config: a start that did not converge leaves
        the chains' warmup to find the bulk.
    """

    def negative(x):
        try:
            lp, grad = logp_and_grad(x)
        except Exception:  # a step of the line search outside the density's domain
            return np.inf, np.zeros_like(x)
        lp = float(lp)
        if not np.isfinite(lp):
            return np.inf, np.zeros_like(x)
        return -lp, -np.asarray(grad, dtype=float)

    x, best, runs, evaluations, iterations, converged = x0, negative(x0)[0], 0, 0, 0, False
    while evaluations < START_MAXITER:
        budget = START_MAXITER - evaluations
        res = minimize(
            negative, x, jac=True, method="L-BFGS-B", options={"maxiter": budget, "maxfun": budget}
        )
        runs, evaluations, iterations = runs + 1, evaluations + res.nfev, iterations + res.nit
        if not (np.isfinite(res.fun) and np.all(np.isfinite(res.x))):
            break
        gain, x, best = best - res.fun, res.x, res.fun
        if gain < START_RESTART_GAIN:
            converged = True
            break
    found = np.isfinite(best)
    search = {
        "start_iterations": iterations,
        "start_runs": runs,
        "start_converged": converged,
        "start_logp": float(-best) if found else None,
    }
    return (x if found else x0), search


def sample(
    model: pm.Model,
    seed: int,
    compiled=None,
    progress: bool = False,
    sampler: str = "nutpie",
    **overrides,
) -> tuple[az.InferenceData, dict]:
    """Sample ``model`` with :data:`SAMPLER_CONFIG` (``overrides`` for experiments only).

    ``sampler="numpyro"`` runs NumPyro's NUTS on JAX (``pip install specbayes[jax]``; a GPU
    when JAX has one) with the same chains, draws and target acceptance — a diagonal mass
    matrix, the low-rank and ``cores`` settings being nutpie's. Returns the
    ``InferenceData`` and the timings ``{"compile_s", "start_s", "sample_s"}`` (compile and
    start — :func:`optimised_start` — are 0 when ``compiled`` is given; numpyro's compile is
    inside ``sample_s``), with the start search's ``start_iterations``, ``start_runs``,
    ``start_converged`` and ``start_logp`` when it ran here (:func:`optimised_start`).
    Healthy on the demo at the defaults (``benchmarks/scale.md``: 0 divergences, R-hat 1.01,
    bulk ESS above 1,000) since the sweep costs' truncation normaliser, and the SD ratios'
    interval transform on a closed-loop sweep, keep JAX's gradient finite
    (:mod:`specbayes.model.truncated`); :func:`health` reports every fit.
    """
    config = {**SAMPLER_CONFIG, **overrides}
    if sampler == "numpyro":
        return _sample_numpyro(model, seed, config, progress)
    if sampler != "nutpie":
        raise ValueError(f"sampler must be 'nutpie' or 'numpyro', got {sampler!r}")
    import nutpie

    start = time.perf_counter()
    start_s, search = 0.0, {}
    if compiled is None:
        compiled = compile_model(model)
        start_s = getattr(initial_points(compiled), "seconds", 0.0)
        search = getattr(initial_points(compiled), "search", {})
    mid = time.perf_counter()
    starts, scout = scouted_starts(compiled, seed, config, progress)
    scouted = with_initial_points(compiled, starts)
    # warmup draws are not kept: the artefact holds what the fit's answers use (a third of
    # the demo fit's netCDF file was its warmup posterior)
    idata = _wait(
        nutpie.sample(
            scouted, seed=seed, progress_bar=progress, save_warmup=False, blocking=False, **config
        )
    )
    add_collapsed(idata, model, seed)
    end = time.perf_counter()
    timing = {"compile_s": mid - start - start_s, "start_s": start_s, "sample_s": end - mid}
    return idata, {**timing, **search, **scout}


def scouted_starts(compiled, seed: int, config: dict, progress: bool = False):
    r"""Each chain's start: where its scouting chain ended, or the best one's if trapped.

    A scouting run of :data:`SCOUT_TUNE` warmup iterations (no draws kept) checks
    ``compiled``'s starts. A chain whose log density over its last quarter lies more than
    :data:`SCOUT_TRAP_SD` × :math:`\sqrt{d/2}` below the best chain's is trapped. With none
    trapped the fit starts from ``compiled``'s starts, as without the check. With one or more,
    each chain of the fit begins where its scouting chain ended, a trapped one at the best
    chain's position at one of its late iterations instead (ten apart per trapped chain).
    Only the starts are chosen: every chain runs its full warmup and draws from there, and
    chains that end the scouting run comparably keep their own positions (R-hat still
    compares chains that found the bulk apart).

    Why: from the optimised start (jittered) two chains of four on the paper's Qwen3-32B
    (6,624 rows) settled within 200 iterations at log densities 6,000 and 8,000 below the other
    two — a noise growing steeply toward saturation and cells spread by 50 % explaining the
    rows worse — and never left (R-hat 2.1, bulk ESS 5; ``benchmarks/model_core.md``,
    2026-12-07). A region that far below holds no posterior mass, but a chain's warmup adapts
    to where it is; restarted from its own start with another warmup schedule, a chain can
    fall into it again, so the fit continues from the scouting positions. Where no chain was
    trapped the fit is the one it was: on the two-drafter set (seeds 1–8, a ridge that mixes
    slowly) continuing from the scouting positions gave the same bulk ESS on average but one
    fit of eight R-hat 1.02, ESS 383, where the unchanged start gave 1.01, ESS 545.

    ``progress`` shows nutpie's progress bar for the scouting run too (minutes on a large
    set).

    Returns
    -------
    starts : callable
        nutpie's ``initial_point_func``.
    info : dict
        ``scout_s`` and ``scout_restarted`` (chains begun at the best one's position).
    """
    import nutpie

    t0 = time.perf_counter()
    # the fit's own settings but its length: the scouting run is the same chains, shorter
    settings = {k: v for k, v in config.items() if k not in ("tune", "draws")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # arviz: "more chains than draws" (none are kept)
        trace = _wait(
            nutpie.sample(
                compiled, tune=SCOUT_TUNE, draws=0, seed=seed, progress_bar=progress,
                save_warmup=True, store_unconstrained=True, blocking=False,
                **settings,
            )
        )  # fmt: skip
    stats = trace.warmup_sample_stats
    points, trapped = choose_starts(stats["logp"].values, stats["unconstrained_draw"].values)
    starts = _in_turn(points) if trapped else initial_points(compiled)
    return starts, {"scout_s": time.perf_counter() - t0, "scout_restarted": trapped}


def initial_points(compiled):
    """nutpie's function of a seed giving a chain's start, of a compiled PyMC model or of a
    model of Python functions (:func:`specbayes.model.whitening.whitened`)."""
    if hasattr(compiled, "initial_point_func"):
        return compiled.initial_point_func
    return compiled._make_initial_points  # nutpie's PyFuncModel names its field so


def with_initial_points(compiled, starts):
    """``compiled`` with the chains' starts given by ``starts(seed)``."""
    plain = hasattr(compiled, "initial_point_func")
    field = "initial_point_func" if plain else "_make_initial_points"
    return dataclasses.replace(compiled, **{field: starts})


def choose_starts(logp: np.ndarray, position: np.ndarray) -> tuple[list[np.ndarray], int]:
    """From a scouting run's log densities (chain, iteration) and unconstrained positions
    (chain, iteration, dim): each chain's last position, or for a trapped chain
    (:func:`scouted_starts`) the best chain's, ten iterations apart from ten before its last.
    Returns the starts and how many chains were trapped."""
    iterations = logp.shape[1]
    typical = logp[:, -max(1, iterations // 4) :].mean(axis=1)
    best = int(np.argmax(typical))
    floor = typical[best] - SCOUT_TRAP_SD * np.sqrt(position.shape[-1] / 2.0)
    trapped = np.flatnonzero(typical < floor)
    points = [position[c, -1] for c in range(len(typical))]
    for j, c in enumerate(trapped):
        points[c] = position[best, max(-1 - 10 * (j + 1), -iterations)]
    return points, len(trapped)


def _in_turn(points: list[np.ndarray]):
    """nutpie's ``initial_point_func`` (called once per chain, from its threads): ``points``
    in turn — which chain gets which start does not matter."""
    lock, count = threading.Lock(), itertools.count()

    def start(seed):
        with lock:
            return np.array(points[next(count) % len(points)])

    return start


def _wait(sampler, poll_s: float = 0.1):
    """The trace of a non-blocking nutpie ``sampler`` once it is finished.

    The main thread waits in slices of ``poll_s`` (nutpie raises ``TimeoutError`` while
    chains still run; its ``is_finished`` raises it too, so it cannot be polled) instead of
    blocking in one wait, so a signal (Ctrl-C, SIGTERM) reaches Python's handler within
    ``poll_s``; the sampler is then cancelled and the interrupt propagates. (nutpie's
    blocking mode would answer Ctrl-C by returning the draws so far, which a caller would
    take for a finished fit.)
    """
    try:
        while True:
            try:
                return sampler.wait(timeout=poll_s)
            except TimeoutError:
                continue
    except BaseException:
        sampler.cancel()
        raise


def _sample_numpyro(
    model: pm.Model, seed: int, config: dict, progress: bool
) -> tuple[az.InferenceData, dict]:
    from specbayes.parallel import jax_chain_method

    method = jax_chain_method(config["chains"])
    start = time.perf_counter()
    keys = ("chains", "tune", "draws", "target_accept")
    with model:
        idata = pm.sample(
            **{k: config[k] for k in keys},
            random_seed=seed,
            nuts_sampler="numpyro",
            nuts_sampler_kwargs={"chain_method": method},
            progressbar=progress,
            compute_convergence_checks=False,
        )
    add_collapsed(idata, model, seed)
    return idata, {"compile_s": 0.0, "sample_s": time.perf_counter() - start}


def add_collapsed(idata: az.InferenceData, model: pm.Model, seed: int) -> None:
    r"""Add exact posterior draws of the scales integrated out of the sampled density to
    ``idata.posterior``: the noise scale :math:`\sigma`, one from
    :math:`\sigma^2 \mid \mu, y \sim IG(a + n/2, b + \tfrac12\sum r^2)`,
    :math:`r = (y - \mu)/w`, per draw (:func:`~specbayes.model.likelihood.draw_sigma`);
    in the pooled structure also the sweep costs' scales ``tau`` (dims ``cost``): the
    :math:`\log C_1` deviations' the same way from their draws, :math:`\log C_2`'s fixed
    jitter."""
    from specbayes.model.likelihood import draw_sigma, posterior_log_row_scale

    if integrated(model):  # the sweeps integrated out: drawn now, scales sampled
        from specbayes.model.marginal import add_draws

        return add_draws(idata, model, seed)
    obs = model["log_latency"]
    y = np.asarray(model.rvs_to_values[obs].data)
    a, b = _constants(obs.owner.inputs[-2:])
    post = idata.posterior
    sweep = np.asarray(model["obs_sweep"].get_value())
    mu = post["mu"].values
    log_w = posterior_log_row_scale(post, sweep, np.asarray(model["log_count"].get_value()))
    rng = np.random.default_rng(seed)
    idata.posterior["sigma"] = (("chain", "draw"), draw_sigma(y, mu, log_w, a, b, rng))
    if "log_c1_dev" not in post:
        return
    dev = post["log_c1_dev"].values
    rv = model["log_c1_sweep" if "log_c1_sweep" in model.named_vars else "log_c1_dev"]
    a1, b1 = _constants(rv.owner.inputs[-2:])
    tau_c1 = draw_sigma(np.zeros(dev.shape[-1]), -dev, np.zeros_like(dev), a1, b1, rng)
    jitter = np.full_like(tau_c1, float(model["c2_jitter"].get_value()))
    idata.posterior["tau"] = (("chain", "draw", "cost"), np.stack([tau_c1, jitter], axis=-1))


def _constants(variables) -> tuple[float, ...]:
    """The values of constant graph inputs (a prior's parameters), read without compiling a
    function: ``.eval()`` would compile one with PyTensor's C linker, whose module cache takes
    1.3–1.6 s to load in a fresh process — and nothing else in a fit uses it (nutpie compiles
    with numba)."""
    import pytensor.tensor as pt

    return tuple(float(pt.get_underlying_scalar_constant_value(x)) for x in variables)


def health(idata: az.InferenceData, model: pm.Model) -> dict:
    """Divergences, worst R-hat and worst bulk/tail ESS over the free variables.

    Returns
    -------
    dict
        ``divergences``, ``rhat_max``, ``ess_bulk_min``, ``ess_tail_min``, ``worst`` (the
        variable with the smallest bulk ESS) and ``healthy`` (0 divergences, R-hat <= 1.01,
        bulk ESS >= 400).
    """
    names = [v.name for v in model.free_RVs]
    post = idata.posterior[names]
    summ = az.summary(post, kind="diagnostics")
    div = int(np.asarray(idata.sample_stats["diverging"]).sum())
    out = {
        "divergences": div,
        "rhat_max": float(summ["r_hat"].max()),
        "ess_bulk_min": float(summ["ess_bulk"].min()),
        "ess_tail_min": float(summ["ess_tail"].min()),
        "worst": str(summ["ess_bulk"].idxmin()),
    }
    out["healthy"] = div == 0 and out["rhat_max"] <= 1.01 and out["ess_bulk_min"] >= 400
    return out
