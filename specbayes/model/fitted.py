r"""A fit of the next model core: its posterior and one density for every evaluation.

:func:`fit_next` samples :func:`~specbayes.model.graph.build_model` and returns a
:class:`NextFit`, which answers what the planner and validation ask (``coefficients``,
``mean_latency``, ``predict``, ``log_likelihood``, ``alpha_draws``, health, ``save``).

One density. Every row's expected log latency is
:func:`~specbayes.model.likelihood.log_mean_latency` of its configuration's costs
:math:`(\log C_1, \log C_2)`, and its density is
:math:`\mathcal N(\log L \mid \mu, \sigma_i)` (``likelihood.log_density``), the row's noise
scale :math:`\sigma_i = \sigma (1 - x_i)^{-\gamma} (n_i/n_\mathrm{ref})^{-1/2}`
(``likelihood.log_row_scale``; a row without ``n_requests`` at :math:`n_\mathrm{ref}`) with
:math:`\sigma` drawn exactly from its conditional (``sampling.add_collapsed``).
A configuration the fit saw uses its sampled costs (the graph's ``log_c1``, ``log_c2``); an unseen
one gets them from the coefficients through :func:`specbayes.laws.effective_costs` — for a
cell the fit never saw, from the hierarchy
(:func:`~specbayes.model.hierarchy.log_coefficients` with a fresh cell deviation) — plus a
fresh sweep deviation of scale :math:`\tau` (pooled structure). The stored ``log_likelihood``
and ``posterior_predictive`` groups are these functions evaluated on the fitted rows.

Saturation. Rows the caller says were *measured* (``measured=True``: validation's held-out
rows, kept because they were unsaturated) condition their configuration's :math:`C_2` below
:math:`1/\lambda_\max` of those rows, as the graph does for the fitted rows; any other row at
a load past its configuration's wall has :math:`\mu = \infty` (latency unbounded) in that
draw, so saturation of new loads is a probability over draws.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr
from scipy import stats

from specbayes import __version__, laws
from specbayes.data import SweepTable, sweep_labels, validate_sweeps
from specbayes.model.coefficient_draws import CoefficientDraws
from specbayes.model.design import Design, build_design, configuration_key, log_counts
from specbayes.model.experts import expert_reads
from specbayes.model.graph import build_model
from specbayes.model.likelihood import (
    draw_blocks,
    log_density,
    log_mean_latency,
    log_row_scale,
    over_blocks,
    posterior_log_row_scale,
)
from specbayes.model.marginal import integrated, linearised_in_reads, noise_location, row_view
from specbayes.model.metrics import (
    check_metrics,
    excess_scale,
    family,
    log_batch,
    log_fixed_cost,
    log_metric_mean,
    log_unit,
    log_width,
    measurement_draws,
    nearest_sweep,
    share_draws,
    stored_groups,
)
from specbayes.model.priors import COEFS, merge_priors
from specbayes.model.sampling import SAMPLER_CONFIG, check_options, health, sample

__all__ = ["MODEL_ID", "NextFit", "fit_next", "load_next"]

#: Written into every artefact of this core; :func:`specbayes.fit.load_fit` dispatches on it.
#: (The package was ``specbayes.model_next`` when the format was named; the id stays, so fits
#: saved before the rename load.)
MODEL_ID = "specbayes.model_next/1"


def fit_next(
    sweeps: pd.DataFrame | SweepTable,
    level: str = "sd",
    *,
    priors: dict | None = None,
    seed: int = 20260,
    progress: bool = False,
    structure: str | None = None,
    sampler_options: dict | None = None,
    metrics: tuple[str, ...] | None = None,
) -> NextFit:
    """Fit the next model core to sweep rows with the one default sampler configuration.

    Parameters
    ----------
    sweeps : DataFrame or SweepTable
        Validated here (unknown alpha allowed) when a raw frame is given.
    level : {"sd", "dense", "moe"}
        ``moe``: ``sd`` with the expert coverage of MoE verifiers
        (:mod:`specbayes.model.experts`).
    priors : dict, optional
        Overrides of :data:`specbayes.model.priors.DEFAULT_PRIORS`.
    seed : int
        Seeds the sampler, the noise scale's draws and the predictive group.
    progress : bool
        nutpie's progress bar.
    structure : {"anchored", "pooled"}, optional
        Forced structure (default: :func:`specbayes.model.design.choose_structure`).
    sampler_options : dict, optional
        :data:`~specbayes.model.sampling.SAMPLER_OPTIONS` over the one default
        configuration: fewer draws for a quick look, ``cores``, or ``sampler="numpyro"``.
    metrics : tuple of str, optional
        Per-point metrics to model with the latency (:mod:`specbayes.model.metrics`:
        ``ttft_p99``, ``itl_p50``, ``latency_p95``, ...): what :meth:`NextFit.metric` and
        the SLO planner answer for.
    """
    options = check_options(sampler_options)
    metrics = check_metrics(metrics)
    t0 = time.perf_counter()
    table = prepare_table(sweeps, level)
    design = build_design(table, level, structure)
    model = build_model(design, priors, metrics)
    t1 = time.perf_counter()
    idata, timing = sample(model, seed, progress=progress, **options)
    config = {
        "level": level,
        "structure": design.structure,
        # the form the sweeps took (the default chooses it), so a saved fit rebuilds it
        "priors": {**stored_priors(priors), "sweeps": sweeps_form(model)},
        "metrics": list(metrics),
        "sampler_config": {**SAMPLER_CONFIG, "sampler": "nutpie", **options, "seed": seed},
        "build_s": t1 - t0,
        **timing,
    }
    result = NextFit(idata, design, excluded=table.excluded, config=config, model=model)
    t2 = time.perf_counter()
    result._attach_groups()
    # wall: validation, design, model, compile, sampling and the stored groups
    config.update(groups_s=time.perf_counter() - t2, wall_s=time.perf_counter() - t0)
    result._stamp_config()
    return result


def prepare_table(sweeps: pd.DataFrame | SweepTable, level: str) -> SweepTable:
    """The validated table a fit of ``level`` uses; rows it leaves out are in ``excluded``.

    ``dense`` leaves the k > 0 rows out (with their reason).

    Raises
    ------
    ValueError
        An empty table, or every row excluded (the reasons counted).
    TypeError
        Neither a DataFrame nor a SweepTable.
    """
    if isinstance(sweeps, pd.DataFrame):
        if len(sweeps) == 0:
            raise ValueError("the sweep table is empty: nothing to fit")
        sweeps = validate_sweeps(sweeps, allow_unknown_alpha=True)
    elif not isinstance(sweeps, SweepTable):
        raise TypeError("sweeps must be a pandas DataFrame or a SweepTable")
    data, excluded = sweeps.data, sweeps.excluded
    if "reason" not in excluded:
        excluded = excluded.assign(reason=pd.Series(dtype=object))
    if level == "dense" and (data["k"] > 0).any():
        spec = data["k"] > 0
        left = data[spec].assign(reason="k > 0: not fitted by the dense level")
        data, excluded = data[~spec], pd.concat([excluded, left])
    if len(data) == 0:
        if len(excluded) == 0:
            raise ValueError("the sweep table is empty: nothing to fit")
        reasons = excluded["reason"].astype(str).value_counts().head(5).to_dict()
        raise ValueError(
            f"all {len(excluded)} rows were excluded before fitting (reasons: {reasons}); "
            "nothing left to fit"
        )
    return SweepTable(data, excluded)


class NextFit(CoefficientDraws):
    """A fitted model of the next core (see the module docstring for what every method uses).

    Attributes
    ----------
    idata : arviz.InferenceData
        ``posterior`` (the model's named quantities, ``sigma``), ``log_likelihood`` and
        ``posterior_predictive`` (``log_latency`` of the fitted rows), ``observed_data``,
        ``constant_data`` (the fitted rows), ``excluded_data``, ``sample_stats``; attrs
        ``model``, ``model_id``, ``config`` (JSON), ``specbayes_version``.
    design : Design
    model_name : str
        The level (``"sd"`` or ``"dense"``).
    data, excluded : DataFrame
        Fitted rows; rows left out with their ``reason``.
    """

    def __init__(self, idata, design: Design, *, excluded, config: dict, model=None) -> None:
        self.idata = idata
        self.design = design
        self.model_name = design.level
        self.data = design.data
        self.excluded = excluded
        self.config = config
        self._model = model
        self._stacked: xr.Dataset | None = None

    # -- the model and its draws ------------------------------------------------------------
    @property
    def model(self):
        """The ``pm.Model`` (rebuilt from code after loading)."""
        if self._model is None:
            self._model = build_model(self.design, self.config.get("priors") or None, self.metrics)
        return self._model

    @property
    def metrics(self) -> tuple[str, ...]:
        """The per-point metrics modelled beside the latency (``fit(..., metrics=)``)."""
        return tuple(self.config.get("metrics") or ())

    @property
    def seed(self) -> int:
        return int(self.config["sampler_config"]["seed"])

    @property
    def alpha_inferred(self) -> bool:
        return bool(len(self.design.coords["sd_unknown"]))

    def alpha_from_prior(self) -> list[str]:
        """(verifier|hardware|cell|drafter) whose latent alpha rests on one draft length k.

        Several k of one drafter on one workload identify its alpha through the k-dependence
        of :math:`E(\alpha, k)`; with one k, alpha trades off against the drafter's cost per
        draft token, and its prior (with the cost bounds) places it."""
        d = self.design
        sd = d.sd[~np.isfinite(d.alpha[d.sd])]
        labels = np.array(d.coords["draft_unit"], dtype=object)[d.sweep_draft[sd]]
        ks = pd.Series(d.k[sd]).groupby(labels).nunique()
        return sorted(ks.index[ks < 2])

    def measured_alpha(self) -> pd.DataFrame:
        """SD sweeps whose alpha varies along the sweep (measured per point): the mean the fit
        uses (``alpha``), ``alpha_min``, ``alpha_max`` and ``rows``, indexed by sweep."""
        d = self.design.data
        cols = ["alpha", "alpha_min", "alpha_max", "rows"]
        sd = d[(d["k"] > 0) & d["alpha"].notna()]
        if sd.empty:
            return pd.DataFrame(columns=cols)
        out = sd.groupby("_config")["alpha"].agg(
            alpha="mean", alpha_min="min", alpha_max="max", rows="size"
        )
        return out[out["alpha_max"] > out["alpha_min"]][cols]

    @property
    def uncatalogued(self) -> list[str]:
        """(verifier|hardware) groups whose verifier or GPU the catalog (``models/``) does not
        know: their coefficient levels take the generic priors, not roofline magnitudes."""
        from specbayes.model.physics import roofline_centres

        groups = self.design.coords["group"]
        return [g for g in groups if roofline_centres(*g.split("|", 1), None, 512.0, 256.0) is None]

    def _post(self) -> xr.Dataset:
        if self._stacked is None:
            stacked = self.idata.posterior.stack(sample=("chain", "draw"))
            self._stacked = stacked.transpose("sample", ...)
        return self._stacked

    def _n(self) -> int:
        return self._post().sizes["sample"]

    # -- rows ---------------------------------------------------------------------------------
    def _rows(self, rows: pd.DataFrame) -> pd.DataFrame:
        """Rows with the columns every evaluation needs (cell, drafter, loop, configuration)."""
        need = [c for c in ("verifier", "hardware", "prefill", "decode") if c not in rows]
        if need:
            raise ValueError(f"rows need the columns {need}")
        rows = rows.reset_index(drop=True).copy()
        if "k" not in rows:
            rows["k"] = 0
        if "cell" not in rows or rows["cell"].isna().any():
            cell = rows["prefill"].round().astype(int).astype(str) + "x"
            cell += rows["decode"].round().astype(int).astype(str)
            given = rows["cell"].astype(object) if "cell" in rows else None
            rows["cell"] = cell if given is None else given.where(given.notna(), cell)
        # no drafter named: the fitted one on an SD row ("", see _draft_unit), none on a dense
        # row — also where a frame of arms with and without one leaves NaN (plan.compare)
        unnamed = np.where(rows["k"] > 0, "", "none")
        if "drafter" not in rows:
            rows["drafter"] = unnamed
        given = rows["drafter"].astype(object)
        rows["drafter"] = given.where(given.notna(), pd.Series(unnamed, index=rows.index))
        rows["drafter"] = rows["drafter"].astype(str)
        rows.loc[rows["k"] == 0, "drafter"] = "none"
        for c in ("concurrency", "alpha"):
            if c not in rows:
                rows[c] = np.nan
        if "sweep" not in rows:
            rows["sweep"] = sweep_labels(rows)
        rows["_config"] = configuration_key(rows)
        rows["_unit"] = rows["verifier"] + "|" + rows["hardware"] + "|" + rows["cell"]
        return rows

    def _draft_unit(self, unit_label: str, drafter: str, fitted: list[str]) -> str:
        """The draft unit ``unit_label|drafter`` (``drafter`` "" means the one fitted drafter).

        Raises
        ------
        ValueError
            ``drafter`` is not among ``fitted``, or "" with several fitted.
        """
        if drafter == "" and len(fitted) == 1:
            drafter = fitted[0]
        if drafter not in fitted:
            have = f"fitted with drafters {fitted}" if fitted else "fitted without SD sweeps"
            raise ValueError(f"{unit_label}: {have}, not with drafter {drafter!r}")
        return f"{unit_label}|{drafter}"

    def _fitted_drafters(self, label: str, of: str = "draft_unit") -> list[str]:
        """Drafters fitted on a unit (``of="draft_unit"``) or a group (``"draft_group"``)."""
        prefix = label + "|"
        names = self.design.coords[of]
        return sorted({n[len(prefix) :] for n in names if n.startswith(prefix)})

    # -- costs and latency --------------------------------------------------------------------
    def _alpha(self, rows: pd.DataFrame) -> np.ndarray:
        """(sample, row) alpha: given, or the fit's inferred draws for its (unit, drafter)."""
        alpha = np.broadcast_to(rows["alpha"].to_numpy(float), (self._n(), len(rows))).copy()
        need = np.flatnonzero((rows["k"] > 0).to_numpy() & ~np.isfinite(alpha[0]))
        for i in need:
            r = rows.loc[i]
            alpha[:, i] = self.alpha_draws(r["verifier"], r["drafter"], r["cell"], r["hardware"])
        alpha[:, (rows["k"] == 0).to_numpy()] = 0.5  # unused: E = 1 at k = 0
        return alpha

    def _row_costs(
        self, rows: pd.DataFrame, measured: bool, seed: int | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple | None]:
        """(sample, row) log costs, curvature :math:`C_3` (0 without one) and knee
        ``(batch, slope)`` (``None`` without one): the sampled ones of fitted configurations,
        else from the coefficients plus a fresh sweep deviation (pooled; C2 below the rows'
        wall when ``measured``) and the group's knee
        (:func:`specbayes.model.graph.sweep_curvature`, :func:`~specbayes.model.
        graph.sweep_knee`)."""
        d, post = self.design, self._post()
        sweep_of = pd.Index(d.coords["sweep"]).get_indexer(rows["_config"])
        n = self._n()
        log_c1, log_c2 = np.empty((n, len(rows))), np.empty((n, len(rows)))
        c3 = np.zeros((n, len(rows)))
        seen = sweep_of >= 0
        log_c1[:, seen] = post["log_c1"].values[:, sweep_of[seen]]
        log_c2[:, seen] = post["log_c2"].values[:, sweep_of[seen]]
        if "c3" in post:
            c3[:, seen] = post["c3"].values[:, sweep_of[seen]]
        knee = None
        if "knee_batch" in post:
            knee = (np.full((n, len(rows)), np.inf), np.zeros((n, len(rows))))
            for part, name in zip(knee, ("knee_batch", "knee_slope"), strict=True):
                part[:, seen] = post[name].values[:, sweep_of[seen]]
        experts = None
        if "expert_c1" in post:  # the moe level: expert reads per request at full coverage
            experts = np.zeros((n, len(rows)))
            experts[:, seen] = post["expert_c1"].values[:, sweep_of[seen]]
        new = rows[~seen]
        if len(new):
            coef = self.coefficients(new, seed)
            alpha = self._alpha(new)
            decode, k = new["decode"].to_numpy(float), new["k"].to_numpy(float)
            parts = [coef[c].values for c in COEFS]
            cycle = {c: coef[c].values for c in laws.SPECULATIVE_COSTS if c in coef}
            c1, c2 = laws.effective_costs(*parts, decode, alpha, k, **cycle)
            if experts is not None:
                passes = laws.verifier_passes(decode, alpha, k)
                experts[:, ~seen] = passes * coef["c1s"].values
            n1, n2 = self._sweep_deviation(new, np.log(c2), measured, seed)
            log_c1[:, ~seen] = np.log(c1) + n1
            log_c2[:, ~seen] = np.log(c2) + n2
            if "knee_tokens" in coef:
                c3[:, ~seen] = laws.token_knee_curvature(
                    *parts[3:], decode, alpha, k, coef["knee_tokens"].values
                )
            if knee is not None:
                passes = laws.verifier_passes(decode, alpha, k)
                batch, slope = laws.knee_costs(
                    coef["knee_at"].values,
                    coef["knee_excess"].values,
                    coef["knee_c2v"].values,
                    passes,
                    k,
                )
                knee[0][:, ~seen], knee[1][:, ~seen] = batch, slope
        if experts is not None:
            ratio = self._expert_ratio(rows["verifier"])
            experts = (experts, ratio, rows["k"].to_numpy(float))
        return log_c1, log_c2, c3, knee, experts

    def _sweep_deviation(self, new: pd.DataFrame, loc2, measured: bool, seed: int | None):
        """Deviations of unseen configurations from the decomposition, one per configuration:
        :math:`\\mathcal N(0, \\tau_j)`, the C2 one truncated at the measured rows' wall."""
        if self.design.structure != "pooled":
            return 0.0, 0.0
        tau = self._post()["tau"].values  # (sample, cost)
        configs, idx = np.unique(new["_config"].to_numpy(), return_inverse=True)
        rng = np.random.default_rng([self.seed if seed is None else seed, 13])
        n = self._n()
        z1 = rng.standard_normal((n, len(configs)))[:, idx]
        upper = np.full(len(new), np.inf)
        if measured:
            open_rps = new["rps"].where(new["concurrency"].isna())
            wall = -np.log(open_rps.groupby(new["_config"]).transform("max").to_numpy(float))
            upper = np.where(np.isfinite(wall), wall, np.inf)
        # one standardised deviation per configuration, truncated at its tightest wall
        z2 = np.empty((n, len(new)))
        for j in range(len(configs)):
            cols = np.flatnonzero(idx == j)
            b = (np.min(upper[cols]) - loc2[:, cols[0]]) / tau[:, 1]
            draw = stats.truncnorm.rvs(-np.inf, b, random_state=rng)
            z2[:, cols] = draw[:, None]
        return tau[:, :1] * z1, tau[:, 1:] * z2

    def _row_state(self, rows: pd.DataFrame, measured: bool, seed: int | None) -> dict:
        """Per row: ``rows`` (completed), ``log_c1``, ``log_c2``, ``mu`` (sample, row; ``mu``
        ``inf`` past the wall), ``load``, ``closed`` and ``experts`` (the ``moe`` level's
        ``(X, m/M, k)``, else ``None``)."""
        rows = self._rows(rows)
        log_c1, log_c2, c3, knee, experts = self._row_costs(rows, measured, seed)
        closed = rows["concurrency"].notna().to_numpy()
        if "rps" not in rows and not closed.all():
            raise ValueError("rows need rps (open loop) or concurrency (closed loop)")
        load = np.where(closed, rows["concurrency"], rows.get("rps", np.nan)).astype(float)
        with np.errstate(all="ignore"):
            mu = log_mean_latency(log_c1, log_c2, load, closed, c3, knee=knee, experts=experts)
            # the noise grows with the utilisation of the law without the knee or the expert
            # coverage (graph.py)
            scale_mu = mu
            if knee is not None or experts is not None:
                scale_mu = log_mean_latency(log_c1, log_c2, load, closed, c3)
        mu = np.where(np.isnan(mu), np.inf, mu)  # past the wall: unbounded
        return dict(
            rows=rows, log_c1=log_c1, log_c2=log_c2, mu=mu, scale_mu=scale_mu, load=load,
            closed=closed, experts=experts,
        )  # fmt: skip

    def _log_mu(
        self, rows: pd.DataFrame, measured: bool, seed: int | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(sample, row) expected log latency :math:`\\mu` (``inf`` past the wall) and the
        rows' noise scale (:meth:`_row_sigma`)."""
        st = self._row_state(rows, measured, seed)
        return st["mu"], self._row_sigma(st["scale_mu"], st["log_c1"], st["rows"])

    def _row_sigma(self, mu: np.ndarray, log_c1: np.ndarray, rows: pd.DataFrame) -> np.ndarray:
        r"""(sample, row) noise scale :math:`\sigma w` (a row without ``n_requests`` taken at
        the fit's reference count)."""
        post = self._post()
        growth = post["noise_growth"].values[:, None]
        log_count, _ = log_counts(rows, self.design.count_ref)
        with np.errstate(all="ignore"):
            log_w = log_row_scale(mu, log_c1, growth, log_count)
            return post["sigma"].values[:, None] * np.exp(log_w)

    def mean_latency(
        self, rows: pd.DataFrame, *, measured: bool = False, seed: int | None = None
    ) -> xr.DataArray:
        """Draws of the expected latency :math:`e^{\\mu}` (s) per row; ``inf`` where saturated."""
        mu, _ = self._log_mu(rows, measured, seed)
        return xr.DataArray(np.exp(mu), dims=("sample", "row"))

    def predict(
        self, rows: pd.DataFrame, seed: int | None = None, *, measured: bool = False
    ) -> xr.DataArray:
        """Posterior predictive latency draws (s): :math:`e^{\\mu + \\sigma_i\\varepsilon}`."""
        mu, sigma = self._log_mu(rows, measured, seed)
        rng = np.random.default_rng([self.seed if seed is None else seed, 3])
        with np.errstate(all="ignore"):
            out = np.exp(mu + sigma * rng.standard_normal(mu.shape))
        return xr.DataArray(np.where(np.isfinite(mu), out, np.inf), dims=("sample", "row"))

    def log_likelihood(
        self, rows: pd.DataFrame, *, measured: bool = False, seed: int | None = None
    ) -> xr.DataArray:
        """Pointwise :math:`\\log\\mathcal N(\\log L \\mid \\mu, \\sigma)` of ``rows["latency"]``
        (the density of the model's observed variable, log latency), dims (sample, row);
        ``-inf`` in a draw that puts the row past saturation."""
        if "latency" not in rows:
            raise ValueError("log_likelihood needs the observed 'latency' of each row")
        mu, sigma = self._log_mu(rows, measured, seed)
        y = np.log(rows["latency"].to_numpy(float))
        with np.errstate(all="ignore"):
            ll = log_density(y[None, :], mu, sigma)
        return xr.DataArray(np.where(np.isfinite(mu), ll, -np.inf), dims=("sample", "row"))

    def metric(
        self,
        rows: pd.DataFrame,
        name: str,
        *,
        predictive: bool = False,
        measured: bool = False,
        seed: int | None = None,
    ) -> xr.DataArray:
        """Draws of a modelled per-point metric (s) per row, dims (sample, row).

        The expected statistic :math:`m_i` (:mod:`specbayes.model.metrics`), or with
        ``predictive=True`` a measurement of it (its Student-t noise); ``inf`` past the wall.

        Raises
        ------
        ValueError
            ``name`` was not fitted (the message names the fitted metrics).
        """
        if name not in self.metrics:
            raise ValueError(
                f"{name!r} is not modelled by this fit (metrics: {list(self.metrics) or 'none'})"
                f" — refit with `specbayes fit DATA --metrics {name}` (or fit(..., metrics=))"
            )
        st = self._row_state(rows, measured, seed)
        rows, post = st["rows"], self._post()
        rng = np.random.default_rng([self.seed if seed is None else seed, 17])
        shares = self.metric_shares(rows, name, seed)
        with np.errstate(all="ignore"):
            batch = log_batch(st["mu"], st["load"], st["closed"])
            loc = log_metric_mean(
                log_fixed_cost(st["log_c1"], batch, st["experts"]), st["log_c2"], batch,
                shares[:, 0], shares[:, 1], log_unit(name, rows["decode"]),
            )  # fmt: skip
            if predictive:
                j, pr = self.metrics.index(name), merge_priors(self.config.get("priors"))
                sigma = post["metric_sigma"].values[:, j, None]
                sigma = sigma * np.exp(log_width(name, rows.get("n_requests")))
                ratio = None
                if pr["metric_excess"] is not None:
                    ratio = post["metric_excess"].values[:, j, None]
                share = excess_scale(name, rows.get("n_requests"))
                loc = measurement_draws(loc, sigma, ratio, share, pr["metric_nu"], rng)
            out = np.exp(loc)
        return xr.DataArray(np.where(np.isfinite(st["mu"]), out, np.inf), dims=("sample", "row"))

    def metric_shares(self, rows: pd.DataFrame, name: str, seed: int | None = None):
        """(sample, term, row) draws of the log shares :math:`\\log\\rho_a, \\log\\rho_b`
        of metric ``name`` (:mod:`specbayes.model.metrics`).

        A row of a fitted configuration takes its sweep's; one of a fitted (workload,
        drafter, k) at another alpha, the sweep with the nearest alpha (the shares scale
        costs that already carry alpha); any other, its arm's level (dense or SD) plus a
        fresh deviation, one per configuration."""
        rows = self._rows(rows)
        d = self.design
        sweep_of = nearest_sweep(d.coords["sweep"], d.alpha, rows["_config"], rows["alpha"])
        rng = np.random.default_rng([self.seed if seed is None else seed, 19])
        arm = (rows["k"] > 0).to_numpy(int)
        tau = merge_priors(self.config.get("priors"))["metric_tau"][family(name)]
        post, configs = self._post(), rows["_config"]
        return share_draws(post, self.metrics, name, sweep_of, arm, configs, rng, tau)

    def alpha_draws(
        self, verifier: str, drafter: str, cell: str, hardware: str | None = None
    ) -> np.ndarray:
        """Draws of the inferred alpha of (verifier, drafter, cell): pooled, the latent
        ``alpha`` of that workload and drafter; anchored, from the tokens per cycle :math:`E`
        of its SD sweep (:func:`specbayes.laws.alpha_from_acceptance_length`)."""
        d = self.design
        sweeps = d.extra["sweeps"].iloc[d.sd]
        unknown = ~np.isfinite(d.alpha[d.sd])
        match = (
            (sweeps["verifier"] == verifier).to_numpy()
            & (sweeps["drafter"] == drafter).to_numpy()
            & (sweeps["cell"] == cell).to_numpy()
            & unknown
        )
        if hardware is not None:
            match &= (sweeps["hardware"] == hardware).to_numpy()
        units = set(sweeps["unit"][match])
        if len(units) != 1 or (d.structure == "anchored" and match.sum() != 1):
            have = [tuple(r) for r in sweeps.loc[unknown, ["verifier", "drafter", "cell"]].values]
            raise ValueError(
                f"alpha of ({verifier}, {drafter}, {cell}) was not inferred by this fit; "
                f"inferred: {sorted(set(have))}"
            )
        if d.structure == "pooled":
            j = d.coords["draft_latent"].index(f"{units.pop()}|{drafter}")
            return np.asarray(self._post()["alpha"].values[:, j], float)
        i = int(np.flatnonzero(match)[0])
        tokens = self._post()["tokens_per_cycle"].values[:, i]
        return np.asarray(laws.alpha_from_acceptance_length(tokens, d.k[d.sd][i]), float)

    # -- health -------------------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        """Divergences, worst R-hat and bulk/tail ESS over the free variables, ``healthy``."""
        h = health(self.idata, self.model)
        return {
            "model": self.model_name,
            "model_id": MODEL_ID,
            "structure": self.design.structure,
            "sweeps": sweeps_form(self.model),
            "rows": len(self.data),
            "excluded": len(self.excluded),
            "divergences": h["divergences"],
            "max_r_hat": h["rhat_max"],
            "min_ess_bulk": h["ess_bulk_min"],
            "min_ess_tail": h["ess_tail_min"],
            "worst": h["worst"],
            "healthy": h["healthy"],
            "wall_s": float(self.config.get("wall_s", np.nan)),
            "start_converged": self.config.get("start_converged"),
            "start_iterations": self.config.get("start_iterations"),
            "scout_restarted": self.config.get("scout_restarted"),
            "alpha_inferred": self.alpha_inferred,
            "alpha_measured": {
                sweep: [round(float(r.alpha), 6), float(r.alpha_min), float(r.alpha_max)]
                for sweep, r in self.measured_alpha().iterrows()
            },
            "uncatalogued": self.uncatalogued,
            "alpha_from_prior": self.alpha_from_prior(),
            # moe: each group's expert reads c1s (median, 90 %, roofline), else empty
            "expert_reads": (
                expert_reads(self.idata.posterior, self.design)
                if "expert_cost" in self.idata.posterior
                else {}
            ),
            "sampler_config": dict(self.config["sampler_config"]),
        }

    @property
    def healthy(self) -> bool:
        return bool(self.summary()["healthy"])

    @property
    def divergences(self) -> int:
        return int(self.idata.sample_stats["diverging"].sum())

    def diagnostics(self) -> pd.DataFrame:
        """R-hat, bulk and tail ESS of every free variable's elements."""
        import arviz as az

        names = [v.name for v in self.model.free_RVs]
        s = az.summary(self.idata.posterior[names], kind="diagnostics")
        s = s[["r_hat", "ess_bulk", "ess_tail"]].copy()
        s.insert(0, "variable", [i.split("[")[0] for i in s.index])
        s["divergences"] = self.divergences
        s.attrs["divergences"] = self.divergences
        return s

    # -- the artefact -------------------------------------------------------------------------
    def _attach_groups(self) -> None:
        """log_likelihood and posterior_predictive of the fitted rows (the functions above),
        observed and constant data, excluded rows, ArviZ names and stamps, attrs."""
        from specbayes.artefacts import finish_fit_artefact
        from specbayes.artefacts import frame_to_dataset as _frame_to_dataset
        from specbayes.artefacts import strict_json as _strict_json

        d, post = self.design, self.idata.posterior
        rng = np.random.default_rng([self.seed, 1])
        ll, pp = self._row_groups(rng)
        dims, coords = ("chain", "draw", "obs"), {"obs": np.arange(len(d.data))}
        groups = {
            "log_likelihood": xr.Dataset({"log_latency": (dims, ll)}, coords=coords),
            "posterior_predictive": xr.Dataset({"log_latency": (dims, pp)}, coords=coords),
            "observed_data": xr.Dataset({"log_latency": ("obs", d.log_latency)}, coords=coords),
            "constant_data": _frame_to_dataset(d.data.drop(columns=["_config"]), "obs"),
            "excluded_data": _frame_to_dataset(self.excluded, "excluded_row"),
        }
        if self.metrics:  # the metrics' own density (metrics.metric_likelihood)
            g = stored_groups(d, self.metrics, post, merge_priors(self.config.get("priors")), rng)
            mdims, mcoords = ("chain", "draw", "metric_obs"), {"metric_obs": g["table"].index}
            for group, values in (("log_likelihood", g["log_likelihood"]),
                                  ("posterior_predictive", g["posterior_predictive"])):  # fmt: skip
                groups[group]["log_metric"] = xr.DataArray(values, dims=mdims, coords=mcoords)
            groups["observed_data"]["log_metric"] = xr.DataArray(
                g["observed"], dims="metric_obs", coords=mcoords
            )
        attrs = {
            "model": self.model_name,
            "model_id": MODEL_ID,
            "config": _strict_json(self.config),
        }
        finish_fit_artefact(self.idata, groups, attrs, "nutpie")

    def _row_groups(self, rng) -> tuple[np.ndarray, np.ndarray]:
        """The fitted rows' pointwise log-likelihood and a predictive draw (chain, draw,
        obs) at the graph's ``mu``, a few draws at a time (:func:`draw_blocks`; over every
        draw at once the temporaries took 13 GB and 24 s on the paper's dense verifiers,
        59,040 rows × 4,000 draws), the blocks in threads (:func:`over_blocks`)."""
        d, post = self.design, self.idata.posterior
        mu = post["mu"].values  # (chain, draw, obs): the graph's own expected log latency
        sigma = post["sigma"].values
        ll, pp = np.empty_like(mu), np.empty_like(mu)
        rows = row_view(d) if linearised_in_reads(self.model) else None

        def noise():  # drawn in order, one block after another (over_blocks)
            for at in draw_blocks(*mu.shape):
                yield at, rng.standard_normal(mu[at].shape)

        def groups(at, z):
            # an integrated moe fit's noise location is not stored (marginal.noise_location)
            location = None if rows is None else noise_location(rows, post, at)
            log_w = posterior_log_row_scale(post, d.obs_sweep, d.log_count, at, location)
            scale = sigma[at][:, None] * np.exp(log_w)
            finite = np.isfinite(mu[at])  # a draw past a row's wall: -inf, as log_likelihood
            with np.errstate(all="ignore"):
                ll[at] = np.where(finite, log_density(d.log_latency, mu[at], scale), -np.inf)
                pp[at] = mu[at] + scale * z

        over_blocks(noise(), groups)
        return ll, pp

    def _stamp_config(self) -> None:
        from specbayes.artefacts import strict_json as _strict_json

        self.idata.attrs["config"] = _strict_json(self.config)

    def save(self, path: str | Path) -> Path:
        """Write the artefact (one netCDF file, compressed; the demo fit's is under 15 MB).

        What the file leaves out or narrows (:func:`specbayes.artefacts.slim_fit_artefact`;
        this object's ``idata`` keeps everything):

        - the posterior's per-row ``mu`` — the fitted rows' expected log latency, recomputed
          draw by draw by ``np.log(fit.mean_latency(fit.data))`` — and ``coef_unit``, which is
          ``np.exp(fit.idata.posterior["log_coef"])``
          (:func:`specbayes.artefacts.add_natural_scale` adds it back);
        - the posterior variables the answers read (:data:`_ANSWER_VARIABLES`) stay float64,
          so a loaded fit answers exactly as this one; the others — the sampler's coordinates,
          read for R-hat and ESS only — are float32, as are ``log_likelihood`` (every draw)
          and ``posterior_predictive`` (400 evenly thinned draws; ``fit.predict(fit.data)``
          draws as many as the posterior has);
        - ``unconstrained_posterior``, the sampler's own coordinates.
        """
        from specbayes.artefacts import NATURAL_SCALE, slim_fit_artefact, write_fit_netcdf

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        drop = ["mu", "noise_mu", *NATURAL_SCALE]
        slim = slim_fit_artefact(self.idata, _ANSWER_VARIABLES, drop=drop)
        return write_fit_netcdf(slim, path)


#: Posterior variables the methods above read (``_post()``), stored exactly by
#: :meth:`NextFit.save`; the save tests compare a loaded fit's answers with the original's.
_ANSWER_VARIABLES = (
    "log_c1", "log_c2", "log_coef", "log_coef_draft", "unit_coef", "coefficients", "coef_mu",
    "coef_mu_draft", "trend", "cell_sd", "tau", "noise_growth", "sigma", "alpha",
    "tokens_per_cycle", "c3", "knee_tokens", "knee_at", "knee_excess", "knee_c2v",
    "knee_batch", "knee_slope",
    "metric_log_share", "metric_share_mu", "metric_sigma", "metric_excess",
)  # fmt: skip


def load_next(idata, path: Path) -> NextFit:
    """A :class:`NextFit` from a read artefact (:func:`specbayes.fit.load_fit` calls this)."""
    from specbayes.artefacts import FitFileError
    from specbayes.artefacts import dataset_to_frame as _dataset_to_frame

    version = idata.attrs.get("specbayes_version")
    if version != __version__:
        raise FitFileError(
            f"{path}: written by specbayes {version}, this is {__version__} — refit the data "
            "with this version (`specbayes fit DATA --out FIT.nc`)"
        )
    config = json.loads(idata.attrs["config"])
    data = _dataset_to_frame(idata.constant_data, "obs")
    excluded = (
        _dataset_to_frame(idata["excluded_data"], "excluded_row")
        if "excluded_data" in idata.groups()
        else pd.DataFrame(columns=["reason"])
    )
    table = SweepTable(data, excluded)
    design = build_design(table, config["level"], config["structure"])
    return NextFit(idata, design, excluded=excluded, config=config)


def sweeps_form(model) -> str:
    """``"marginal"`` where ``model`` integrates its sweeps' costs out, else ``"sampled"``."""
    return "marginal" if integrated(model) else "sampled"


def stored_priors(priors: dict | None) -> dict:
    """What a fit's config keeps of its priors: every prior the model was built with (the
    defaults with ``priors`` overlaid, which checks the overrides), as JSON values (tuples as
    lists) — not only the overrides, so a saved fit rebuilds the model it was sampled with
    after the defaults move (a parametrisation renames the posterior's variables: C1's
    sweeps centred, 2026-12-07)."""
    merged = merge_priors(priors)
    return json.loads(json.dumps(merged, default=lambda o: list(o) if isinstance(o, tuple) else o))
