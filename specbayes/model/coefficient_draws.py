"""Posterior draws of the six cycle coefficients for any row: a mixin of
:class:`~specbayes.model.fitted.NextFit`.

A unit (verifier, hardware, cell) the fit saw uses its draws; in the pooled structure a cell
the fit never saw gets the hierarchy's prediction
(:func:`~specbayes.model.hierarchy.log_coefficients`: its group's level, trend and a
fresh cell deviation) — what leave-n-out validation tests. The methods read the fit through
``design``, ``seed``, ``_post()``, ``_n()``, ``_rows()``, ``_draft_unit()`` and
``_fitted_drafters()`` of the class they are mixed into.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import xarray as xr

from specbayes.model.graph import _unit_workload
from specbayes.model.hierarchy import log_coefficients, trend_covariates
from specbayes.model.priors import COEFS


class CoefficientDraws:
    """``coefficients(rows)`` and the per-unit, per-cycle and new-cell draws behind it."""

    # -- coefficients -------------------------------------------------------------------------
    def coefficients(self, rows: pd.DataFrame, seed: int | None = None) -> xr.Dataset:
        """Posterior draws of the six cycle coefficients per row (seconds), dims (sample, row),
        and ``c1c``, ``c2c`` (the costs per speculative cycle: fixed, per sequence),
        ``prefill_share`` (the drafter's prefill over the verifier's), ``c1s`` and
        ``expert_ratio`` (the ``moe`` level's expert reads per pass at full coverage and
        :math:`m/M`) where the fit has them.

        A unit (verifier, hardware, cell) the fit saw uses its draws; in the pooled
        structure an unseen cell of a fitted (verifier, hardware) gets the hierarchy's
        prediction — trend plus a fresh cell deviation, one draw per cell shared by its rows.
        Drafter coefficients are 0 on k = 0 rows.

        Raises
        ------
        ValueError
            Unknown verifier/hardware, a drafter the unit was not fitted with, or an unseen
            cell of an anchored fit (one workload per unit: no trend to carry it).
        """
        rows = self._rows(rows)
        d = self.design
        units = d.coords["unit"]
        n = self._n()
        out = np.zeros((n, len(rows), len(COEFS)))
        known = rows["_unit"].isin(units).to_numpy()
        if (~known).any():
            out[:, ~known] = self._new_cell_coefficients(rows[~known], seed)
        for i in np.flatnonzero(known):
            out[:, i] = self._unit_coefficients(units.index(rows.at[i, "_unit"]), rows.loc[i])
        dense = (rows["k"] == 0).to_numpy()
        out[:, dense, 2] = out[:, dense, 5] = 0.0
        data = {c: (("sample", "row"), out[..., j]) for j, c in enumerate(COEFS)}
        # per (verifier, hardware) group: the batch curvature's knee (``inverse_knee``) or the
        # knee's position, excess and verifier cost (``knee``)
        post = self._post()
        group = pd.Index(d.coords["group"]).get_indexer(rows["verifier"] + "|" + rows["hardware"])
        for name in ("knee_tokens", "knee_at", "knee_excess", "knee_c2v"):
            if name in post:
                data[name] = (("sample", "row"), post[name].values[:, group])
        if "expert_cost" in post:  # moe: a verifier pass's expert reads at full coverage
            data["c1s"] = (("sample", "row"), post["expert_cost"].values[:, group])
            ratio = np.broadcast_to(self._expert_ratio(rows["verifier"]), (n, len(rows)))
            data["expert_ratio"] = (("sample", "row"), ratio)
        if "cycle_overhead" in post:
            data["c1c"] = (("sample", "row"), self._cycle_overhead(rows, "cycle_overhead"))
        if "spec_seq_overhead" in post:
            # per sequence, proportional to the context p + g/2 (graph._spec_seq_overhead)
            _, centre = trend_covariates(*_unit_workload(d), d.coords["coef"])
            trend, _ = trend_covariates(rows["prefill"], rows["decode"], d.coords["coef"], centre)
            context = np.exp(trend[:, d.coords["coef"].index("c2v")])
            data["c2c"] = (
                ("sample", "row"), self._cycle_overhead(rows, "spec_seq_overhead") * context
            )  # fmt: skip
        if "drafter_prefill" in post:  # rho, the drafter's prefill over the verifier's
            data["prefill_share"] = (
                ("sample", "row"), self._cycle_overhead(rows, "drafter_prefill")
            )  # fmt: skip
        return xr.Dataset(data, coords={"sample": np.arange(n), "row": np.arange(len(rows))})

    def _expert_ratio(self, verifiers: pd.Series) -> np.ndarray:
        """:math:`m/M` of each of ``verifiers`` as the ``moe`` fit's design has it (from its
        rows' expert counts or the catalog: :func:`~specbayes.model.experts.expert_ratios`)."""
        d = self.design
        known = dict(zip(d.extra["sweeps"]["verifier"], d.extra["expert_ratio"], strict=True))
        return np.array([known[v] for v in verifiers], dtype=float)

    def _cycle_overhead(self, rows: pd.DataFrame, name: str) -> np.ndarray:
        """(sample, row) draws of a cost per speculative cycle sampled per (verifier,
        hardware, drafter) — ``cycle_overhead`` (``c1c``), ``spec_seq_overhead`` (``c2c``
        at the trend's centre cell) or ``drafter_prefill`` (``prefill_share``) — 0 on k = 0
        rows."""
        var = self._post()[name]
        draws, names = var.values, list(var[var.dims[-1]].values)
        out = np.zeros((self._n(), len(rows)))
        for i in np.flatnonzero((rows["k"] > 0).to_numpy()):
            label = rows.at[i, "verifier"] + "|" + rows.at[i, "hardware"]
            drafter = rows.at[i, "drafter"]
            group = self._draft_unit(label, drafter, self._fitted_drafters(label, "draft_group"))
            if group in names:  # c2c: none where the GPU's kernel packs the GQA group
                out[:, i] = draws[:, names.index(group)]
        return out

    def _unit_coefficients(self, unit: int, row: pd.Series) -> np.ndarray:
        """(sample, coef) draws of one fitted unit's coefficients for ``row``'s drafter."""
        d, post = self.design, self._post()
        full = np.zeros((self._n(), len(COEFS)))
        if d.structure == "pooled":
            full[:, [0, 1, 3, 4]] = np.exp(post["log_coef"].values[:, unit, :])
            if row["k"] > 0:
                label = d.coords["unit"][unit]
                du = self._draft_unit(label, row["drafter"], self._fitted_drafters(label))
                j = d.coords["draft_unit"].index(du)
                full[:, [2, 5]] = np.exp(post["log_coef_draft"].values[:, j, :])
            return full
        verifier = post["unit_coef"].values[:, unit, :]  # c1p, c1v, c2p, c2v
        full[:, [0, 1, 3, 4]] = verifier
        if row["k"] > 0:
            full[:, [2, 5]] = self._anchored_drafter(unit, row["drafter"])
        return full

    def _anchored_drafter(self, unit: int, drafter: str) -> np.ndarray:
        d = self.design
        match = [i for i, s in enumerate(d.sd) if d.sweep_unit[s] == unit]
        named = [i for i in match if d.drafter[d.sd[i]] == drafter or drafter == ""]
        if len(named) != 1:
            have = sorted({d.drafter[d.sd[i]] for i in match})
            raise ValueError(
                f"{d.coords['unit'][unit]}: no fitted SD sweep with drafter {drafter!r} "
                f"(fitted: {have or 'none'})"
            )
        return self._post()["coefficients"].values[:, named[0], :][:, [2, 5]]

    def _new_cell_coefficients(self, rows: pd.DataFrame, seed: int | None) -> np.ndarray:
        """(sample, row, coef) draws for rows of cells the fit never saw (pooled only): the
        verifier coefficients from their group's level, the drafter's from its (verifier,
        hardware, drafter) level, each with its trend and a fresh cell deviation."""
        d = self.design
        groups = d.coords["group"]
        group_of = (rows["verifier"] + "|" + rows["hardware"]).to_numpy()
        unknown = sorted(set(group_of) - set(groups))
        if unknown:
            raise ValueError(
                f"unknown (verifier|hardware) {unknown}: this fit knows {groups}; a pair the fit "
                "never saw has no coefficients — fit data that include it"
            )
        if d.structure != "pooled":
            cells = sorted(set(rows["_unit"]))
            raise ValueError(
                f"{cells}: cells this fit never saw — an anchored fit (one workload per "
                "verifier and GPU) has no cell trend; measure the cell or fit several cells"
            )
        rng = np.random.default_rng([self.seed if seed is None else seed, 11])
        full = np.zeros((self._n(), len(rows), len(COEFS)))
        verifier = self._new_level(rows["_unit"], rows, group_of, "verifier", rng)
        full[..., [0, 1, 3, 4]] = verifier
        spec = np.flatnonzero((rows["k"] > 0).to_numpy())
        if len(spec):
            sub = rows.iloc[spec]
            draft_group = [
                self._draft_unit(g, r, self._fitted_drafters(g, "draft_group"))
                for g, r in zip(group_of[spec], sub["drafter"], strict=True)
            ]
            names = pd.Series([x.rsplit("|", 1)[1] for x in draft_group], index=sub.index)
            draws = self._new_level(sub["_unit"] + "|" + names, sub, draft_group, "drafter", rng)
            full[:, spec, 2], full[:, spec, 5] = draws[..., 0], draws[..., 1]
        return full

    def _new_level(self, keys: pd.Series, rows: pd.DataFrame, group_of, part: str, rng):
        """(sample, row, coef) of the ``part`` coefficients of new cells keyed by ``keys``:
        :func:`~specbayes.model.hierarchy.log_coefficients` of the fitted group level
        (``coef_mu`` or ``coef_mu_draft``), trend and a fresh cell deviation."""
        d, post = self.design, self._post()
        names = d.coords["coef_v" if part == "verifier" else "coef_d"]
        coefs = d.coords["coef"]
        group_names = d.coords["group" if part == "verifier" else "draft_group"]
        mu = post["coef_mu" if part == "verifier" else "coef_mu_draft"].values
        new = sorted(set(keys))
        first = rows.groupby(keys.to_numpy())[["prefill", "decode"]].mean().loc[new]
        _, centre = trend_covariates(*_unit_workload(d), coefs)
        trend, _ = trend_covariates(first["prefill"], first["decode"], coefs, centre)
        cols = [coefs.index(c) for c in names]
        n = self._n()
        share = np.zeros((n, len(coefs)))
        share[:, [coefs.index(c) for c in d.coords["coef_t"]]] = post["trend"].values
        cell_sd = np.zeros((n, len(coefs)))
        cell_sd[:, [coefs.index(c) for c in post["coef_c"].values]] = post["cell_sd"].values
        z = rng.standard_normal((n, len(new), len(names)))
        group_by_key = pd.Series(group_of, index=keys.to_numpy()).groupby(level=0).first()
        group = np.array([group_names.index(group_by_key[k]) for k in new])
        log_c = log_coefficients(mu, share[:, cols], cell_sd[:, cols], z, group, trend[:, cols])
        return np.exp(log_c[:, pd.Index(new).get_indexer(keys), :])
