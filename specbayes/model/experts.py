r"""The ``moe`` level: a verifier pass's expert reads grow with the tokens it routes.

A mixture-of-experts verifier reads, in every pass, the experts its tokens route to: with
:math:`m` of :math:`M` experts chosen per token, :math:`T` routed tokens touch the expected
fraction :math:`\varphi(T) = 1 - (1 - m/M)^T` of each layer's experts
(:func:`specbayes.laws.expert_coverage`; docs/model.md §5). So a pass at batch :math:`B`
costs its dense part plus :math:`\varphi(T)\,c_{1s}`, :math:`T = B(k + 1)` (every running
sequence routes its :math:`k + 1` verified tokens), where :math:`c_{1s}` — every expert of
every layer, read once — is one cost per (verifier, hardware): the expert weights are the
same bytes in every workload.

Per sweep of group :math:`g` with :math:`w = g/E` verifier passes per request, the expert
part of a request's latency at full coverage is :math:`X = w\,c_{1s,g}` (``expert_c1``), and
with the sweep's costs :math:`C_1, C_2` its mean latency is the least fixed point

.. math::

    L = \frac{C_1 + \varphi(\lambda L (k + 1))\,X}{1 - \lambda C_2}
    \quad\text{(open loop)}, \qquad
    L = C_1 + N C_2 + \varphi(N (k + 1))\,X \quad\text{(closed loop)}

(:func:`specbayes.model.likelihood.log_mean_latency`). The expert reads have no
per-sequence part: their compute per token is the active parameters' and sits in
:math:`c_{2v}` with the rest of a token's work; at full coverage a pass reads each expert
once whatever its batch. So the design note's :math:`C_{2s}` is 0 here and every open-loop
map is bounded — its fixed point is finite wherever :math:`\lambda C_2 < 1`, which the
sweeps' wall already guarantees.

:math:`\log c_{1s,g} \sim \mathcal N(\log c^\mathrm{roof}_{1s}, s)` around the roofline's
full-coverage read (:func:`specbayes.model.physics.roofline_centres` with ``coverage``)
where the catalog knows the verifier and GPU, else the generic ``expert_cost`` prior. The
other coefficients' roofline centres then carry no expert tangent.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pymc as pm

from specbayes import catalog


def expert_counts(verifier: str, rows: pd.DataFrame) -> tuple[float, float] | None:
    """``(m, M)`` of ``verifier``: the rows' ``experts_per_token`` and ``num_experts`` where
    given, else the catalog's; ``None`` for a verifier without expert routing."""
    if {"experts_per_token", "num_experts"} <= set(rows):
        m = pd.to_numeric(rows["experts_per_token"], errors="coerce").dropna()
        big_m = pd.to_numeric(rows["num_experts"], errors="coerce").dropna()
        if len(m) and len(big_m) and float(big_m.iloc[0]) > 0:
            return float(m.iloc[0]), float(big_m.iloc[0])
    try:
        spec = catalog.load_model(verifier)
    except (ValueError, FileNotFoundError):
        return None
    geometry = spec.geometry()
    if not geometry.num_experts:
        return None
    return float(geometry.experts_per_tok), float(geometry.num_experts)


def expert_ratios(data: pd.DataFrame, verifiers: np.ndarray) -> np.ndarray:
    """:math:`m/M` for each entry of ``verifiers`` (from ``data``'s rows of each verifier).

    Raises
    ------
    ValueError
        One line naming the verifiers without expert routing (the ``moe`` level's rule).
    """
    ratio, missing = {}, []
    for name in sorted(set(verifiers)):
        counts = expert_counts(name, data[data["verifier"] == name])
        if counts is None:
            missing.append(name)
        else:
            ratio[name] = counts[0] / counts[1]
    if missing:
        raise ValueError(
            f"the moe model fits mixture-of-experts verifiers only: {', '.join(missing)} "
            "has no expert routing (no experts_per_token / num_experts columns and no MoE "
            "catalog entry) — fit it with the sd model"
        )
    return np.array([ratio[v] for v in verifiers], dtype=float)


def roofline_reads(design) -> list[float | None]:
    """Each group's roofline full-coverage expert read (s), ``None`` where the catalog does
    not know the verifier or GPU."""
    from specbayes.model.physics import roofline_centres
    from specbayes.model.priors import _setting

    sweeps = design.extra["sweeps"]
    reads = []
    for group in design.coords["group"]:
        verifier, hardware, tp, _ = _setting(design, sweeps[sweeps["group"] == group])
        centres = roofline_centres(verifier, hardware, None, 512.0, 256.0, tp=tp, coverage=True)
        c1s = (centres or {}).get("c1s", 0.0)
        reads.append(c1s if c1s > 0 else None)
    return reads


def expert_prior(design, pr: dict) -> tuple[np.ndarray, np.ndarray]:
    """Location and scale of each group's :math:`\\log c_{1s}` (module docstring)."""
    generic = pr["expert_cost"]
    loc, scale = [], []
    for read in roofline_reads(design):
        known = read is not None
        loc.append(np.log(read) if known else generic["mu"])
        scale.append(pr["coef_mu_roofline_sigma"] if known else generic["sigma"])
    return np.array(loc), np.array(scale)


def expert_reads(posterior, design) -> dict[str, list[float | None]]:
    """Per (verifier, hardware) group of a ``moe`` fit: the posterior median of
    :math:`c_{1s}`, its central 90 % interval and the roofline's read (s; ``None`` where the
    catalog does not know it) — what ``specbayes fit`` prints beside the health table."""
    draws = posterior["expert_cost"].values.reshape(-1, len(design.coords["group"]))
    lo, mid, hi = np.quantile(draws, [0.05, 0.5, 0.95], axis=0)
    roof = roofline_reads(design)
    return {
        g: [float(mid[i]), float(lo[i]), float(hi[i]), roof[i]]
        for i, g in enumerate(design.coords["group"])
    }


def expert_costs(design, pr: dict, passes):
    r"""Each sweep's expert reads per request at full coverage, :math:`X = w\,c_{1s,g}`
    (``expert_c1``, dims ``sweep``), from one ``expert_cost`` :math:`c_{1s}` per group."""
    loc, scale = expert_prior(design, pr)
    c1s = pm.LogNormal("expert_cost", loc, scale, dims="group")
    group = design.unit_group[design.sweep_unit]
    return pm.Deterministic("expert_c1", passes * c1s[group], dims="sweep")
