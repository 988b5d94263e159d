"""specbayes — Bayesian latency models for speculative decoding in LLM serving.

Fits the interpretable latency model of Kong et al. (2026) — the latency law
``L = C1 / (1 - rps * C2)``, the speculative-decoding cycle decomposition and the MoE
expert-coverage correction — as hierarchical PyMC models, and turns the posterior into
deployment decisions with intervals.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("specbayes")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
