r"""The formulas of the latency model — one definition each (docs/model.md §1–6).

Every function here is a plain, vectorised array function: arguments broadcast against each
other (posterior draws × grids), nothing is looped in Python, and no function warns on the
edges of its domain (``alpha = 1``, ``k = 0``, saturation). The PyMC models, the simulator
checks, the planner and the tests all call these.

The cheap closed forms (:func:`expected_tokens`, :func:`effective_costs`, :func:`latency`,
:func:`closed_loop_latency`, :func:`expert_coverage`, :func:`moe_latency_unrolled`,
:func:`moe_latency_implicit`, :func:`moe_fixed_cost_latency`,
:func:`moe_closed_loop_latency`) also accept PyTensor tensors,
so the model graph uses the very same code; with NumPy inputs PyTensor is never imported.

Notation
--------
``rps``  request rate λ (requests/s, achieved); ``L`` mean end-to-end latency (s);
``decode`` output tokens g; ``alpha`` per-token acceptance probability; ``k`` draft length
(``k = 0`` is dense decoding); ``c1*`` load-independent and ``c2*`` load-dependent costs with
suffix ``p`` (prefill, once per request), ``v`` (one verifier pass) and ``d`` (one drafter pass).

Layout
------
:mod:`._common`      shared helpers: NumPy or PyTensor namespace, quiet edges, float64 inputs
:mod:`.acceptance`   §1.2 acceptance: :func:`expected_tokens`, :func:`marginal_acceptance`,
                     ``alpha_from_*``
:mod:`.latency_law`  §1.1 the latency law (open and closed loop, headroom, saturation, the knee
                     and :data:`KNEE_WIDTH`), §1.3 the cycle decomposition (passes, pass and
                     cycle cost, effective costs and curvature)
:mod:`.decisions`    §1.4 speedup, break-even (ratios, concurrency, rate), :func:`optimal_k`
:mod:`.coverage`     §1.5 MoE expert coverage, the law with a configuration's expert reads
                     (:class:`Experts`, the Lambert-W fixed point, closed loop) and the
                     ``experts=`` plumbing; imports no other law
:mod:`.moe`          §1.5 routed tokens and the general MoE latency solvers

Every name is re-exported here, with the private helpers that tests and notes elsewhere name
(``_moe_step``, ``_open_headroom``, ``_soft_root``): callers write ``specbayes.laws.<name>``,
never the submodule.
:data:`KNEE_WIDTH` is read from this package by the knee formulas, so
``specbayes.laws.KNEE_WIDTH = w`` (or a test's monkeypatch of it) takes effect everywhere.
"""

from specbayes.laws.acceptance import (
    alpha_from_acceptance_length,
    alpha_from_marginal,
    expected_tokens,
    marginal_acceptance,
)
from specbayes.laws.coverage import (
    MOE_FIXED_STEPS,
    Experts,
    expert_coverage,
    map_term,
    moe_closed_loop_latency,
    moe_fixed_cost_latency,
    term_keywords,
)
from specbayes.laws.decisions import (
    BREAK_EVEN_GRID,
    break_even,
    break_even_concurrency,
    break_even_rps,
    closed_loop_speedup,
    optimal_k,
    speedup,
    speedup_from_ratios,
)
from specbayes.laws.latency_law import (
    KNEE_WIDTH,
    SPECULATIVE_COSTS,
    batch_curvature,
    closed_loop_latency,
    concurrency_at_latency,
    cycle_cost,
    effective_costs,
    effective_curvature,
    knee_costs,
    knee_latency,
    latency,
    latency_sensitivities,
    log_headroom,
    pass_cost,
    rps_at_latency,
    saturation_rps,
    token_knee_curvature,
    verifier_passes,
)
from specbayes.laws.latency_law import _open_headroom as _open_headroom
from specbayes.laws.latency_law import _soft_root as _soft_root
from specbayes.laws.moe import (
    MOE_IMPLICIT_ITERATIONS,
    MOE_IMPLICIT_NEWTON,
    SLOPE_CAP,
    moe_latency,
    moe_latency_implicit,
    moe_latency_unrolled,
    routed_tokens,
)
from specbayes.laws.moe import _moe_step as _moe_step

__all__ = [
    "BREAK_EVEN_GRID",
    "KNEE_WIDTH",
    "MOE_FIXED_STEPS",
    "MOE_IMPLICIT_ITERATIONS",
    "MOE_IMPLICIT_NEWTON",
    "SLOPE_CAP",
    "SPECULATIVE_COSTS",
    "Experts",
    "alpha_from_acceptance_length",
    "alpha_from_marginal",
    "batch_curvature",
    "break_even",
    "break_even_concurrency",
    "break_even_rps",
    "closed_loop_latency",
    "closed_loop_speedup",
    "concurrency_at_latency",
    "cycle_cost",
    "effective_costs",
    "effective_curvature",
    "expected_tokens",
    "expert_coverage",
    "knee_costs",
    "knee_latency",
    "latency",
    "latency_sensitivities",
    "log_headroom",
    "map_term",
    "marginal_acceptance",
    "moe_closed_loop_latency",
    "moe_fixed_cost_latency",
    "moe_latency",
    "moe_latency_implicit",
    "moe_latency_unrolled",
    "optimal_k",
    "pass_cost",
    "routed_tokens",
    "rps_at_latency",
    "saturation_rps",
    "speedup",
    "speedup_from_ratios",
    "term_keywords",
    "token_knee_curvature",
    "verifier_passes",
]
