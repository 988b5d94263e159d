"""Which configuration the planner and the report answer about: the arm a user asked for.

With no options the arm is a *measured* configuration — the drafter, draft length k, workload
and alpha of one SD sweep of the fit's data (:func:`measured_sweeps`) — so the default answers
are about something that was run, with that sweep's own acceptance rate. Every option given
narrows the choice; a combination that was never measured is planned all the same (the fitted
laws answer there), and :func:`arm_notes` says what *was* measured.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from specbayes import plan

__all__ = [
    "DEFAULT_RULE",
    "alpha_point",
    "arm_notes",
    "default_arm",
    "measured_sweeps",
    "resolve_arm",
]

#: How :func:`default_arm` picks among the measured SD sweeps matching the options given.
DEFAULT_RULE = "the matching measured SD sweep with the most rows (ties: the highest load)"

_CELL = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*[xX×]\s*(\d+(?:\.\d+)?)\s*$")
_KEY = ("verifier", "hardware", "drafter", "cell", "k")


def measured_sweeps(fit: Any) -> pd.DataFrame:
    """One row per measured SD sweep (``k >= 1``) of the fit's data.

    A sweep is one configuration over load: the data's ``sweep`` label where it has one
    (:func:`specbayes.data.sweep_labels`: a measured alpha varies along its sweep), else
    (verifier, hardware, drafter, cell, k, alpha).

    Returns
    -------
    pandas.DataFrame
        Columns ``verifier, hardware, drafter, cell, k`` (as strings, ``k`` an int),
        ``rows``, ``top_rps`` (highest measured rate), ``alpha`` (mean of its rows, as the
        fit uses it; ``NaN`` where alpha was inferred), ``prefill, decode`` (mean tokens);
        sorted by :data:`DEFAULT_RULE` — the first row is the default.
    """
    sd = fit.data[fit.data.k > 0].copy()
    for col in ("verifier", "hardware", "drafter", "cell"):
        sd[col] = sd[col].astype(str)
    sd["k"] = sd["k"].astype(int)
    if "sweep" in sd and sd["sweep"].notna().all():
        label = sd["sweep"].astype(str)
    else:  # a set alpha is part of a sweep's key (data.CONFIG_COLUMNS)
        alpha = sd["alpha"].map(lambda a: "-" if pd.isna(a) else f"{a:.6g}")
        label = sd[list(_KEY)].astype(str).agg("|".join, axis=1) + "|" + alpha
    out = (
        sd.assign(_sweep=label)
        .groupby("_sweep", sort=True)
        .agg(
            **{c: (c, "first") for c in _KEY},
            rows=("k", "size"),
            top_rps=("rps", "max"),
            alpha=("alpha", "mean"),
            prefill=("prefill", "mean"),
            decode=("decode", "mean"),
        )
    )
    # most rows first, then the most loaded; the sorted label breaks what is left
    out = out.sort_values(["rows", "top_rps"], ascending=[False, False], kind="stable")
    return out.reset_index(drop=True)


def _matching(sweeps: pd.DataFrame, given: dict[str, Any]) -> tuple[pd.DataFrame, list[str]]:
    """Sweeps matching ``given``; options that leave none are dropped (k first, then the
    cell, then the hardware) and named in the second item."""
    dropped: list[str] = []
    order = ["k", "cell", "hardware"]
    while True:
        sel = sweeps
        for col, value in given.items():
            if value is not None and col not in dropped:
                sel = sel[sel[col] == value]
        if len(sel) or not order:
            return sel, dropped
        dropped.append(order.pop(0))


def default_arm(
    fit: Any,
    verifier: str | None = None,
    hardware: str | None = None,
    drafter: str | None = None,
    cell: str | None = None,
    k: int | None = None,
) -> plan.Arm:
    """The measured SD sweep chosen by :data:`DEFAULT_RULE` among those matching the options.

    The arm takes that sweep's verifier, hardware, drafter, cell, k, mean tokens and alpha
    (the mean of its rows — the acceptance measured on that cell — rounded to 3 decimals;
    ``None`` where alpha was inferred: the fit's alpha draws are used). A ``k`` or ``cell``
    no sweep matches is left out of the choice (the caller plans it and :func:`arm_notes`
    says so); a cell that was never fitted never narrows it. Without SD rows the arm is the
    most-measured dense configuration (``k = 0``).
    """
    sweeps = measured_sweeps(fit)
    given = dict(verifier=verifier, hardware=hardware, drafter=drafter, cell=cell, k=k)
    if cell is not None and cell not in set(fit.data.cell.astype(str)):
        given["cell"] = None
    sel, _ = _matching(sweeps, given)
    if len(sel):
        top = sel.iloc[0]
        return plan.Arm(
            verifier=top.verifier,
            hardware=top.hardware,
            cell=top.cell,
            prefill=float(top.prefill),
            decode=float(top.decode),
            drafter=top.drafter,
            alpha=None if pd.isna(top.alpha) else round(float(top.alpha), 3),
            k=int(top.k),
        )
    d = fit.data
    for col, value in (("verifier", verifier), ("hardware", hardware)):
        if value is not None:
            d = d[d[col].astype(str) == value]
    if d.empty:
        raise ValueError("no fitted row matches the configuration asked for")
    key = ["verifier", "hardware", "cell"]
    top = d.groupby(key).size().idxmax()
    rows = d.set_index(key).loc[[top]]
    return plan.Arm(
        verifier=top[0],
        hardware=top[1],
        cell=top[2],
        prefill=float(rows["prefill"].mean()),
        decode=float(rows["decode"].mean()),
    )


def _known(fit: Any, column: str, value: str | None, option: str) -> None:
    if value is None:
        return
    known = sorted(fit.data[column].astype(str).unique())
    if value not in known:
        raise ValueError(
            f"{option} {value}: not in this fit (fitted: {', '.join(known)}) — choose one of "
            "them, or fit data that include it"
        )


def _check_pair(fit: Any, verifier: str, drafter: str) -> None:
    d = fit.data
    sd = d[(d.k > 0) & (d.verifier.astype(str) == verifier)]
    paired = sorted(sd["drafter"].astype(str).unique())
    if drafter == "none" and paired:
        raise ValueError(
            "--drafter none: the planner compares an SD arm with dense itself — give the SD "
            f"arm's drafter (measured with verifier {verifier}: {', '.join(paired)})"
        )
    if drafter not in paired:
        measured = ", ".join(paired) if paired else "none: this fit has no SD rows of it"
        raise ValueError(
            f"--drafter {drafter}: never measured with verifier {verifier} in this fit "
            f"(drafters measured with it: {measured}) — choose one of those, or fit sweeps of "
            "that pair"
        )


def _measured_text(sweeps: pd.DataFrame) -> str:
    """``"dspark k=7 (HumanEval alpha 0.731; math alpha 0.834); mtp k=2 (...)"``: the
    measured draft lengths per drafter, with the alphas measured on each cell."""
    parts = []
    for (drafter, k), rows in sweeps.groupby(["drafter", "k"], sort=True):
        cells = []
        for cell, sub in rows.groupby("cell", sort=True):
            alphas = "/".join(f"{a:.3g}" for a in sorted(sub.alpha.dropna().unique()))
            cells.append(f"{cell} alpha {alphas}" if alphas else f"{cell} alpha inferred")
        parts.append(f"{drafter} k={k} ({'; '.join(cells)})")
    return ", ".join(parts)


def arm_notes(fit: Any, arm: plan.Arm, *, defaulted: bool = False) -> list[str]:
    """Lines on where ``arm`` stands against the data: the measured sweep it is, or what was
    measured instead; prompt and output tokens outside those measured for its verifier.

    ``defaulted``: some of drafter, k and cell were not given, so the arm came from
    :data:`DEFAULT_RULE` — the first line says so. Off the data the laws still answer, but
    only the model's form carries the answer.
    """
    notes = []
    if arm.k > 0:
        sweeps = measured_sweeps(fit)
        mine = sweeps[(sweeps.verifier == arm.verifier) & (sweeps.hardware == arm.hardware)]
        cell = arm.cell or f"{round(arm.prefill)}x{round(arm.decode)}"
        same = mine[(mine.drafter == str(arm.drafter)) & (mine.k == arm.k) & (mine.cell == cell)]
        if len(same):
            s = same.iloc[0]
            alpha = "inferred" if pd.isna(s.alpha) else f"{s.alpha:.3f}, the mean of its rows"
            rule = f" — the default: {DEFAULT_RULE}" if defaulted else ""
            top = f"{s.top_rps:.3g} req/s"
            if plan.fitted_closed_loop(fit):  # its user counts streams, not requests/s
                top = f"{plan.measured_max_rps(fit, arm, [arm.k], load='concurrency')[0]:g} streams"
            notes.append(
                f"arm: the measured sweep {arm.drafter} k={arm.k} in {cell} on {arm.hardware} "
                f"({s.rows} rows up to {top}; measured alpha {alpha}){rule}"
            )
        else:
            measured = _measured_text(mine) if len(mine) else "none"
            notes.append(
                f"note: {arm.drafter} k={arm.k} in {cell} on {arm.hardware} was never measured "
                f"with {arm.verifier} (measured SD sweeps there: {measured}): the answers below "
                "extrapolate the fitted laws"
            )
    d = fit.data
    rows = d[d.verifier.astype(str) == arm.verifier]
    for what, value, measured in (
        ("prompt tokens", arm.prefill, rows["prefill"]),
        ("output tokens", arm.decode, rows["decode"]),
    ):
        lo, hi = float(measured.min()), float(measured.max())
        if not lo <= value <= hi:
            notes.append(
                f"note: {value:g} lies outside the {what} measured for {arm.verifier} "
                f"({lo:g}–{hi:g}): the answers below extrapolate the fitted laws"
            )
    knee = knee_text(fit, arm)
    if knee:
        notes.append(f"model: batch curvature (fitted with --curvature) — {knee}")
    experts = expert_text(fit, arm)
    if experts:
        notes.append(f"model: moe — {experts}")
    return notes


def expert_text(fit: Any, arm: plan.Arm) -> str | None:
    """A ``moe`` fit's expert reads for ``arm``'s verifier and GPU, in words (else None)."""
    if getattr(fit, "model_name", "sd") != "moe":
        return None
    ds = fit.coefficients(replace(arm, k=0, alpha=None).row())
    c1s = 1e3 * ds["c1s"].values[:, 0]
    lo, mid, hi = np.quantile(c1s, [0.05, 0.5, 0.95])
    ratio = float(ds["expert_ratio"].values[0, 0])
    return (
        f"a verifier pass reads {mid:.3g} ms of experts at full coverage (90 %: {lo:.3g}–"
        f"{hi:.3g}); a pass routing T tokens touches 1 − (1 − {ratio:.4g})^T of them "
        "(docs/model.md §5), in every answer below"
    )


def knee_text(fit: Any, arm: plan.Arm) -> str | None:
    """Where the passes of a fit made with ``--curvature`` bend, in words (else None)."""
    try:
        ds = fit.coefficients(replace(arm, k=0, alpha=None).row())
    except (ValueError, KeyError, AttributeError):
        return None
    if "knee_tokens" not in ds:
        return None
    lo, mid, hi = np.quantile(ds["knee_tokens"].values[:, 0], [0.05, 0.5, 0.95])
    k = max(arm.k, 1)
    lo, per_verify, mid, hi = _count(lo), _count(mid / (k + 1)), _count(mid), _count(hi)
    return (
        f"passes on {arm.hardware} bend past {mid} tokens per pass (90 % {lo}–{hi}): dense past "
        f"{mid} requests, a k={k} verify pass past {per_verify}"
    )


def _count(x: float) -> str:
    """A token or request count: whole from 100 on (1,170, not 1.17e+03)."""
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def _cell_tokens(fit: Any, arm: plan.Arm, cell: str) -> tuple[float, float] | None:
    """Mean (prefill, decode) of workload ``cell``: from the fit's rows, else from its label."""
    d = fit.data
    rows = d[d.cell.astype(str) == cell]
    same = rows[(rows.verifier == arm.verifier) & (rows.hardware == arm.hardware)]
    rows = same if len(same) else rows
    if len(rows):
        return float(rows["prefill"].mean()), float(rows["decode"].mean())
    m = _CELL.match(cell)
    return (float(m.group(1)), float(m.group(2))) if m else None


def resolve_arm(
    fit: Any,
    *,
    verifier: str | None = None,
    hardware: str | None = None,
    drafter: str | None = None,
    cell: str | None = None,
    prefill: float | None = None,
    decode: float | None = None,
    alpha: float | None = None,
    k: int | None = None,
) -> plan.Arm:
    """The arm a user asked for, checked against the fit; the rest from :func:`default_arm`.

    Each option narrows the measured sweep chosen (verifier, hardware, drafter, cell, k), so
    ``cell="math"`` plans a sweep measured on ``math`` with the alpha of that cell's rows; an
    option no sweep matches (a k never run with that drafter) is applied to the closest
    sweep — whose alpha is kept — and :func:`arm_notes` names what was measured. A ``cell``
    names a workload: a fitted cell's mean prompt and output tokens, or the tokens of a
    ``"<prefill>x<decode>"`` label — so ``cell="256x256"`` plans the 256/256 workload, not
    the default one under a new name. ``alpha`` overrides the measured one.

    Raises
    ------
    ValueError
        Unknown verifier, hardware or drafter; a drafter never measured with the verifier;
        a cell that is neither fitted nor ``"<prefill>x<decode>"`` (without tokens given); a
        cell whose tokens contradict ``prefill``/``decode``.
    """
    _known(fit, "verifier", verifier, "--verifier")
    _known(fit, "hardware", hardware, "--hardware")
    arm = default_arm(fit, verifier, hardware, drafter, cell, k)
    if drafter is not None:
        _check_pair(fit, arm.verifier, drafter)
    changes: dict[str, Any] = {"drafter": drafter} if drafter is not None else {}
    if k is not None:
        changes["k"] = int(k)
    if alpha is not None:
        changes["alpha"] = float(alpha)
    if cell is not None and cell != arm.cell:
        tokens = _cell_tokens(fit, arm, cell)
        if tokens is None and (prefill is None or decode is None):
            cells = ", ".join(sorted(fit.data.cell.astype(str).unique()))
            raise ValueError(
                f"--cell {cell}: not a workload of this fit (fitted: {cells}) nor "
                "'<prefill>x<decode>' — give --prefill and --decode with it"
            )
        _agree(cell, (prefill, decode), tokens)
        p, g = tokens or (prefill, decode)
        changes.update(
            cell=cell,
            prefill=p if prefill is None else prefill,
            decode=g if decode is None else decode,
        )
    elif cell is not None:
        _agree(cell, (prefill, decode), (arm.prefill, arm.decode))
        changes.update(
            prefill=arm.prefill if prefill is None else prefill,
            decode=arm.decode if decode is None else decode,
        )
    elif prefill is not None or decode is not None:
        p = arm.prefill if prefill is None else prefill
        g = arm.decode if decode is None else decode
        changes.update(prefill=p, decode=g, cell=f"{round(p)}x{round(g)}")
    return replace(arm, **changes)


def _agree(cell: str, given: tuple, implied: tuple | None) -> None:
    for name, g, i in zip(("--prefill", "--decode"), given, implied or (None, None), strict=True):
        if g is not None and i is not None and abs(g - i) > 0.5:
            raise ValueError(
                f"--cell {cell}: means {name} {i:g}, but {name} {g:g} was given — give one or "
                "the other"
            )


def alpha_point(fit: Any, arm: plan.Arm) -> float:
    """The arm's alpha as one number: its own, else the posterior median of the inferred one
    (for tables over an alpha grid, which take numbers)."""
    if arm.alpha is not None:
        return float(arm.alpha)
    draws = np.asarray(fit.alpha_draws(arm.verifier, arm.drafter, arm.cell), dtype=float)
    return round(float(np.median(draws)), 3)
