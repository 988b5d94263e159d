r"""Choose k online: a draft-length controller built from a fit.

A server is started with one ``num_speculative_tokens``; the best k moves with the load and
with the acceptance of the current prompt mix. This module turns a posterior into a
controller a serving stack can call, following the reading note's deployment checklist
(estimate the request rate over a sliding window, combine it with a recent acceptance
estimate, read k* from a table, and keep a minimum time between switches, since switching k
changes the KV budget and the kernels):

* :func:`k_table` — the posterior's k-table over an (alpha, load) grid
  (:func:`specbayes.plan.optimal_k`): each candidate's posterior *expected* latency, the Bayes
  choice, its regret and the probability that it is the fastest. Exported by
  ``specbayes control table FIT.nc --out table.csv`` and read back by :meth:`KTable.from_frame`,
  so a serving stack needs the CSV and this module, not the fit.
* :func:`arrival_rate` (:func:`recent_rate`: shortened on a burst), :func:`in_flight` and
  :func:`acceptance` — sliding-window estimators over the counters a vLLM server exports
  (requests received, speculative cycles and accepted draft tokens:
  ``vllm:spec_decode_num_drafts``, ``vllm:spec_decode_num_accepted_tokens``), as
  :class:`Sample` records.
* :func:`choose` — one decision: the k the table prefers at the estimated (alpha, load),
  with hysteresis (switch only when the current k's expected latency is at least ``margin``
  above the best's, or just after a change of the request rate, :func:`rate_change`) and a
  minimum dwell time before a switch that raises the server's utilisation
  (:meth:`KTable.utilisation`; one that relieves it is made at once).
* :class:`KController` — the same as an object with state: ``decide(now, window) -> k``.

Everything here is a pure function of the table and the observations: no clock, no I/O.
What a switch costs the server is not modelled here (the table knows only steady states).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from specbayes import laws

__all__ = [
    "ControllerConfig",
    "Decision",
    "KController",
    "KTable",
    "Sample",
    "acceptance",
    "arrival_rate",
    "choose",
    "in_flight",
    "k_table",
    "rate_change",
    "recent_rate",
]

#: Default acceptance grid of a table: the range drafters reach on real prompt mixes.
DEFAULT_ALPHAS = tuple(np.round(np.linspace(0.30, 0.95, 14), 3))


@dataclass(frozen=True)
class KTable:
    """Posterior expected latency of every candidate k over an (alpha, load) grid.

    Attributes
    ----------
    alphas : ndarray, shape (A,)
        Increasing per-token acceptance rates.
    loads : ndarray, shape (R,)
        Increasing loads: request rates (``load == "rps"``) or streams in flight
        (``"concurrency"``).
    ks : ndarray of int, shape (K,)
        Candidate draft lengths (0 = dense decoding).
    expected : ndarray, shape (A, R, K)
        Posterior expected mean latency (s); ``inf`` where a k saturates in some draws.
    k_bayes, regret, p_best : ndarray, shape (A, R)
        The Bayes choice, its expected relative latency lost against each draw's best, and
        the posterior probability that it is the fastest.
    load : {"rps", "concurrency"}
    arm : str
        The configuration the table was computed for.
    """

    alphas: np.ndarray
    loads: np.ndarray
    ks: np.ndarray
    expected: np.ndarray
    k_bayes: np.ndarray
    regret: np.ndarray
    p_best: np.ndarray
    load: str = "rps"
    arm: str = ""

    def __post_init__(self) -> None:
        a, r, k = len(self.alphas), len(self.loads), len(self.ks)
        if self.load not in ("rps", "concurrency"):
            raise ValueError(f"load must be 'rps' or 'concurrency', got {self.load!r}")
        if self.expected.shape != (a, r, k):
            raise ValueError(f"expected latencies of shape {self.expected.shape}, need {(a, r, k)}")
        for name in ("alphas", "loads"):
            grid = getattr(self, name)
            if len(grid) < 1 or np.any(np.diff(grid) <= 0):
                raise ValueError(f"{name} must be a non-empty increasing grid")

    def latencies(self, alpha: float, load: float) -> np.ndarray:
        """Expected latency of every k at ``(alpha, load)``: bilinear in the grid on log
        latency, clamped to the grid's edges; ``inf`` where a neighbouring grid point is."""
        wa = _weights(self.alphas, alpha)
        wr = _weights(self.loads, load)
        out = np.zeros(len(self.ks))
        for (i, u), (j, v) in ((x, y) for x in wa for y in wr):
            out = out + u * v * np.log(self.expected[i, j])
        return np.exp(out)

    def utilisation(self, alpha: float, load: float) -> np.ndarray:
        r"""Each k's utilisation at ``(alpha, load)`` under the law
        :math:`L = C_1/(1 - \rho)`: :math:`\rho = 1 - L(\text{lowest load})/L(\text{load})`
        from the expected latencies (1 where a k saturates; exact for a grid from 0 req/s
        on an open-loop table)."""
        lat, idle = self.latencies(alpha, load), self.latencies(alpha, float(self.loads[0]))
        with np.errstate(invalid="ignore"):
            return np.where(np.isfinite(lat), 1.0 - idle / lat, 1.0)

    def best(self, alpha: float, load: float) -> int:
        """The k of lowest expected latency at ``(alpha, load)`` (-1: every k saturates)."""
        lat = self.latencies(alpha, load)
        return int(self.ks[int(np.argmin(lat))]) if np.isfinite(lat).any() else -1

    def to_frame(self) -> pd.DataFrame:
        """One row per grid point: ``alpha``, the load, ``k_bayes``, ``regret``, ``p_best``
        and ``expected_latency_k<k>`` per candidate (the CSV ``specbayes control table``
        writes)."""
        rows = []
        for i, a in enumerate(self.alphas):
            for j, r in enumerate(self.loads):
                row = {"alpha": a, self.load: r, "k_bayes": int(self.k_bayes[i, j])}
                row.update(regret=self.regret[i, j], p_best=self.p_best[i, j])
                row.update({f"expected_latency_k{k}": self.expected[i, j, n]
                            for n, k in enumerate(self.ks)})  # fmt: skip
                rows.append(row)
        out = pd.DataFrame(rows)
        out.attrs["arm"] = self.arm
        return out

    @classmethod
    def from_frame(cls, frame: pd.DataFrame, arm: str = "") -> KTable:
        """The table back from :meth:`to_frame`'s rows (e.g. read from its CSV).

        Raises
        ------
        ValueError
            A column missing, or rows that do not form a full (alpha, load) grid.
        """
        load = "rps" if "rps" in frame else "concurrency"
        cols = [c for c in frame if c.startswith("expected_latency_k")]
        missing = [c for c in ("alpha", load, "k_bayes", "regret", "p_best") if c not in frame]
        if missing or not cols:
            raise ValueError(f"k-table: missing column(s) {missing or ['expected_latency_k<k>']}")
        alphas, loads = np.unique(frame["alpha"]), np.unique(frame[load])
        if len(frame) != len(alphas) * len(loads):
            raise ValueError(
                f"k-table: {len(frame)} rows do not form the {len(alphas)} x {len(loads)} "
                "(alpha, load) grid their values span"
            )
        f = frame.sort_values(["alpha", load])
        shape = (len(alphas), len(loads))
        ks = np.array([int(c.removeprefix("expected_latency_k")) for c in cols])
        order = np.argsort(ks)
        expected = f[cols].to_numpy(float).reshape(*shape, len(cols))[..., order]
        return cls(
            alphas=alphas, loads=loads, ks=ks[order], expected=expected,
            k_bayes=f["k_bayes"].to_numpy(int).reshape(shape),
            regret=f["regret"].to_numpy(float).reshape(shape),
            p_best=f["p_best"].to_numpy(float).reshape(shape), load=load, arm=arm,
        )  # fmt: skip


