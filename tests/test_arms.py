"""The planner's arm: by default a measured sweep with its own cell's alpha; options narrow it."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from conftest import DrawsFit, law_rows

from specbayes import plan
from specbayes.arms import arm_notes, default_arm, measured_sweeps, resolve_arm


def _sweeps(fit, drafter, k, cell, alpha, n, seed):
    """One measured sweep of ``n`` points whose per-point alpha scatters around ``alpha``."""
    rows = law_rows(fit, alphas=(alpha,), ks=(k,), n=n).assign(drafter=drafter, cell=cell)
    rng = np.random.default_rng(seed)
    rows["alpha"] = alpha + 0.004 * rng.standard_normal(len(rows))
    rows["sweep"] = f"V8|{drafter}|A100|{cell}|k={k}|alpha=measured"
    return rows


@pytest.fixture
def two_drafters() -> DrawsFit:
    """Like the real B200 data: mtp measured only at k=2, dspark only at k=7, on two cells
    whose acceptance differs (HumanEval ≈ 0.73, math ≈ 0.83); mtp has the most rows."""
    fit = DrawsFit()
    dense = [law_rows(fit, ks=(0,)).assign(cell=c, sweep=f"V8|dense|{c}") for c in ("he", "math")]
    fit.data = pd.concat(
        [
            *dense,
            _sweeps(fit, "mtp", 2, "he", 0.73, 9, 1),
            _sweeps(fit, "mtp", 2, "math", 0.83, 8, 2),
            _sweeps(fit, "dspark", 7, "he", 0.73, 7, 3),
            _sweeps(fit, "dspark", 7, "math", 0.83, 7, 4),
        ],
        ignore_index=True,
    )
    return fit


def _rows_alpha(fit, arm) -> float:
    d = fit.data
    own = d[(d.drafter == arm.drafter) & (d.k == arm.k) & (d.cell == arm.cell)]
    assert len(own), f"{arm.label()} is not a measured sweep"
    return round(float(own.alpha.mean()), 3)


def test_default_arm_is_the_measured_sweep_with_the_most_rows(two_drafters):
    arm = default_arm(two_drafters)
    # not the most common drafter paired with the median k over all drafters (mtp k=7)
    assert (arm.drafter, arm.k, arm.cell) == ("mtp", 2, "he")
    assert arm.alpha == _rows_alpha(two_drafters, arm)
    assert arm.alpha != pytest.approx(0.73, abs=1e-9)  # the rows' mean, not a rounded guess
    sweeps = measured_sweeps(two_drafters)
    assert sweeps.iloc[0][["drafter", "k", "cell", "rows"]].tolist() == ["mtp", 2, "he", 9]
    notes = arm_notes(two_drafters, arm, defaulted=True)
    assert notes[0].startswith("arm: the measured sweep mtp k=2 in he") and "most rows" in notes[0]


def test_every_option_narrows_the_measured_choice(two_drafters):
    fit = two_drafters
    for given, want in (
        (dict(drafter="dspark"), ("dspark", 7)),
        (dict(k=7), ("dspark", 7)),
        (dict(cell="math"), ("mtp", 2)),
        (dict(cell="math", drafter="dspark", k=7), ("dspark", 7)),
    ):
        arm = resolve_arm(fit, **given)
        assert (arm.drafter, arm.k) == want, given
        assert arm.cell == given.get("cell", arm.cell)
        assert arm.alpha == _rows_alpha(fit, arm), given  # that cell's own alpha
    math = resolve_arm(fit, cell="math", drafter="dspark", k=7)
    assert math.alpha == pytest.approx(0.83, abs=0.01)
    assert resolve_arm(fit, cell="he", drafter="dspark", k=7).alpha == pytest.approx(0.73, abs=0.01)
    assert resolve_arm(fit, cell="math", alpha=0.5).alpha == 0.5  # an explicit alpha wins


def test_an_unmeasured_combination_is_planned_and_names_what_was_measured(two_drafters):
    arm = resolve_arm(two_drafters, drafter="mtp", k=7, cell="math")
    assert (arm.drafter, arm.k, arm.cell) == ("mtp", 7, "math")
    mtp_math = two_drafters.data.query("drafter == 'mtp' and cell == 'math'")
    assert arm.alpha == round(float(mtp_math.alpha.mean()), 3)  # mtp's alpha on that cell
    (note,) = arm_notes(two_drafters, arm)
    assert "mtp k=7 in math on A100 was never measured with V8" in note
    measured = r"dspark k=7 \(he alpha 0\.7\d*; math alpha 0\.8\d*\), mtp k=2 \(he alpha 0\.7"
    assert re.search(measured, note), note
    assert "2–2" not in note and "lies outside" not in note


def test_capacity_error_answers_about_the_arms_own_k(draws_fit):
    arm = plan.Arm("V8", "A100", prefill=1024, decode=1024, drafter="eagle3", alpha=0.75, k=2)
    with pytest.raises(ValueError, match=r"~0 req/s k=2 takes .*the fastest candidate, k=\d+"):
        plan.capacity(draws_fit, arm, 0.2)


def test_a_curved_fit_names_its_knee(two_drafters):
    """A fit with a batch curvature (``--curvature``) says where its passes bend; one without
    says nothing (issue 43)."""
    arm = resolve_arm(two_drafters)
    assert not any(n.startswith("model: batch curvature") for n in arm_notes(two_drafters, arm))
    two_drafters.draws["knee_tokens"] = np.full(two_drafters.n, 600.0)
    (note,) = [n for n in arm_notes(two_drafters, arm) if n.startswith("model: batch curvature")]
    assert "600 tokens per pass" in note
    assert f"verify pass past {600 / (arm.k + 1):,.0f}" in note
