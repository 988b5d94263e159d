r"""Fitting the latency models: :func:`fit` and :func:`load_fit` for every level.

>>> from specbayes.fit import fit, load_fit
>>> f = fit(sweeps, model="sd")                      # doctest: +SKIP
>>> f.healthy, f.diagnostics().head()                # doctest: +SKIP
>>> draws = f.predict(new_rows)                      # (sample, row) latency draws  # doctest: +SKIP

Every level (``dense``, ``sd``, ``moe``) runs on the model core :mod:`specbayes.model`
(README "The model"); a fit is a :class:`specbayes.model.fitted.NextFit`, sampled with the
core's one configuration (:data:`specbayes.model.sampling.SAMPLER_CONFIG`; ``sampler_config``
may set ``seed`` and :data:`specbayes.model.sampling.SAMPLER_OPTIONS`).

Health
------
A fit is healthy when there are no divergences, every R-hat ≤ 1.01 and every bulk ESS ≥ 400
over its free variables (:data:`THRESHOLDS`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from specbayes.artefacts import FitFileError
from specbayes.data import SweepTable
from specbayes.model.fitted import MODEL_ID, NextFit, fit_next, load_next
from specbayes.model.sampling import SAMPLER_CONFIG

__all__ = ["SAMPLER_DEFAULTS", "THRESHOLDS", "FitFileError", "fit", "load_fit"]

#: The sampler settings of a fit whose ``sampler_config`` sets none: the model core's one
#: configuration and the seed (of the sampler, the noise scale's draws and the predictive group).
SAMPLER_DEFAULTS: dict[str, Any] = {"sampler": "nutpie", **SAMPLER_CONFIG, "seed": 20260}

#: Health thresholds (``docs/model.md``, "Sampler health"): divergences, R-hat and bulk ESS
#: over reported quantities.
THRESHOLDS: dict[str, float] = {"divergences": 0, "r_hat": 1.01, "ess_bulk": 400}


def fit(
    sweeps: pd.DataFrame | SweepTable,
    model: str = "sd",
    sampler_config: dict | None = None,
    priors: dict | None = None,
    progress: bool = True,
    metrics: Sequence[str] | None = None,
) -> NextFit:
    """Fit a latency model to sweep data.

    Parameters
    ----------
    sweeps : DataFrame or SweepTable
        Raw rows (validated here with ``allow_unknown_alpha=True``) or an
        already validated table.
    model : {'dense', 'sd', 'moe'}
    sampler_config : dict, optional
        ``seed`` and :data:`specbayes.model.sampling.SAMPLER_OPTIONS` over
        :data:`SAMPLER_DEFAULTS` (fewer draws for a quick look, ``cores``,
        ``sampler="numpyro"``).
    priors : dict, optional
        Overrides of :data:`specbayes.model.priors.DEFAULT_PRIORS`.
    progress : bool
        Show the sampler's progress bar.
    metrics : sequence of str, optional
        Per-point metrics to model beside the mean latency
        (:mod:`specbayes.model.metrics`; e.g. ``("ttft_p99", "itl_p50")``): what
        ``fit.metric`` and the SLO planner (``plan.capacity(..., slo=)``) answer for.

    Returns
    -------
    NextFit

    Raises
    ------
    ValueError
        Empty table, all rows excluded (saturated), one load level per configuration,
        unknown model, sampler or sampler option.
    """
    options = dict(sampler_config or {})
    seed = options.pop("seed", None)
    seed = SAMPLER_DEFAULTS["seed"] if seed is None else seed
    return fit_next(
        sweeps,
        model,
        priors=priors,
        seed=int(seed),
        progress=progress,
        sampler_options=options,
        metrics=metrics,
    )


#: How to make a fit file, for error messages.
_MAKE_ONE = "write one with `specbayes fit DATA --out FIT.nc`"


def _read_idata(path: Path):
    """The InferenceData in ``path``, or :class:`FitFileError` saying what is wrong with it."""
    import arviz as az

    if not path.exists():
        raise FitFileError(f"{path}: no such fit file — {_MAKE_ONE}")
    if path.is_dir():
        inside = sorted(path.glob("*.nc"))
        todo = f"did you mean {inside[0]}?" if inside else "give the .nc file itself"
        raise FitFileError(f"{path}: is a folder, not a fit file — {todo}")
    size = path.stat().st_size
    if size == 0:
        raise FitFileError(f"{path}: empty file, not a fit — {_MAKE_ONE}")
    with open(path, "rb") as fh:
        head = fh.read(8)
    if head != b"\x89HDF\r\n\x1a\n":
        kind = "netCDF-3" if head[:3] == b"CDF" else "not a netCDF-4 (HDF5) file"
        raise FitFileError(f"{path}: {kind}, not a specbayes fit — {_MAKE_ONE}")
    try:
        idata = az.from_netcdf(str(path), engine="h5netcdf")
        idata.load() if hasattr(idata, "load") else None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise FitFileError(f"{path}: {_why_unreadable(exc, size)} — {_MAKE_ONE}") from None
    return idata


def _why_unreadable(exc: BaseException, size: int) -> str:
    """What an HDF5/netCDF read error means, without the library's internals."""
    import re

    text = " ".join(str(exc).split())
    m = re.search(r"eof = (\d+).*stored_eof = (\d+)", text)
    if m:
        return (
            f"truncated netCDF file ({int(m.group(1)):,} of {int(m.group(2)):,} bytes: the copy "
            "or the write did not finish)"
        )
    if "truncated" in text.lower():
        return f"truncated netCDF file ({size:,} bytes)"
    return "corrupt or unreadable netCDF file (HDF5 could not read it)"


def load_fit(path: str | Path) -> NextFit:
    """Read a fit written by its ``save``; the model is rebuilt from code on demand, from the
    stored rows, so predictions equal those of the saved fit.

    Raises
    ------
    FitFileError
        (a ``ValueError``) when ``path`` is missing, a folder, empty, not netCDF-4,
        truncated, a netCDF file that is not a specbayes fit, or a fit written by the old
        model core (removed) or by another version of specbayes.
    """
    path = Path(path)
    idata = _read_idata(path)
    missing = [a for a in ("model", "config") if a not in idata.attrs]
    groups = set(idata.groups())
    missing += [g for g in ("posterior", "constant_data") if g not in groups]
    if missing:
        raise FitFileError(
            f"{path}: a netCDF file but not a specbayes fit (no {', '.join(missing)}) — {_MAKE_ONE}"
        )
    model_id = str(idata.attrs.get("model_id", ""))
    if model_id != MODEL_ID and not model_id.startswith("specbayes.model"):
        raise FitFileError(
            f"{path}: written by the old model core, which was removed — refit the data with "
            "`specbayes fit DATA --out FIT.nc`"
        )
    if model_id != MODEL_ID:
        raise FitFileError(
            f"{path}: written by another version of the model core ({model_id}; this is "
            f"{MODEL_ID}) — refit the data with `specbayes fit DATA --out FIT.nc`"
        )
    return load_next(idata, path)