def _weights(grid: np.ndarray, x: float) -> list[tuple[int, float]]:
    """(index, weight) of the grid points that linearly interpolate ``x`` (clamped)."""
    if not np.isfinite(x):
        raise ValueError(f"cannot look up a non-finite value {x!r} in the k-table")
    if x <= grid[0] or len(grid) == 1:
        return [(0, 1.0)]
    if x >= grid[-1]:
        return [(len(grid) - 1, 1.0)]
    j = int(np.searchsorted(grid, x))
    t = (x - grid[j - 1]) / (grid[j] - grid[j - 1])
    # no zero weight: 0 * log(inf) would be NaN where a grid point saturates
    return [(i, w) for i, w in ((j - 1, 1.0 - t), (j, t)) if w > 0.0]


def k_table(
    fit: Any,
    arm: Any,
    *,
    alphas: Sequence[float] = DEFAULT_ALPHAS,
    rps: Sequence[float] | None = None,
    concurrency: Sequence[float] | None = None,
    ks: Iterable[int] = range(0, 8),
) -> KTable:
    """The posterior k-table of ``arm`` (a :class:`specbayes.plan.Arm`) over an (alpha, load)
    grid: :func:`specbayes.plan.optimal_k` per grid point, exactly one of ``rps`` (open loop)
    or ``concurrency`` (closed loop)."""
    from specbayes import plan

    table = plan.optimal_k(fit, arm, list(alphas), rps, ks=ks, concurrency=concurrency)
    table["p_best"] = [
        row[f"p_best_k{int(row['k_bayes'])}"] if row["k_bayes"] >= 0 else 0.0
        for _, row in table.iterrows()
    ]
    return KTable.from_frame(table, arm=f"{arm.verifier} + {arm.drafter} on {arm.hardware}")


