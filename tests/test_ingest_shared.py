"""Every genuine tool output in ../shared/examples parses, and the numbers equal the raw fields.

Skipped when ../shared is absent (the package's own fixtures cover the readers then).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from specbayes.data import validate_sweeps
from specbayes.ingest import IngestError, ingest_files, read

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
EXAMPLES = SHARED / "examples"

pytestmark = [
    pytest.mark.shared,
    pytest.mark.skipif(not EXAMPLES.exists(), reason="../shared/examples is absent"),
]

GUIDELLM_JSON = [
    "guidellm/v0.5.2_constant/benchmarks.json",
    "guidellm/v0.5.2_constant/benchmarks.yaml",
    "guidellm/v0.8.1_sweep/benchmarks.json.gz",
    "guidellm/v0.5.2_legacy_fixture/benchmarks_stripped.json",
    "guidellm/v0.5.2_legacy_fixture/benchmarks_stripped.yaml",
]


def raw(rel: str) -> dict:
    data = (EXAMPLES / rel).read_bytes()
    if rel.endswith(".gz"):
        data = gzip.decompress(data)
    return yaml.safe_load(data) if rel.endswith(".yaml") else json.loads(data)


def example_files() -> list[Path]:
    if not EXAMPLES.exists():
        return []
    return sorted(p for p in EXAMPLES.rglob("*") if p.is_file() and p.name != "README.md")


@pytest.mark.parametrize("path", example_files(), ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_every_example_file_parses_or_names_its_defect(path):
    if path.name == "benchmarks.csv" and "v0.5.2" in str(path):
        # GuideLLM 0.5.2's CSV export misaligns rows (input_formats.md §1.6): one clear error
        with pytest.raises(IngestError, match=r"row 5.*230 columns.*146.*JSON/YAML"):
            read(path)
        return
    df = read(path)
    assert len(df) >= 1
    assert np.all(np.isfinite(df.latency)) and np.all(df.latency > 0)
    assert np.all(np.isfinite(df.rps)) and np.all(df.rps > 0)


@pytest.mark.parametrize("rel", GUIDELLM_JSON)
def test_guidellm_numbers_equal_hand_computation(rel):
    doc = raw(rel)
    df = read(EXAMPLES / rel)
    assert len(df) == len(doc["benchmarks"])
    legacy = "legacy" in rel
    for i, bench in enumerate(doc["benchmarks"]):
        row = df.iloc[i]
        m = bench["metrics"]
        totals = bench["request_totals"] if legacy else m["request_totals"]
        strategy = (bench["args"] if legacy else bench["config"])["strategy"]
        lat = m["request_latency"]["successful"]
        assert row.rps == totals["successful"] / bench["duration"]
        assert row.latency == lat["mean"]
        assert row.latency_p50 == lat["percentiles"].get("p50", lat["median"])
        assert row.latency_p99 == lat["percentiles"]["p99"]
        assert row.ttft == m["time_to_first_token_ms"]["successful"]["mean"] / 1000
        assert row.itl == m["inter_token_latency_ms"]["successful"]["mean"] / 1000
        assert row.prefill == m["prompt_token_count"]["successful"]["mean"]
        assert row.decode == m["output_token_count"]["successful"]["mean"]
        assert (row.n_requests, row.n_errored, row.n_incomplete) == (
            totals["successful"],
            totals["errored"],
            totals["incomplete"],
        )
        assert row.strategy == strategy["type_"]
        if "rate" in strategy and strategy["type_"] in ("constant", "poisson"):
            assert row.target_rps == strategy["rate"]
        # recompute the mean from the per-request records where the file keeps all of them
        records = bench["requests"]["successful"]
        if len(records) == totals["successful"]:
            mean = np.mean([r["request_latency"] for r in records])
            assert row.latency == pytest.approx(mean, rel=1e-12)


def test_guidellm_v081_sweep_flags_throughput_only():
    df = read(EXAMPLES / "guidellm/v0.8.1_sweep/benchmarks.json.gz")
    assert df.strategy.tolist() == ["synchronous", "throughput", "constant", "constant"]
    assert df.saturated.tolist() == [False, True, False, False]
    assert df.concurrency[0] == 1
    assert df.verifier[0] == "mock-llm"


def test_guidellm_yaml_equals_json():
    a = read(EXAMPLES / "guidellm/v0.5.2_constant/benchmarks.yaml").drop(columns="source")
    b = read(EXAMPLES / "guidellm/v0.5.2_constant/benchmarks.json").drop(columns="source")
    pd.testing.assert_frame_equal(a, b)


def test_guidellm_csv_081_matches_json():
    csv = read(EXAMPLES / "guidellm/v0.8.1_sweep/benchmarks.csv")
    js = read(EXAMPLES / "guidellm/v0.8.1_sweep/benchmarks.json.gz")
    for col in ("rps", "latency", "latency_p50", "ttft", "itl", "prefill", "decode"):
        np.testing.assert_allclose(csv[col], js[col], rtol=1e-12, err_msg=col)
    # the CSV rounds the target rate to two decimals
    np.testing.assert_allclose(csv.target_rps, js.target_rps, atol=0.006)
    assert csv.saturated.tolist() == js.saturated.tolist()


def test_vllm_default_example_by_hand():
    rel = "vllm-bench/v0.13.0_default/openai-4.0qps-mock-llm-20261129-064040.json"
    doc = raw(rel)
    row = read(EXAMPLES / rel).iloc[0]
    out = doc["total_output_tokens"] / doc["completed"]
    assert "mean_e2el_ms" not in doc
    assert row.latency == pytest.approx(
        (doc["mean_ttft_ms"] + doc["mean_tpot_ms"] * (out - 1)) / 1000, rel=1e-12
    )
    assert row.latency_source == "approx"
    assert row.rps == doc["request_throughput"] and row.target_rps == 4.0
    assert row.prefill == doc["total_input_tokens"] / doc["completed"] and row.decode == out
    assert row.n_requests == doc["completed"] and row.n_errored == doc["failed"]
    assert row.strategy == "poisson" and not row.saturated


def test_vllm_concurrency_example_by_hand():
    rel = (
        "vllm-bench/v0.13.0_concurrency/"
        "openai-chat-infqps-concurrency8-mock-llm-20261129-064313.json"
    )
    doc = raw(rel)
    assert doc["request_rate"] == "inf"
    row = read(EXAMPLES / rel).iloc[0]
    assert row.concurrency == doc["max_concurrency"] == 8
    assert row.strategy == "concurrent" and np.isnan(row.target_rps)
    assert row.rps == doc["request_throughput"]
    out = doc["total_output_tokens"] / doc["completed"]
    assert row.latency == pytest.approx(
        (doc["mean_ttft_ms"] + doc["mean_tpot_ms"] * (out - 1)) / 1000, rel=1e-12
    )
    # Little's law with N = 8 agrees within the ramp/drain tail of a 48-request run
    assert row.latency == pytest.approx(8 / doc["request_throughput"], rel=0.02)


def test_all_examples_ingest_and_validate():
    files = [p for p in example_files() if not (p.suffix == ".csv" and "v0.5.2" in str(p))]
    df = ingest_files(files, hardware="loopback-mock")
    table = validate_sweeps(df)
    assert len(table.data) + len(table.excluded) == len(df)
    assert set(table.excluded.index) >= set(df.index[df.saturated])


# -- percentiles (issue 45): every level the file carries, ms → s, none invented -------------

LEVELS = (50, 90, 95, 99)
#: GuideLLM metric → (schema column, factor to seconds)
GUIDELLM_METRICS = {
    "request_latency": ("latency", 1.0),
    "time_to_first_token_ms": ("ttft", 1e-3),
    "inter_token_latency_ms": ("itl", 1e-3),
    "time_per_output_token_ms": ("tpot", 1e-3),
}


@pytest.mark.parametrize("rel", GUIDELLM_JSON)
def test_guidellm_percentiles_equal_the_file(rel):
    doc = raw(rel)
    df = read(EXAMPLES / rel)
    for i, bench in enumerate(doc["benchmarks"]):
        row = df.iloc[i]
        for metric, (column, scale) in GUIDELLM_METRICS.items():
            dist = bench["metrics"][metric]["successful"]
            pct = dist["percentiles"]
            for level in LEVELS:
                # legacy files print no p50; their median is that statistic
                expected = pct.get(f"p{level}", dist["median"] if level == 50 else None)
                assert row[f"{column}_p{level}"] == pytest.approx(expected * scale, rel=1e-15)
            if column != "latency":
                assert row[column] == pytest.approx(dist["mean"] * scale, rel=1e-15)
        # GuideLLM has no per-chunk gaps: those columns stay empty rather than copied
        assert row[[f"chunk_itl_p{q}" for q in LEVELS]].isna().all()


def test_guidellm_csv_081_percentiles_match_json():
    csv = read(EXAMPLES / "guidellm/v0.8.1_sweep/benchmarks.csv")
    js = read(EXAMPLES / "guidellm/v0.8.1_sweep/benchmarks.json.gz")
    for metric in ("latency", "ttft", "itl", "tpot"):
        for col in [f"{metric}_p{q}" for q in LEVELS] + ([metric] if metric != "latency" else []):
            assert csv[col].notna().all(), col
            np.testing.assert_allclose(csv[col], js[col], rtol=1e-12, err_msg=col)


VLLM_EXAMPLES = [
    "vllm-bench/v0.13.0_default/openai-4.0qps-mock-llm-20261129-064040.json",
    "vllm-bench/v0.13.0_concurrency/openai-chat-infqps-concurrency8-mock-llm-20261129-064313.json",
]


@pytest.mark.parametrize("rel", VLLM_EXAMPLES)
def test_vllm_percentiles_equal_the_file_and_absent_ones_stay_empty(rel):
    doc = raw(rel)
    row = read(EXAMPLES / rel).iloc[0]
    # vLLM's TPOT is the schema's itl; its per-chunk ITL is chunk_itl
    for metric, column in {"ttft": "ttft", "tpot": "itl", "itl": "chunk_itl"}.items():
        assert row[column] == doc[f"mean_{metric}_ms"] / 1000
        assert row[f"{column}_p50"] == doc[f"median_{metric}_ms"] / 1000
        assert row[f"{column}_p99"] == doc[f"p99_{metric}_ms"] / 1000
        # the default --metric-percentiles is 99 only: p90/p95 are not interpolated
        assert np.isnan(row[f"{column}_p90"]) and np.isnan(row[f"{column}_p95"])
    # no e2el in the default --percentile-metrics and no per-request arrays: no latency tails
    assert row[[f"latency_p{q}" for q in LEVELS]].isna().all()
    assert row[[f"tpot_p{q}" for q in LEVELS]].isna().all() and np.isnan(row.tpot)
