"""specbayes — Bayesian latency models for speculative decoding in LLM serving.

Fits the interpretable latency model of Kong et al. (2026) — the latency law
``L = C1 / (1 - rps * C2)``, the speculative-decoding cycle decomposition and the MoE
expert-coverage correction — as hierarchical PyMC models, and turns the posterior into
deployment decisions with intervals.
"""

import warnings
from importlib.metadata import PackageNotFoundError, version

# PyTensor warns on its first import when no system BLAS is linked (every pip install): the
# models here are elementwise and matrix-vector work that NumPy's own BLAS serves, so the
# warning is noise to a user. Every module that imports PyTensor or PyMC is under this
# package, so the filter is set here, before any of them runs; the regex matches that one
# message only.
warnings.filterwarnings(
    "ignore",
    message=r"PyTensor could not link to a BLAS installation",
    category=UserWarning,
)

try:
    __version__ = version("specbayes")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
