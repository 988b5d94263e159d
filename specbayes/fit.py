r"""Fitting the latency models: :func:`fit` and :func:`load_fit` for every level.

>>> from specbayes.fit import fit, load_fit
>>> f = fit(sweeps, model="sd")                      # doctest: +SKIP
>>> f.healthy, f.diagnostics().head()                # doctest: +SKIP
>>> draws = f.predict(new_rows)                      # (sample, row) latency draws  # doctest: +SKIP

Every level runs on the default core (:mod:`specbayes.model_next`, its fit object
:class:`specbayes.model_next.fitted.NextFit`; README "The model"). The rest of this module is
the old core, selectable for the ``moe`` level only (``fit(..., model="moe", core="legacy")``,
:func:`resolve_core`) until it is deleted: its :class:`Fit`, and the sampling below.

Sampling (the old core)
-----------------------
``sampler_config`` is one dict (defaults :data:`SAMPLER_DEFAULTS`): ``sampler`` is
``"nutpie"`` (default; the fast path on CPU), ``"pymc"`` (PyMC's NUTS) or ``"numpyro"``
(JAX; ``pip install specbayes[jax]``, a ``ValueError`` naming it otherwise). nutpie and
PyMC sample the model with the rows' likelihood as one compiled numba term
(:attr:`~specbayes.model.LatencyModel.sampling_model`); JAX cannot lower that term, so
numpyro samples the same density written as a PyTensor graph with :mod:`specbayes.laws`
(:attr:`~specbayes.model.LatencyModel.model`, checked equal to the kernel in the tests), on
a GPU when JAX has one, with one chain per CPU device otherwise
(:func:`specbayes.parallel.jax_chain_method`). One
``seed`` feeds the sampler, the posterior predictive draws and the prior draws used for
unseen cells. A fit with a latent alpha draws :data:`LATENT_ALPHA_DRAWS` per chain unless
``draws`` is given (it mixes more slowly). A fit whose least-squares reference resolves a
drafter coefficient in no drafter unit (each drafter swept at one draft length, as in the
real B200 sweeps: ``c1d``; a latent alpha against ``c2d``) samples with
:data:`HIDDEN_DRAFT_SETTINGS` — from the mode, at a target acceptance of 0.99, 3000 draws per
chain — unless ``sampler_config`` sets those keys; the config lists the coefficients no
unit resolves (``unresolved``). ``start`` chooses where the chains start and in which
coordinates they move:

* ``"least_squares"``: the deterministic least-squares point of
  :func:`specbayes.model.least_squares_reference` (``z = 0``, moved where a row would be
  saturated, :meth:`~specbayes.model.LatencyModel.feasible_start`: inside the region
  :math:`\lambda C_2 < 1`), in the coordinates whitened there;
* ``"mode"``: the posterior mode (:func:`specbayes.mode.mode_start`: L-BFGS, then Newton,
  on the sampling model's log density from that start), in coordinates whitened again at
  the mode with the mode's noise model — for large sweep sets, where the least-squares
  whitening is far off (the paper's dense verifiers: 31 leapfrog steps per draw instead of
  > 300). What the search did is kept in the config (``mode_search``);
* ``"auto"`` (default): ``"mode"`` for the ``moe`` level (:data:`MODE_START_LEVELS`) and
  from :data:`MODE_START_ROWS` fitted rows on, else ``"least_squares"``; the config records
  the choice.

Either way the samplers add their standard jitter of ±1 in the unconstrained coordinates
(about one posterior standard deviation of the whitened ``z``) so that chains start apart.

Health
------
:attr:`Fit.healthy` holds when there are no divergences, every R-hat ≤ 1.01 and every bulk
ESS ≥ 400 over the coefficients (``log_coef``, ``log_coef_draft``, latent ``alpha``) and all
hyper-parameters (:data:`THRESHOLDS`).

Pointwise groups
----------------
``log_likelihood`` and ``posterior_predictive`` hold one value per row and draw; to keep the
artefact small, when rows × draws exceeds ``sampler_config["pointwise_max"]`` (default
4e6) they are computed on an evenly thinned subset of the draws (all chains kept). Both are
computed with the same NumPy forward model as :meth:`Fit.mean_latency` (which calls
:mod:`specbayes.laws`), so they agree with prediction exactly.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from specbayes.artefacts import finish_fit_artefact
from specbayes.data import SweepTable, cell_label, validate_sweeps
from specbayes.mode import NutpieDensity, mode_start
from specbayes.model import (
    DRAFT_COEFS,
    SHARE_SD_FACTOR,
    TREND,
    Design,
    LatencyModel,
    _trend_value,
    build_design,
    draw_pair,
    forward_numpy,
    merge_priors,
    pair_log_weight,
    pair_name,
    pooled_coefs,
    pooled_pairs,
    unresolved_coefficients,
)
from specbayes.parallel import jax_chain_method

__all__ = ["SAMPLER_DEFAULTS", "THRESHOLDS", "Fit", "fit", "load_fit", "resolve_core"]

#: Default sampler settings; ``fit(sampler_config=...)`` overrides them key by key.
#: 1000 tuning + 1500 draws per chain (was 1500 + 1000, the same cost): with the batch
#: curvature the knee levels and the per-cell scales mix slowly — at the old split the demo
#: fit's min bulk ESS was 897 (1966 now) and two slow-tier fits ended at 351 / 389 < 400.
SAMPLER_DEFAULTS: dict[str, Any] = {
    "sampler": "nutpie",
    "chains": 4,
    "draws": 1500,
    "tune": 1000,
    "cores": None,  # None: min(chains, CPUs)
    "seed": 20260,
    "low_rank": True,  # nutpie's low-rank modified mass matrix
    "target_accept": 0.98,
    "pointwise_max": 4_000_000,
    "start": "auto",  # "mode" for moe and from MODE_START_ROWS rows on, else "least_squares"
}
#: ``start="auto"`` starts at the posterior mode from this many fitted rows on. Measured: the
#: least-squares whitening costs 213–265 leapfrog steps per draw on 19,462 paper rows and
#: > 300 on 58,701 (31 from the mode), while up to 2,736 simulated rows and on the demo
#: (502) it samples at 31 steps with a higher bulk ESS than from the mode (demo c1p: ~1650
#: vs 1080; the mode whitening leaves c1p unresolved in more units). Between the two sizes
#: nothing was measured.
MODE_START_ROWS = 10_000
#: Model levels that ``start="auto"`` starts at the mode whatever their size. ``moe``: the
#: least-squares reference holds the expert coverage fixed, and on the paper's gpt-oss-20b
#: rows (H100, 1,007 rows) the posterior sat 30–45 whitening sd from it in a dozen
#: coordinates (posterior sd of those z ~2): 55 leapfrog steps per draw, divergences and a
#: slow share level ``mu[c2s]`` (bulk ESS 303–489, R-hat up to 1.02); from the mode 31 steps,
#: 0 divergences, R-hat 1.00, min bulk ESS 975, 117 s instead of 226 s.
MODE_START_LEVELS = ("moe",)
#: Draws per chain when some alpha is latent and ``sampler_config`` does not set ``draws``:
#: a latent alpha trades off against the drafter's per-pass cost (a longer acceptance run
#: needs a dearer draft pass) and the weak prefill terms, a ridge along which NUTS moves
#: slowly — bulk ESS ~320 of 4 x 1000 draws on the latent-alpha simulation (seed 21; 3000
#: tuning steps did not change it), so the default doubles the draws to keep ESS >= 400.
LATENT_ALPHA_DRAWS = 2000

#: Sampler settings (over the defaults, unless ``sampler_config`` sets them) when the
#: least-squares reference resolves a drafter coefficient in no drafter unit
#: (:func:`specbayes.model.unresolved_coefficients`) — each drafter swept at one draft length
#: k, as in the real B200 sweeps: a cycle's fixed cost is then split between the prefill
#: (``c1p``) and the draft passes (``c1d``) by the hierarchy alone. The reference leaves
#: ``c1d`` where a flat direction drifted (e^-11.5 s there, 3.4 log units below the posterior
#: mode, so the ``mu`` prior and the whitening were centred at a point of no mass), and the
#: posterior's ridge bends sharply where ``c1d`` -> 0 and ``c1p`` takes the whole fixed cost.
#: Measured on those sweeps (``benchmarks/fit_speed.py --cases real --seeds ...``): at the
#: defaults (least-squares start) 5 divergences, R-hat 1.02, bulk ESS 300 and worse at seeds
#: 1 and 2; from the mode, 1 divergence at 2 of 8 seeds; from the mode at 0.99, 0 divergences
#: at all 8 but bulk ESS 361-401 at 2 of them; with 3000 draws as well, healthy at all 8
#: (bulk ESS 674-1558), 29-41 s per fit.
HIDDEN_DRAFT_SETTINGS: dict[str, Any] = {"start": "mode", "target_accept": 0.99, "draws": 3000}

#: Health thresholds (``docs/model.md``, "Sampler health"): divergences, R-hat and bulk ESS
#: over reported quantities.
THRESHOLDS: dict[str, float] = {"divergences": 0, "r_hat": 1.01, "ess_bulk": 400}

#: Posterior variables checked for health (hyper-parameters and coefficients), when present.
HEALTH_VARS = (
    "mu",
    "trend_slope",
    "verifier_slope_effect",
    "hardware_slope_effect",
    "tau",
    "verifier_effect",
    "verifier_effect_scale",
    "hardware_effect",
    "hardware_effect_scale",
    "drafter_effect",
    "drafter_effect_scale",
    "size_slope",
    "drafter_size_slope",
    "sigma0",
    "gamma",
    "knee_verifier_level",
    "knee_drafter_level",
    "knee_verifier_effect",
    "knee_drafter_effect",
    "knee_hardware_effect",
    "log_coef",
    "log_coef_draft",
    "alpha",
)


def _merge_config(config: dict | None) -> dict:
    out = dict(SAMPLER_DEFAULTS)
    for key, value in (config or {}).items():
        if key not in out:
            raise ValueError(f"unknown sampler_config key {key!r}; known: {sorted(out)}")
        out[key] = value
    if out["sampler"] not in ("nutpie", "pymc", "numpyro"):
        raise ValueError("sampler must be 'nutpie', 'pymc' or 'numpyro'")
    if out["start"] not in ("auto", "least_squares", "mode"):
        raise ValueError("start must be 'auto', 'least_squares' or 'mode'")
    return out


def _prepare(sweeps: pd.DataFrame | SweepTable, model: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Validated rows to fit and the excluded rows (with ``reason``)."""
    if isinstance(sweeps, SweepTable):
        table = sweeps
    elif isinstance(sweeps, pd.DataFrame):
        if len(sweeps) == 0:
            raise ValueError("the sweep table is empty: nothing to fit")
        # unknown alpha is fine: sd/moe infer it, dense leaves SD rows out anyway
        table = validate_sweeps(sweeps, allow_unknown_alpha=True)
    else:
        raise TypeError("sweeps must be a pandas DataFrame or a SweepTable")
    data, excluded = table.data.copy(), table.excluded.copy()
    if "reason" not in excluded:
        excluded["reason"] = pd.Series(dtype=object)
    if model == "dense":
        spec = data["k"] > 0
        if spec.any():
            excluded = pd.concat(
                [excluded, data[spec].assign(reason="k > 0: not fitted by the dense model")]
            )
            data = data[~spec]
    if len(data) == 0:
        if len(excluded):
            reasons = excluded["reason"].astype(str).value_counts().head(5).to_dict()
            raise ValueError(
                f"all {len(excluded)} rows were excluded before fitting (reasons: {reasons}); "
                "nothing left to fit"
            )
        raise ValueError("the sweep table is empty: nothing to fit")
    return data, excluded


