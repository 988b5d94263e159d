"""The paper's cost-ratio findings as posterior probabilities (specbayes.findings)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import TRUE_COEFS, DrawsFit

from specbayes import findings, laws, plan

#: Cheap drafter for C1 (c1d/c1v = 0.03) but costly per batched token (c2d/c2v = 0.93):
#: C1R < 1 everywhere, C2R > 1 up to alpha ~ 0.93 at k = 1 (and higher for larger k), the
#: C1R-optimal k well above the C2R-optimal one — the paper's three findings.
HOLDS = dict(TRUE_COEFS, c1d=0.03 * TRUE_COEFS["c1v"], c2d=0.93 * TRUE_COEFS["c2v"])
#: The reverse: a drafter costly in C1 (0.9) and nearly free in C2 (0.03).
FAILS = dict(TRUE_COEFS, c1d=0.9 * TRUE_COEFS["c1v"], c2d=0.03 * TRUE_COEFS["c2v"])
CELL = "1024x1024"


def stub(coefs: dict, n: int = 400, spread: float = 0.05, seed: int = 0) -> DrawsFit:
    """A :class:`DrawsFit` whose draws are log-normal around ``coefs``."""
    fit = DrawsFit(n=n, spread=spread, seed=seed)
    rng = np.random.default_rng(seed + 1)
    fit.draws = {k: v * np.exp(spread * rng.standard_normal(n)) for k, v in coefs.items()}
    return fit


def test_findings_hold_on_paper_like_coefficients():
    table, checks = findings.paper_findings(stub(HOLDS), "V8", "A100", cell=CELL)
    a, b, c = checks["c1r_below_1"], checks["c2r_above_1"], checks["argmin_k"]
    assert a["holds"] and a["p_all"] > 0.99 and a["p_min"] > 0.99
    assert set(a["p_by_k"]) == set(range(1, 11))
    assert b["holds"]
    assert b["alpha_threshold_by_k"][1] == 0.95  # alpha = 0.93 is where C2R(k=1) = 1
    assert all(t is None or t >= 0.95 for t in b["alpha_threshold_by_k"].values())
    assert b["alpha_cross_median_by_k"][1] == pytest.approx(0.93, abs=0.01)
    assert b["p_by_alpha_k"][(0.5, 3)] == 1.0
    assert c["holds"] and c["p_mean"] > 0.85
    assert c["p_by_alpha"][0.7] > 0.99
    assert c["mean_argmin_c1r_by_alpha"][0.7] > c["mean_argmin_c2r_by_alpha"][0.7] + 2
    # at alpha = 1 every draft is accepted: C1R falls all the way to the largest k, and so does
    # C2R in every draw with c2d < c2v (a tie, which counts against the finding)
    assert c["mean_argmin_c1r_by_alpha"][1.0] == 10
    frac = np.mean(stub(HOLDS).draws["c2d"] < stub(HOLDS).draws["c2v"])
    assert c["p_by_alpha"][1.0] == pytest.approx(1.0 - frac)
    assert len(table) == len(findings.PAPER_ALPHAS) * 10
    assert table.attrs["cell"] == CELL and table.attrs["decode"] == 1024


def test_findings_flip_when_the_drafter_costs_are_reversed():
    _, checks = findings.paper_findings(stub(FAILS), "V8", "A100", cell=CELL)
    a, b, c = checks["c1r_below_1"], checks["c2r_above_1"], checks["argmin_k"]
    assert not a["holds"] and a["p_all"] == 0.0 and a["p_by_k"][10] == 0.0
    assert not b["holds"]
    assert b["alpha_threshold_by_k"][1] == 0.5  # C2R < 1 already at the lowest alpha
    assert not c["holds"] and c["p_mean"] < 0.05


def test_table_is_the_planners_cost_ratios_on_the_same_draws():
    fit = stub(HOLDS)
    alphas, ks = (0.6, 0.8), range(1, 7)
    table, _ = findings.paper_findings(fit, "V8", "A100", cell=CELL, alphas=alphas, ks=ks)
    arm = plan.Arm("V8", "A100", prefill=1024, decode=1024, cell=CELL, alpha=0.8, k=1)
    expected = plan.cost_ratios(fit, arm, ks=ks)
    got = table[table.alpha == 0.8].drop(columns=["alpha", "p_argmin_c1r", "p_argmin_c2r"])
    pd.testing.assert_frame_equal(got.reset_index(drop=True), expected)
    c1r, c2r, _ = findings.ratio_draws(fit, arm, alphas, ks)
    np.testing.assert_allclose(table["p_c1r_below_1"], (c1r < 1).mean(0).ravel())
    np.testing.assert_allclose(table["p_c2r_above_1"], (c2r > 1).mean(0).ravel())
    np.testing.assert_allclose(table.groupby("alpha")["p_argmin_c1r"].sum(), 1.0)
    np.testing.assert_allclose(table.groupby("alpha")["p_argmin_c2r"].sum(), 1.0)


def test_c2r_crossing_alpha_solves_c2r_equal_1():
    fit = stub(TRUE_COEFS, spread=0.3)
    coefs = fit.draws
    # k = 1: E = 1 + alpha, so C2R = 1 exactly where alpha = c2d / c2v (inf when that is > 1)
    ratio = coefs["c2d"] / coefs["c2v"]
    cross = findings.c2r_crossing_alpha(coefs, 1024, 1)
    assert np.isinf(cross).any() and (ratio > 1).any()
    np.testing.assert_allclose(cross, np.where(ratio > 1, np.inf, ratio), atol=1e-12)
    cross6 = findings.c2r_crossing_alpha(coefs, 1024, 6)
    ok = np.isfinite(cross6)
    c = [coefs[n][ok] for n in plan.COEFFICIENTS]
    c2_sd = laws.effective_costs(*c, 1024, cross6[ok], 6)[1]
    c2_dense = laws.effective_costs(*c, 1024, 0.5, 0)[1]
    np.testing.assert_allclose(c2_sd / c2_dense, 1.0, atol=1e-9)


def test_median_cell_and_default_cell():
    grid = [(p, g) for p in (256, 512, 768, 1024) for g in (256, 512, 768, 1024)]
    rows = [dict(cell=f"{p}x{g}", prefill=p, decode=g) for p, g in grid]
    data = pd.DataFrame(rows).assign(verifier="V8", hardware="A100")
    assert findings.median_cell(data, "V8", "A100") == ("768x768", 768.0, 768.0)
    fit = stub(HOLDS)
    fit.data = data
    table, _ = findings.paper_findings(fit, "V8", "A100", alphas=[0.8], ks=[1, 2])
    assert table.attrs["cell"] == "768x768" and len(table) == 2
    table, _ = findings.paper_findings(fit, "V8", "A100", cell=(300, 700), alphas=[0.8], ks=[2])
    assert table.attrs["cell"] == "300x700" and table.attrs["prefill"] == 300
    with pytest.raises(ValueError, match="no rows"):
        findings.median_cell(data, "V8", "H100")


def test_bad_inputs_are_refused():
    fit = stub(HOLDS)
    with pytest.raises(ValueError, match="carries no data"):
        findings.paper_findings(fit, "V8", "A100")
    with pytest.raises(ValueError, match=">= 1"):
        findings.paper_findings(fit, "V8", "A100", cell=CELL, ks=[0, 1])
    with pytest.raises(ValueError, match="alphas"):
        findings.paper_findings(fit, "V8", "A100", cell=CELL, alphas=[0.0])
    with pytest.raises(ValueError, match="prefill"):
        findings.paper_findings(fit, "V8", "A100", cell="median")
    with pytest.raises(ValueError, match="unknown verifier"):
        findings.paper_findings(fit, "V70", "A100", cell=CELL)


def test_benchmark_script_runs_on_a_stub_fit(tmp_path, monkeypatch):
    import importlib.util

    from conftest import REPO, law_rows

    spec = importlib.util.spec_from_file_location(
        "paper_findings_bench", REPO / "benchmarks" / "paper_findings.py"
    )
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    fit = stub(HOLDS)
    dense_only = law_rows(fit, ks=(0,)).assign(verifier="V70")
    fit.data = pd.concat([law_rows(fit), dense_only], ignore_index=True)
    fit.summary = lambda: dict(
        model="sd",
        rows=len(fit.data),
        divergences=0,
        max_r_hat=1.0,
        min_ess_bulk=900.0,
        healthy=True,
    )
    monkeypatch.setattr(bench, "load_fit", lambda path: fit)
    out = tmp_path / "findings.md"
    text = bench.main(
        ["stub.nc", "--ks", "1,2,4", "--alphas", "0.6,0.8,0.95", "--write", "--out", str(out)]
    )
    assert out.read_text().startswith("# The paper's cost-ratio findings")
    assert (
        text in out.read_text()
        and "Command: `.venv/bin/python benchmarks/paper_findings.py" in text
    )
    assert "| V8 | A100 | eagle3 | 1024x1024 | 1.000 | 1.000 | holds |" in text
    assert "V70" in text.split("Skipped:")[1]  # dense-only group listed, not evaluated
