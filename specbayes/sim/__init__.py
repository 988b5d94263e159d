"""The serving simulator: an iteration-level model of a continuous-batching LLM engine.

* :func:`simulate_point` — one load point (a sweep-schema row);
* :func:`sweep` — a GuideLLM-like sweep of one configuration (synchronous, throughput, then
  rates up to the highest non-preempting one);
* :func:`build_dataset` — the bundled ``demo`` / ``paper`` datasets.

Mechanism: :mod:`~specbayes.sim.engine` (scheduler, KV cache, SD, MoE), roofline step cost:
:mod:`~specbayes.sim.costs`, MoE routing: :mod:`~specbayes.sim.routing`, arrivals:
:mod:`~specbayes.sim.arrivals`.
"""

from specbayes.sim.api import simulate_point, sweep
from specbayes.sim.costs import EngineConfig
from specbayes.sim.datasets import build_dataset, design
from specbayes.sim.point import SimConfig, make_config, run_point

__all__ = [
    "EngineConfig",
    "SimConfig",
    "build_dataset",
    "design",
    "make_config",
    "run_point",
    "simulate_point",
    "sweep",
]
