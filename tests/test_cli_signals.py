"""Ctrl-C (SIGINT) and SIGTERM stop a command promptly, with one line and nothing left behind.

``specbayes fit`` runs in a subprocess and gets a signal while it imports and reads (the fast
tier), compiles or samples (the slow tier); it must exit within 5 s with status 130 (SIGINT)
or 143 (SIGTERM), print one line on stderr and no traceback, and leave nothing in ``--out``'s
folder. Interrupts in the places a subprocess cannot aim at — while the artefact is written,
inside a C library's callback — are raised in-process.
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from specbayes import cli

REPO = Path(__file__).resolve().parents[1]
STATUS = {signal.SIGINT: 130, signal.SIGTERM: 143}


def wait_for_handlers(pid: int, timeout_s: float = 30.0) -> None:
    """Wait until process ``pid`` catches SIGTERM (``SigCgt`` in ``/proc/<pid>/status``): the
    CLI's handlers are installed, the interpreter's start-up is over."""
    status = Path(f"/proc/{pid}/status")
    if not status.exists():
        pytest.skip("needs /proc to see when the handlers are installed")
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        caught = next(x for x in status.read_text().splitlines() if x.startswith("SigCgt:"))
        if int(caught.split()[1], 16) & (1 << (signal.SIGTERM - 1)):
            return
        time.sleep(0.02)
    raise AssertionError("the CLI never installed its SIGTERM handler")


def interrupt_fit(tmp_path: Path, signum: int, after_s: float) -> tuple[int, float, str, list]:
    """Start ``specbayes fit`` on the demo, send ``signum`` ``after_s`` seconds after its
    handlers are installed; the exit
    status, the seconds it took to exit, stderr and what is left under ``tmp_path``."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "specbayes.cli", "fit", str(REPO / "data/demo.parquet")]
    cmd += ["--out", str(tmp_path / "out" / "fit.nc"), "--quiet"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    wait_for_handlers(proc.pid)
    time.sleep(after_s)
    assert proc.poll() is None, "the fit ended before the signal"
    sent = time.perf_counter()
    proc.send_signal(signum)
    try:
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    return proc.returncode, time.perf_counter() - sent, err, left


def check_interrupted(result, signum: int) -> None:
    code, took, err, left = result
    assert code == STATUS[signum], err
    assert took < 5.0, f"exited {took:.1f} s after the signal"
    name = signal.Signals(signum).name
    # "specbayes:" alone while the subcommands are still being imported
    assert re.fullmatch(
        rf"specbayes( fit)?: interrupted \({name}\) — stopped; nothing was written\n", err
    ), err
    assert left == []


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_while_reading(tmp_path, signum):
    check_interrupted(interrupt_fit(tmp_path, signum, 1.0), signum)


@pytest.mark.slow
@pytest.mark.parametrize("after_s", [5.0, 10.0, 18.0])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_while_compiling_or_sampling(tmp_path, signum, after_s):
    check_interrupted(interrupt_fit(tmp_path, signum, after_s), signum)


class _Partial:
    """A fit whose ``save`` writes half a file, then is interrupted."""

    excluded = pd.DataFrame({"reason": ["saturated"]})

    def __init__(self, signum: int) -> None:
        self.signum = signum

    def save(self, path: Path) -> Path:
        Path(path).write_bytes(b"half a netCDF file")
        raise cli.Interrupted(self.signum)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_while_writing(tmp_path, monkeypatch, capsys, signum):
    import specbayes.fit

    csv = tmp_path / "sweeps.csv"
    pd.read_parquet(REPO / "data/demo.parquet").head(60).to_csv(csv, index=False)
    monkeypatch.setattr(specbayes.fit, "fit", lambda *a, **k: _Partial(signum))
    code = cli.main(["fit", str(csv), "--out", str(tmp_path / "new" / "fit.nc"), "--quiet"])
    assert code == STATUS[signum]
    assert capsys.readouterr().err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["sweeps.csv"]
    # the handlers main() installed are gone again: an in-process caller keeps its own
    assert signal.getsignal(signal.SIGTERM) is not cli._raise_interrupted


def test_what_an_interrupt_broke_is_reported_as_the_interrupt(tmp_path, monkeypatch, capsys):
    """A signal inside an extension module's initialisation surfaces as ``ImportError:
    initialization failed`` (seen in CI while ``fit`` imported its libraries): the command
    still ends as interrupted, with its status and one line, not as an internal error."""
    import specbayes.fit

    def broken(*args, **kwargs):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1.0)  # the handler raises here
        except KeyboardInterrupt:
            raise ImportError("initialization failed") from None

    csv = tmp_path / "sweeps.csv"
    pd.read_parquet(REPO / "data/demo.parquet").head(60).to_csv(csv, index=False)
    monkeypatch.setattr(specbayes.fit, "fit", broken)
    code = cli.main(["fit", str(csv), "--out", str(tmp_path / "new" / "fit.nc"), "--quiet"])
    assert code == 143
    err = capsys.readouterr().err
    assert err == "specbayes fit: interrupted (SIGTERM) — stopped; nothing was written\n"
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["sweeps.csv"]


def test_interrupt_swallowed_by_a_c_callback_is_raised_again():
    """Python prints and drops an exception raised in a ctypes callback (numba's LLVM object
    cache calls one): the interrupt is raised again in the code that runs next."""
    previous = cli.install_signal_handlers()
    try:

        def callback() -> None:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.01)  # the handler runs here, inside the callback

        with pytest.raises(cli.Interrupted):
            ctypes.CFUNCTYPE(None)(callback)()
            time.sleep(2.0)  # ... and the interrupt is raised again here
    finally:
        cli.restore_signal_handlers(previous)


def test_demo_interrupted_while_reporting_leaves_nothing(tmp_path, monkeypatch, capsys):
    """The demo writes its fit before the report: an interrupt while reporting removes it."""
    import specbayes.commands.demo as demo
    import specbayes.fit
    import specbayes.report

    class Fit:
        def save(self, path: Path) -> Path:
            Path(path).write_bytes(b"a fit")
            return Path(path)

        def summary(self) -> dict:
            health = {"divergences": 0, "max_r_hat": 1, "min_ess_bulk": 1e3, "wall_s": 1}
            return {"healthy": True, **health}

    def report(*args, **kwargs):
        raise cli.Interrupted(signal.SIGTERM)

    monkeypatch.setattr(demo, "demo_data", lambda seed: pd.DataFrame({"k": [0]}))
    monkeypatch.setattr(specbayes.fit, "fit", lambda *a, **k: Fit())
    monkeypatch.setattr(specbayes.report, "resolve_arm", lambda *a, **k: None)
    monkeypatch.setattr(specbayes.report, "write_report", report)
    assert cli.main(["demo", "--out", str(tmp_path / "d")]) == 143
    assert capsys.readouterr().err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []
