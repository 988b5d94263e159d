r"""Deployment decisions with intervals, computed over posterior draws.

The questions are those of Kong et al. (arXiv 2605.15051) — speedup vs load, the break-even
load, the best draft length, capacity under an SLO — with the formulas of ``docs/model.md``.

Every quantity here is evaluated **per posterior draw** with the formulas of
:mod:`specbayes.laws` and only then summarised (:mod:`specbayes.intervals`): the reported
mean speedup is :math:`\mathbb{E}[L_\mathrm{dense}/L_\mathrm{sd}]`, not the ratio of mean
latencies, and intervals are quantiles of draws, not formulas at posterior means.

An *arm* is one server configuration on one workload — (verifier, hardware, drafter,
prefill, decode) — for which the fit provides draws of the six cycle coefficients and, with
a batch curvature, the knee in tokens per pass (``fit.coefficients``); alpha and k then give its
effective :math:`(C_1, C_2, C_3)` — :math:`C_3` the batch curvature (:func:`curvature`; 0 for a
fit of the paper's law),
so every latency here is :func:`laws.latency` of the law the model was fitted with. A fit with
the experimental knee (``specbayes fit --knee``) gives each draw a knee in tokens per pass
and its excess κ instead; an arm's knee :math:`(B_K, \Delta)` (:func:`laws.knee_costs`) then
goes to every law in place of :math:`C_3` (:func:`knee`). A ``moe`` fit gives each draw a
verifier pass's expert reads at full coverage and :math:`m/M`; an arm's
:class:`laws.Experts` (:func:`experts`) then goes to every law as ``experts=``.
All latencies here are the *mean* latency ``mu`` of the model (no observation noise): the
quantities a capacity plan is about.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from specbayes import laws
from specbayes.intervals import INTERVAL_PROB, summarize
from specbayes.plan_loads import (  # the public ones re-exported: see __all__
    _check_rps,
    _one_load,
    fitted_closed_loop,
    measured_max_rps,
    measured_stream_range,
    measured_streams,
    stream_grid,
)
from specbayes.slo import MEAN_LATENCY, check_slo, slo_loads

__all__ = [
    "Arm",
    "break_even",
    "capacity",
    "coefficient_draws",
    "compare",
    "cost_ratios",
    "curvature",
    "effective_cost_draws",
    "experts",
    "fitted_closed_loop",
    "knee",
    "law_term",
    "measured_max_rps",
    "measured_stream_range",
    "measured_streams",
    "optimal_k",
    "replicas",
    "speedup",
    "stream_grid",
]

COEFFICIENTS = ("c1p", "c1v", "c1d", "c2p", "c2v", "c2d")
#: Speculative costs beside them (laws.effective_costs): per cycle fixed and per sequence,
#: and the drafter's prefill over the verifier's.
CYCLE_COSTS = laws.SPECULATIVE_COSTS
KNEES = ("knee_tokens",)
#: The experimental knee's draws (``priors={"knee": ...}``), per row when the fit has them.
KNEE_LAW = ("knee_at", "knee_excess", "knee_c2v")
#: The ``moe`` level's draws: a pass's expert reads at full coverage and m/M.
EXPERTS = ("c1s", "expert_ratio")
DEFAULT_KS: tuple[int, ...] = tuple(range(0, 11))
#: P(C2R > 1) at or above which a configuration gets the note's "red flag".
RED_FLAG_PROB = 0.9


@dataclass(frozen=True)
class Arm:
    """One configuration on one workload.

    Parameters
    ----------
    verifier, hardware : str
        Labels as in the fitted data.
    prefill, decode : float
        Mean prompt and output tokens of the workload.
    drafter : str, optional
        Draft model (``None``: the fit's only drafter for this verifier, or dense).
    cell : str, optional
        Workload label; defaults to ``"<prefill>x<decode>"``.
    alpha : float, optional
        Per-token acceptance; ``None`` uses the fit's latent alpha draws where alpha was
        inferred.
    k : int
        Draft length (0 = dense).
    """

    verifier: str
    hardware: str
    prefill: float
    decode: float
    drafter: str | None = None
    cell: str | None = None
    alpha: float | None = None
    k: int = 0
    extra: dict = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if self.alpha is not None and not 0.0 < self.alpha <= 1.0:
            raise ValueError(f"alpha must lie in (0, 1]; got {self.alpha}")
        if self.k < 0 or int(self.k) != self.k:
            raise ValueError(f"k must be a non-negative integer; got {self.k}")
        if not (self.prefill >= 1 and self.decode >= 1):  # the cost trends take log(tokens)
            raise ValueError(
                f"prefill >= 1 and decode >= 1 token needed; got {self.prefill:g}, "
                f"{self.decode:g} — give token counts of at least 1"
            )

    def row(self) -> pd.DataFrame:
        """This arm as a one-row frame in the sweep schema (for ``fit.coefficients``)."""
        cell = self.cell or f"{round(self.prefill)}x{round(self.decode)}"
        row = dict(
            verifier=self.verifier,
            hardware=self.hardware,
            prefill=float(self.prefill),
            decode=float(self.decode),
            cell=cell,
            k=int(self.k),
            alpha=np.nan if self.alpha is None else float(self.alpha),
            **self.extra,
        )
        if self.drafter is not None:
            row["drafter"] = self.drafter
        return pd.DataFrame([row])

    def label(self) -> str:
        if self.k == 0:
            return f"{self.verifier} dense"
        a = "alpha inferred" if self.alpha is None else f"alpha={self.alpha:g}"
        return f"{self.verifier} + {self.drafter or 'drafter'} k={self.k} {a}"


def _columns(name: str, draws: np.ndarray, stats: Sequence[str], prob: float) -> dict:
    """``{name_stat: column}`` of :func:`summarize` over the sample axis."""
    table = summarize(draws, prob=prob)
    return {f"{name}_{stat}": table[stat].to_numpy() for stat in stats}


def _check_alpha(alpha: Any) -> np.ndarray:
    a = np.asarray(alpha, dtype=float)
    if np.any(~np.isfinite(a)) or np.any((a <= 0) | (a > 1)):
        raise ValueError(f"alpha must lie in (0, 1]; got {np.ravel(a)[:5].tolist()}")
    return a


def _check_ks(ks: Iterable[int]) -> np.ndarray:
    k = np.asarray(list(ks))
    if k.size == 0 or np.any(k < 0) or np.any(k != np.round(k)):
        raise ValueError("draft lengths k must be non-negative integers")
    return k.astype(int)


def coefficient_draws(fit: Any, *arms: Arm) -> list[dict[str, np.ndarray]]:
    """Posterior draws of the six cycle coefficients of each arm, each of shape ``(sample,)``.

    All arms are evaluated in one ``fit.coefficients`` call, so arms sharing a verifier,
    hardware and cell share the same draws of their common coefficients. Cells the fit
    never saw are predicted by the model (trend plus a per-cell deviation drawn from its
    prior); an unknown verifier or hardware raises ``ValueError`` from the fit. A ``moe`` fit
    adds its expert reads ``c1s`` and ``expert_ratio`` (m/M) (:func:`experts`).
    """
    # ask for SD rows (k >= 1) so the drafter coefficients are filled; a fit that knows no
    # drafter for this verifier answers for dense rows only
    rows = pd.concat([replace(a, k=max(a.k, 1)).row() for a in arms], ignore_index=True)
    try:
        ds = fit.coefficients(rows)
    except ValueError:
        if any(a.k > 0 for a in arms):
            raise
        ds = fit.coefficients(pd.concat([a.row() for a in arms], ignore_index=True))
    n = ds.sizes["sample"]
    # a knee's or expert reads' draws only where the fit has them (absent: no such term)
    law = tuple(name for name in KNEE_LAW + EXPERTS if name in ds)
    return [
        {
            **{
                name: np.asarray(ds[name].isel(row=i).values, dtype=float)
                if name in ds
                else np.full(n, np.inf)  # a fit without knees: no batch curvature
                for name in COEFFICIENTS + KNEES + law
            },
            # the costs per speculative cycle (fixed, per sequence): 0 for a fit without them
            **{
                name: np.asarray(ds[name].isel(row=i).values, dtype=float)
                if name in ds
                else np.zeros(n)
                for name in CYCLE_COSTS
            },
        }
        for i in range(len(arms))
    ]


def _alpha_draws(fit: Any, arm: Arm, n: int, k: np.ndarray) -> np.ndarray:
    if arm.alpha is not None:
        return np.full(n, float(_check_alpha(arm.alpha)))
    if np.all(k == 0):
        return np.full(n, 0.5)  # unused: E = 1 at k = 0
    cell = arm.cell or f"{round(arm.prefill)}x{round(arm.decode)}"
    try:
        draws = np.asarray(fit.alpha_draws(arm.verifier, arm.drafter, cell), dtype=float)
    except (AttributeError, KeyError, ValueError) as exc:
        raise ValueError(
            f"{arm.label()}: no acceptance rate — pass alpha (the fit has no inferred alpha "
            f"for this verifier/drafter/cell: {exc})"
        ) from exc
    if draws.shape != (n,):
        raise ValueError(f"alpha draws of {arm.label()} do not align with coefficient draws")
    return draws


def _costs(
    fit: Any, coefs: dict[str, np.ndarray], arm: Arm, alpha: Any = None, k: Any = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, Any]:
    """:func:`laws.effective_costs`, :func:`curvature` and :func:`knee` or :func:`experts`
    over coefficient draws, broadcasting alpha and k after them: ``(C1, C2, C3, term)``."""
    n = coefs["c1p"].shape[0]
    k = np.asarray(arm.k if k is None else k)
    if alpha is None:
        alpha = _alpha_draws(fit, arm, n, k).reshape((n,) + (1,) * k.ndim)
    else:
        alpha = _check_alpha(alpha)[None, ...]
    extra = max(np.ndim(alpha) - 1, k.ndim)
    c = {name: value.reshape((n,) + (1,) * extra) for name, value in coefs.items()}
    k = k[None, ...]
    c1, c2 = laws.effective_costs(
        *(c[name] for name in COEFFICIENTS), arm.decode, alpha, k,
        **{name: c[name] for name in CYCLE_COSTS},
    )  # fmt: skip
    c3 = curvature(c, arm.decode, alpha, k)
    term = laws.map_term(law_term(c, arm.decode, alpha, k), lambda x: np.broadcast_to(x, c2.shape))
    return c1, c2, np.broadcast_to(c3, c2.shape), term


def law_term(coefs: dict, decode: Any, alpha: Any, k: Any) -> Any:
    """The law's term beyond :math:`C_1, C_2, C_3` of coefficient draws: :func:`knee` or
    :func:`experts` (a fit has at most one), else ``None``."""
    term = knee(coefs, decode, alpha, k)
    return experts(coefs, decode, alpha, k) if term is None else term


def experts(coefs: dict, decode: Any, alpha: Any, k: Any) -> laws.Experts | None:
    r"""A ``moe`` fit's expert reads of coefficient draws (:class:`laws.Experts`: passes
    :math:`g/E` times :math:`c_{1s}`, :math:`m/M`, k), ``None`` without them."""
    if "c1s" not in coefs:
        return None
    share = laws.verifier_passes(decode, alpha, k) * coefs["c1s"]
    return laws.Experts(share, coefs["expert_ratio"], k)


def knee(coefs: dict, decode: Any, alpha: Any, k: Any) -> tuple[np.ndarray, np.ndarray] | None:
    r"""The experimental knee :math:`(B_K, \Delta)` of coefficient draws, ``None`` without one.

    From the draws' knee in tokens per pass :math:`K` (``knee_at``) and excess
    :math:`\kappa` (``knee_excess``): :math:`B_K = K/(k + 1)`,
    :math:`\Delta = \kappa (k + 1) w \bar c_{2v}` (``knee_c2v``: the group's verifier cost),
    :math:`w = g/E(\alpha, k)` (:func:`laws.knee_costs`, as the fit's own rows get theirs).
    """
    if "knee_at" not in coefs:
        return None
    passes = laws.verifier_passes(decode, alpha, k)
    return laws.knee_costs(coefs["knee_at"], coefs["knee_excess"], coefs["knee_c2v"], passes, k)


def curvature(coefs: dict, decode: Any, alpha: Any, k: Any) -> np.ndarray:
    """The batch curvature :math:`C_3` of coefficient draws: the knee in tokens per pass
    (:func:`laws.token_knee_curvature`; an ``inf`` or absent knee: none)."""
    c = {name: coefs.get(name, np.inf) for name in ("c2p", "c2v", "c2d", *KNEES)}
    return laws.token_knee_curvature(
        c["c2p"], c["c2v"], c["c2d"], decode, alpha, k, c["knee_tokens"]
    )


def effective_cost_draws(
    fit: Any, arm: Arm, *, alpha: Any = None, k: Any = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, Any]:
    r"""Draws of :math:`(C_1, C_2, C_3, \mathrm{term})` of an arm via
    :func:`laws.effective_costs`, :func:`curvature` (the batch curvature) and
    :func:`law_term` (pass it on as ``**laws.term_keywords(term)`` to the laws).

    ``alpha`` and ``k`` (arrays) override the arm's and broadcast after the sample axis:
    the result has shape ``(sample, *broadcast(alpha, k).shape)``. Without ``alpha`` an SD
    arm uses its own alpha, or the fit's latent-alpha draws when it has none.
    """
    (coefs,) = coefficient_draws(fit, arm)
    return _costs(fit, coefs, arm, alpha, k)


def _sd_and_dense(fit: Any, arm: Arm, k: Any = None):
    """Effective costs of an SD arm and of dense decoding, from the *same* coefficient draws."""
    (coefs,) = coefficient_draws(fit, arm)
    c1s, c2s, c3s, knee_s = _costs(fit, coefs, arm, k=k)
    c1d, c2d, c3d, knee_d = _costs(fit, coefs, replace(arm, k=0, alpha=None))
    return c1s, c2s, c3s, c1d, c2d, c3d, knee_s, knee_d


def _column(term: Any) -> Any:
    """A knee or expert reads of (sample,) draws as a column, for broadcasting against a load
    or k axis."""
    return laws.map_term(term, lambda x: x[:, None])


def _pair(term_sd: Any, term_dense: Any) -> dict[str, Any]:
    """The two arms' terms as keywords of :func:`laws.speedup` and the break-evens."""
    return laws.term_keywords(term_sd, "_sd") | laws.term_keywords(term_dense, "_dense")


# ---------------------------------------------------------------------------------------------


def speedup(
    fit: Any,
    arm: Arm,
    rps: Sequence[float] | None = None,
    *,
    concurrency: Sequence[float] | None = None,
    prob: float = INTERVAL_PROB,
):
    r"""Speedup of an SD arm over dense on the same server and workload, vs load.

    Give exactly one load grid. Open loop (``rps``): per draw
    :math:`S(\lambda) = L_\mathrm{dense}(\lambda) / L_\mathrm{sd}(\lambda)`
    (:func:`laws.speedup`); where only the dense server is saturated the draw counts as a
    win (``inf``); where only SD is saturated, a loss (``0``); where both are, undefined.
    Closed loop (``concurrency``, streams always in flight): per draw
    :math:`S(N) = L_\mathrm{dense}(N) / L_\mathrm{sd}(N)` with *the same* ``N`` streams in
    both arms (:func:`laws.closed_loop_speedup`) — also SD's throughput gain at ``N``; a
    closed loop never saturates.

    Returns
    -------
    pandas.DataFrame
        One row per load: ``rps`` (or ``concurrency``), ``mean, median, lo, hi, p_faster``
        (P(S > 1)); open loop also ``p_dense_saturated, p_sd_saturated``.
    """
    load, closed = _one_load(rps, concurrency)
    if arm.k == 0:
        raise ValueError("speedup needs an SD arm (k >= 1); dense is the baseline")
    c1s, c2s, c3s, c1d, c2d, c3d, knee_s, knee_d = _sd_and_dense(fit, arm)
    law = laws.closed_loop_speedup if closed else laws.speedup
    costs = (c[:, None] for c in (c1s, c2s, c1d, c2d, c3s, c3d))
    s = law(load[None, :], *costs, **_pair(_column(knee_s), _column(knee_d)))
    table = summarize(s, prob=prob)
    table.insert(0, "concurrency" if closed else "rps", load)
    table["p_faster"] = np.mean(s > 1.0, axis=0)
    if not closed:
        sat_d = laws.saturation_rps(c1d, c2d, c3d, **laws.term_keywords(knee_d))
        sat_s = laws.saturation_rps(c1s, c2s, c3s, **laws.term_keywords(knee_s))
        table["p_dense_saturated"] = np.mean(load[None, :] >= sat_d[:, None], axis=0)
        table["p_sd_saturated"] = np.mean(load[None, :] >= sat_s[:, None], axis=0)
    table.attrs.update(arm=arm.label(), prob=prob, draws=s, closed_loop=closed)
    return table


def cost_ratios(
    fit: Any, arm: Arm, *, ks: Iterable[int] = DEFAULT_KS[1:], prob: float = INTERVAL_PROB
) -> pd.DataFrame:
    r""":math:`C_{1R}` and :math:`C_{2R}` per draft length, with intervals and the red flag.

    The red flag (``docs/model.md``, "Speedup") is :math:`C_{2R} > 1`: SD's advantage
    shrinks with load and turns into a loss past :math:`\mathrm{RPS}^*`. A configuration is
    flagged when :math:`P(C_{2R} > 1) \ge` :data:`RED_FLAG_PROB`.

    Returns
    -------
    pandas.DataFrame
        One row per k: ``k, c1r_mean, c1r_lo, c1r_hi, c2r_mean, c2r_lo, c2r_hi,
        p_c1r_below_1, p_c2r_above_1, red_flag``.
    """
    ks = _check_ks(ks)
    if np.any(ks == 0):
        raise ValueError("cost ratios compare SD (k >= 1) with dense")
    c1s, c2s, _, c1d, c2d, *_ = _sd_and_dense(fit, arm, k=ks)
    c1r, c2r = c1s / c1d[:, None], c2s / c2d[:, None]
    p2 = np.mean(c2r > 1.0, axis=0)
    return pd.DataFrame(
        dict(
            k=ks,
            **_columns("c1r", c1r, ("mean", "lo", "hi"), prob),
            **_columns("c2r", c2r, ("mean", "lo", "hi"), prob),
            p_c1r_below_1=np.mean(c1r < 1.0, axis=0),
            p_c2r_above_1=p2,
            red_flag=p2 >= RED_FLAG_PROB,
        )
    )


def break_even(
    fit: Any,
    arm: Arm,
    *,
    ks: Iterable[int] | None = None,
    closed_loop: bool = False,
    prob: float = INTERVAL_PROB,
) -> pd.DataFrame:
    r"""Break-even load per draft length, as draws: :math:`\mathrm{RPS}^*` or :math:`N^*`.

    Open loop (default): per draw the two latency curves either cross once below the dense
    saturation rate (:func:`laws.break_even_rps`: with batch curvature found numerically;
    without it :math:`r^* = (C_{1R} - 1)/(C_{1R} - C_{2R})`, :func:`laws.break_even`) or
    never. ``closed_loop=True``: the concurrency :math:`N^*` — the same number of streams in
    both arms — beyond which SD loses (:func:`laws.break_even_concurrency`; without
    curvature :math:`N^* = (C_{1,\mathrm{dense}} - C_{1,\mathrm{sd}})/(C_{2,\mathrm{sd}} -
    C_{2,\mathrm{dense}})`). The never-crossing draws are reported as probabilities rather
    than hidden as ``NaN``:

    * ``p_always_wins`` — no crossing and SD faster at the start (:math:`C_{1R} < 1`; a moe
      fit's closed loop: at one stream): SD faster at every load the dense server sustains;
    * ``p_never_wins`` — no crossing and SD not faster at the start;
    * ``p_wins_then_loses`` / ``p_loses_then_wins`` — the crossing cases by the start.

    Open loop: ``rps_star`` and ``r_star``, the crossing in units of the dense load
    (:math:`\mathrm{RPS}^* C_{2,\mathrm{dense}}`), and ``dense_saturation_rps_median``;
    closed loop: ``n_star`` (streams). Intervals are over the draws that cross.
    """
    ks = _check_ks([arm.k] if ks is None else ks)
    if np.any(ks == 0):
        raise ValueError("break-even compares SD (k >= 1) with dense")
    c1s, c2s, c3s, c1d, c2d, c3d, knee_s, knee_d = _sd_and_dense(fit, arm, k=ks)
    law = laws.break_even_concurrency if closed_loop else laws.break_even_rps
    costs = (c1s, c2s, c1d[:, None], c2d[:, None], c3s, c3d[:, None])
    terms = _pair(knee_s, _column(knee_d))
    star = law(*costs, **terms)
    cross = np.isfinite(star)
    moe_start = closed_loop and isinstance(knee_s, laws.Experts)  # its grid starts at 1 stream
    c1r = 1.0 / laws.closed_loop_speedup(1.0, *costs, **terms) if moe_start else c1s / c1d[:, None]
    if closed_loop:
        stars = _columns("n_star", star, ("median", "lo", "hi"), prob)
    else:
        stars = {
            **_columns("rps_star", star, ("median", "lo", "hi"), prob),
            **_columns("r_star", star * c2d[:, None], ("median", "lo", "hi"), prob),
        }
    out = pd.DataFrame(
        dict(
            k=ks,
            **stars,
            p_wins_then_loses=np.mean(cross & (c1r < 1), axis=0),
            p_loses_then_wins=np.mean(cross & (c1r > 1), axis=0),
            p_always_wins=np.mean(~cross & (c1r < 1), axis=0),
            p_never_wins=np.mean(~cross & (c1r >= 1), axis=0),
        )
    )
    if closed_loop:
        out.attrs.update(n_star_draws=star)
    else:
        out["dense_saturation_rps_median"] = np.median(
            laws.saturation_rps(c1d, c2d, c3d, **laws.term_keywords(knee_d))
        )
        out.attrs.update(rps_star_draws=star)
    out.attrs.update(arm=arm.label(), prob=prob, closed_loop=closed_loop)
    return out


def optimal_k(
    fit: Any,
    arm: Arm,
    alphas: Sequence[float] | None,
    rps: Sequence[float] | None = None,
    *,
    ks: Iterable[int] = DEFAULT_KS,
    concurrency: Sequence[float] | None = None,
) -> pd.DataFrame:
    r"""The k-table over an (alpha, load) grid.

    The load is ``rps`` (open loop, :func:`laws.latency`) or ``concurrency`` (closed loop,
    :func:`laws.closed_loop_latency`: every k runs the same streams), exactly one of them;
    the table's load column is named after it.

    ``alphas=None`` plans at the arm's own acceptance: its ``alpha``, or — where the fit
    inferred it — its posterior draws, each draw with its own alpha (one grid row per load,
    ``alpha`` the draws' median, ``alpha_inferred`` True): the best k of a drafter whose
    acceptance nobody measured.

    For each draw and grid point the latency of every candidate k is computed
    (dense ``k = 0`` included); then

    * ``p_best_k<k>`` — the posterior probability that each k is the fastest;
    * ``k_bayes`` — the Bayes choice: lowest posterior *expected* latency. A draw in which
      a candidate saturates gives it infinite latency; where every candidate saturates in
      some draws (all expected latencies infinite) the choice is the candidate least likely
      to saturate, ties broken by median latency; ``-1`` where every candidate saturates in
      every draw;
    * ``expected_latency_k<k>`` — each candidate's posterior expected latency (``inf`` where
      it saturates in some draws), what an online controller compares (:mod:`specbayes.control`);
    * ``regret`` — :math:`\mathbb{E}[L_{k_\mathrm{bayes}} / L_{k^*_\mathrm{draw}}] - 1`, the
      expected relative latency lost against the per-draw best (over draws where the Bayes
      choice is unsaturated), and ``p_bayes_saturated``.
    """
    rps, closed = _one_load(rps, concurrency)
    ks = _check_ks(ks)
    inferred = alphas is None and arm.alpha is None
    if alphas is None:
        # shape (sample, 1, k): every draw at its own alpha
        (coefs,) = coefficient_draws(fit, arm)
        draws = _alpha_draws(fit, arm, coefs["c1p"].shape[0], ks)  # given, or inferred
        c1, c2, c3, bend = _costs(fit, coefs, arm, k=ks[None, :])
        alphas = np.array([float(np.median(draws))])
    else:
        alphas = _check_alpha(np.atleast_1d(alphas))
        # shape (sample, alpha, k) -> latencies (sample, alpha, rps, k)
        c1, c2, c3, bend = effective_cost_draws(fit, arm, alpha=alphas[:, None], k=ks[None, :])
    law = laws.closed_loop_latency if closed else laws.latency
    # (sample, alpha, k) -> (sample, alpha, load, k), as the costs
    bend = laws.map_term(bend, lambda x: x[:, :, None, :])
    lat = law(
        rps[None, None, :, None],
        c1[:, :, None, :],
        c2[:, :, None, :],
        c3[:, :, None, :],
        **laws.term_keywords(bend),
    )
    best_idx = np.argmin(lat, axis=-1)
    best_lat = np.min(lat, axis=-1)
    with np.errstate(invalid="ignore"):
        expected = np.mean(lat, axis=0)  # (alpha, rps, k)
    rows = []
    for i, a in enumerate(alphas):
        for j, r in enumerate(rps):
            e = expected[i, j]
            finite = np.isfinite(e)
            if finite.any():
                k_idx = int(np.argmin(np.where(finite, e, np.inf)))
            else:  # every candidate saturates in some draw: least risk, then median latency
                p_sat = np.mean(~np.isfinite(lat[:, i, j, :]), axis=0)
                med = np.quantile(lat[:, i, j, :], 0.5, axis=0, method="inverted_cdf")
                order = np.lexsort((med, p_sat))
                k_idx = int(order[0]) if p_sat[order[0]] < 1.0 else -1
            row: dict[str, Any] = {"alpha": a, "concurrency" if closed else "rps": r}
            if inferred:
                row["alpha_inferred"] = True
            all_sat = ~np.isfinite(best_lat[:, i, j])
            for kk_i, kk in enumerate(ks):
                row[f"p_best_k{kk}"] = float(np.mean((best_idx[:, i, j] == kk_i) & ~all_sat))
            for kk_i, kk in enumerate(ks):  # inf where k saturates in some draws
                row[f"expected_latency_k{kk}"] = float(e[kk_i])
            row["p_all_saturated"] = float(np.mean(all_sat))
            if k_idx < 0:
                row.update(
                    k_bayes=-1, expected_latency=np.inf, regret=np.nan, p_bayes_saturated=1.0
                )
            else:
                chosen = lat[:, i, j, k_idx]
                ok = np.isfinite(chosen)
                row.update(
                    k_bayes=int(ks[k_idx]),
                    expected_latency=float(e[k_idx]),  # inf when it saturates in some draws
                    regret=float(np.mean(chosen[ok] / best_lat[ok, i, j]) - 1.0),
                    p_bayes_saturated=float(np.mean(~ok)),
                )
            rows.append(row)
    out = pd.DataFrame(rows)
    out.attrs.update(arm=arm.label(), ks=ks.tolist())
    return out


def _below_zero_load(arm: Arm, ks: np.ndarray, c1: np.ndarray, slo: dict, prob: float, closed):
    """The one-line error of SLOs no load meets: zero-load latencies of the arm's k."""
    if set(slo) != {MEAN_LATENCY}:
        given = ", ".join(f"{name} {y:g} s" for name, y in slo.items())
        return ValueError(
            f"SLO {given}: no load meets all of them with probability {prob:g} for "
            f"{arm.label()} at any k in {list(ks)} — even an idle server misses one; relax "
            "the tightest (plan.capacity with one SLO at a time shows which)"
        )
    slo = slo[MEAN_LATENCY]
    zl = summarize(c1, prob=prob)
    best = int(np.argmin(zl["median"]))
    # the arm's own k first (the one asked about), then the fastest candidate if another
    own = int(np.flatnonzero(ks == arm.k)[0]) if arm.k in ks else best
    text = (
        f"k={ks[own]} takes {zl['median'][own]:.3g} s (90 % interval "
        f"{zl['lo'][own]:.3g}–{zl['hi'][own]:.3g} s)"
    )
    if own != best:
        text += f"; the fastest candidate, k={ks[best]}, {zl['median'][best]:.3g} s"
    at, load = ("~0 streams", "stream count") if closed else ("~0 req/s", "rate")
    return ValueError(
        f"SLO {slo:g} s is below the zero-load latency of {arm.label()}: even at {at} "
        f"{text}, so no {load} meets it with probability {prob:g} — raise the SLO above "
        f"{zl['hi'][own]:.3g} s"
    )


def capacity(
    fit: Any,
    arm: Arm,
    slo_latency: float | None = None,
    *,
    slo: dict[str, float] | None = None,
    prob: float = 0.9,
    ks: Iterable[int] = DEFAULT_KS,
    closed_loop: bool = False,
) -> pd.DataFrame:
    r"""Highest load whose mean latency — or every SLO in ``slo`` — is met with probability
    ``prob``.

    ``slo`` maps statistics to seconds: ``"latency"`` (the mean, the same as
    ``slo_latency``) and any metric the fit models (``{"ttft_p99": 2.0, "itl_p99": 0.05,
    "latency_p95": 20}``; :mod:`specbayes.slo`). Per draw each SLO holds up to its own load
    and all of them up to the smallest, so the capacity is the :math:`(1-p)` quantile of
    that minimum, as below for the mean alone; ``binding`` names the SLO with the smallest
    median load.

    Open loop, the request rate: :math:`L(\lambda)` rises with λ, so per draw
    :math:`L(\lambda) \le \mathrm{SLO}` exactly when :math:`\lambda \le
    \lambda_\mathrm{SLO}` (:func:`laws.rps_at_latency`: :math:`(1 - C_1/\mathrm{SLO})/C_2`
    without batch curvature; never when :math:`C_1 \ge \mathrm{SLO}`). Hence
    :math:`P(L(\lambda) \le \mathrm{SLO}) \ge p \iff \lambda \le
    Q_{1-p}(\lambda_\mathrm{SLO})`: the capacity is the :math:`(1-p)` quantile of the
    draws of :math:`\lambda_\mathrm{SLO}`.

    ``closed_loop=True``, the stream count: :math:`L(N)` rises with N likewise
    (:func:`laws.concurrency_at_latency`), so the capacity is the :math:`(1-p)` quantile of
    :math:`N_\mathrm{SLO}`, rounded down to whole streams (a server's max concurrency is an
    integer), with the throughput those streams deliver, :math:`N/L(N)` (Little's law),
    at probability ``prob``.

    Returns
    -------
    pandas.DataFrame
        One row per k: ``k, capacity_rps`` (at probability ``prob``), ``median_rps``
        (at probability 0.5), ``p_slo_feasible`` (P(zero-load latency < SLO)),
        ``zero_load_latency_median``, ``max_measured_rps`` and ``extrapolated`` (the
        capacity lies above every fitted rate of that k on this workload: the latency law
        is being trusted beyond the data — servers often bend upward there, e.g. when
        verification turns compute-bound or the batch hits ``max_num_seqs``). Closed loop:
        ``capacity_streams, median_streams, throughput_rps, max_measured_concurrency``
        in place of the ``*_rps`` columns.

    Raises
    ------
    ValueError
        If an SLO is not positive or names a metric the fit does not model, ``prob`` is not
        in (0, 1), or no load meets the SLOs with probability ``prob`` for any candidate.
    """
    slo = _slo(fit, slo_latency, slo)
    if not 0 < prob < 1:
        raise ValueError("prob must lie in (0, 1)")
    ks = _check_ks(ks)
    c1, c2, c3, bend = effective_cost_draws(fit, arm, k=ks)
    loads = slo_loads(fit, arm, ks, slo, (c1, c2, c3, bend), closed_loop)
    load = np.minimum.reduce(list(loads.values()))
    cap = np.quantile(load, 1.0 - prob, axis=0, method="inverted_cdf")
    median = np.quantile(load, 0.5, axis=0, method="inverted_cdf")
    if closed_loop:
        cap, median = np.floor(cap).astype(int), np.floor(median).astype(int)
    unit = "streams" if closed_loop else "rps"
    out = pd.DataFrame(
        {
            "k": ks,
            f"capacity_{unit}": cap,
            f"median_{unit}": median,
            "p_slo_feasible": np.mean(load > 0, axis=0),
            "zero_load_latency_median": np.median(c1, axis=0),
        }
    )
    if len(slo) > 1:
        names = list(loads)
        medians = np.stack([np.median(loads[n], axis=0) for n in names])
        out["binding"] = [names[i] for i in np.argmin(medians, axis=0)]
    if closed_loop:
        with np.errstate(all="ignore"):
            tput = cap / laws.closed_loop_latency(cap, c1, c2, c3, **laws.term_keywords(bend))
        out["throughput_rps"] = np.quantile(tput, 1.0 - prob, axis=0, method="inverted_cdf")
    measured = "concurrency" if closed_loop else "rps"
    out[f"max_measured_{measured}"] = measured_max_rps(fit, arm, ks, load=measured)
    out["extrapolated"] = ~(out[f"capacity_{unit}"] <= out[f"max_measured_{measured}"])
    if not np.any(cap > 0):
        raise _below_zero_load(arm, ks, c1, slo, prob, closed_loop)
    out.attrs.update(arm=arm.label(), slo=slo, prob=prob, closed_loop=closed_loop)
    return out


def _slo(fit: Any, slo_latency: float | None, slo: dict | None) -> dict[str, float]:
    """One SLO dict from ``slo_latency`` (the mean) and ``slo``, checked against the fit."""
    if slo_latency is None and not slo:
        raise ValueError("give an SLO: slo_latency (mean, seconds) or slo={metric: seconds}")
    both = dict(slo or {})
    if slo_latency is not None:
        if MEAN_LATENCY in both and both[MEAN_LATENCY] != slo_latency:
            raise ValueError("slo_latency and slo['latency'] disagree: give the mean once")
        both[MEAN_LATENCY] = slo_latency
    return check_slo(fit, both)


def replicas(
    fit: Any,
    arm: Arm,
    total_rps: float | None = None,
    slo_latency: float | None = None,
    *,
    prob: float = 0.9,
    ks: Iterable[int] = DEFAULT_KS,
    total_streams: float | None = None,
    slo: dict[str, float] | None = None,
) -> pd.DataFrame:
    r"""Identical servers needed to carry a total load under the SLO with probability ``prob``
    (the mean latency ``slo_latency``, or every SLO in ``slo``, as in :func:`capacity`).

    Give exactly one total. Open loop, ``total_rps`` (req/s): with load spread evenly over n
    servers each sees :math:`\lambda/n`, so the smallest n is :math:`\lceil \lambda /
    \mathrm{capacity} \rceil` (:func:`capacity`). Closed loop, ``total_streams``: N streams
    always in flight, spread evenly over n servers, each holds at most :math:`\lceil N/n
    \rceil` of them, which meets the SLO exactly when it is at most the capacity in streams
    :math:`N_\mathrm{cap}` (``capacity(..., closed_loop=True)``: whole streams, the latency
    rising with N), so again :math:`n = \lceil N / N_\mathrm{cap} \rceil`. ``inf`` where no
    load meets the SLO for that k.
    """
    if (total_rps is None) == (total_streams is None):
        raise ValueError(
            "give exactly one of total_rps (open loop, req/s) or total_streams (closed loop, "
            "streams in flight)"
        )
    if slo_latency is None and not slo:
        raise ValueError(
            "replicas are sized under an SLO: give slo_latency (seconds) or slo={metric: seconds}"
        )
    closed = total_streams is not None
    total = float(total_streams if closed else total_rps)
    if not (np.isfinite(total) and total > 0):
        raise ValueError(f"{'total_streams' if closed else 'total_rps'} must be finite and > 0")
    cap = capacity(fit, arm, slo_latency, slo=slo, prob=prob, ks=ks, closed_loop=closed)
    per = cap["capacity_streams" if closed else "capacity_rps"]
    with np.errstate(divide="ignore"):
        n = np.where(per > 0, np.ceil(total / np.where(per > 0, per, 1)), np.inf)
    out = cap.assign(replicas=n)
    out.attrs.update(cap.attrs, **{"total_streams" if closed else "total_rps": total})
    return out


def compare(
    fit: Any, a: Arm, b: Arm, rps: Sequence[float], *, prob: float = INTERVAL_PROB
) -> dict[str, Any]:
    r"""Speedup of arm ``b`` over arm ``a`` vs load, their crossover, and their saturation loads.

    The common case: a dense sweep and an SD sweep (perhaps with alpha inferred) on the same
    workload — "where does SD stop paying?". Per draw
    :math:`S = L_a/L_b`, the crossover :math:`\lambda^\times` solves :math:`L_a = L_b`
    (:func:`laws.break_even_rps` with ``a`` as the baseline), and each arm saturates at
    :func:`laws.saturation_rps` (:math:`1/C_2` without batch curvature).

    Returns
    -------
    dict
        ``speedup`` (table as :func:`speedup`), ``crossover`` (one-row summary with
        ``p_cross``), ``saturation`` (per-arm summary of the saturation rate).
    """
    rps = _check_rps(rps)
    coef_a, coef_b = coefficient_draws(fit, a, b)
    c1a, c2a, c3a, knee_a = _costs(fit, coef_a, a)
    c1b, c2b, c3b, knee_b = _costs(fit, coef_b, b)
    s = laws.speedup(
        rps[None, :],
        c1b[:, None],
        c2b[:, None],
        c1a[:, None],
        c2a[:, None],
        c3b[:, None],
        c3a[:, None],
        **_pair(_column(knee_b), _column(knee_a)),
    )
    table = summarize(s, prob=prob)
    table.insert(0, "rps", rps)
    table["p_faster"] = np.mean(s > 1.0, axis=0)
    sat_a = laws.saturation_rps(c1a, c2a, c3a, **laws.term_keywords(knee_a))
    sat_b = laws.saturation_rps(c1b, c2b, c3b, **laws.term_keywords(knee_b))
    table["p_a_saturated"] = np.mean(rps[None, :] >= sat_a[:, None], axis=0)
    table["p_b_saturated"] = np.mean(rps[None, :] >= sat_b[:, None], axis=0)
    cross = laws.break_even_rps(c1b, c2b, c1a, c2a, c3b, c3a, **_pair(knee_b, knee_a))
    cs = summarize(cross, prob=prob)
    crossover = pd.DataFrame(
        dict(
            rps_median=cs["median"],
            rps_lo=cs["lo"],
            rps_hi=cs["hi"],
            p_cross=[float(np.mean(np.isfinite(cross)))],
            p_b_wins_at_zero_load=[float(np.mean(c1b < c1a))],
        )
    )
    sat = summarize(np.stack([sat_a, sat_b], axis=1), prob=prob)
    sat.insert(0, "arm", [a.label(), b.label()])
    return dict(speedup=table, crossover=crossover, saturation=sat)
