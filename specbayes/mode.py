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
maximised from the feasible start (:meth:`LatencyModel.feasible_start`), and every block is
whitened again at that mode (:func:`specbayes.model.whitening`) with the mode's coefficients,
knees, :math:`\sigma_0` and rows' noise growth :math:`(1 - x)^{-\gamma}`. The search has two
stages. Far from the mode the law's walls (:math:`\lambda C_2 \ge 1` at some row) are close
and steps must be short: L-BFGS (:func:`lbfgs`, whose line search backs off the walls), for
:data:`LBFGS_WARM_ITERATIONS`. Then Newton (:func:`newton`) with the Hessian by differences
of the gradient, cheap because a block's whitened units meet other blocks' only through the
hyper-parameters (:func:`block_hessian`: 120 gradients a step where the dense Hessian
would take 1,576), until half the Newton decrement is below :data:`NEWTON_TOL`. The
structure (which effects, scales and slopes are sampled) stays the one the least-squares
reference decided. On all 58,701 rows of the paper's dense verifiers: 5,000 L-BFGS
iterations (28 s, log density −202,374 → 39,257), 60 Newton steps (→ 47,405), 77 s in
all; L-BFGS alone took four rounds and 234 s to reach 47,333 (its first two rounds ended
at a 20,000-iteration cap: L-BFGS in coordinates whitened far from the mode is slow).

The mode is in the unconstrained coordinates with their log-Jacobians (so a learned scale's
mode is that of its log), which is where the samplers move.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from specbayes.model import (
    LatencyModel,
    _blocks,
    _graph_softness,
    _residual_jacobian,
    _set_row_knees,
    whitening,
)

__all__ = ["ModeSearch", "block_hessian", "find_mode", "lbfgs", "mode_start", "newton", "whiten_at"]

#: Most L-BFGS iterations, its memory, and the stop: the log density gained less than
#: ``GAIN_TOL`` over the last ``GAIN_WINDOW`` iterations (or a gradient below ``GRAD_TOL``).
LBFGS_ITERATIONS = 20000
LBFGS_MEMORY = 30
GAIN_TOL = 0.01
GAIN_WINDOW = 100
GRAD_TOL = 1e-6
#: The first round's L-BFGS iterations: it leaves the least-squares start, where the
#: law's walls make Newton steps short; Newton takes over from there.
LBFGS_WARM_ITERATIONS = 5000
#: Most Newton iterations per round, and the stop: half the Newton decrement
#: :math:`g^\top |H|^{-1} g / 2` (the log density still to gain in the quadratic model)
#: below ``NEWTON_TOL`` with every curvature positive.
NEWTON_ITERATIONS = 100
NEWTON_TOL = 1e-3
#: Rounds of (mode, whitening at the mode): at most ``MAX_ROUNDS``, until a round's search
#: gains less than ``ROUND_TOL`` in log density (its start was already the mode) or its
#: Newton search converged.
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


def block_hessian(
    objective, x: np.ndarray, z: slice, blocks, h: float = 1e-6, threads: int = 1
) -> np.ndarray:
    r"""Hessian of ``objective`` at ``x`` by forward differences of its gradient, with the
    sparsity of the whitened units.

    A unit's whitened coordinates ``z`` (the slots of one block: a verifier and cell) meet
    the other blocks' only through the hyper-parameters, so one gradient difference along
    :math:`v = \sum_b e_{z, b_j}` (the j-th slot of every block at once) gives column
    :math:`b_j` of every block's own z-rows; the hyper-parameters' columns (everything
    outside ``z``) are differenced one at a time and give the hyper-by-z rows by symmetry.
    Cost: :math:`1 + \max_b |b| + n_\mathrm{hyper}` gradients instead of :math:`1 + n` —
    on the paper's dense verifiers 120 instead of 1,576. (Central differences, twice the
    gradients, took the Newton stage there from 49 s to 75 s, to the same mode.)

    Parameters
    ----------
    objective : callable
        ``x -> (f, grad)``, ``f`` infinite past a wall.
    z : slice
        Where the whitened units sit in ``x``.
    blocks : list of int arrays
        The blocks' slots (indices into ``z``), as :func:`specbayes.model._blocks` gives them.
    threads : int
        Gradients evaluated at once, for an ``objective`` that may be called from several
        threads and releases the GIL (:class:`NutpieDensity`; a PyTensor function is
        neither).
    """
    n = len(x)
    hess = np.zeros((n, n))
    grad = objective(x)[1]

    def product(v):  # H v; the other side, or a smaller step, where one crosses a wall
        for step in (h, -h, 1e-2 * h, -1e-2 * h):
            f_step, g_step = objective(x + step * v)
            if np.isfinite(f_step):
                return (g_step - grad) / step
        raise FloatingPointError("the Hessian's differences cross a wall of the law")

    def unit(k):
        v = np.zeros(n)
        v[k] = 1.0
        return v

    z_cols = [
        [z.start + np.asarray(b) for b in blocks if len(b) > j]
        for j in range(max(len(b) for b in blocks))
    ]
    directions = []
    for j, cols in enumerate(z_cols):
        v = np.zeros(n)
        for idx in cols:
            v[idx[j]] = 1.0
        directions.append(v)
    hyper = np.r_[0 : z.start, z.stop : n]
    with ThreadPoolExecutor(threads) as pool:
        columns = list(pool.map(product, [*directions, *(unit(k) for k in hyper)]))
    for j, cols in enumerate(z_cols):
        for idx in cols:
            hess[idx, idx[j]] = columns[j][idx]
    for k, column in zip(hyper, columns[len(z_cols) :], strict=True):
        hess[:, k] = column
        hess[k, z] = column[z]
    return 0.5 * (hess + hess.T)