def _sample(
    lm: LatencyModel, init: dict, cfg: dict, progress: bool, density: NutpieDensity | None = None
):
    """Sample ``lm``'s sampling model from ``init`` (nutpie: ``density``'s compiled model
    when the mode search compiled one)."""
    import os

    # the compiled rows' likelihood has no JAX form: numpyro samples the graph model
    model = lm.model if cfg["sampler"] == "numpyro" else lm.sampling_model
    cores = cfg["cores"] or min(cfg["chains"], os.cpu_count() or 1)
    if cfg["sampler"] == "nutpie":
        import nutpie

        if density is not None:
            compiled = density.for_sampling(init)
        else:
            compiled = nutpie.compile_pymc_model(
                model, initial_points=init, jitter_rvs=set(model.free_RVs)
            )
        return nutpie.sample(
            compiled,
            draws=cfg["draws"],
            tune=cfg["tune"],
            chains=cfg["chains"],
            cores=cores,
            seed=cfg["seed"],
            progress_bar=progress,
            save_warmup=False,
            low_rank_modified_mass_matrix=bool(cfg["low_rank"]),
            target_accept=cfg["target_accept"],
        )
    import pymc as pm

    kwargs: dict[str, Any] = {}
    if cfg["sampler"] == "numpyro":
        kwargs["nuts_sampler"] = "numpyro"
        kwargs["nuts_sampler_kwargs"] = {"chain_method": jax_chain_method(cfg["chains"])}
    else:
        kwargs["init"] = "adapt_diag"
    with model:
        return pm.sample(
            draws=cfg["draws"],
            tune=cfg["tune"],
            chains=cfg["chains"],
            cores=cores,
            random_seed=cfg["seed"],
            initvals=init,
            progressbar=progress,
            target_accept=cfg["target_accept"],
            compute_convergence_checks=False,
            **kwargs,
        )


