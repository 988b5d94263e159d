"""Convenience entry points taking catalog names: one point, one sweep."""

from __future__ import annotations

import pandas as pd

from specbayes.sim.costs import EngineConfig
from specbayes.sim.point import make_config, run_point
from specbayes.sim.sweep import sweep_config

__all__ = ["simulate_point", "sweep"]


def simulate_point(
    verifier: str,
    *,
    hardware: str = "H100-SXM",
    drafter: str | None = None,
    tp: int = 1,
    prefill: int = 512,
    decode: int = 256,
    alpha: float | None = None,
    k: int = 0,
    rps: float | None = None,
    concurrency: int | None = None,
    strategy: str | None = None,
    n_requests: int | None = None,
    seed: int = 0,
    engine: EngineConfig | None = None,
    details: bool = False,
):
    """Simulate one load point and return its sweep-schema row (a dict).

    Exactly one load: ``rps`` (open loop, ``strategy`` "constant" — the default — or
    "poisson"), ``concurrency`` (closed loop, N streams), or ``strategy`` "synchronous" /
    "throughput". ``n_requests`` defaults to 400 (24 for synchronous). See
    :func:`specbayes.sim.point.make_config` for the configuration arguments and errors, and
    :func:`specbayes.sim.point.run_point` for what is measured.
    """
    cfg = make_config(
        verifier,
        hardware=hardware,
        drafter=drafter,
        tp=tp,
        prefill=prefill,
        decode=decode,
        alpha=alpha,
        k=k,
        engine=engine,
    )
    given = sum(x is not None for x in (rps, concurrency)) + (
        strategy in ("synchronous", "throughput")
    )
    if given != 1:
        raise ValueError(
            "give exactly one load: rps, concurrency, or strategy 'synchronous'/'throughput'"
        )
    if rps is not None:
        strategy = strategy or "constant"
        if strategy not in ("constant", "poisson"):
            raise ValueError(f"with rps the strategy is 'constant' or 'poisson', not {strategy!r}")
    elif concurrency is not None:
        strategy = "concurrent"
    n = n_requests or (24 if strategy == "synchronous" else 400)
    return run_point(
        cfg,
        strategy,
        rate=rps,
        concurrency=concurrency,
        n_requests=n,
        seed=seed,
        details=details,
    )


def sweep(
    verifier: str,
    *,
    hardware: str = "H100-SXM",
    drafter: str | None = None,
    tp: int = 1,
    prefill: int = 512,
    decode: int = 256,
    alpha: float | None = None,
    k: int = 0,
    n_rates: int = 9,
    arrival: str = "constant",
    seed: int = 0,
    engine: EngineConfig | None = None,
    on_point=None,
) -> pd.DataFrame:
    """A GuideLLM-like sweep of one configuration (see :mod:`specbayes.sim.sweep`).

    ``on_point`` (optional) is called after each simulated point, e.g. to advance a bar.
    """
    cfg = make_config(
        verifier,
        hardware=hardware,
        drafter=drafter,
        tp=tp,
        prefill=prefill,
        decode=decode,
        alpha=alpha,
        k=k,
        engine=engine,
    )
    rows = sweep_config(cfg, n_rates=n_rates, arrival=arrival, seed=seed, on_point=on_point)
    return pd.DataFrame(rows)
