"""Request arrival processes (open loop) and the load strategies the simulator knows.

Open loop: ``poisson`` (exponential gaps, rate λ), ``constant`` (gaps exactly 1/λ) and
``throughput`` (every request at t = 0, GuideLLM's throughput mode). Closed loop:
``synchronous`` (one request at a time) and ``concurrent`` (N streams; a stream sends its
next request the moment the previous one completes) — their issue times are decided inside
the engine.
"""

from __future__ import annotations

import numpy as np

__all__ = ["CLOSED", "OPEN", "STRATEGIES", "arrival_times"]

OPEN = ("poisson", "constant", "throughput")
CLOSED = ("synchronous", "concurrent")
STRATEGIES = OPEN + CLOSED


def arrival_times(strategy: str, n: int, rate: float | None, rng: np.random.Generator):
    """Arrival times (s) of ``n`` open-loop requests, sorted, starting near 0.

    Parameters
    ----------
    strategy : {"poisson", "constant", "throughput"}
        Arrival process.
    n : int
        Requests.
    rate : float
        Request rate λ (req/s) for ``poisson`` and ``constant``.
    rng : numpy.random.Generator
        Source of randomness (Poisson gaps).

    Returns
    -------
    ndarray
        Float64 times.
    """
    if strategy == "throughput":
        return np.zeros(n)
    if rate is None or not rate > 0 or not np.isfinite(rate):
        raise ValueError(f"strategy {strategy!r} needs a request rate > 0 (got {rate})")
    if strategy == "constant":
        return np.arange(n) / rate
    if strategy == "poisson":
        gaps = rng.exponential(1.0 / rate, size=n)
        gaps[0] = 0.0
        return np.cumsum(gaps)
    raise ValueError(f"unknown open-loop strategy {strategy!r}; choose one of {', '.join(OPEN)}")