def newton(objective, hessian, x: np.ndarray, max_iter: int = NEWTON_ITERATIONS):
    r"""Minimise ``objective`` by saddle-free Newton steps with a backtracking line search.

    Where :math:`H` is positive definite the step is Newton's, :math:`p = -H^{-1} g` (by
    Cholesky); elsewhere, with :math:`H = V \operatorname{diag}(w) V^\top`, it is
    :math:`p = -V \operatorname{diag}(1/|w|) V^\top g` (:math:`|w|` floored at
    :math:`10^{-9} \max |w|`): a descent direction across a saddle (a hierarchical scale
    far from its mode). The step halves until it is finite (inside the law's walls) and
    satisfies Armijo's condition. Stops when :math:`H` is positive definite and half the
    Newton decrement :math:`g^\top H^{-1} g / 2` is below :data:`NEWTON_TOL`. (On the
    paper's dense verifiers, 1,472 coordinates: a Cholesky factor ~0.03 s, an ``eigh``
    0.35 s, at each of ~40 steps.)

    Returns
    -------
    x, f, iterations, converged
    """
    from scipy.linalg import LinAlgError, cho_factor, cho_solve

    f, g = objective(x)
    for it in range(1, max_iter + 1):
        hess = hessian(x)
        try:  # positive definite (near the mode): Newton's step by Cholesky, ~10x an eigh
            direction = -cho_solve(cho_factor(hess), g)
            if 0.5 * float(-g @ direction) < NEWTON_TOL:
                return x, f, it - 1, True
        except LinAlgError:
            w, vecs = np.linalg.eigh(hess)
            scale = np.maximum(np.abs(w), 1e-9 * max(np.abs(w).max(), 1.0))
            direction = -vecs @ ((vecs.T @ g) / scale)
        slope = g @ direction
        step = 1.0
        while True:
            f_new, g_new = objective(x + step * direction)
            if np.isfinite(f_new) and f_new <= f + 1e-4 * step * slope:
                break
            step *= 0.5
            if step < 1e-10:
                return x, f, it, False
        x, f, g = x + step * direction, f_new, g_new
    return x, f, max_iter, False


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


class _Density:
    """What both evaluators share: ``model`` and each free variable's ``(slice, shape)`` in
    the raveled unconstrained values (``slices``)."""

    model: object
    slices: dict
    #: ``objective`` may run on several threads at once, in parallel
    thread_safe: bool = False

    def flatten(self, point: dict) -> np.ndarray:
        """The raveled unconstrained values of ``point`` (constrained values)."""
        values = _value_point(self.model, point)
        return np.concatenate([np.ravel(values[name]) for name in self.slices])


class GraphDensity(_Density):
    """The sampling model's log density compiled with PyTensor's default backend (C), for
    one model: the mode search's evaluator when no nutpie model is at hand.

    ``objective(x) -> (-logp, -grad)`` on the raveled unconstrained values (infinite past a
    wall), ``flatten(point)`` and ``point(x)`` (every unobserved variable, constrained and
    deterministic).
    """

    def __init__(self, model, start: dict):
        self.model = model
        values0 = _value_point(model, start)
        # one compiled function for the value (with the transforms' log-Jacobians) and its
        # gradient: the rows' likelihood kernel computes both in one pass
        self._fn = model.logp_dlogp_function(ravel_inputs=True, initial_point=values0)
        self._fn.set_extra_values({})
        self.slices, i = {}, 0
        for v in model.continuous_value_vars:
            shape = np.shape(values0[v.name])
            size = int(np.prod(shape))
            self.slices[v.name] = (slice(i, i + size), shape)
            i += size
        self._at = None

    def objective(self, x):
        value, grad = self._fn(x)
        if not np.isfinite(value):  # past a wall: the line search backs off
            return np.inf, np.zeros_like(x)
        return -float(value), -grad

    def point(self, x: np.ndarray) -> dict:
        model = self.model
        if self._at is None:
            self._at = model.compile_fn(
                model.unobserved_value_vars,
                inputs=model.value_vars,
                on_unused_input="ignore",
                point_fn=False,
            )
        values = {name: x[where].reshape(shape) for name, (where, shape) in self.slices.items()}
        outs = self._at(*[values[v.name] for v in model.value_vars])
        names = [v.name for v in model.unobserved_value_vars]
        return {name: np.asarray(o) for name, o in zip(names, outs, strict=True)}


