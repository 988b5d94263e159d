"""One tiny saved sd fit shared by the CLI, CLI-error and notebook tests (built once per
session).

It is made by the ``specbayes fit`` command itself (2 chains × 20 draws of the sd model on
``simulate_sweeps(seed=7)``, ``--strict``), so the command's printed report and exit code are
kept for the test of that command: enough to exercise every command and notebook path, far
too short to trust (its health fails, which is what ``--strict`` must report).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import io
import shutil
import tempfile
from pathlib import Path

TINY = {"draws": 20, "tune": 20, "chains": 2}


@functools.lru_cache(maxsize=1)
def tiny_fit_run() -> tuple[Path, int, str]:
    """``(path of fit.nc, exit code, printed text)`` of ``specbayes fit ... --strict``.

    The fit lies beside its data (``sweeps.csv``) in a temporary folder removed at exit.
    """
    from specbayes.cli import main
    from specbayes.model.simulate import simulate_sweeps

    folder = Path(tempfile.mkdtemp(prefix="specbayes-tiny-fit-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    df, _ = simulate_sweeps(seed=7)
    df.to_csv(folder / "sweeps.csv", index=False)
    out = folder / "fit.nc"
    args = ["fit", str(folder / "sweeps.csv"), "--model", "sd", "--out", str(out)]
    for key, value in TINY.items():
        args += [f"--{key}", str(value)]
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        code = main([*args, "--quiet", "--strict"])
    return out, code, text.getvalue()


def tiny_fit_path() -> Path:
    """Path of the saved tiny fit (``fit.nc``) beside its data (``sweeps.csv``)."""
    return tiny_fit_run()[0]
