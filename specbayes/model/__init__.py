r"""The model core: one generative PyMC model, one density everywhere.

Levels ``dense``, ``sd`` and ``moe`` (the expert coverage, :mod:`.experts`). Every fit runs on
it (:func:`specbayes.fit.fit`); the old core it replaced was removed on 2026-12-07.

Layout
------
:mod:`.priors`     prior configuration (plain dicts, merged with a user's)
:mod:`.design`     the data as arrays: observations, sweeps, units, the structure chosen
:mod:`.hierarchy`  the hierarchical location of the log coefficients (graph and prediction)
:mod:`.graph`      :func:`build_model` — the ``pm.Model``, top to bottom as the math
:mod:`.truncated`  PyMC's ``TruncatedNormal`` with a normaliser whose JAX gradient is finite
:mod:`.sampling`   the one default sampler configuration and a health summary
:mod:`.physics`    roofline magnitudes of the coefficients (the group levels' prior centres)
:mod:`.experts`    the ``moe`` level: a verifier pass's expert reads at the coverage it routes
:mod:`.fitted`     :class:`~.fitted.NextFit`: the posterior and one density for every evaluation
"""

from specbayes.model.design import Design, build_design
from specbayes.model.graph import build_model
from specbayes.model.priors import DEFAULT_PRIORS, merge_priors
from specbayes.model.sampling import SAMPLER_CONFIG, health, sample

__all__ = [
    "DEFAULT_PRIORS",
    "SAMPLER_CONFIG",
    "Design",
    "build_design",
    "build_model",
    "health",
    "merge_priors",
    "sample",
]
