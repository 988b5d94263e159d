"""The simulator's timing columns (issue 45): every documented metric and percentile per point,
with the definitions of :data:`specbayes.data.OPTIONAL_COLUMNS`."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from specbayes.data import OPTIONAL_COLUMNS, PERCENTILE_LEVELS, TIMING_METRICS, validate_sweeps
from specbayes.sim import EngineConfig, make_config, run_point
from specbayes.sim.engine import Emissions

KW = dict(hardware="H100", prefill=512, decode=256)
RATE = 10.0
N = 300


def _columns(metric: str) -> list[str]:
    pct = [f"{metric}_p{level}" for level in PERCENTILE_LEVELS]
    return pct if metric == "latency" else [metric, *pct]


@pytest.fixture(scope="module")
def points():
    """Dense, SD at alpha 0.7 and SD at alpha 0.9, same verifier, workload and load."""
    out = {}
    for name, extra in {
        "dense": {},
        "sd": dict(k=3, alpha=0.7),
        "sd_high": dict(k=3, alpha=0.9),
    }.items():
        cfg = make_config("Qwen3-8B", **KW, **extra)
        out[name] = run_point(cfg, "constant", rate=RATE, n_requests=N, details=True)
    return out


@pytest.mark.parametrize("name", ["dense", "sd"])
def test_every_documented_timing_column_is_recorded_and_finite(points, name):
    row, _ = points[name]
    for metric in TIMING_METRICS:
        for col in _columns(metric):
            assert col in OPTIONAL_COLUMNS  # the documented name
            assert col in row, col
            assert np.isfinite(row[col]) and row[col] > 0, (col, row[col])


@pytest.mark.parametrize("name", ["dense", "sd", "sd_high"])
def test_percentiles_are_non_decreasing_and_bracket_the_median(points, name):
    row, _ = points[name]
    for metric in TIMING_METRICS:
        values = [row[f"{metric}_p{level}"] for level in PERCENTILE_LEVELS]
        assert all(a <= b for a, b in itertools.pairwise(values)), (metric, values)
        mean = row[metric]
        assert values[0] * 0.5 < mean < values[-1] * 1.5 + 1e-12, (metric, mean, values)


@pytest.mark.parametrize("name", ["dense", "sd"])
def test_per_request_definitions(points, name):
    """itl = (finish − first)/(g − 1), tpot = latency/g, ttft = first − arrival, per request,
    over the same measured requests as the latency columns."""
    row, info = points[name]
    g = KW["decode"]
    sel = info["selected"]
    lat = (info["finish"] - info["arrival"])[sel]
    ttft = (info["first_token"] - info["arrival"])[sel]
    itl = (info["finish"] - info["first_token"])[sel] / (g - 1)
    tpot = lat / g
    for metric, values in {"latency": lat, "ttft": ttft, "itl": itl, "tpot": tpot}.items():
        if metric != "latency":
            assert row[metric] == pytest.approx(values.mean(), rel=1e-12)
        for level in PERCENTILE_LEVELS:
            assert row[f"{metric}_p{level}"] == pytest.approx(
                np.percentile(values, level), rel=1e-12
            )
    # decode tokens fixed per cell: itl × (g − 1) + ttft = latency, per request and on average
    assert row["itl"] * (g - 1) + row["ttft"] == pytest.approx(row["latency"], rel=1e-9)
    assert row["tpot"] * g == pytest.approx(row["latency"], rel=1e-9)
    # tpot counts the first token (prefill + queueing) too: above itl whenever ttft > itl
    assert row["tpot"] > row["itl"]


@pytest.mark.parametrize("name", ["dense", "sd"])
def test_emissions_span_first_token_to_finish(points, name):
    row, info = points[name]
    em: Emissions = info["emissions"]
    g = KW["decode"]
    sel = info["selected"]
    assert np.all(em.count >= 1) and np.all(em.count <= g)
    last = em.times[em.start + em.count - 1]
    np.testing.assert_array_equal(last, info["finish"])
    np.testing.assert_array_equal(em.times[em.start], info["first_token"])  # no preemption
    gaps = em.gaps(sel)
    assert gaps.size == (em.count[sel] - 1).sum()
    assert np.all(gaps > 0)
    # pooled over all gaps: the mean is the total decode span over the number of gaps
    span = (info["finish"] - info["first_token"])[sel].sum()
    assert row["chunk_itl"] == pytest.approx(span / gaps.size, rel=1e-9)
    assert row["chunk_itl_p99"] == pytest.approx(np.percentile(gaps, 99), rel=1e-12)
    if name == "dense":
        # one token per step: every request emits g times, and the pooled chunk mean equals
        # the per-request itl mean (same number of gaps per request)
        assert np.all(em.count == g)
        assert row["chunk_itl"] == pytest.approx(row["itl"], rel=1e-9)
    else:
        # several tokens per verify step: emissions ≈ g / acceptance length
        chunks = em.count[sel].mean()
        assert chunks == pytest.approx(g / row["acceptance_length"], rel=0.05)


def test_sd_chunks_are_longer_than_dense_tokens_but_its_itl_is_shorter(points):
    dense, _ = points["dense"]
    for name in ("sd", "sd_high"):
        sd, _ = points[name]
        assert sd["rps"] == pytest.approx(dense["rps"], rel=0.05)  # the same load
        # a verify step (verifier on k + 1 tokens + drafting) outlasts a dense step
        assert sd["chunk_itl"] > dense["itl"]
        assert sd["chunk_itl_p50"] > dense["chunk_itl_p50"]
        # ... but carries several tokens: bursty, chunk gap ≈ itl × tokens per chunk
        ratio = sd["chunk_itl"] / sd["itl"]
        assert ratio == pytest.approx(sd["acceptance_length"], rel=0.1)
        assert ratio > 1.5
    high, _ = points["sd_high"]
    assert high["itl"] < 0.75 * dense["itl"]  # high alpha: SD's per-token latency is lower
    assert high["itl_p99"] < dense["itl_p99"]


@pytest.mark.filterwarnings("ignore:.*single load level:UserWarning")
def test_validate_sweeps_accepts_the_rows(points):
    rows = pd.DataFrame([points[name][0] for name in ("dense", "sd", "sd_high")])
    table = validate_sweeps(rows, source="sim")
    assert len(table.data) == 3
    for metric in TIMING_METRICS:
        for col in _columns(metric):
            assert table.data[col].notna().all(), col
    # and the validator would reject disordered percentiles in these very rows
    bad = rows.copy()
    bad["chunk_itl_p50"] = bad["chunk_itl_p99"] * 2
    with pytest.raises(Exception, match="chunk_itl_p50"):
        validate_sweeps(bad, source="sim")


def test_emission_bound_holds_under_preemption():
    """Recomputed requests emit again at their re-prefill's end; never more than g times."""
    small = EngineConfig(kv_blocks_override=200)
    cfg = make_config("Qwen3-8B", hardware="H100", prefill=256, decode=256, engine=small)
    row, info = run_point(cfg, "concurrent", concurrency=32, n_requests=120, details=True)
    assert row["preemptions"] > 0
    em = info["emissions"]
    assert np.all(em.count <= 256)
    np.testing.assert_array_equal(em.times[em.start + em.count - 1], info["finish"])
    sel = info["selected"]
    span = (info["finish"] - info["first_token"])[sel].sum()
    assert em.gaps(sel).sum() == pytest.approx(span, rel=1e-9)
    for metric in TIMING_METRICS:
        assert all(np.isfinite(row[c]) for c in _columns(metric))


def test_emissions_gaps_by_hand():
    em = Emissions(
        times=np.array([1.0, 2.0, 4.0, 9.0, 5.0, 5.5, 7.0, 0.0]),
        start=np.array([0, 4, 7]),
        count=np.array([3, 3, 1]),
    )
    np.testing.assert_allclose(em.gaps(), [1.0, 2.0, 0.5, 1.5])
    np.testing.assert_allclose(em.gaps(np.array([False, True, True])), [0.5, 1.5])
    assert em.gaps(np.array([False, False, True])).size == 0


def test_single_token_outputs_have_no_chunk_gaps():
    cfg = make_config("Qwen3-8B", hardware="H100", prefill=128, decode=1)
    row = run_point(cfg, "constant", rate=5.0, n_requests=40)
    assert np.isnan(row["chunk_itl"]) and np.isnan(row["chunk_itl_p99"])
    assert row["tpot"] == pytest.approx(row["latency"], rel=1e-12)