def fit(
    sweeps: pd.DataFrame | SweepTable,
    model: str = "sd",
    sampler_config: dict | None = None,
    priors: dict | None = None,
    progress: bool = True,
    core: str | None = None,
    metrics: Sequence[str] | None = None,
) -> Fit:
    """Fit a latency model to sweep data.

    Parameters
    ----------
    sweeps : DataFrame or SweepTable
        Raw rows (validated here with ``allow_unknown_alpha=True``) or an
        already validated table.
    model : {'dense', 'sd', 'moe'}
    sampler_config : dict, optional
        Overrides of :data:`SAMPLER_DEFAULTS`.
    priors : dict, optional
        Overrides of :data:`specbayes.model.DEFAULT_PRIORS`.
    progress : bool
        Show the sampler's progress bar.
    core : {"legacy"}, optional
        The model core. By default every level runs on the default core
        (:mod:`specbayes.model_next`, its one sampler configuration — ``sampler_config`` may
        set ``seed`` and :data:`specbayes.model_next.sampling.SAMPLER_OPTIONS`) and returns a
        :class:`specbayes.model_next.fitted.NextFit`. ``core="legacy"`` (CLI: ``--core
        legacy``) fits ``moe`` on the old core (this module's :class:`Fit`) until it is
        deleted. See :func:`resolve_core`.
    metrics : sequence of str, optional
        Per-point metrics to model beside the mean latency on the default core
        (:mod:`specbayes.model_next.metrics`; e.g. ``("ttft_p99", "itl_p50")``): what
        ``fit.metric`` and the SLO planner (``plan.capacity(..., slo=)``) answer for.

    Returns
    -------
    NextFit or Fit
        The default core's fit; the old core's with ``core="legacy"``.

    Raises
    ------
    ValueError
        Empty table, all rows excluded (saturated), one load level per configuration,
        unknown model or sampler, a core the level does not run on.
    """
    if resolve_core(model, core) == "next":
        return _fit_next(sweeps, model, sampler_config, priors, progress, metrics)
    if metrics:
        raise ValueError("metrics: the per-point metric models are on the default core only")
    return _fit_legacy(sweeps, model, sampler_config, priors, progress)


def resolve_core(model: str, core: str | None = None) -> str:
    """The core a fit of ``model`` runs on: ``"next"`` (the default core) for every level,
    ``"legacy"`` for ``moe`` where it asks for the old core.

    Raises
    ------
    ValueError
        ``core`` is neither ``None``, ``"next"`` nor ``"legacy"``; ``core="legacy"`` for a
        level other than ``moe``.
    """
    if core not in (None, "next", "legacy"):
        raise ValueError(
            f"core must be None, 'next' or 'legacy' (the moe level's old core); got {core!r}"
        )
    if core == "legacy":
        if model != "moe":
            raise ValueError(
                f"the old core is kept for the moe level only; the {model!r} level runs on "
                "the default core — drop core='legacy' (--core legacy)"
            )
        return "legacy"
    return "next"


def _fit_legacy(
    sweeps: pd.DataFrame | SweepTable,
    model: str = "sd",
    sampler_config: dict | None = None,
    priors: dict | None = None,
    progress: bool = True,
) -> Fit:
    """The old core's fit (:class:`Fit`): the ``moe`` level's until it moves to the default
    core; its own tests call it for the other levels until it is deleted."""
    cfg = _merge_config(sampler_config)
    if cfg["sampler"] == "numpyro":  # a missing JAX fails before any work
        jax_chain_method(cfg["chains"])
    data, excluded = _prepare(sweeps, model)
    design = build_design(data, model)
    user = sampler_config or {}
    if design.latent_alpha and "draws" not in user:
        cfg["draws"] = max(cfg["draws"], LATENT_ALPHA_DRAWS)
    t0 = time.perf_counter()
    lm = LatencyModel(design, priors)
    unresolved = unresolved_coefficients(design, lm.param)
    hidden_draft = [c for c in unresolved if c in DRAFT_COEFS]
    if hidden_draft:  # the hierarchy alone places the drafter passes' cost (see the constant)
        for key, value in HIDDEN_DRAFT_SETTINGS.items():
            if key not in user:
                cfg[key] = max(cfg[key], value) if key == "draws" else value
    if cfg["start"] == "auto":
        by_mode = model in MODE_START_LEVELS or len(design.data) >= MODE_START_ROWS
        cfg["start"] = "mode" if by_mode else "least_squares"
    density, compile_s = None, None
    if cfg["start"] == "mode":  # at the posterior mode, in coordinates whitened there
        if cfg["sampler"] == "nutpie":  # one compile for the mode search and the sampler
            t_compile = time.perf_counter()
            density = NutpieDensity(lm)
            compile_s = time.perf_counter() - t_compile
        lm, init, search = mode_start(lm, density=density)
    else:
        init, search = lm.feasible_start(), None
    t_build = time.perf_counter() - t0
    idata = _sample(lm, init, cfg, progress, density)
    wall = time.perf_counter() - t0
    for group in [g for g in idata.groups() if g.startswith("warmup")]:
        del idata[group]
    idata.posterior.attrs = {}
    config = {
        "sampler_config": cfg,
        "priors": lm.priors,
        "structure": lm.structure,
        "unresolved": unresolved,  # coefficients no unit's rows resolve: the priors place them
        "build_s": t_build,  # least squares, mode search, model build (and compile, below)
        "compile_s": compile_s,  # nutpie's compile when the mode search did it, else None
        "mode_search": search.as_dict() if search else None,
        "wall_s": wall,
    }
    f = Fit(idata, design, excluded=excluded, config=config, latent=lm)
    f._attach_groups()
    return f


def _fit_next(
    sweeps, model: str, sampler_config: dict | None, priors, progress: bool, metrics=None
):
    """:func:`specbayes.model_next.fitted.fit_next` behind :func:`fit`'s signature."""
    from specbayes.model_next.fitted import fit_next

    options = dict(sampler_config or {})
    seed = options.pop("seed", None)
    seed = SAMPLER_DEFAULTS["seed"] if seed is None else seed
    return fit_next(
        sweeps,
        model,
        priors=priors,
        seed=int(seed),
        progress=progress,
        sampler_options=options,
        metrics=metrics,
    )


