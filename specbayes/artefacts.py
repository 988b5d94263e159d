"""Writing artefacts safely: strict JSON and output folders that appear whole or not at all.

The fit artefact follows ArviZ's conventions (:func:`split_internal`,
:func:`rename_sample_stats`, :func:`add_natural_scale`, :func:`stamp_groups`) and is written
small (:func:`slim_fit_artefact`, :func:`write_fit_netcdf`); its tables (the fitted and the
excluded rows) are stored by :func:`frame_to_dataset` and read back by
:func:`dataset_to_frame`, its config by :func:`strict_json`, and a file that is not a
readable fit raises :class:`FitFileError`. Every JSON file
the package writes goes through :func:`dumps`: ``NaN`` and ``±Infinity`` are
not JSON (``JSON.parse`` rejects them), so non-finite numbers become ``null`` and the
document says what ``null`` means. Output folders are written through :func:`staged_dir`:
files are written into a hidden sibling folder and moved into place only when everything
succeeded, so a failed command leaves nothing half-written behind.
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

__all__ = [
    "NATURAL_SCALE",
    "NULL_MEANS",
    "SAMPLE_STATS_NAMES",
    "FitFileError",
    "add_natural_scale",
    "check_out_dir",
    "check_writable",
    "dataset_to_frame",
    "dumps",
    "finish_fit_artefact",
    "frame_to_dataset",
    "jsonable",
    "rename_sample_stats",
    "slim_fit_artefact",
    "split_internal",
    "staged_dir",
    "stamp_groups",
    "strict_json",
    "write_fit_netcdf",
]

#: What ``null`` stands for in the JSON the package writes (written into each document).
NULL_MEANS = (
    "null marks a number that is not finite: an unbounded latency or speedup (the server is "
    "saturated in the draws concerned), a quantity with no defined draw (e.g. a break-even "
    "rate when no draw crosses), or an unmeasured value"
)


def jsonable(obj: Any) -> Any:
    """``obj`` with numpy scalars and arrays as Python values and non-finite floats as ``None``."""
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [jsonable(v) for v in obj.tolist()]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if obj is None or isinstance(obj, bool | int | str):
        return obj
    if hasattr(obj, "isoformat"):
        return obj.isoformat()
    return str(obj)


def dumps(obj: Any, *, indent: int | None = 2, note_nulls: bool = True) -> str:
    """Strict JSON text of ``obj`` (no ``NaN``/``Infinity``).

    Parameters
    ----------
    obj : Any
        Mappings, sequences, numbers, strings, numpy values.
    indent : int, optional
        Passed to :func:`json.dumps`.
    note_nulls : bool
        When ``obj`` is a mapping, add a ``"null_means"`` entry saying what ``null`` stands for.
    """
    data = jsonable(obj)
    if note_nulls and isinstance(data, dict):
        data = {**data, "null_means": NULL_MEANS}
    return json.dumps(data, indent=indent, allow_nan=False, ensure_ascii=False)


def check_out_dir(path: str | Path, option: str = "--out") -> Path:
    """``path`` as an output folder, checked before any work: ``ValueError`` when it is an
    existing file, lies under a file, or cannot be written (:func:`check_writable`)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(
            f"{option} {path}: is an existing file, not a folder — give a folder path "
            "(it is created if missing)"
        )
    check_writable(path, option)
    return path


def check_writable(path: str | Path, option: str = "--out") -> None:
    """``ValueError`` unless ``path`` (a folder, or a file to be written) can be created.

    The nearest existing folder on the way must be a folder and writable; a probe folder is
    created there and removed, so nothing is left behind. Checked before minutes of work,
    not after.
    """
    path = Path(path)
    start = path if path.is_dir() else path.parent
    base = next((p for p in (start, *start.parents) if p.exists()), Path("."))
    if not base.is_dir():
        raise ValueError(
            f"{option} {path}: {base} is a file, not a folder — give a path in a folder"
        )
    try:
        Path(tempfile.mkdtemp(prefix=".specbayes-probe-", dir=base)).rmdir()
    except OSError as exc:
        raise ValueError(
            f"{option} {path}: cannot write in {base} ({exc.strerror or exc}) — give a folder "
            "you can write to"
        ) from None


