"""Shared helpers of the formulas: the array namespace (NumPy or PyTensor) and quiet edges.

Every formula in :mod:`specbayes.laws` takes NumPy arrays or, for the cheap closed forms,
PyTensor tensors; :func:`_namespace` picks the module that computes with them (PyTensor is
imported only for tensor inputs), :class:`_quiet` silences NumPy's warnings on the edges of a
formula's domain, and :func:`_as_float` makes float64 arrays or tensors.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np


def _namespace(*args: Any) -> ModuleType:
    """Return ``pytensor.tensor`` if any argument is a PyTensor variable, else NumPy."""
    for a in args:
        if type(a).__module__.startswith("pytensor"):
            import pytensor.tensor as pt

            return pt
    return np


def _is_numpy(xp: ModuleType) -> bool:
    return xp is np


class _quiet:
    """``np.errstate`` for NumPy inputs, a no-op for PyTensor graphs."""

    def __init__(self, xp: ModuleType) -> None:
        self._ctx = np.errstate(all="ignore") if _is_numpy(xp) else None

    def __enter__(self) -> None:
        if self._ctx is not None:
            self._ctx.__enter__()

    def __exit__(self, *exc: object) -> None:
        if self._ctx is not None:
            self._ctx.__exit__(*exc)


def _as_float(x: Any, xp: ModuleType) -> Any:
    """Float64 array or tensor (PyTensor would make float32 constants of float32-exact scalars)."""
    if _is_numpy(xp):
        return np.asarray(x, dtype=float)
    if type(x).__module__.startswith("pytensor"):
        return x
    return xp.as_tensor_variable(np.asarray(x, dtype="float64"))