class Fit:
    """A fitted latency model: the posterior and everything needed to predict from it.

    Attributes
    ----------
    idata : arviz.InferenceData
        ``posterior``, ``posterior_predictive``, ``log_likelihood``, ``observed_data``,
        ``constant_data`` (the fitted rows), ``excluded_data`` (rows left out, with
        ``reason``), ``sample_stats``; attrs ``model``, ``config`` (JSON), ``specbayes_version``,
        ``alpha_inferred``.
    model_name : str
    data, excluded : DataFrame
    """

    def __init__(
        self,
        idata,
        design: Design,
        *,
        excluded: pd.DataFrame,
        config: dict,
        latent: LatencyModel | None = None,
    ) -> None:
        self.idata = idata
        self.design = design
        self.model_name = design.model_name
        self.data = design.data
        self.excluded = excluded
        self.config = config
        self._latent = latent
        self._stacked = None

    # -- construction helpers ---------------------------------------------------------------
    @property
    def latency_model(self) -> LatencyModel:
        """The :class:`LatencyModel` (rebuilt from code on first use after loading: then
        whitened at the least-squares reference, not at the mode the fit sampled from, so
        its ``z`` are not the posterior's; coefficients, hyper-parameters and predictions
        do not depend on the whitening)."""
        if self._latent is None:
            self._latent = LatencyModel(self.design, self.config.get("priors"))
        return self._latent

    @property
    def model(self):
        """The ``pm.Model``."""
        return self.latency_model.model

    @property
    def alpha_inferred(self) -> bool:
        """True when some alpha was latent (inferred from the latencies)."""
        return self.design.latent_alpha

    @property
    def seed(self) -> int:
        return int(self.config["sampler_config"]["seed"])

    def _post(self) -> xr.Dataset:
        if self._stacked is None:
            post = self.idata.posterior
            self._stacked = post.stack(sample=("chain", "draw")).transpose("sample", ...)
        return self._stacked

    def _attach_groups(self) -> None:
        """Add observed/constant data, excluded rows, log-likelihood and predictive groups."""
        d = self.design
        n_obs = len(d.data)
        post = self.idata.posterior
        nchain, ndraw = post.sizes["chain"], post.sizes["draw"]
        cfg = self.config["sampler_config"]
        step = max(1, int(np.ceil(nchain * ndraw * n_obs / cfg["pointwise_max"])))
        draws_sel = np.arange(0, ndraw, step)
        sub = post.isel(draw=draws_sel)
        stacked = sub.stack(sample=("chain", "draw")).transpose("sample", ...)
        mu, sigma = self._fitted_mu_sigma(stacked)
        y = d.rows["latency"]
        with np.errstate(all="ignore"):
            logy = np.log(y)
            ll = (
                -0.5 * ((logy - np.log(mu)) / sigma) ** 2
                - np.log(sigma)
                - 0.5 * np.log(2 * np.pi)
                - logy
            )
        rng = np.random.default_rng([self.seed, 1])
        with np.errstate(all="ignore"):
            pp = mu * np.exp(sigma * rng.standard_normal(mu.shape))
        pp = np.where(np.isfinite(mu), pp, np.inf)  # a draw past saturation: unbounded (as predict)
        shape = (nchain, len(draws_sel), n_obs)
        coords = {"chain": sub.chain.values, "draw": sub.draw.values, "obs": np.arange(n_obs)}
        ll_ds = xr.Dataset(
            {"latency": (("chain", "draw", "obs"), ll.reshape(shape))}, coords=coords
        )
        pp_ds = xr.Dataset(
            {"latency": (("chain", "draw", "obs"), pp.reshape(shape))}, coords=coords
        )
        obs_ds = xr.Dataset({"latency": ("obs", y)}, coords={"obs": np.arange(n_obs)})
        groups = {
            "log_likelihood": ll_ds,
            "posterior_predictive": pp_ds,
            "observed_data": obs_ds,
            "constant_data": _frame_to_dataset(d.data, "obs"),
            "excluded_data": _frame_to_dataset(self.excluded, "excluded_row"),
        }
        attrs = {
            "model": self.model_name,
            "model_id": f"specbayes.{self.model_name}",
            "config": _strict_json(self.config),
            "alpha_inferred": int(self.alpha_inferred),
        }
        finish_fit_artefact(self.idata, groups, attrs, cfg.get("sampler", "nutpie"))

    # -- coefficients -----------------------------------------------------------------------
    def _fitted_mu_sigma(self, stacked: xr.Dataset) -> tuple[np.ndarray, np.ndarray]:
        """(sample, obs) mean latency and noise sd for the fitted rows, from stacked draws."""
        d = self.design
        r = d.rows
        th = stacked["log_coef"].values  # (S, unit, base_coef)
        coef = {c: np.exp(th[:, r["unit"], j]) for j, c in enumerate(d.base_coefs)}
        coef["c1p"] = coef["c1p"] * r["a_p"]
        coef["c2p"] = coef["c2p"] * r["a_p"]
        if d.draft_coefs and "log_coef_draft" in stacked:
            thd = stacked["log_coef_draft"].values
            has = r["dunit"] >= 0
            du = np.maximum(r["dunit"], 0)
            for j, c in enumerate(d.draft_coefs):
                coef[c] = np.where(has, np.exp(thd[:, du, j]), 0.0)
        alpha = np.broadcast_to(r["alpha"], (th.shape[0], len(r["alpha"]))).copy()
        if d.latent_alpha:
            has = r["akey"] >= 0
            alpha[:, has] = stacked["alpha"].values[:, r["akey"][has]]
        coef.update(self._knee_draws(stacked, d.data))
        mu, x = forward_numpy(coef, r, alpha, moe=self.model_name == "moe")
        sigma = self._sigma(stacked["sigma0"].values, stacked["gamma"].values, x)
        return mu, sigma

    @staticmethod
    def _sigma(sigma0: np.ndarray, gamma: np.ndarray, x: np.ndarray) -> np.ndarray:
        headroom = np.clip(1.0 - np.nan_to_num(x, nan=1.0), 1e-12, 1.0)
        return sigma0[:, None] * np.exp(-gamma[:, None] * np.log(headroom))

    def _knee_draws(self, post: xr.Dataset, rows: pd.DataFrame) -> dict[str, np.ndarray]:
        """Knee batches (sample, row) of the rows' verifier/drafter and GPU (requests).

        A fit made before the batch curvature existed has no knees: ``inf`` (no curvature).
        """
        d = self.design
        n_s = post.sizes["sample"]
        out = {
            "knee_verifier": np.full((n_s, len(rows)), np.inf),
            "knee_drafter": np.full((n_s, len(rows)), np.inf),
        }
        hw = np.array([d.hardware.index(h) for h in rows["hardware"]], dtype=np.int64)
        if "log_knee_verifier" in post:
            vv = np.array([d.verifiers.index(v) for v in rows["verifier"]], dtype=np.int64)
            out["knee_verifier"] = np.exp(post["log_knee_verifier"].values[:, vv, hw])
        if "log_knee_drafter" in post and "drafter" in rows:
            k = rows["k"].to_numpy() if "k" in rows else np.zeros(len(rows))
            has = (rows["drafter"] != "none").to_numpy() & (k > 0)
            dd = np.array(
                [
                    d.drafters.index(x) if h else 0
                    for x, h in zip(rows["drafter"], has, strict=True)
                ],
                dtype=np.int64,
            )
            kd = np.exp(post["log_knee_drafter"].values[:, dd, hw])
            out["knee_drafter"] = np.where(has[None, :], kd, np.inf)
        return out

    def _normalise_rows(self, rows: pd.DataFrame) -> pd.DataFrame:
        d = self.design
        if not isinstance(rows, pd.DataFrame) or len(rows) == 0:
            raise ValueError("rows must be a non-empty DataFrame")
        missing = [c for c in ("verifier", "hardware", "prefill", "decode") if c not in rows]
        if missing:
            raise ValueError(f"rows lack required column(s) {missing}")
        rows = rows.reset_index(drop=True).copy()
        unknown = sorted(set(rows["verifier"].astype(str)) - set(d.verifiers))
        if unknown:
            raise ValueError(
                f"unknown verifier(s) {unknown}: this fit knows {d.verifiers}; a verifier the "
                "model never saw has no coefficients to predict from"
            )
        unknown_h = sorted(set(rows["hardware"].astype(str)) - set(d.hardware))
        if unknown_h:
            raise ValueError(f"unknown hardware {unknown_h}: this fit knows {d.hardware}")
        if "k" not in rows:
            rows["k"] = 0
        if "drafter" not in rows:
            rows["drafter"] = np.nan
        rows["drafter"] = rows["drafter"].astype(object)
        rows.loc[rows["k"] == 0, "drafter"] = "none"
        if rows["drafter"].isna().any():
            if len(d.drafters) == 1:
                rows["drafter"] = rows["drafter"].fillna(d.drafters[0])
            else:
                raise ValueError(f"rows with k > 0 need a drafter (one of {d.drafters})")
        spec = rows["k"] > 0
        if spec.any() and not d.draft_coefs:
            raise ValueError("the dense model predicts k = 0 rows only")
        unknown_d = sorted(set(rows.loc[spec, "drafter"].astype(str)) - set(d.drafters))
        if unknown_d:
            raise ValueError(f"unknown drafter(s) {unknown_d}: this fit knows {d.drafters}")
        if "cell" not in rows or rows["cell"].isna().any():
            labels = cell_label(rows["prefill"], rows["decode"])
            if "cell" in rows:
                rows["cell"] = rows["cell"].where(rows["cell"].notna(), labels)
            else:
                rows["cell"] = labels
        for c in ("verifier", "hardware", "drafter", "cell"):
            rows[c] = rows[c].astype(str)
        return rows

    def _hyper_loc(self, post, coef: str, table: pd.DataFrame) -> np.ndarray:
        """Prior location draws (sample, n) of a coefficient for units described by ``table``."""
        d, s = self.design, self.config["structure"]
        pr = merge_priors(self.config.get("priors"))
        coefs = list(d.coefs)
        loc = post["mu"].values[:, coefs.index(coef)][:, None] * np.ones((1, len(table)))
        hw = [d.hardware.index(h) for h in table["hardware"]]
        if s["hardware_effect"]:
            loc = loc + post["hardware_effect"].sel(coef=coef).values[:, hw]
        if coef in DRAFT_COEFS:
            if s["drafter_effect"]:
                dd = [d.drafters.index(x) for x in table["drafter"]]
                loc = loc + post["drafter_effect"].sel(draft_coef=coef).values[:, dd]
            if s["drafter_size"]:
                ds = np.log(d.drafter_size)
                dd = [d.drafters.index(x) for x in table["drafter"]]
                loc = loc + post["drafter_size_slope"].sel(draft_coef=coef).values[:, None] * (
                    ds[dd] - ds.mean()
                )
        else:
            vv = [d.verifiers.index(v) for v in table["verifier"]]
            if s["verifier_effect"]:
                loc = loc + post["verifier_effect"].sel(base_coef=coef).values[:, vv]
            if s["verifier_size"]:
                ls = np.log(d.verifier_size)
                beta = (
                    float(pr["size_slope"][0])  # tied to its physical trend (model docs)
                    if coef in s.get("tied", ())
                    else post["size_slope"].sel(base_coef=coef).values[:, None]
                )
                loc = loc + beta * (ls[vv] - ls.mean())
        kind = TREND[coef]
        if kind is not None:
            t = _trend_value(kind, table["p"].to_numpy(), table["g"].to_numpy())
            t = t - d.trend_center[kind]
            if coef in s["free_slopes"]:
                slope = post["trend_slope"].sel(slope_coef=coef).values[:, None]
                if coef in s.get("slope_effects", ()):  # verifier coefficients only: vv is set
                    for name, idx in (("verifier_slope_effect", vv), ("hardware_slope_effect", hw)):
                        if name in post:
                            slope = slope + post[name].sel(slope_effect_coef=coef).values[:, idx]
            else:
                slope = pr["trend_slope"].get(coef, (0.0, 0.0))[0]
            loc = loc + slope * t[None, :]
        return loc

    def _tau(self, post, coef: str, n: int) -> np.ndarray:
        s = self.config["structure"]
        if coef in s["learned_tau"]:
            return post["tau"].sel(tau_coef=coef).values
        return np.full(n, float(merge_priors(self.config.get("priors"))["cell_sd"]))

    def _draw_pairs(self, post, loc: dict, g: np.ndarray, rng) -> None:
        """Per-cell deviations of unseen units for the pairs, in place (:func:`draw_pair`)."""
        sd = SHARE_SD_FACTOR * float(merge_priors(self.config.get("priors"))["cell_sd"])
        for a, b in pooled_pairs(self.model_name):
            tau = self._tau(post, pair_name(a, b), loc[a].shape[0])
            lwa = pair_log_weight(a, g, self.model_name)
            lwb = pair_log_weight(b, g, self.model_name)
            loc[a], loc[b] = draw_pair(loc[a], loc[b], lwa, lwb, tau, sd, rng)

    def _unit_draws(self, rows: pd.DataFrame) -> dict[str, np.ndarray]:
        """Log-coefficient draws (sample, row) for each coefficient, unseen units drawn anew."""
        d = self.design
        post = self._post()
        n_s = post.sizes["sample"]
        out: dict[str, np.ndarray] = {}
        rng = np.random.default_rng([self.seed, 2])
        # verifier units
        keys = ["verifier", "hardware", "cell"]
        ukey = pd.MultiIndex.from_frame(d.units[keys])
        uidx = ukey.get_indexer(pd.MultiIndex.from_frame(rows[keys]))
        th = post["log_coef"].values
        unseen = rows.loc[uidx < 0, keys].drop_duplicates().reset_index(drop=True)
        if len(unseen):
            grp = rows.loc[uidx < 0].groupby(keys, sort=False)
            stats = grp.agg(p=("prefill", "mean"), g=("decode", "mean")).reset_index()
            unseen = unseen.merge(stats, on=keys)
        new = {}
        for j, c in enumerate(d.base_coefs):
            col = np.empty((n_s, len(rows)))
            seen = uidx >= 0
            col[:, seen] = th[:, uidx[seen], j]
            if len(unseen):
                new[c] = self._hyper_loc(post, c, unseen)
                if c not in pooled_coefs(self.model_name):
                    tau = self._tau(post, c, n_s)
                    new[c] = new[c] + tau[:, None] * rng.standard_normal(new[c].shape)
            out[c] = col
        p_unit = np.where(uidx >= 0, d.units["p"].to_numpy()[np.maximum(uidx, 0)], np.nan)
        if len(unseen):
            self._draw_pairs(post, new, unseen["g"].to_numpy(dtype=float), rng)
            pos = pd.MultiIndex.from_frame(unseen[keys]).get_indexer(
                pd.MultiIndex.from_frame(rows.loc[uidx < 0, keys])
            )
            for c in d.base_coefs:
                out[c][:, uidx < 0] = new[c][:, pos]
            p_unit[uidx < 0] = unseen["p"].to_numpy()[pos]
        ratio = rows["prefill"].to_numpy(dtype=float) / p_unit
        # drafter units
        spec = (rows["k"] > 0).to_numpy()
        for c in d.draft_coefs:
            out[c] = np.full((n_s, len(rows)), -np.inf)
        if d.draft_coefs and spec.any():
            dkeys = ["verifier", "hardware", "drafter", "cell"]
            dkey = pd.MultiIndex.from_frame(d.dunits[dkeys])
            didx = np.where(spec, dkey.get_indexer(pd.MultiIndex.from_frame(rows[dkeys])), -2)
            thd = post["log_coef_draft"].values
            for j, c in enumerate(d.draft_coefs):
                seen = didx >= 0
                out[c][:, seen] = thd[:, didx[seen], j]
            miss = didx == -1
            if miss.any():
                sub = rows.loc[miss]
                un = sub[dkeys].drop_duplicates().reset_index(drop=True)
                stats = (
                    sub.groupby(dkeys, sort=False)
                    .agg(p=("prefill", "mean"), g=("decode", "mean"))
                    .reset_index()
                )
                un = un.merge(stats, on=dkeys)
                pos = pd.MultiIndex.from_frame(un[dkeys]).get_indexer(
                    pd.MultiIndex.from_frame(sub[dkeys])
                )
                for c in d.draft_coefs:
                    loc = self._hyper_loc(post, c, un)
                    tau = self._tau(post, c, n_s)
                    draw = loc + tau[:, None] * rng.standard_normal(loc.shape)
                    out[c][:, miss] = draw[:, pos]
        out["_prefill_ratio"] = ratio
        return out

    def coefficients(self, rows: pd.DataFrame) -> xr.Dataset:
        """Posterior draws of the cycle coefficients for each row (seconds).

        Parameters
        ----------
        rows : DataFrame
            ``verifier, hardware, prefill, decode``; optional ``drafter`` (needed for
            ``k > 0`` when the fit knows several drafters), ``k``, ``cell`` (default: the
            label of rounded ``prefill x decode``).

        Returns
        -------
        xarray.Dataset
            ``c1p, c1v, c1d, c2p, c2v, c2d`` (MoE also ``c1s, c2s``: the per-verifier-pass
            cost at full expert coverage), dims ``("sample", "row")``; ``sample`` stacks
            chain × draw; also ``knee_verifier``, ``knee_drafter``, the knee batches of the
            batch curvature (:func:`laws.effective_curvature`; ``inf`` where a row has no
            drafter pass). Prefill coefficients are for the row's own prompt length
            (unit value × ``prefill / unit mean prefill``), so
            ``laws.effective_costs(..., decode, alpha, k)`` reproduces the model's costs.
            Drafter coefficients are 0 for ``k = 0`` rows (and always for ``dense``). A cell
            the fit never saw gets its trend plus a per-cell deviation drawn from
            :math:`\\mathcal N(0, \\tau_j)` (one draw per cell, shared by its rows).

        Raises
        ------
        ValueError
            Unknown verifier, hardware or drafter; missing columns.
        """
        rows = self._normalise_rows(rows)
        draws = self._unit_draws(rows)
        ratio = draws.pop("_prefill_ratio")
        data = {}
        names = ["c1p", "c1v", "c1d", "c2p", "c2v", "c2d"]
        if self.model_name == "moe":
            names += ["c1s", "c2s"]
        n_s = self._post().sizes["sample"]
        for c in names:
            v = np.exp(draws[c]) if c in draws else np.zeros((n_s, len(rows)))
            if c in ("c1p", "c2p"):
                v = v * ratio[None, :]
            data[c] = (("sample", "row"), v)
        for c, v in self._knee_draws(self._post(), rows).items():
            data[c] = (("sample", "row"), v)
        return xr.Dataset(data, coords={"sample": np.arange(n_s), "row": np.arange(len(rows))})

    # -- latency ----------------------------------------------------------------------------
    def _row_alpha(self, rows: pd.DataFrame, n_s: int) -> np.ndarray:
        d = self.design
        alpha = np.full((n_s, len(rows)), 0.5)
        spec = (rows["k"] > 0).to_numpy()
        given = (
            rows["alpha"].to_numpy(dtype=float) if "alpha" in rows else np.full(len(rows), np.nan)
        )
        alpha[:, spec & np.isfinite(given)] = given[spec & np.isfinite(given)]
        need = spec & ~np.isfinite(given)
        if need.any():
            if not d.latent_alpha:
                raise ValueError("rows with k > 0 need alpha (this fit did not infer alpha)")
            akey = pd.MultiIndex.from_frame(d.akeys)
            idx = akey.get_indexer(pd.MultiIndex.from_frame(rows.loc[need, list(d.akeys.columns)]))
            if (idx < 0).any():
                raise ValueError(
                    "rows with k > 0 and no alpha must match an inferred (verifier, drafter, "
                    f"cell): known {list(akey)}"
                )
            alpha[:, need] = self._post()["alpha"].values[:, idx]
        return alpha

    def _mu_x(self, rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, pd.DataFrame]:
        rows = self._normalise_rows(rows)
        coefs = self.coefficients(rows)
        n_s = coefs.sizes["sample"]
        closed = rows["concurrency"].notna().to_numpy() if "concurrency" in rows else None
        if closed is None:
            closed = np.zeros(len(rows), dtype=bool)
        if "rps" not in rows and not closed.all():
            raise ValueError("rows need rps (open loop) or concurrency (closed loop)")
        rps = np.where(closed, 0.0, rows["rps"].to_numpy(dtype=float) if "rps" in rows else 0.0)
        conc = np.where(closed, rows["concurrency"].to_numpy(dtype=float) if closed.any() else 0, 0)
        m_ratio = np.zeros(len(rows))
        if self.model_name == "moe":
            from specbayes.model import _experts_of

            for v in rows["verifier"].unique():
                m, big_m = _experts_of(v, self.design.data)
                m_ratio[(rows["verifier"] == v).to_numpy()] = m / big_m
        r = {
            "g": rows["decode"].to_numpy(dtype=float),
            "k": rows["k"].to_numpy(dtype=float),
            "rps": rps,
            "conc": conc.astype(float),
            "closed": closed.astype(float),
            "m_ratio": m_ratio,
        }
        alpha = self._row_alpha(rows, n_s)
        coef = {c: coefs[c].values for c in coefs.data_vars}
        mu, x = forward_numpy(coef, r, alpha, moe=self.model_name == "moe")
        return mu, x, rows

    def mean_latency(self, rows: pd.DataFrame) -> xr.DataArray:
        """Posterior draws of the mean latency ``mu`` (s) of each row, dims (sample, row).

        ``rows`` as for :meth:`coefficients` plus ``alpha`` (for ``k > 0``; may be NaN when
        the fit inferred alpha for that verifier/drafter/cell) and ``rps`` (open loop) or
        ``concurrency`` (closed loop, takes precedence where set). ``inf`` where saturated.
        """
        mu, _, _ = self._mu_x(rows)
        return xr.DataArray(mu, dims=("sample", "row"), name="mu")

    def predict(self, rows: pd.DataFrame, seed: int | None = None) -> xr.DataArray:
        """Posterior predictive latency draws (s), dims (sample, row), observation noise included.

        :math:`L = \\mu\\,\\exp(\\sigma_0 (1-x)^{-\\gamma}\\,\\varepsilon)`, the model's
        likelihood evaluated with the same forward model as :meth:`mean_latency`; seeded
        from the fit's seed (or ``seed``), so a saved and re-loaded fit predicts identically.
        """
        mu, x, _ = self._mu_x(rows)
        post = self._post()
        sigma = self._sigma(post["sigma0"].values, post["gamma"].values, x)
        rng = np.random.default_rng([self.seed if seed is None else seed, 3])
        with np.errstate(all="ignore"):
            out = mu * np.exp(sigma * rng.standard_normal(mu.shape))
        out = np.where(np.isfinite(mu), out, np.inf)  # saturated: unbounded, not NaN
        return xr.DataArray(out, dims=("sample", "row"), name="latency")

    def log_likelihood(self, rows: pd.DataFrame) -> xr.DataArray:
        r"""Pointwise log density of ``rows["latency"]`` under each posterior draw.

        The model's likelihood — :math:`\log L \sim \mathcal N(\log\mu,
        \sigma_0 (1-x)^{-\gamma})` — evaluated at observed latencies of any rows, e.g.
        held-out cells (for their ELPD); ``-inf`` where a draw puts the row past saturation.
        Dims (sample, row).
        """
        if "latency" not in rows:
            raise ValueError("log_likelihood needs the observed 'latency' of each row")
        y = rows["latency"].to_numpy(dtype=float)
        mu, x, _ = self._mu_x(rows)
        post = self._post()
        sigma = self._sigma(post["sigma0"].values, post["gamma"].values, x)
        with np.errstate(all="ignore"):
            z = (np.log(y)[None, :] - np.log(mu)) / sigma
            ll = -0.5 * z**2 - np.log(sigma) - np.log(y)[None, :] - 0.5 * np.log(2 * np.pi)
        ll = np.where(np.isfinite(mu), ll, -np.inf)
        return xr.DataArray(ll, dims=("sample", "row"), name="log_likelihood")

    def alpha_draws(self, verifier: str, drafter: str, cell: str) -> np.ndarray:
        """Posterior draws of a latent alpha (sample,).

        Raises
        ------
        ValueError
            When alpha was given for that key (not inferred) or the key is unknown.
        """
        d = self.design
        if not d.latent_alpha:
            raise ValueError("alpha was given in the data, not inferred, for every row of this fit")
        match = (
            (d.akeys["verifier"] == verifier)
            & (d.akeys["drafter"] == drafter)
            & (d.akeys["cell"] == cell)
        )
        if not match.any():
            raise ValueError(
                f"alpha of ({verifier}, {drafter}, {cell}) was not inferred; inferred keys: "
                f"{[tuple(r) for r in d.akeys.values]}"
            )
        return self._post()["alpha"].values[:, int(np.flatnonzero(match)[0])]

    # -- health -----------------------------------------------------------------------------
    def diagnostics(self) -> pd.DataFrame:
        """R-hat, bulk and tail ESS of every coefficient and hyper-parameter element.

        Returns
        -------
        DataFrame
            Index: variable element (``arviz.summary`` naming); columns ``variable``,
            ``r_hat``, ``ess_bulk``, ``ess_tail``, ``divergences`` (the run's total, repeated).
        """
        import warnings

        import arviz as az

        post = self.idata.posterior
        names = [v for v in HEALTH_VARS if v in post]
        with warnings.catch_warnings():
            # the effects of tied coefficients are exactly 0 (no variance: ArviZ warns and
            # reports NaN); they are not parameters and are dropped below
            warnings.simplefilter("ignore", RuntimeWarning)
            s = az.summary(self.idata, var_names=names, kind="diagnostics")
        tied = self.config.get("structure", {}).get("tied", [])
        if tied:
            pattern = rf"^(verifier|hardware)_effect\[({'|'.join(tied)}),"
            s = s[~s.index.str.match(pattern)]
        s = s[["r_hat", "ess_bulk", "ess_tail"]].copy()
        s.insert(0, "variable", [i.split("[")[0] for i in s.index])
        s["divergences"] = self.divergences
        return s

    @property
    def divergences(self) -> int:
        return int(self.idata.sample_stats["diverging"].sum())

    def summary(self) -> dict[str, Any]:
        """Divergences, max R-hat, min bulk/tail ESS, wall time, healthy; the sampler settings
        used and the coefficients no unit resolves (``unresolved``: the priors place them)."""
        diag = self.diagnostics()
        out = {
            "model": self.model_name,
            "rows": len(self.data),
            "excluded": len(self.excluded),
            "divergences": self.divergences,
            "max_r_hat": float(diag["r_hat"].max()),
            "min_ess_bulk": float(diag["ess_bulk"].min()),
            "min_ess_tail": float(diag["ess_tail"].min()),
            "wall_s": float(self.config.get("wall_s", float("nan"))),
            "alpha_inferred": self.alpha_inferred,
            "sampler_config": dict(self.config.get("sampler_config", {})),
            "unresolved": list(self.config.get("unresolved", [])),
        }
        out["healthy"] = bool(
            out["divergences"] <= THRESHOLDS["divergences"]
            and out["max_r_hat"] <= THRESHOLDS["r_hat"]
            and out["min_ess_bulk"] >= THRESHOLDS["ess_bulk"]
        )
        return out

    @property
    def healthy(self) -> bool:
        """No divergences, R-hat ≤ 1.01 and bulk ESS ≥ 400 everywhere (:data:`THRESHOLDS`)."""
        return self.summary()["healthy"]

    # -- persistence ------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Write the artefact (one netCDF file)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.idata.to_netcdf(str(path), engine="h5netcdf")
        return path


