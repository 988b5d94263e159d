"""Shared test helpers."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

os.environ.setdefault("MPLBACKEND", "Agg")

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"

#: Modules whose tests share the session's fits (:mod:`tiny_fit`, test_fit's sd fit): under
#: pytest-xdist (``make test`` runs ``-n 2``) they go to one worker, which builds each fit
#: once; every other module goes whole to whichever worker is free (its module fixtures are
#: built once too).
FIT_MODULES = ("test_cli_errors.py", "test_control.py", "test_fit.py", "test_notebooks.py")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """xdist's scope scheduler with the fit-sharing modules as one scope (``--dist
    loadgroup`` would do this, but does not group tests under pytest 9)."""
    from xdist.scheduler import LoadScopeScheduling

    class FitsTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return "fits" if module.endswith(FIT_MODULES) else module

    return FitsTogether(config, log)


COEF_NAMES = ("c1p", "c1v", "c1d", "c2p", "c2v", "c2d")
#: Coefficients reproducing the worked example of docs/model.md §4 (1024/1024, dense
#: C1 = 1.20 s, C2 = 0.0696 s; alpha = 0.75, k = 6: C1 = 0.78 s, C2 = 0.085 s).
TRUE_COEFS = dict(c1p=0.05, c1v=1.123e-3, c1d=2.25e-4, c2p=2.0e-3, c2v=6.6e-5, c2d=3.58e-5)


class DrawsFit:
    """A stand-in for a fit (:class:`specbayes.model.fitted.NextFit`) holding fixed
    coefficient draws.

    Draws are log-normal around ``TRUE_COEFS`` (sd ``spread`` on the log scale), one set
    per verifier; the cell's decode length does not change the c-coefficients here.
    """

    def __init__(self, n: int = 400, spread: float = 0.08, seed: int = 0, verifiers=("V8",)):
        rng = np.random.default_rng(seed)
        self.verifiers = set(verifiers)
        self.draws = {
            name: value * np.exp(spread * rng.standard_normal(n))
            for name, value in TRUE_COEFS.items()
        }
        self.n = n

    def coefficients(self, rows: pd.DataFrame) -> xr.Dataset:
        unknown = set(rows["verifier"]) - self.verifiers
        if unknown:
            raise ValueError(f"unknown verifier(s) {sorted(unknown)}")
        return xr.Dataset(
            {
                name: (("sample", "row"), np.repeat(d[:, None], len(rows), axis=1))
                for name, d in self.draws.items()
            }
        )

    def alpha_draws(self, verifier, drafter, cell):
        raise ValueError("alpha was given in the data, not inferred")


@pytest.fixture
def draws_fit() -> DrawsFit:
    return DrawsFit()


def needs_shared(*parts: str) -> Path:
    """Path under ../shared, skipping the test when it is absent (a user's clone)."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} not present (../shared is only beside CI/dev checkouts)")
    return path


def law_rows(fit: DrawsFit, alphas=(0.6, 0.8), ks=(0, 2, 6), decode=1024, n=9) -> pd.DataFrame:
    """Rows on the law of ``fit``'s true coefficients (for report/plot tests)."""
    from specbayes import laws

    rows = []
    for k in ks:
        for a in alphas if k else (np.nan,):
            c1, c2 = laws.effective_costs(*TRUE_COEFS.values(), decode, 0.5 if k == 0 else a, k)
            for r in np.linspace(0.0, 0.9 / c2, n):
                rows.append(
                    dict(
                        verifier="V8",
                        hardware="A100",
                        drafter="eagle3" if k else "none",
                        cell=f"1024x{decode}",
                        prefill=1024,
                        decode=decode,
                        k=k,
                        alpha=a,
                        rps=r,
                        latency=float(laws.latency(r, c1, c2)),
                    )
                )
    return pd.DataFrame(rows)
