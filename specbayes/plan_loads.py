"""Loads of a plan: the request rates or stream counts asked about, and those the fit measured.

A plan is evaluated over a grid of loads, open loop in requests per second or closed loop in
streams always in flight. This module checks such a grid (:func:`_one_load`), tells whether a
fit was fitted closed loop (:func:`fitted_closed_loop`) and gives the doubling stream counts
of a closed-loop sweep (:func:`stream_grid`), and reads from the fit's data the loads each arm
was measured at (:func:`measured_max_rps`, :func:`measured_streams`,
:func:`measured_stream_range`): a decision beyond them extrapolates the latency law.

Notes
-----
Split from :mod:`specbayes.plan`, which re-exports every public name here. The dependency goes
one way: ``plan`` imports this module, which needs :class:`specbayes.plan.Arm` for type hints
only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from specbayes.plan import Arm

__all__ = [
    "fitted_closed_loop",
    "measured_max_rps",
    "measured_stream_range",
    "measured_streams",
    "stream_grid",
]


def _check_rps(rps: Any) -> np.ndarray:
    r = np.atleast_1d(np.asarray(rps, dtype=float))
    if r.size == 0 or np.any(~np.isfinite(r)) or np.any(r < 0):
        raise ValueError("request rates must be finite and >= 0")
    return r


def _check_concurrency(concurrency: Any) -> np.ndarray:
    n = np.atleast_1d(np.asarray(concurrency, dtype=float))
    if n.size == 0 or np.any(~np.isfinite(n)) or np.any(n <= 0):
        raise ValueError("concurrency (streams in flight) must be finite and > 0")
    return n


def _one_load(rps: Any, concurrency: Any) -> tuple[np.ndarray, bool]:
    """The load grid and whether it is closed loop; exactly one of the two must be given."""
    if (rps is None) == (concurrency is None):
        raise ValueError(
            "give exactly one of rps (open loop, req/s) or concurrency (closed loop, streams)"
        )
    if concurrency is not None:
        return _check_concurrency(concurrency), True
    return _check_rps(rps), False


def measured_max_rps(fit: Any, arm: Arm, ks: Iterable[int], *, load: str = "rps") -> np.ndarray:
    """Highest fitted load (``load``: ``"rps"`` or ``"concurrency"``) of the arm's verifier,
    hardware and cell, per k.

    Any alpha counts (and any drafter for ``k = 0``); ``NaN`` where the fit has no row of that
    k. A decision at a higher load extrapolates the latency law beyond the data.
    """
    return _measured_load(fit, arm, ks, load, "max")


def _measured_load(fit: Any, arm: Arm, ks: Iterable[int], load: str, how: str) -> np.ndarray:
    """``how`` (``"max"`` or ``"min"``) of the fitted ``load`` of the arm's rows, per k."""
    data = getattr(fit, "data", None)
    ks = np.asarray(list(ks))
    if data is None or load not in data:
        return np.full(ks.shape, np.nan)
    cell = arm.cell or f"{round(arm.prefill)}x{round(arm.decode)}"
    rows = data[
        (data.verifier == arm.verifier) & (data.hardware == arm.hardware) & (data.cell == cell)
    ]
    if arm.drafter is not None:
        rows = rows[(rows.k == 0) | (rows.drafter == arm.drafter)]
    top = rows.groupby("k")[load].agg(how)
    return np.array([top.get(int(k), np.nan) for k in ks], dtype=float)


def fitted_closed_loop(fit: Any) -> bool:
    """Whether every row the fit was fitted to is closed loop (a ``concurrency`` given).

    Such a fit is planned in concurrency by default: its data say nothing about an open-loop
    server's queueing, and its user's question is "at N streams".
    """
    data = getattr(fit, "data", None)
    if data is None or "concurrency" not in data or not len(data):
        return False
    return bool(data["concurrency"].notna().all())


def stream_grid(top: float) -> list[int]:
    """Doubling stream counts 1, 2, 4, … up to ``top`` (64 when unknown): the concurrency
    levels closed-loop sweeps are run at."""
    top = top if np.isfinite(top) and top >= 1 else 64
    return [2**i for i in range(math.floor(math.log2(top) + 1e-9) + 1)]


def measured_streams(fit: Any, arm: Arm, pick=max) -> float:
    """Highest measured concurrency of the arm's SD sweep and of its dense baseline, the
    ``pick`` of the two (``NaN``: neither was measured closed loop)."""
    measured = measured_max_rps(fit, arm, [0, arm.k], load="concurrency")
    return pick(measured[np.isfinite(measured)], default=np.nan)


def measured_stream_range(fit: Any, arm: Arm) -> tuple[float, float]:
    """The stream counts measured in both the arm's SD sweep and its dense baseline:
    ``(lightest, heaviest)`` — the largest of the two sweeps' lowest concurrencies and the
    smallest of their highest (``NaN`` where either was not measured closed loop). A
    comparison of the two arms inside this range rests on data; beyond it, on the law."""
    ks = [0, arm.k]
    low = _measured_load(fit, arm, ks, "concurrency", "min")
    high = _measured_load(fit, arm, ks, "concurrency", "max")
    if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
        return np.nan, np.nan
    return float(np.max(low)), float(np.min(high))