def _strict_json(obj: Any) -> str:
    """JSON text with no ``NaN``/``Infinity`` (:func:`specbayes.artefacts.dumps`)."""
    from specbayes.artefacts import dumps

    return dumps(json.loads(json.dumps(obj, default=_json_default)), indent=None, note_nulls=False)


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, tuple):
        return list(o)
    return str(o)


def _frame_to_dataset(df: pd.DataFrame, dim: str) -> xr.Dataset:
    """A DataFrame as a netCDF-safe Dataset (text as fixed-width unicode, bools as int)."""
    data = {}
    for c in df.columns:
        s = df[c]
        if pd.api.types.is_bool_dtype(s):
            data[c] = (dim, s.astype(int).to_numpy())
        elif pd.api.types.is_numeric_dtype(s):
            data[c] = (dim, s.to_numpy(dtype=float))
        else:
            vals = s.astype(object).where(s.notna(), "").astype(str).to_numpy().astype("U")
            data[c] = (dim, vals)
    ds = xr.Dataset(data, coords={dim: np.arange(len(df))})
    ds.attrs["text_columns"] = json.dumps(
        [c for c in df.columns if not pd.api.types.is_numeric_dtype(df[c])]
    )
    ds.attrs["int_columns"] = json.dumps(
        [c for c in df.columns if pd.api.types.is_integer_dtype(df[c])]
    )
    return ds