@contextlib.contextmanager
def staged_dir(out: str | Path) -> Iterator[Path]:
    """A temporary folder beside ``out`` whose files move into ``out`` on success.

    On an exception the temporary folder is removed and ``out`` is left as it was (created
    only if it did not exist and only on success). Files of the same names already in
    ``out`` are replaced; other files there are kept.
    """
    out = check_out_dir(out)
    parent = out.parent if str(out.parent) else Path(".")
    try:
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=parent))
    except OSError as exc:
        raise ValueError(
            f"--out {out}: cannot write there ({exc.strerror or exc}) — give a folder you can "
            "write to"
        ) from None
    try:
        yield tmp
        out.mkdir(parents=True, exist_ok=True)
        for item in sorted(tmp.iterdir()):
            target = out / item.name
            if target.is_dir() and not item.is_dir():
                raise ValueError(f"--out {out}: {target} is a folder; cannot replace it by a file")
            item.replace(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# -- the fit artefact's ArviZ conventions ---------------------------------------------------

#: nutpie's sample_stats names -> ArviZ's (``arviz.InferenceData`` schema).
SAMPLE_STATS_NAMES = {
    "depth": "tree_depth",
    "mean_tree_accept": "acceptance_rate",
    "maxdepth_reached": "reached_max_treedepth",
    "logp": "lp",
}


def _internal_names(post: xr.Dataset) -> list[str]:
    """Sampler coordinates, not quantities a user reads: transformed values (``*__``) and the
    whitened ``z`` (the model's unconstrained, whitened parameter vector)."""
    return [v for v in post.data_vars if v.endswith("__") or v == "z"]


def split_internal(idata) -> dict[str, xr.Dataset]:
    """Move the internal variables out of ``posterior`` into ``unconstrained_posterior``."""
    post = idata.posterior
    names = _internal_names(post)
    if not names:
        return {}
    internal = post[names]
    if "z" in internal and "param" in internal.dims:
        internal = internal.rename({"param": "z_param"})
    kept = post.drop_vars(names)
    used = {dim for var in kept.data_vars.values() for dim in var.dims}
    # the internal variables' coordinates (auto-named ``*__dim_0``) go with them
    orphans = [c for c in kept.coords if not set(kept[c].dims) <= used]
    idata.posterior = kept.drop_vars(orphans)
    return {"unconstrained_posterior": internal}


def rename_sample_stats(idata) -> None:
    """nutpie's sample_stats names -> ArviZ's (:data:`SAMPLE_STATS_NAMES`)."""
    if "sample_stats" not in idata.groups():
        return
    stats = idata.sample_stats
    names = {a: b for a, b in SAMPLE_STATS_NAMES.items() if a in stats and b not in stats}
    if names:
        idata.sample_stats = stats.rename(names)


#: Natural-scale variables (s) added to the posterior -> the log they exponentiate.
NATURAL_SCALE = {
    "coef_unit": "log_coef",
    "coef_draft_unit": "log_coef_draft",
}


def add_natural_scale(idata) -> None:
    """Add the unit coefficients (s) on their natural scale."""
    post = idata.posterior
    pairs = NATURAL_SCALE.items()
    new = {n: np.exp(post[log]) for n, log in pairs if log in post and n not in post}
    if new:
        idata.posterior = post.assign(new)


def finish_fit_artefact(idata, groups: dict, attrs: dict, sampler: str) -> None:
    """Replace ``groups`` in ``idata``, move internal variables out of ``posterior``, use
    ArviZ's sample_stats names, add natural-scale coefficients, set ``attrs`` and stamp
    every group (the conventions above, in one place for every fit)."""
    import warnings

    import arviz as az

    from specbayes import __version__

    for name in groups:
        if name in idata.groups():
            del idata[name]
    groups = {**groups, **split_internal(idata)}
    with warnings.catch_warnings():
        # 'excluded_data' is a custom group (ArviZ warns once about any such group)
        warnings.filterwarnings("ignore", message=".*excluded_data.*", category=UserWarning)
        idata.add_groups(groups)
    rename_sample_stats(idata)
    add_natural_scale(idata)
    idata.attrs.update({**attrs, "specbayes_version": __version__})
    stamp_groups(idata, sampler, az.__version__, __version__)


def stamp_groups(idata, sampler: str, arviz_version: str, specbayes_version: str) -> None:
    """``created_at``, ``inference_library`` and versions on every group (ArviZ convention)."""
    import datetime

    created = datetime.datetime.now(datetime.UTC).isoformat()
    try:
        from importlib.metadata import version

        library_version = version(sampler if sampler != "numpyro" else "numpyro")
    except Exception:  # the sampler's version is informative, not required
        library_version = "unknown"
    for name in idata.groups():
        ds = idata[name]
        ds.attrs.setdefault("created_at", created)
        ds.attrs["inference_library"] = sampler
        ds.attrs["inference_library_version"] = library_version
        ds.attrs["arviz_version"] = arviz_version
        ds.attrs["specbayes_version"] = specbayes_version


# -- the fit artefact on disk ---------------------------------------------------------------

#: Posterior predictive draws kept in the file, in total over chains: enough for
#: ``az.plot_ppc`` and a 90 % band's coverage; an in-memory fit keeps all of them.
PREDICTIVE_DRAWS = 400

#: Groups whose values are stored as float32 (7 significant digits, far below the Monte
#: Carlo error of any of them): one value per row and draw.
POINTWISE_GROUPS = ("log_likelihood", "posterior_predictive")


def slim_fit_artefact(idata, exact, drop=(), predictive_draws: int = PREDICTIVE_DRAWS):
    """A copy of the fit ``idata`` as it is written to disk (``idata`` itself is unchanged).

    The demo fit's file was 58 MB, two thirds of it per-row draws; what the file keeps:

    - ``posterior``: the variables named in ``exact`` (those the fit's answers read) as
      float64, every other one as float32 (7 significant digits: R-hat and ESS, for which
      the sampler's coordinates are kept, do not change); ``drop`` (per-row quantities
      recomputable from the rest) is left out;
    - ``log_likelihood``: every draw (PSIS-LOO needs them), float32;
    - ``posterior_predictive``: ``predictive_draws`` evenly thinned draws (all chains),
      float32 — for ``az.plot_ppc`` and predictive bands;
    - ``unconstrained_posterior`` (the sampler's own coordinates) is left out;
    - every other group as it is.

    Parameters
    ----------
    idata : arviz.InferenceData
    exact : iterable of str
        Posterior variables kept as float64 (names not in the posterior are ignored).
    drop : iterable of str
        Posterior variables left out.
    predictive_draws : int
        Posterior predictive draws kept in total.
    """
    import arviz as az

    exact, drop = set(exact), set(drop)
    groups = {}
    for name in idata.groups():
        ds = idata[name]
        if name == "unconstrained_posterior":
            continue
        if name == "posterior":
            ds = ds.drop_vars([v for v in drop if v in ds])
            ds = ds.assign({v: _float32(ds[v]) for v in ds.data_vars if v not in exact})
        elif name in POINTWISE_GROUPS:
            if name == "posterior_predictive":
                per_chain = max(1, -(-predictive_draws // ds.sizes["chain"]))
                step = max(1, ds.sizes["draw"] // per_chain)
                ds = ds.isel(draw=slice(None, step * per_chain, step))
            ds = ds.assign({v: _float32(ds[v]) for v in ds.data_vars})
        groups[name] = ds
    with warnings_ignored_for_custom_groups():
        slim = az.InferenceData(**groups)
    slim.attrs.update(idata.attrs)
    return slim


def _float32(var: xr.DataArray) -> xr.DataArray:
    return var.astype(np.float32) if np.issubdtype(var.dtype, np.floating) else var


@contextlib.contextmanager
def warnings_ignored_for_custom_groups() -> Iterator[None]:
    """ArviZ warns once about any group outside its schema ('excluded_data' is one)."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*excluded_data.*", category=UserWarning)
        yield


def write_fit_netcdf(idata, path: str | Path) -> Path:
    """Write ``idata`` as one netCDF-4 file, every numeric variable zlib-compressed with the
    byte shuffle (which lets zlib find the repeated sign and exponent bytes of draws).

    ArviZ's own ``to_netcdf`` compresses without the shuffle; the layout (the attrs at the
    root, one netCDF group per InferenceData group) is ArviZ's, so ``az.from_netcdf`` and
    :func:`specbayes.fit.load_fit` read it.
    """
    path = Path(path)
    mode = "w"
    if idata.attrs:
        xr.Dataset(attrs=idata.attrs).to_netcdf(path, mode=mode, engine="h5netcdf")
        mode = "a"
    for name in idata.groups():
        ds = idata[name]
        encoding = {
            v: {"zlib": True, "complevel": 4, "shuffle": True}
            for v, var in ds.variables.items()
            if np.issubdtype(var.dtype, np.number) or var.dtype == bool
        }
        ds.to_netcdf(path, mode=mode, group=name, engine="h5netcdf", encoding=encoding)
        mode = "a"
    return path


class FitFileError(ValueError):
    """A file that is not a readable specbayes fit; the message names it and says why."""


def strict_json(obj: Any) -> str:
    """One line of JSON text with no ``NaN``/``Infinity`` (:func:`dumps`): a fit's config."""
    return dumps(json.loads(json.dumps(obj, default=_json_default)), indent=None, note_nulls=False)


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, tuple):
        return list(o)
    return str(o)


def frame_to_dataset(df: pd.DataFrame, dim: str) -> xr.Dataset:
    """A DataFrame as a netCDF-safe Dataset (text as fixed-width unicode, bools as int)."""
    data = {}
    for c in df.columns:
        s = df[c]
        if pd.api.types.is_bool_dtype(s):
            data[c] = (dim, s.astype(int).to_numpy())
        elif pd.api.types.is_numeric_dtype(s):
            data[c] = (dim, s.to_numpy(dtype=float))
        else:
            vals = s.astype(object).where(s.notna(), "").astype(str).to_numpy().astype("U")
            data[c] = (dim, vals)
    ds = xr.Dataset(data, coords={dim: np.arange(len(df))})
    ds.attrs["text_columns"] = json.dumps(
        [c for c in df.columns if not pd.api.types.is_numeric_dtype(df[c])]
    )
    ds.attrs["int_columns"] = json.dumps(
        [c for c in df.columns if pd.api.types.is_integer_dtype(df[c])]
    )
    return ds


def dataset_to_frame(ds: xr.Dataset, dim: str) -> pd.DataFrame:
    """The DataFrame :func:`frame_to_dataset` stored (empty text back to NaN, ints as int)."""
    text = json.loads(ds.attrs.get("text_columns", "[]"))
    ints = json.loads(ds.attrs.get("int_columns", "[]"))
    df = pd.DataFrame({c: ds[c].values for c in ds.data_vars})
    for c in text:
        if c in df:
            df[c] = df[c].astype(str).astype(object).where(df[c].astype(str) != "", np.nan)
    for c in ints:
        if c in df:
            df[c] = df[c].astype(int)
    return df