def _double_pointer(a: np.ndarray):
    """``a``'s buffer as a C ``double *`` (``a`` float64 and C-contiguous)."""
    import ctypes

    return a.ctypes.data_as(ctypes.POINTER(ctypes.c_double))


class NutpieDensity(_Density):
    """The sampling model compiled once by nutpie (PyTensor's numba backend), for the mode
    search *and* the sampler.

    Every whitening of a :class:`LatencyModel` has the same graph
    (:meth:`LatencyModel.whitening_data` enters as shared data), so the mode search's rounds
    only set new values (:meth:`use`) and the sampler starts from the same compiled model
    (:meth:`for_sampling`). Against :class:`GraphDensity` per round this saves one C compile
    per round and the sampler's separate compile, and the numba log density is faster
    (on the paper's dense verifiers at the mode: 3.3 ms against 6.1 ms with its gradient).

    The search calls the very C callbacks nutpie's sampler calls (``compiled_logp_func``,
    ``compiled_expand_func``, through :mod:`ctypes`), not the PyTensor functions they were
    built from: those would compile the whole graph with numba a second time for Python's
    argument types on their first call (31.5 s and 9.7 s on the paper's dense verifiers),
    and a ctypes call releases the GIL, so :func:`block_hessian` can difference on several
    threads.
    """

    thread_safe = True

    def __init__(self, lm: LatencyModel):
        import nutpie

        self.model = lm.sampling_model
        self.compiled = nutpie.compile_pymc_model(self.model, jitter_rvs=set(self.model.free_RVs))
        names, slices, shapes = self.compiled.shape_info
        n_free = len(self.model.free_RVs)
        self._all = list(zip(names, slices, shapes, strict=True))
        self.slices = {name: (where, tuple(shape)) for name, where, shape in self._all[:n_free]}
        self._logp = self.compiled.compiled_logp_func.ctypes
        self._expand = self.compiled.compiled_expand_func.ctypes
        self.use(lm)

    def use(self, lm: LatencyModel) -> None:
        """Evaluate the density of ``lm`` (same design and structure, its whitening)."""
        self.data = lm.whitening_data()
        self.compiled = self.compiled.with_data(**self.data)

    def objective(self, x):
        """``(-logp, -grad)`` at ``x``; ``(inf, 0)`` past a wall of the law (the callback
        reports a log density or gradient that is not finite)."""
        x = np.ascontiguousarray(x, dtype=float)
        grad, logp = np.empty_like(x), np.empty(())
        code = self._logp(
            x.size,
            _double_pointer(x),
            _double_pointer(grad),
            _double_pointer(logp),
            self.compiled.user_data.ctypes.data,
        )
        if code != 0:  # 3, 4: gradient or value not finite (1: an error inside)
            return np.inf, np.zeros_like(x)
        return -float(logp), -grad

    def point(self, x: np.ndarray) -> dict:
        x = np.ascontiguousarray(x, dtype=float)
        flat = np.empty(self.compiled.n_expanded)
        code = self._expand(
            x.size,
            flat.size,
            _double_pointer(x),
            _double_pointer(flat),
            self.compiled.user_data.ctypes.data,
        )
        if code != 0:
            raise FloatingPointError(f"nutpie's expand callback failed (code {code})")
        return {name: flat[where].reshape(shape) for name, where, shape in self._all}

    def for_sampling(self, start: dict):
        """The compiled model with the current whitening, its chains started at ``start``
        jittered by U(-1, 1) in every unconstrained coordinate (as
        ``nutpie.compile_pymc_model(..., initial_points=start, jitter_rvs=all)``)."""
        import dataclasses

        x0 = self.flatten(start)

        def initial_point(seed=None):
            rng = np.random.default_rng(seed)
            return x0 + rng.uniform(-1.0, 1.0, x0.size)

        return dataclasses.replace(self.compiled, initial_point_func=initial_point)