def _dataset_to_frame(ds: xr.Dataset, dim: str) -> pd.DataFrame:
    text = json.loads(ds.attrs.get("text_columns", "[]"))
    ints = json.loads(ds.attrs.get("int_columns", "[]"))
    df = pd.DataFrame({c: ds[c].values for c in ds.data_vars})
    for c in text:
        if c in df:
            df[c] = df[c].astype(str).astype(object).where(df[c].astype(str) != "", np.nan)
    for c in ints:
        if c in df:
            df[c] = df[c].astype(int)
    return df


class FitFileError(ValueError):
    """A file that is not a readable specbayes fit; the message names it and says why."""


#: How to make a fit file, for error messages.
_MAKE_ONE = "write one with `specbayes fit DATA --out FIT.nc`"


def _read_idata(path: Path):
    """The InferenceData in ``path``, or :class:`FitFileError` saying what is wrong with it."""
    import arviz as az

    if not path.exists():
        raise FitFileError(f"{path}: no such fit file — {_MAKE_ONE}")
    if path.is_dir():
        inside = sorted(path.glob("*.nc"))
        todo = f"did you mean {inside[0]}?" if inside else "give the .nc file itself"
        raise FitFileError(f"{path}: is a folder, not a fit file — {todo}")
    size = path.stat().st_size
    if size == 0:
        raise FitFileError(f"{path}: empty file, not a fit — {_MAKE_ONE}")
    with open(path, "rb") as fh:
        head = fh.read(8)
    if head != b"\x89HDF\r\n\x1a\n":
        kind = "netCDF-3" if head[:3] == b"CDF" else "not a netCDF-4 (HDF5) file"
        raise FitFileError(f"{path}: {kind}, not a specbayes fit — {_MAKE_ONE}")
    try:
        idata = az.from_netcdf(str(path), engine="h5netcdf")
        idata.load() if hasattr(idata, "load") else None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise FitFileError(f"{path}: {_why_unreadable(exc, size)} — {_MAKE_ONE}") from None
    return idata


