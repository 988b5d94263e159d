"""One tiny saved sd fit shared by the CLI-error and notebook tests (built once per session).

2 chains × 20 draws of the sd model on ``simulate_sweeps(seed=7)``: enough to exercise every
command and notebook path, far too short to trust (its health fails, which is the point of
nothing here).
"""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path

TINY = {"draws": 20, "tune": 20, "chains": 2}


@functools.lru_cache(maxsize=1)
def tiny_fit_path() -> Path:
    """Path of the saved tiny fit (``fit.nc``) beside its data (``sweeps.csv``)."""
    from specbayes.fit import fit
    from specbayes.model import simulate_sweeps

    folder = Path(tempfile.mkdtemp(prefix="specbayes-tiny-fit-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    df, _ = simulate_sweeps(seed=7)
    df.to_csv(folder / "sweeps.csv", index=False)
    fit(df, model="sd", sampler_config=TINY, progress=False).save(folder / "fit.nc")
    return folder / "fit.nc"
