r"""Service-level objectives on several metrics: the load at which each is met, per draw.

Serving teams set SLOs on tails and streaming metrics — p99 TTFT, p99 ITL, p95 end-to-end —
as well as on the mean latency. An SLO names a statistic the fit models: ``"latency"`` (the
mean, the paper's law) or a per-point metric fitted with it (``fit(..., metrics=)``,
:mod:`specbayes.model.metrics`): ``ttft_p99``, ``itl_p99``, ``latency_p95``, ...

Every statistic rises with the running batch :math:`B`, so per posterior draw an SLO
:math:`m \le y` holds exactly up to a load: for a metric
:math:`m = (\rho_a C_1 + \rho_b C_2 B)/s`,

.. math::  B^* = \frac{y s - \rho_a C_1}{\rho_b C_2}

(none when :math:`B^* \le 0`: not even an idle server meets it), which is :math:`N^*` streams
in a closed loop and :math:`\lambda^* = B^*/L(B^*)` requests per second in an open one
(Little's law, :math:`L(B) = C_1 + B C_2 + B^2 C_3` the law's mean latency at that batch; with
the experimental knee the rate whose open-loop batch :math:`\lambda L(\lambda)` is
:math:`B^*`, :func:`load_at`). On the ``moe`` level the zero-load part carries the expert
reads at the batch's coverage, :math:`\rho_a(C_1 + \varphi(B(k+1))X)`: :math:`B^*` by
bisection (:func:`batch_at`), the rate again :math:`B^*/L(B^*)` with the closed loop's law.
All SLOs hold up to the smallest of their loads: the capacity of :func:`specbayes.plan.capacity`
is a quantile of that minimum over draws.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from specbayes import laws
from specbayes.laws.latency_law import _bisect_below

#: The SLO key of the mean end-to-end latency (the law's own statistic).
MEAN_LATENCY = "latency"


def parse_slo(text: str) -> dict[str, float]:
    """``"20"`` (a mean-latency SLO) or ``"ttft_p99=2,itl_p99=0.05"`` as ``{name: seconds}``.

    Raises
    ------
    ValueError
        A part that is not ``name=seconds``, a value that is not a positive number, or a
        name given twice.
    """
    text = text.strip()
    try:
        return {MEAN_LATENCY: _seconds(MEAN_LATENCY, text)} if "=" not in text else _pairs(text)
    except ValueError as exc:
        raise ValueError(
            f"--slo {text!r}: {exc} — give SECONDS (mean latency) or NAME=SECONDS,... "
            "(e.g. ttft_p99=2,itl_p99=0.05,latency_p95=20)"
        ) from None


def _pairs(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"{part!r} is not NAME=SECONDS")
        name = name.strip()
        if name in out:
            raise ValueError(f"{name} given twice")
        out[name] = _seconds(name, value)
    if not out:
        raise ValueError("no SLO given")
    return out


def _seconds(name: str, value: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise ValueError(f"{name}: {value!r} is not a number of seconds") from None
    if not (np.isfinite(x) and x > 0):
        raise ValueError(f"{name}: {value!r} must be a finite, positive number of seconds")
    return x


def check_slo(fit: Any, slo: dict[str, float]) -> dict[str, float]:
    """The SLO checked against what ``fit`` models (one line naming what is missing)."""
    modelled = tuple(getattr(fit, "metrics", ()))
    unknown = [name for name in slo if name != MEAN_LATENCY and name not in modelled]
    if unknown:
        raise ValueError(
            f"SLO on {unknown}: this fit models the mean latency"
            + (f" and {list(modelled)}" if modelled else " only")
            + f" — refit with `specbayes fit DATA --metrics {','.join(unknown)}` (the data must "
            "report them)"
        )
    for name, y in slo.items():
        if not (np.isfinite(y) and y > 0):
            raise ValueError(f"SLO {name}: {y!r} must be a positive number of seconds")
    return dict(slo)


def batch_at(
    fit: Any, arm, ks: np.ndarray, name: str, target: float, c1, c2, experts=None
) -> np.ndarray:
    r"""(sample, k) running batch :math:`B^*` at which metric ``name`` reaches ``target``
    (0 where no batch meets it, ``inf`` where a zero load-dependent share never reaches it).

    With ``experts`` (:class:`laws.Experts`, the ``moe`` level) the zero-load part carries
    the reads at the batch's coverage, :math:`\rho_a (C_1 + \varphi(B(k+1)) X)`
    (:func:`specbayes.model.metrics.log_fixed_cost`): still rising in :math:`B`, no longer
    linear, so :math:`B^*` is found by bisection below the linear law's batch at
    ``target`` (the reads only add)."""
    from specbayes.model.metrics import log_fixed_cost, log_unit

    rows = pd.concat([replace(arm, k=int(k)).row() for k in ks], ignore_index=True)
    shares = np.exp(fit.metric_shares(rows, name))  # (sample, term, k)
    scale = np.exp(log_unit(name, [arm.decode]))[0]
    with np.errstate(all="ignore"):
        b = (target * scale - shares[:, 0] * c1) / (shares[:, 1] * c2)
    b = np.where(np.isnan(b), 0.0, np.maximum(b, 0.0))
    if experts is None:
        return b

    def metric(batch):
        fixed = np.exp(log_fixed_cost(np.log(c1), np.log(batch), experts))
        return (shares[:, 0] * fixed + shares[:, 1] * c2 * batch) / scale

    return _bisect_below(metric, target, np.where(np.isfinite(b), b, 1e9))


def load_at(batch, c1, c2, c3, closed_loop: bool, knee=None, iterations: int = 60) -> np.ndarray:
    r"""Load at a running batch: :math:`N = B` streams, or :math:`\lambda = B / L(B)`.

    With :class:`laws.Experts` for ``knee`` (the ``moe`` level) the open-loop rate is
    :math:`B / L_\mathrm{closed}(B)` with the reads at the batch's coverage: the open-loop
    fixed point :math:`L(1 - \lambda C_2) = C_1 + \varphi(\lambda L(k+1)) X` is the closed
    loop's law at :math:`B = \lambda L`.

    With a ``knee`` = :math:`(B_K, \Delta)` (:func:`laws.knee_latency`, in place of
    :math:`C_3`) the open-loop law is smoothed in the batch of the law without the knee, so
    :math:`B / L_\mathrm{closed}(B)` is not its rate; its batch :math:`\lambda
    L(\lambda)` rises with :math:`\lambda` from 0 to ``inf`` at the saturation rate, and the
    rate is found by bisection on :math:`[0, \lambda_\mathrm{sat}]` (``iterations`` halvings).
    """
    if closed_loop:
        return batch
    if isinstance(knee, laws.Experts):
        with np.errstate(all="ignore"):
            return batch / laws.closed_loop_latency(batch, c1, c2, c3, experts=knee)
    if knee is not None:
        batch, c1, c2, b_k, slope = np.broadcast_arrays(
            *(np.asarray(x, dtype=float) for x in (batch, c1, c2, *knee))
        )
        lo, hi = np.zeros(batch.shape), laws.saturation_rps(c1, c2, knee=(b_k, slope))
        for _ in range(iterations):
            mid = 0.5 * (lo + hi)
            with np.errstate(all="ignore"):
                ok = mid * laws.knee_latency(mid, c1, c2, b_k, slope) <= batch
            lo, hi = np.where(ok, mid, lo), np.where(ok, hi, mid)
        return lo
    with np.errstate(all="ignore"):
        lam = batch / laws.closed_loop_latency(batch, c1, c2, c3)
        # past the batch an open loop can reach (inf without curvature, sqrt(C1/C3) with it)
        # the SLO holds up to the wall
        peak = np.sqrt(c1 / c3)
    return np.where(batch < peak, lam, laws.saturation_rps(c1, c2, c3))


def slo_loads(
    fit: Any, arm, ks: np.ndarray, slo: dict[str, float], costs: tuple, closed_loop: bool
) -> dict[str, np.ndarray]:
    """Per SLO, (sample, k) draws of the highest load that meets it (rps, or streams).

    ``costs`` is ``(C1, C2, C3)`` or ``(C1, C2, C3, term)`` (:func:`specbayes.plan.
    effective_cost_draws`; ``term`` a knee, :class:`laws.Experts` or ``None``)."""
    c1, c2, c3, knee = (*costs, None) if len(costs) == 3 else costs
    experts = knee if isinstance(knee, laws.Experts) else None
    out = {}
    for name, target in slo.items():
        if name == MEAN_LATENCY:
            inverse = laws.concurrency_at_latency if closed_loop else laws.rps_at_latency
            out[name] = inverse(target, c1, c2, c3, **laws.term_keywords(knee))
        else:
            # the metric's own shares of C1 and C2 (no knee in them): its batch, then the load
            batch = batch_at(fit, arm, ks, name, target, c1, c2, experts)
            out[name] = load_at(batch, c1, c2, c3, closed_loop, knee)
    return out
