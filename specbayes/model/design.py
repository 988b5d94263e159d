r"""The data as the model sees them: observations, sweeps, units, and the structure chosen.

Indices
-------
``obs``
    one row of the validated sweep table (one load point).
``sweep``
    one configuration swept over load (:func:`specbayes.data.sweep_labels`): its own
    :math:`C_1, C_2` are what one sweep identifies, to about 1 %.
``unit``
    one (verifier, hardware, cell): the verifier coefficients of one workload.
``group``
    one (verifier, hardware): what the pooled structure shares across cells.
``draft_unit``, ``draft_group``
    one (verifier, hardware, cell, drafter) and one (verifier, hardware, drafter): the
    drafter's coefficients :math:`c_{1d}, c_{2d}` of one workload and their pooled level —
    each drafter of a verifier has its own (an EAGLE-3 head and a small draft model on the
    same verifier cost different amounts per draft token); where a workload's SD rows carry
    no acceptance, its latent alpha is one per draft unit.

Structure (what the data identify decides what is sampled)
----------------------------------------------------------
``anchored``
    Every unit has exactly one dense sweep and at most one SD sweep per drafter. Then the
    sweeps' own costs are the sampled axes and the six coefficients (with E where alpha is
    unknown) are derived from them plus prior-only positions: no coefficient is sampled
    against a ridge the data cannot resolve.
``pooled``
    Anything else (several draft lengths or acceptances per drafter, several cells, several
    drafters per workload): the coefficients are over-determined, so they are sampled (with
    the hierarchy over cells) and each sweep's costs deviate from the cycle decomposition by
    a learned ``tau``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from specbayes import laws
from specbayes.data import SweepTable
from specbayes.model.experts import expert_ratios
from specbayes.model.priors import COEFS, TRENDED, VERIFIER_COEFS

STRUCTURES = ("anchored", "pooled")

#: Model levels: the latency law of dense rows, the SD cycle decomposition over all rows, and
#: that with the MoE expert coverage (:mod:`specbayes.model.experts`).
LEVELS = ("dense", "sd", "moe")


@dataclass(frozen=True)
class Design:
    r"""Arrays of one dataset for :func:`specbayes.model.graph.build_model`.

    Per observation: ``obs_sweep``, ``load`` (rps open loop, N closed loop), ``obs_closed``,
    ``log_latency``, ``log_count`` (:func:`log_counts`: the requests each row's mean is
    taken over, relative to ``count_ref``). Per sweep: ``sweep_unit``, ``k``, ``alpha`` (NaN
    where unknown or dense), ``decode``, ``prefill``, ``closed`` (all rows closed loop),
    ``log_wall`` (:math:`-\log\lambda_\max` over its
    open-loop rows, ``inf`` if none: the upper bound of :math:`\log C_2`), ``drafter``,
    ``sweep_draft`` (its draft unit, -1 for dense sweeps). Per unit: ``unit_group``,
    ``unit_dense`` (its dense sweep, or -1). Per draft unit: ``draft_unit_of`` (its unit),
    ``draft_group_of`` (its draft group). ``sd`` lists the SD sweeps; ``coords`` the PyMC
    coordinates.
    """

    level: str
    structure: str
    data: pd.DataFrame
    coords: dict
    obs_sweep: np.ndarray
    load: np.ndarray
    obs_closed: np.ndarray
    log_latency: np.ndarray
    sweep_unit: np.ndarray
    k: np.ndarray
    alpha: np.ndarray
    decode: np.ndarray
    prefill: np.ndarray
    closed: np.ndarray
    log_wall: np.ndarray
    drafter: np.ndarray
    unit_group: np.ndarray
    unit_dense: np.ndarray
    sd: np.ndarray
    sweep_draft: np.ndarray
    draft_unit_of: np.ndarray
    draft_group_of: np.ndarray
    log_count: np.ndarray
    count_ref: float
    extra: dict = field(default_factory=dict)

    @property
    def e_max(self) -> np.ndarray:
        r"""Per sweep, the largest possible tokens per cycle: :math:`E(\alpha, k)` where alpha
        is known, :math:`k + 1` where it is not (1 for dense sweeps)."""
        known = np.isfinite(self.alpha)
        e_known = laws.expected_tokens(np.where(known, self.alpha, 1.0), self.k)
        return np.where(known, e_known, self.k + 1.0)


def configuration_key(data: pd.DataFrame) -> pd.Series:
    """A row's configuration: its sweep label without the loop mode.

    One configuration has one :math:`C_1, C_2` whether it was driven open or closed loop, so a
    GuideLLM sweep's synchronous point (closed loop, N = 1) joins its open-loop rates.
    """
    return data["sweep"].str.replace(r"\|(open|closed)$", "", regex=True)


def _sweep_frame(data: pd.DataFrame) -> pd.DataFrame:
    rps_open = data["rps"].where(data["concurrency"].isna())
    frame = data.assign(_rps_open=rps_open, _closed=data["concurrency"].notna())
    frame = frame.groupby("_config", sort=True)
    sweeps = frame.agg(
        verifier=("verifier", "first"),
        hardware=("hardware", "first"),
        cell=("cell", "first"),
        drafter=("drafter", "first"),
        k=("k", "first"),
        alpha=("alpha", "mean"),
        decode=("decode", "mean"),
        prefill=("prefill", "mean"),
        closed=("_closed", "all"),
        rps_max=("_rps_open", "max"),
    )
    sweeps["unit"] = sweeps["verifier"] + "|" + sweeps["hardware"] + "|" + sweeps["cell"]
    sweeps["group"] = sweeps["verifier"] + "|" + sweeps["hardware"]
    return sweeps


def choose_structure(sweeps: pd.DataFrame) -> str:
    """``anchored`` when every unit has one dense sweep and one SD sweep per drafter at most."""
    dense = sweeps[sweeps["k"] == 0].groupby("unit").size()
    sd = sweeps[sweeps["k"] > 0].groupby(["unit", "drafter"]).size()
    units = set(sweeps["unit"])
    if set(dense.index) == units and (dense == 1).all() and (sd <= 1).all():
        return "anchored"
    return "pooled"


def build_design(table: SweepTable, level: str = "sd", structure: str | None = None) -> Design:
    """Arrays and coordinates of a validated sweep table for model ``level``.

    Parameters
    ----------
    table : SweepTable
        From :func:`specbayes.data.validate_sweeps`.
    level : {"dense", "sd", "moe"}
        ``dense`` keeps the k = 0 rows only; ``moe`` is ``sd`` with the expert coverage
        (:mod:`specbayes.model.experts`), pooled, of MoE verifiers only.
    structure : {"anchored", "pooled"}, optional
        Forced structure; default :func:`choose_structure` (``pooled`` for ``moe``: the
        anchored structure derives the coefficients from the sweeps' costs and has no place
        for the expert reads).
    """
    if level not in LEVELS:
        raise ValueError(f"unknown model {level!r}: choose one of {', '.join(LEVELS)}")
    if level == "moe" and structure == "anchored":
        raise ValueError("the moe level is pooled: the anchored structure has no expert reads")
    data = table.data if level != "dense" else table.data[table.data["k"] == 0]
    data = data.reset_index(drop=True)
    if "concurrency" not in data:
        data["concurrency"] = np.nan
    data["_config"] = configuration_key(data)
    load = data["concurrency"].fillna(data["rps"]).round(9)
    if len(data) and load.groupby(data["_config"]).nunique().max() < 2:
        raise ValueError(
            "every configuration has a single load level (one rate or concurrency): the "
            "load-independent and load-dependent costs C1, C2 cannot be separated; sweep "
            "at least two loads per configuration"
        )
    sweeps = _sweep_frame(data)
    extra = {}
    if level == "moe":
        extra["expert_ratio"] = expert_ratios(data, sweeps["verifier"].to_numpy())
        structure = "pooled"
    structure = structure or choose_structure(sweeps)
    if structure not in STRUCTURES:
        raise ValueError(f"structure must be one of {STRUCTURES}; got {structure!r}")
    units = sorted(sweeps["unit"].unique())
    groups = sorted(sweeps["group"].unique())
    sweep_unit = sweeps["unit"].map({u: i for i, u in enumerate(units)}).to_numpy()
    unit_group = np.array([groups.index(u.rsplit("|", 1)[0]) for u in units])
    is_dense = sweeps["k"].to_numpy() == 0
    unit_dense = np.full(len(units), -1)
    unit_dense[sweep_unit[is_dense]] = np.flatnonzero(is_dense)
    closed = sweeps["closed"].to_numpy(bool)
    rps_max = sweeps["rps_max"].to_numpy(float)
    with np.errstate(divide="ignore"):
        log_wall = np.where(np.isfinite(rps_max), -np.log(rps_max), np.inf)
    obs_sweep = data["_config"].map({s: i for i, s in enumerate(sweeps.index)}).to_numpy()
    obs_closed = data["concurrency"].notna().to_numpy()
    load = np.where(obs_closed, data["concurrency"], data["rps"]).astype(float)
    sd = np.flatnonzero(~is_dense)
    alpha = sweeps["alpha"].to_numpy(float)
    drafts = _draft_units(sweeps, sd, units)
    log_count, count_ref = log_counts(data)
    coords = {
        "obs": np.arange(len(data)),
        "sweep": list(sweeps.index),
        "sd_sweep": list(sweeps.index[sd]),
        "sd_unknown": list(sweeps.index[sd][np.isnan(alpha[sd])]),
        "unit": units,
        "group": groups,
        "draft_unit": drafts["units"],
        "draft_group": drafts["groups"],
        "draft_latent": drafts["latent"],
        "cell": units,  # one unit per cell within a group; the label carries verifier|hw
        "coef": list(COEFS if level != "dense" else VERIFIER_COEFS),
        "coef_t": [c for c in TRENDED if level != "dense" or c in VERIFIER_COEFS],
        "coef_v": ["c1p", "c1v", "c2p", "c2v"],
        "coef_d": ["c1d", "c2d"],
        "cost": ["C1", "C2"],
    }
    design = Design(
        level=level,
        structure=structure,
        data=data,
        coords=coords,
        obs_sweep=obs_sweep,
        load=load,
        obs_closed=obs_closed,
        log_latency=np.log(data["latency"].to_numpy(float)),
        sweep_unit=sweep_unit,
        k=sweeps["k"].to_numpy(float),
        alpha=alpha,
        decode=sweeps["decode"].to_numpy(float),
        prefill=sweeps["prefill"].to_numpy(float),
        closed=closed,
        log_wall=log_wall,
        drafter=sweeps["drafter"].to_numpy(str),
        unit_group=unit_group,
        unit_dense=unit_dense,
        sd=sd,
        sweep_draft=drafts["sweep_draft"],
        draft_unit_of=drafts["unit_of"],
        draft_group_of=drafts["group_of"],
        log_count=log_count,
        count_ref=count_ref,
        extra={"sweeps": sweeps, "sweep_latent": drafts["sweep_latent"], **extra},
    )
    if structure == "anchored":
        _check_anchored(design)
    return design


def log_counts(rows: pd.DataFrame, ref: float | None = None) -> tuple[np.ndarray, float]:
    r"""Per row :math:`\log(n_i/n_\mathrm{ref})`, :math:`n_i` the requests its mean latency is
    taken over (``n_requests``), and :math:`n_\mathrm{ref}`.

    ``ref`` defaults to the geometric mean of the rows' counts (1 where none is known). A
    row without a count is taken at the reference (``0``): the typical row of the fit — what a
    planned load point with no count is predicted as.
    """
    n = rows["n_requests"] if "n_requests" in rows else pd.Series(np.nan, index=rows.index)
    n = pd.to_numeric(n, errors="coerce").to_numpy(float)
    known = np.isfinite(n) & (n > 0)
    if ref is None:
        ref = float(np.exp(np.log(n[known]).mean())) if known.any() else 1.0
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(known, np.log(n / ref), 0.0), ref


def _draft_units(sweeps: pd.DataFrame, sd: np.ndarray, units: list) -> dict:
    """Draft units (unit|drafter) and draft groups (group|drafter) of the SD sweeps, their
    indices, and the draft units whose alpha is latent (SD sweeps without one)."""
    spec = sweeps.iloc[sd]
    unit_label = (spec["unit"] + "|" + spec["drafter"]).to_numpy()
    group_label = (spec["group"] + "|" + spec["drafter"]).to_numpy()
    draft_units = sorted(set(unit_label))
    draft_groups = sorted(set(group_label))
    sweep_draft = np.full(len(sweeps), -1)
    sweep_draft[sd] = pd.Index(draft_units).get_indexer(unit_label)
    first = pd.Series(range(len(sd))).groupby(sweep_draft[sd]).first().to_numpy(int)
    unit_of = pd.Index(units).get_indexer(spec["unit"].to_numpy()[first])
    group_of = pd.Index(draft_groups).get_indexer(group_label[first])
    unknown = sd[spec["alpha"].isna().to_numpy()]
    latent = sorted({draft_units[sweep_draft[s]] for s in unknown})
    sweep_latent = np.full(len(sweeps), -1)
    labels = [draft_units[sweep_draft[s]] for s in unknown]
    sweep_latent[unknown] = pd.Index(latent).get_indexer(labels)
    return {
        "units": draft_units,
        "groups": draft_groups,
        "latent": latent,
        "sweep_draft": sweep_draft,
        "unit_of": unit_of,
        "group_of": group_of,
        "sweep_latent": sweep_latent,
    }


def _check_anchored(design: Design) -> None:
    r"""The SD wall bound must lie above the ratio floor for every prior draw of the dense C2.

    :math:`\log C_{2R} \in (-\log E_\max, \log\text{wall}_s - \log C_{2,\mathrm{dense}})` is
    non-empty for every dense :math:`C_2` below its own wall iff
    :math:`\lambda_{\max,s} \le E_\max\,\lambda_{\max,\mathrm{dense}}`.
    """
    dense = design.unit_dense[design.sweep_unit[design.sd]]
    wall_sd = design.log_wall[design.sd]
    with np.errstate(invalid="ignore"):
        gap = design.log_wall[dense] - wall_sd + np.log(design.e_max[design.sd])
    bad_rows = np.isfinite(wall_sd) & ~(gap > 0)
    if bad_rows.any():
        bad = [design.coords["sweep"][s] for s in design.sd[bad_rows]]
        raise ValueError(f"SD sweeps measured past E_max x the dense capacity: {bad}")