@dataclass(frozen=True)
class Sample:
    """One scrape of a server's counters (cumulative since it started) and gauges.

    Attributes
    ----------
    t : float
        Time of the scrape (s, any origin).
    requests : float
        Requests received (``vllm:request_success`` + running + waiting, or the router's
        count).
    drafts : float
        Speculative cycles run (``vllm:spec_decode_num_drafts``).
    accepted : float
        Draft tokens accepted (``vllm:spec_decode_num_accepted_tokens``).
    k : int
        Draft length in effect since the previous sample.
    running : float
        Requests in flight at ``t`` (``vllm:num_requests_running`` + waiting); NaN if unknown.
    """

    t: float
    requests: float
    drafts: float = 0.0
    accepted: float = 0.0
    k: int = 0
    running: float = float("nan")


def _span(window: Sequence[Sample], now: float, seconds: float) -> list[Sample]:
    """The samples of ``window`` in ``[now - seconds, now]``, in time order."""
    return sorted((s for s in window if now - seconds <= s.t <= now), key=lambda s: s.t)


def _count(window: Sequence[Sample], now: float, seconds: float) -> tuple[float, float] | None:
    """Requests received over the last ``seconds`` and the time they span: the counter's
    increase between the first and the last sample in that span (None with fewer than two)."""
    s = _span(window, now, seconds)
    if len(s) < 2 or s[-1].t <= s[0].t:
        return None
    return max(s[-1].requests - s[0].requests, 0.0), s[-1].t - s[0].t


def arrival_rate(window: Sequence[Sample], now: float, seconds: float = 30.0) -> float | None:
    """Requests per second over the last ``seconds``: the counter's increase over the time
    between the first and the last sample in that span (None with fewer than two)."""
    counted = _count(window, now, seconds)
    return None if counted is None else counted[0] / counted[1]


