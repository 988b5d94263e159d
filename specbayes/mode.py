r"""The posterior mode, and the whitening at it: where sampling starts.

The least-squares reference (:func:`specbayes.model.least_squares_reference`) whitens every
block (verifier, cell) with the Gauss–Newton precision of a per-block fit that has one noise
sd :math:`\hat\sigma` (the rms residual), a moment estimate of the noise growth
:math:`\hat\gamma \in [0, 2]` and knees fitted by alternation. On large sweep sets that point
can be far from the posterior, and the sampler then pays for the whole distance in every
trajectory: on the paper's dense verifiers Qwen3-8B and Qwen3-14B (19,462 rows) the reference
had :math:`\hat\sigma = 0.131`, :math:`\hat\gamma = 0.65`, while the posterior sits at
:math:`\sigma_0 = 0.0076`, :math:`\gamma = 2.5` — the data precision 300 times the whitening's
— with units 35–133 whitened sd from the reference; nutpie took 220–320 leapfrog steps per
draw at step size 0.06.

Here the sampling model's own log density (value and gradient, the compiled likelihood) is
maximised by L-BFGS (:func:`lbfgs`, whose line search backs off the law's walls) from the
feasible start (:meth:`LatencyModel.feasible_start`), and every block is whitened again at
that mode
(:func:`specbayes.model.whitening`) with the mode's coefficients, knees, :math:`\sigma_0` and
rows' noise growth :math:`(1 - x)^{-\gamma}`; further rounds repeat it in the new, better
conditioned coordinates until a round finds nothing to gain. The structure (which effects,
scales and slopes are sampled) stays the one the least-squares reference decided. On the same
19,462 rows: 16–17 leapfrog steps per draw at step size 0.23 after two rounds (a prototype
with SciPy's L-BFGS-B, restarted); on all 58,701 rows of the paper's dense verifiers: four
rounds (252 s, the last gaining 0.005), then 31 steps per draw at step size 0.16.

The mode is in the unconstrained coordinates with their log-Jacobians (so a learned scale's
mode is that of its log), which is where the samplers move.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from specbayes.model import (
    LatencyModel,
    _graph_softness,
    _residual_jacobian,
    _set_row_knees,
    whitening,
)

__all__ = ["ModeSearch", "find_mode", "lbfgs", "mode_start", "whiten_at"]

#: Most L-BFGS iterations, its memory, and the stop: the log density gained less than
#: ``GAIN_TOL`` over the last ``GAIN_WINDOW`` iterations (or a gradient below ``GRAD_TOL``).
LBFGS_ITERATIONS = 20000
LBFGS_MEMORY = 30
GAIN_TOL = 0.01
GAIN_WINDOW = 100
GRAD_TOL = 1e-6
#: Rounds of (mode, whitening at the mode): at most ``MAX_ROUNDS``, until a round's search
#: gains less than ``ROUND_TOL`` in log density (its start was already the mode). The paper's
#: dense verifiers need three: the first two end at the iteration cap (L-BFGS in coordinates
#: whitened far from the mode is slow), the third converges, the fourth gains 0.005.
MAX_ROUNDS = 4
ROUND_TOL = 1.0


def lbfgs(objective, x: np.ndarray, max_iter: int = LBFGS_ITERATIONS):
    r"""Minimise ``objective(x) -> (f, grad)`` by L-BFGS with a backtracking line search
    that treats a non-finite ``f`` as a step too long.

    The latency law has walls (:math:`\lambda C_2 \ge 1` at some row: log density
    :math:`-\infty`) next to its mode; SciPy's L-BFGS-B line search stops at the first
    infinite value it meets (on the paper's dense verifiers after 11 iterations, 100,000 short
    of the mode). Here the step halves until it is finite and satisfies Armijo's condition;
    pairs with :math:`s^\top y \le 0` are not stored, so the inverse-Hessian estimate stays
    positive definite.

    Returns
    -------
    x, f, iterations
    """
    f, g = objective(x)
    mem_s: list[np.ndarray] = []
    mem_y: list[np.ndarray] = []
    history = [f]
    it = 0
    for it in range(1, max_iter + 1):
        q = g.copy()
        coeffs = []
        for s_k, y_k in zip(reversed(mem_s), reversed(mem_y), strict=True):
            rho = 1.0 / (y_k @ s_k)
            a_k = rho * (s_k @ q)
            q -= a_k * y_k
            coeffs.append((rho, a_k))
        if mem_s:
            q *= (mem_s[-1] @ mem_y[-1]) / (mem_y[-1] @ mem_y[-1])
        else:
            q /= max(np.linalg.norm(g), 1.0)  # first step: at most unit length
        for (rho, a_k), s_k, y_k in zip(reversed(coeffs), mem_s, mem_y, strict=True):
            q += s_k * (a_k - rho * (y_k @ q))
        direction = -q
        slope = g @ direction
        if slope >= 0:  # not a descent direction: forget the curvature pairs
            mem_s.clear()
            mem_y.clear()
            direction = -g / max(np.linalg.norm(g), 1.0)
            slope = g @ direction
        step = 1.0
        while True:
            x_new = x + step * direction
            f_new, g_new = objective(x_new)
            if np.isfinite(f_new) and f_new <= f + 1e-4 * step * slope:
                break
            step *= 0.5
            if step < 1e-14:
                return x, f, it
        s_k, y_k = x_new - x, g_new - g
        if s_k @ y_k > 1e-12 * (s_k @ s_k):
            mem_s.append(s_k)
            mem_y.append(y_k)
            if len(mem_s) > LBFGS_MEMORY:
                mem_s.pop(0)
                mem_y.pop(0)
        x, f, g = x_new, f_new, g_new
        history.append(f)
        if np.max(np.abs(g)) < GRAD_TOL:
            break
        if len(history) > GAIN_WINDOW and history[-GAIN_WINDOW - 1] - f < GAIN_TOL:
            break
    return x, f, it


@dataclass
class ModeSearch:
    """What the mode search did (kept in the fit's config)."""

    rounds: list[dict] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return {"rounds": self.rounds, "seconds": round(self.seconds, 2)}


def _value_point(model, point: dict) -> dict:
    """Unconstrained values of the model's free variables from constrained ``point`` values
    (the model's initial point for variables ``point`` lacks)."""
    import pytensor.tensor as pt

    out = dict(model.initial_point())
    for rv in model.free_RVs:
        if rv.name not in point:
            continue
        value = np.asarray(point[rv.name], dtype=float)
        transform = model.rvs_to_transforms.get(rv)
        if transform is not None:
            value = transform.forward(pt.as_tensor(value), *rv.owner.inputs).eval()
        out[model.rvs_to_values[rv].name] = np.asarray(value, dtype=float)
    return out


def find_mode(lm: LatencyModel, start: dict) -> tuple[dict, dict]:
    r"""Maximise the log density of ``lm.sampling_model`` from ``start`` by L-BFGS.

    Parameters
    ----------
    lm : LatencyModel
    start : dict
        Constrained values of the free variables (a feasible point: every row's latency
        finite, e.g. :meth:`LatencyModel.feasible_start`).

    Returns
    -------
    point : dict
        Values of every unobserved variable at the mode (constrained, and the deterministics
        ``log_coef``, ``log_knee_verifier``, ...).
    info : dict
        ``logp_start``, ``logp``, ``iterations`` (of :func:`lbfgs`).
    """
    model = lm.sampling_model
    values0 = _value_point(model, start)
    grad_vars = model.continuous_value_vars
    # one compiled function for the value (with the transforms' log-Jacobians) and its
    # gradient: the rows' likelihood kernel computes both in one pass
    fn = model.logp_dlogp_function(ravel_inputs=True, initial_point=values0)
    fn.set_extra_values({})
    x0 = np.concatenate([np.ravel(values0[v.name]) for v in grad_vars])

    def unpack(x):
        out, i = {}, 0
        for v in grad_vars:
            shape = np.shape(values0[v.name])
            size = int(np.prod(shape))
            out[v.name] = x[i : i + size].reshape(shape)
            i += size
        return out

    def objective(x):
        value, grad = fn(x)
        if not np.isfinite(value):  # past a wall: the line search backs off
            return np.inf, np.zeros_like(x)
        return -float(value), -grad

    f0 = objective(x0)[0]
    if not np.isfinite(f0):
        raise RuntimeError("the mode search needs a feasible start (log density not finite)")
    x, f, iterations = lbfgs(objective, x0)
    values = unpack(x)
    at = model.compile_fn(
        model.unobserved_value_vars,
        inputs=model.value_vars,
        on_unused_input="ignore",
        point_fn=False,
    )
    outs = at(*[values[v.name] for v in model.value_vars])
    point = {v.name: np.asarray(o) for v, o in zip(model.unobserved_value_vars, outs, strict=True)}
    info = {"logp_start": -float(f0), "logp": -float(f), "iterations": int(iterations)}
    return point, info


def whiten_at(lm: LatencyModel, point: dict) -> tuple[LatencyModel, dict]:
    r"""A :class:`LatencyModel` whitened at ``point`` (a mode from :func:`find_mode`), and
    the start that puts its coefficients exactly there.

    The new reference is the point's flat coefficients :math:`\theta`; the block precisions
    are the Gauss–Newton ones at :math:`\theta`, the point's knees (the graph's soft wall),
    noise sd :math:`\sigma_0` and rows' noise growth :math:`(1 - x)^{-\gamma}`. Structure and
    priors are ``lm``'s.
    """
    d, par = lm.design, lm.param
    theta = par.ref.copy()
    theta[par.base_index] = point["log_coef"]
    if "log_coef_draft" in point:
        theta[par.draft_index] = point["log_coef_draft"]
    if "alpha" in point:
        a = np.asarray(point["alpha"], dtype=float)
        theta[par.alpha_index] = np.log(a / (1.0 - a))
    knees = (
        np.asarray(point.get("log_knee_verifier", par.knee_verifier), dtype=float),
        np.asarray(point.get("log_knee_drafter", par.knee_drafter), dtype=float),
    )
    layout = (par.base_index, par.draft_index, par.alpha_index)
    _set_row_knees(d, *knees)
    rows = np.arange(len(d.data))
    _, _, _, x = _residual_jacobian(theta, d, layout, rows, [], _graph_softness(d), jacobian=False)
    sigma0, gamma = float(point["sigma0"]), float(point["gamma"])
    row_scale = np.clip(1.0 - np.nan_to_num(x, nan=1.0), 1e-6, 1.0) ** -gamma
    param = whitening(d, theta, row_scale, sigma0, gamma, knees, lm.priors)
    new = LatencyModel(d, lm.priors, param=param, structure=lm.structure)
    free = {rv.name for rv in new.model.free_RVs}
    start = {k: np.asarray(v, dtype=float) for k, v in point.items() if k in free}
    start["z"] = np.zeros(param.n)
    theta_0, _ = new._start_state(start)
    start["z"] = new.z_step(start, theta_0, theta)
    return new, start


def mode_start(
    lm: LatencyModel, max_rounds: int = MAX_ROUNDS
) -> tuple[LatencyModel, dict, ModeSearch]:
    """Rounds of :func:`find_mode` and :func:`whiten_at` from ``lm``'s feasible start, until
    a round gains less than :data:`ROUND_TOL` (at most ``max_rounds``).

    Returns
    -------
    LatencyModel
        Whitened at the last mode.
    dict
        Its start: the mode (constrained values of the free variables).
    ModeSearch
        Per round: log density at its start and at the mode, L-BFGS iterations,
        the mode's ``sigma0`` and ``gamma``.
    """
    t0 = time.perf_counter()
    search = ModeSearch()
    start = lm.feasible_start()
    for _ in range(max_rounds):
        point, info = find_mode(lm, start)
        info.update(sigma0=float(point["sigma0"]), gamma=float(point["gamma"]))
        search.rounds.append(info)
        lm, start = whiten_at(lm, point)
        if info["logp"] - info["logp_start"] < ROUND_TOL:
            break
    search.seconds = time.perf_counter() - t0
    return lm, start, search