def find_mode(
    lm: LatencyModel,
    start: dict,
    method: str = "lbfgs",
    max_iter: int | None = None,
    density: GraphDensity | NutpieDensity | None = None,
) -> tuple[dict, dict]:
    r"""Maximise the log density of ``lm.sampling_model`` from ``start``.

    Parameters
    ----------
    lm : LatencyModel
    start : dict
        Constrained values of the free variables (a feasible point: every row's latency
        finite, e.g. :meth:`LatencyModel.feasible_start`).
    method : {'lbfgs', 'newton'}
        :func:`lbfgs` (cheap steps; robust far from the mode, where the law's walls are
        near) or :func:`newton` with :func:`block_hessian` (120 gradients a step on the
        paper's dense verifiers, and a handful of steps near the mode).
    max_iter : int, optional
        Defaults :data:`LBFGS_ITERATIONS`, :data:`NEWTON_ITERATIONS`.
    density : GraphDensity or NutpieDensity, optional
        The compiled log density of ``lm``'s sampling model (a :class:`GraphDensity` of it
        when absent).

    Returns
    -------
    point : dict
        Values of every unobserved variable at the mode (constrained, and the deterministics
        ``log_coef``, ``log_knee_verifier``, ...).
    info : dict
        ``method``, ``logp_start``, ``logp``, ``iterations``, ``converged`` (Newton's test;
        for L-BFGS whether it stopped before ``max_iter``).
    """
    if method not in ("lbfgs", "newton"):
        raise ValueError("method must be 'lbfgs' or 'newton'")
    density = density or GraphDensity(lm.sampling_model, start)
    objective, slices = density.objective, density.slices
    x0 = density.flatten(start)
    f0 = objective(x0)[0]
    if not np.isfinite(f0):
        raise RuntimeError("the mode search needs a feasible start (log density not finite)")
    if method == "lbfgs":
        cap = LBFGS_ITERATIONS if max_iter is None else max_iter
        x, f, iterations = lbfgs(objective, x0, max_iter=cap)
        converged = iterations < cap
    else:
        blocks = _blocks(lm.design)[1]
        threads = (os.cpu_count() or 1) if density.thread_safe else 1
        x, f, iterations, converged = newton(
            objective,
            lambda x: block_hessian(objective, x, slices["z"][0], blocks, threads=threads),
            x0,
            max_iter=NEWTON_ITERATIONS if max_iter is None else max_iter,
        )
    point = density.point(x)
    info = {
        "method": method,
        "logp_start": -float(f0),
        "logp": -float(f),
        "iterations": int(iterations),
        "converged": bool(converged),
    }
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
    lm: LatencyModel, max_rounds: int = MAX_ROUNDS, density: NutpieDensity | None = None
) -> tuple[LatencyModel, dict, ModeSearch]:
    """Rounds of :func:`find_mode` and :func:`whiten_at` from ``lm``'s feasible start: L-BFGS
    for :data:`LBFGS_WARM_ITERATIONS` first, then Newton, until a round converges or gains
    less than :data:`ROUND_TOL` (at most ``max_rounds``).

    With ``density`` (compiled from ``lm``'s sampling model) every round evaluates it with
    the round's whitening (:meth:`NutpieDensity.use`), and it is left at the last one, ready
    for :meth:`NutpieDensity.for_sampling`; without, each round compiles a
    :class:`GraphDensity`.

    Returns
    -------
    LatencyModel
        Whitened at the last mode.
    dict
        Its start: the mode (constrained values of the free variables).
    ModeSearch
        Per round: the method, log density at its start and at the mode, iterations,
        whether it converged, the mode's ``sigma0`` and ``gamma``.
    """
    t0 = time.perf_counter()
    search = ModeSearch()
    start = lm.feasible_start()
    for r in range(max_rounds):
        if r == 0:
            point, info = find_mode(
                lm, start, "lbfgs", max_iter=LBFGS_WARM_ITERATIONS, density=density
            )
        else:
            try:
                point, info = find_mode(lm, start, "newton", density=density)
            except FloatingPointError as exc:  # the mode within a difference step of a wall:
                search.rounds.append({"method": "newton", "error": str(exc)})
                break  # keep the whitening at the last round's point
        info.update(sigma0=float(point["sigma0"]), gamma=float(point["gamma"]))
        search.rounds.append(info)
        lm, start = whiten_at(lm, point)
        if density is not None:
            density.use(lm)
        if info["logp"] - info["logp_start"] < ROUND_TOL or (r > 0 and info["converged"]):
            break
    search.seconds = time.perf_counter() - t0
    return lm, start, search