def _since_change(
    exposure: np.ndarray, count: np.ndarray, z: float, least: float = 0.0
) -> tuple[float, float]:
    r"""(count, exposure) since the last change of a Poisson rate, from cumulative counts.

    ``exposure`` and ``count`` are cumulative at successive scrapes (time and requests, or
    speculative cycles and accepted draft tokens). A change point: the interior scrape that
    splits them into two rates most unlike each other by the likelihood-ratio statistic
    :math:`G = 2\,[n_1\log\frac{n_1}{\hat\lambda T_1} + n_2\log\frac{n_2}{\hat\lambda T_2}]`
    (:math:`\hat\lambda` the whole span's rate), taken where :math:`G > z^2` (for one
    split, about ``z`` standard deviations) and at least ``least`` exposure follows it; else
    the whole span.
    """
    e, n = exposure - exposure[0], count - count[0]
    whole = (float(n[-1]), float(e[-1]))
    if len(e) < 3 or n[-1] <= 0 or e[-1] <= 0:
        return whole
    rate = n[-1] / e[-1]
    n1, t1 = n[1:-1], e[1:-1]  # before each interior scrape, and after it
    n2, t2 = n[-1] - n1, e[-1] - e[1:-1]
    with np.errstate(divide="ignore", invalid="ignore"):
        g = 2.0 * (np.nan_to_num(n1 * np.log(n1 / (rate * t1)))
                   + np.nan_to_num(n2 * np.log(n2 / (rate * t2))))  # fmt: skip
    g = np.where((t2 >= least) & (t1 > 0) & (t2 > 0), g, 0.0)
    j = int(np.argmax(g))
    return (float(n2[j]), float(t2[j])) if g[j] > z * z else whole


def recent_rate(
    window: Sequence[Sample], now: float, seconds: float = 30.0, z: float = 4.0
) -> float | None:
    r"""Requests per second since the rate last changed inside the last ``seconds``.

    The change point is the scrape that splits the window's arrivals into two Poisson rates
    most unlike each other (:func:`_since_change`), where the evidence passes ``z``: a
    burst, or its end, is read from its first scrape on, where the window's average would
    lag it by up to ``seconds``; else the window's rate."""
    found = rate_change(window, now, seconds, z)
    return None if found is None else found[0]


def rate_change(
    window: Sequence[Sample], now: float, seconds: float = 30.0, z: float = 4.0
) -> tuple[float, float | None] | None:
    """:func:`recent_rate` and the time of the change it reads from (None where the window
    shows no change); None with fewer than two samples in the span."""
    s = _span(window, now, seconds)
    if len(s) < 2 or s[-1].t <= s[0].t:
        return None
    t = np.array([x.t for x in s])
    n = np.maximum.accumulate(np.array([x.requests for x in s]))
    count, span = _since_change(t, n, z)
    changed = span < t[-1] - t[0]
    return count / span, (float(t[-1] - span) if changed else None)


def in_flight(window: Sequence[Sample], now: float, seconds: float = 30.0) -> float | None:
    """Mean requests in flight over the last ``seconds`` (closed loop's load; None if no
    sample in the span reports it)."""
    vals = [s.running for s in _span(window, now, seconds) if np.isfinite(s.running)]
    return float(np.mean(vals)) if vals else None


def acceptance(
    window: Sequence[Sample],
    now: float,
    seconds: float = 30.0,
    min_drafts: float = 100.0,
    z: float = 4.0,
) -> float | None:
    r"""Per-token acceptance alpha over the last ``seconds`` — since it last changed there —
    from the accepted draft tokens per speculative cycle.

    Over the intervals run at one draft length k (the most recent k > 0 in the span), the
    mean acceptance length :math:`\ell = 1 + \Delta\text{accepted}/\Delta\text{drafts}` is
    :math:`E(\alpha, k)` under i.i.d. acceptance, inverted by
    :func:`specbayes.laws.alpha_from_acceptance_length`. Where the accepted tokens per cycle
    change inside the span (a new prompt mix; :func:`_since_change` with the cycles as the
    exposure, evidence past ``z``, at least ``min_drafts`` cycles after the change) only
    the cycles since the change count — read from the first scrape that shows it. None when
    fewer than ``min_drafts`` cycles ran at that k in the span (dense decoding drafts
    nothing).
    """
    s = _span(window, now, seconds)
    ks = [b.k for b in s[1:] if b.k > 0]
    if not ks:
        return None
    k = ks[-1]
    steps = [(max(b.drafts - a.drafts, 0.0), max(b.accepted - a.accepted, 0.0))
             for a, b in itertools.pairwise(s) if b.k == k]  # fmt: skip
    drafts, accepted = np.cumsum([(0.0, 0.0), *steps], axis=0).T
    if drafts[-1] < min_drafts:
        return None
    accepted_n, drafts_n = _since_change(drafts, accepted, z, least=min_drafts)
    per_cycle = min(max(accepted_n / drafts_n, 1e-6), float(k))  # within (0, k]
    return float(laws.alpha_from_acceptance_length(1.0 + per_cycle, k))