def _why_unreadable(exc: BaseException, size: int) -> str:
    """What an HDF5/netCDF read error means, without the library's internals."""
    import re

    text = " ".join(str(exc).split())
    m = re.search(r"eof = (\d+).*stored_eof = (\d+)", text)
    if m:
        return (
            f"truncated netCDF file ({int(m.group(1)):,} of {int(m.group(2)):,} bytes: the copy "
            "or the write did not finish)"
        )
    if "truncated" in text.lower():
        return f"truncated netCDF file ({size:,} bytes)"
    return "corrupt or unreadable netCDF file (HDF5 could not read it)"


def load_fit(path: str | Path) -> Fit:
    """Read a fit written by :meth:`Fit.save`; the model is rebuilt from code on demand.

    The design is rebuilt from the stored rows, so predictions equal those of the saved fit.

    Raises
    ------
    FitFileError
        (a ``ValueError``) when ``path`` is missing, a folder, empty, not netCDF-4,
        truncated, or a netCDF file that is not a specbayes fit.
    """
    path = Path(path)
    idata = _read_idata(path)
    missing = [a for a in ("model", "config") if a not in idata.attrs]
    groups = set(idata.groups())
    missing += [g for g in ("posterior", "constant_data") if g not in groups]
    if missing:
        raise FitFileError(
            f"{path}: a netCDF file but not a specbayes fit (no {', '.join(missing)}) — {_MAKE_ONE}"
        )
    if str(idata.attrs.get("model_id", "")).startswith("specbayes.model_next"):
        from specbayes.model_next.fitted import load_next

        return load_next(idata, path)
    model = idata.attrs["model"]
    config = json.loads(idata.attrs["config"])
    data = _dataset_to_frame(idata.constant_data, "obs")
    if "excluded_data" in groups:
        excluded = _dataset_to_frame(idata["excluded_data"], "excluded_row")
    else:
        excluded = pd.DataFrame(columns=["reason"])
    design = build_design(data, model)
    design.structure = config["structure"]
    return Fit(idata, design, excluded=excluded, config=config)
