r"""GuideLLM-like sweep of one configuration.

GuideLLM's ``sweep`` profile runs a synchronous benchmark, a throughput benchmark (every
request at once), then rates evenly spaced between the two. The paper keeps 9 rates from the
synchronous rate up to the highest rate at which vLLM does not preempt. Here:

1. ``synchronous`` — one request at a time: latency :math:`L_1`, rate :math:`r_1 = 1/L_1`;
2. ``throughput`` — all requests at t = 0: the saturated rate :math:`X` (its row is kept,
   flagged ``saturated``);
3. the top rate: :math:`r_\mathrm{top} = f X` with ``f = top_fraction`` (0.9), lowered by a
   factor 0.85 until the point is neither preempting nor otherwise saturated (≤ 8 tries; the
   rejected tries are kept as saturated rows when ``keep_rejected``);
4. ``n_rates - 1`` open-loop points at :math:`r_1 + (r_\mathrm{top} - r_1)\,i/(n_\mathrm{rates}-1)`,
   :math:`i = 1..n_\mathrm{rates}-1` (the last is the top point), with ``constant`` (GuideLLM's
   default) or ``poisson`` arrivals.

Requests per open-loop point grow with the expected number in the system so the window
holds many turnovers of the batch: :math:`n = \mathrm{clip}(12\,\hat B + 60, 120, n_\max)`,
:math:`\hat B = \lambda L_1 / \max(1 - \lambda/X, 0.1)`; when the measured
:math:`B = \lambda L` asks for > 1.25 × that many, the point is rerun with them.
"""

from __future__ import annotations

import math

import numpy as np

from specbayes.sim.point import SimConfig, run_point

__all__ = ["sweep_config"]


def _n_for_rate(rate: float, l1: float, x: float, n_max: int) -> int:
    b = rate * l1 / max(1.0 - rate / x, 0.1)
    return int(np.clip(math.ceil(12 * b) + 60, 120, n_max))


def _open_point(cfg, arrival, rate, l1, x, n_max, seed, on_point=None) -> dict:
    """One open-loop point; rerun with more requests if the window held < 8 batch turnovers."""
    n = _n_for_rate(rate, l1, x, n_max)
    row = run_point(cfg, arrival, rate=rate, n_requests=n, seed=seed)
    b = row["rps"] * row["latency"]
    want = int(np.clip(math.ceil(12 * b) + 60, 120, n_max))
    if want > 1.25 * n:
        row = run_point(cfg, arrival, rate=rate, n_requests=want, seed=seed)
    if on_point is not None:
        on_point()
    return row


def sweep_config(
    cfg: SimConfig,
    *,
    n_rates: int = 9,
    arrival: str = "constant",
    seed: int = 0,
    n_sync: int = 24,
    n_max: int = 3000,
    top_fraction: float = 0.9,
    keep_rejected: bool = False,
    on_point=None,
) -> list[dict]:
    """Rows of one sweep: synchronous, throughput, then ``n_rates - 1`` open-loop rates.

    Parameters
    ----------
    cfg : SimConfig
        The configuration.
    n_rates : int
        Load points including the synchronous one (the paper's 9).
    arrival : {"constant", "poisson"}
        Arrival process of the open-loop points.
    seed : int
        Seed (each point derives its own from it and the configuration).
    n_sync : int
        Requests of the synchronous point.
    n_max : int
        Most requests per open-loop point.
    top_fraction : float
        First try of the top rate as a fraction of the throughput rate.
    keep_rejected : bool
        Keep rows of rejected top-rate tries (flagged saturated).
    on_point : callable, optional
        Called with no argument after each simulated point (progress bars).

    Returns
    -------
    list of dict
        Sweep-schema rows, each with ``sweep_index`` (0 = synchronous, -1 = throughput,
        -2 = a rejected top-rate try).
    """
    if n_rates < 2:
        raise ValueError(f"n_rates must be >= 2; got {n_rates}")
    if arrival not in ("constant", "poisson"):
        raise ValueError(f"arrival must be 'constant' or 'poisson'; got {arrival!r}")
    rows = []
    sync = run_point(cfg, "synchronous", n_requests=n_sync, seed=seed)
    sync["sweep_index"] = 0
    rows.append(sync)
    if on_point is not None:
        on_point()
    l1 = sync["latency"]
    r1 = sync["rps"]
    n_thr = max(3 * cfg.engine.max_num_seqs, 200)
    thr = run_point(cfg, "throughput", n_requests=n_thr, seed=seed)
    thr["sweep_index"] = -1
    rows.append(thr)
    if on_point is not None:
        on_point()
    x = max(thr["rps"], r1 * 1.05)

    f = top_fraction
    top = None
    for _ in range(8):
        rate = max(f * x, r1 * 1.02)
        row = _open_point(cfg, arrival, rate, l1, x, n_max, seed, on_point)
        if not row["saturated"]:
            top = (rate, row)
            break
        if keep_rejected:
            row["sweep_index"] = -2
            rows.append(row)
        f *= 0.85
    if top is None:  # keep the last try, flagged
        top = (rate, row)
    r_top, top_row = top
    for i in range(1, n_rates):
        if i == n_rates - 1:
            row = top_row
        else:
            rate = r1 + (r_top - r1) * i / (n_rates - 1)
            row = _open_point(cfg, arrival, rate, l1, x, n_max, seed, on_point)
        row["sweep_index"] = i
        rows.append(row)
    return rows