@dataclass(frozen=True)
class ControllerConfig:
    r"""Settings of :func:`choose` (ASSUMPTIONS of the reading note's checklist).

    Attributes
    ----------
    window_s : float
        Sliding window of the request-rate and in-flight estimators (s): 30 s holds ~300
        arrivals at 10 req/s (a 6 % Poisson error).
    change_z : float
        Evidence for a change of the request rate or of the acceptance inside its window
        (:func:`recent_rate`, :func:`acceptance`; about standard deviations): past it the
        rate, or the acceptance, since the change is read.
    alpha_window_s : float
        Sliding window of the acceptance estimator (s): a loaded server runs hundreds of
        speculative cycles a second, so 5 s pins alpha to ~0.01 and a change of prompt mix
        shows within one scrape or two.
    min_dwell_s : float
        Least time after a switch before a switch to a k that runs at a *higher*
        utilisation at the estimated load (s): a switch changes vLLM's KV budget and kernels.
        A switch that relieves the server — to a k of lower utilisation
        :math:`\rho = 1 - L(0)/L(\lambda)` under the law :math:`L = C_1/(1 - \lambda C_2)`
        (:meth:`KTable.utilisation`) — is made at once: a queue's tail grows as
        :math:`1/(1 - \rho)`, faster than its mean, while the server waits. As a congestion
        controller cuts at once and grows slowly, this bounds oscillation (one raise per
        dwell) without holding a k the load has outgrown.
    margin : float
        Relative expected-latency gain over the current k the fastest k must promise for a
        switch (hysteresis). The k's within it of the fastest are near-ties, and the switch
        is to the one of lowest utilisation among them (a burst's queue, and its tail, grow
        as :math:`1/(1 - \rho)` while the law's mean is the steady state's).
    min_drafts : float
        Cycles needed in the window before its acceptance replaces the previous estimate.
    fresh_s : float
        For this long after the change of the request rate the estimator reads from
        (:func:`rate_change`), the table's choice is taken without the margin: the rate since
        the change is still forming (a burst's first scrape holds a second of it), and the k
        the margin would keep was chosen for the load before the change. A raise of the
        utilisation still waits the dwell, so the choice can relieve the server once and not
        flap back.
    """

    window_s: float = 30.0
    change_z: float = 4.0
    alpha_window_s: float = 5.0
    min_dwell_s: float = 60.0
    margin: float = 0.03
    min_drafts: float = 100.0
    fresh_s: float = 5.0

    def __post_init__(self) -> None:
        names = ("window_s", "change_z", "alpha_window_s", "min_dwell_s", "margin",
                 "min_drafts", "fresh_s")  # fmt: skip
        for name in names:
            if not getattr(self, name) >= 0:
                raise ValueError(f"ControllerConfig.{name} must be >= 0")


@dataclass(frozen=True)
class Decision:
    """What :func:`choose` saw and decided.

    ``k`` the draft length to run, ``switched`` whether it changed, ``since`` the time of the
    last switch, ``alpha`` and ``load`` the estimates used, ``best`` the table's best k there,
    ``reason`` one line of why.
    """

    k: int
    switched: bool
    since: float
    alpha: float
    load: float | None
    best: int
    reason: str
    latencies: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False)


def choose(
    table: KTable,
    k: int,
    since: float,
    alpha: float,
    now: float,
    window: Sequence[Sample],
    config: ControllerConfig = ControllerConfig(),
) -> Decision:
    """One decision: keep ``k`` (run since ``since``) or switch to the table's best.

    The load is the window's arrival rate (open-loop table; since its last change where the
    rate changed inside the window, :func:`rate_change`) or mean requests in flight
    (closed-loop table) over ``window_s``; the acceptance is the estimate over
    ``alpha_window_s``, else ``alpha`` (the last one). The choice is the k of lowest
    utilisation within ``margin`` of the fastest. A switch to it needs an expected latency
    at ``k`` above ``(1 + margin)`` times the fastest k's — except within ``fresh_s`` of a
    change of the rate — and, where it runs at a higher utilisation than ``k`` at this load,
    waits ``min_dwell_s`` since the last switch.
    """
    estimate = acceptance(window, now, config.alpha_window_s, config.min_drafts, config.change_z)
    alpha = alpha if estimate is None else estimate
    change = None
    if table.load == "rps":
        found = rate_change(window, now, config.window_s, config.change_z)
        load, change = (None, None) if found is None else found
    else:
        load = in_flight(window, now, config.window_s)
    fresh = change is not None and now - change <= config.fresh_s
    keep = dict(k=k, switched=False, since=since, alpha=alpha, load=load)
    if load is None:
        return Decision(**keep, best=k, reason="no load estimate yet: keep k")
    lat = table.latencies(alpha, load)
    if not np.isfinite(lat).any():
        return Decision(**keep, best=-1, reason="every k saturates here: keep k", latencies=lat)
    util = table.utilisation(alpha, load)
    # the k's within the margin of the fastest are near-ties for the mean; of them the one of
    # lowest utilisation is taken: the law's mean is the steady state, and a burst's queue
    # (and more so its tail) grows as 1/(1 - rho) while it lasts
    near = np.flatnonzero(lat <= (1.0 + config.margin) * lat.min())
    j = int(near[np.argmin(util[near])])  # the chosen k's index
    best = int(table.ks[j])
    keep["latencies"] = lat
    i = list(table.ks).index(k) if k in table.ks else None
    if best == k:
        return Decision(**keep, best=best, reason="k is the best here")
    current = np.inf if i is None else lat[i]
    rho = 1.0 if i is None else float(util[i])  # a k the table lacks: leave it
    # the dwell holds a raise of the utilisation only: a switch that relieves the server is
    # made at once (the current k's queue, and more so its tail, grows while it waits)
    if now - since < config.min_dwell_s and util[j] >= rho:
        return Decision(
            **keep, best=best, reason=f"dwell: {now - since:.0f} s since the last switch"
        )
    gain = current / lat.min() - 1.0
    if gain <= config.margin and not fresh:
        return Decision(**keep, best=best, reason=f"gain {gain:.1%} within the margin")
    why = f"the rate changed at {change:.0f} s: " if fresh else ""
    faster = current / lat[j] - 1.0
    return Decision(**{**keep, "k": best, "switched": True, "since": now}, best=best,
                    reason=f"{why}k={best} expected {faster:.1%} faster")  # fmt: skip


class KController:
    """A draft-length controller: ``decide(now, window) -> k``.

    Parameters
    ----------
    table : KTable
        From :func:`k_table` or :meth:`KTable.from_frame` (the exported CSV).
    k : int
        The draft length the server starts with.
    alpha : float
        Acceptance assumed until the window has ``min_drafts`` cycles (e.g. the fit's).
    config : ControllerConfig
    start : float
        Time the server started with ``k`` (the first dwell runs from it).

    Examples
    --------
    >>> table = KTable.from_frame(pd.read_csv("table.csv"))  # doctest: +SKIP
    >>> ctl = KController(table, k=3, alpha=0.7)  # doctest: +SKIP
    >>> k = ctl.decide(now, scrapes_of_the_last_minute)  # doctest: +SKIP
    """

    def __init__(
        self,
        table: KTable,
        k: int,
        alpha: float,
        config: ControllerConfig = ControllerConfig(),
        start: float = 0.0,
    ) -> None:
        if k not in table.ks:
            raise ValueError(f"k={k} is not a candidate of the table ({table.ks.tolist()})")
        self.table, self.config = table, config
        self.state = Decision(k=k, switched=False, since=start, alpha=alpha, load=None,
                              best=k, reason="start")  # fmt: skip
        self.history: list[Decision] = []

    def decide(self, now: float, window: Sequence[Sample]) -> int:
        """The draft length to run from ``now``, given the recent samples ``window``."""
        s = self.state
        d = choose(self.table, s.k, s.since, s.alpha, now, window, self.config)
        self.state = replace(d, latencies=np.zeros(0))
        self.history.append(d)
        return d.k
