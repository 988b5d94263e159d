"""Readers on the package's own fixtures (tests/fixtures/ingest; no ../shared needed)."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from specbayes import laws
from specbayes.data import validate_sweeps
from specbayes.ingest import IngestError, detect_format, ingest_files, read
from specbayes.ingest._common import load_file

FIX = Path(__file__).parent / "fixtures" / "ingest"


def load(name: str):
    data = (FIX / name).read_bytes()
    if name.endswith(".gz"):
        data = gzip.decompress(data)
    if name.endswith(".yaml"):
        return yaml.safe_load(data)
    return json.loads(data)


# --------------------------------------------------------------------------------------------
# GuideLLM
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("guidellm_v1.json", "guidellm v1 (0.5.2)"),
        ("guidellm_v2.json.gz", "guidellm v2 (0.8.1)"),
        ("guidellm_v2.yaml", "guidellm v2 (0.8.1)"),
        ("guidellm_v04.json", "guidellm 0.4"),
        ("guidellm_legacy.json", "guidellm legacy"),
        ("vllm_default.json", "vllm bench serve"),
        ("vllm_append_result.json", "vllm bench serve (JSON Lines)"),
        ("sglang_bench.jsonl", "sglang bench_serving"),
        ("sweep_table.csv", "sweep table"),
    ],
)
def test_format_detected_from_content(name, fmt, tmp_path):
    assert detect_format(FIX / name) == fmt
    # the name does not matter: copy under a misleading one
    other = tmp_path / "results.txt"
    other.write_bytes((FIX / name).read_bytes())
    assert detect_format(other) == fmt


def test_guidellm_v1_numbers_from_raw_fields():
    doc = load("guidellm_v1.json")
    df = read(FIX / "guidellm_v1.json")
    assert len(df) == len(doc["benchmarks"])
    for row, bench in zip(df.itertuples(), doc["benchmarks"], strict=True):
        m = bench["metrics"]
        ok = m["request_totals"]["successful"]
        assert row.rps == ok / bench["duration"]
        assert row.latency == m["request_latency"]["successful"]["mean"]
        assert row.latency_p50 == m["request_latency"]["successful"]["percentiles"]["p50"]
        assert row.latency_p99 == m["request_latency"]["successful"]["percentiles"]["p99"]
        assert row.ttft == m["time_to_first_token_ms"]["successful"]["mean"] / 1000
        assert row.itl == m["inter_token_latency_ms"]["successful"]["mean"] / 1000
        assert row.prefill == m["prompt_token_count"]["successful"]["mean"]
        assert row.decode == m["output_token_count"]["successful"]["mean"]
        assert row.n_requests == ok
        assert row.n_errored == m["request_totals"]["errored"]
        assert row.n_incomplete == m["request_totals"]["incomplete"]
        assert row.mean_batch == m["request_concurrency"]["successful"]["mean"]
        assert row.strategy == bench["config"]["strategy"]["type_"]
        assert row.source.endswith(f"guidellm_v1.json#benchmarks[{row.Index}]")
    # per-request records (complete for the synchronous benchmark) give the same mean
    records = doc["benchmarks"][0]["requests"]["successful"]
    assert df.latency[0] == pytest.approx(np.mean([r["request_latency"] for r in records]))


def test_guidellm_strategies_and_flags():
    df = read(FIX / "guidellm_v2.json.gz")
    by = df.set_index(df.index)
    assert list(df.strategy) == [
        "synchronous",
        "concurrent",
        "constant",
        "poisson",
        "throughput",
        "constant",
    ]
    assert by.concurrency[0] == 1 and by.concurrency[1] == 4  # closed loops
    assert np.isnan(by.target_rps[0]) and by.target_rps[2] == 10.0 and by.target_rps[3] == 4.0
    assert list(df.saturated) == [False, False, True, True, True, True]
    assert "rate shortfall" in df.saturation_reason[2]
    assert "errored: 2 of 22" in df.saturation_reason[3]
    assert "throughput strategy" in df.saturation_reason[4]
    assert "over-saturation detector" in df.saturation_reason[5]
    # the sampled request list (2 of 40, latency 9 s) is not used for the mean
    assert df.latency[1] == 0.52
    assert (df.verifier == "tiny-model-v2").all()


def test_guidellm_yaml_equals_json():
    a = read(FIX / "guidellm_v2.yaml").drop(columns="source")
    b = read(FIX / "guidellm_v2.json.gz").drop(columns="source")
    pd.testing.assert_frame_equal(a, b)


def test_guidellm_legacy_uses_median_for_p50_and_benchmark_totals():
    doc = load("guidellm_legacy.json")
    row = read(FIX / "guidellm_legacy.json").iloc[0]
    bench = doc["benchmarks"][0]
    assert "p50" not in bench["metrics"]["request_latency"]["successful"]["percentiles"]
    assert row.latency_p50 == bench["metrics"]["request_latency"]["successful"]["median"]
    assert row.rps == bench["request_totals"]["successful"] / bench["duration"]
    assert row.concurrency == 1 and row.strategy == "synchronous"
    assert row.verifier == "legacy-model"


def test_guidellm_record_mismatch_is_an_error(tmp_path):
    doc = load("guidellm_v1.json")
    doc["benchmarks"][0]["requests"]["successful"][0]["request_latency"] = 5.0
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(IngestError, match=r"request_latency.successful.mean.*disagrees"):
        read(path)


def test_guidellm_latency_from_records_or_littles_law(tmp_path):
    doc = load("guidellm_v1.json")
    del doc["benchmarks"][0]["metrics"]["request_latency"]  # records complete: use them
    del doc["benchmarks"][1]["metrics"]["request_latency"]  # no records: Little's law
    doc["benchmarks"] = doc["benchmarks"][:2]
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    df = read(path)
    assert df.latency_source.tolist() == ["requests", "littles_law"]
    assert df.latency[0] == pytest.approx((0.4 + 0.5 + 0.6) / 3)
    assert df.latency[1] == pytest.approx(3.9 / 8.0)
    assert np.isnan(df.latency_p50[0])


# --------------------------------------------------------------------------------------------
# vllm bench serve / SGLang
# --------------------------------------------------------------------------------------------


def test_vllm_default_reconstructs_latency_approximately():
    doc = load("vllm_default.json")
    row = read(FIX / "vllm_default.json").iloc[0]
    out = doc["total_output_tokens"] / doc["completed"]
    assert row.latency == pytest.approx(
        (doc["mean_ttft_ms"] + doc["mean_tpot_ms"] * (out - 1)) / 1000
    )
    assert row.latency_source == "approx"
    assert row.rps == doc["request_throughput"] and row.target_rps == doc["request_rate"]
    assert row.prefill == doc["total_input_tokens"] / doc["completed"] and row.decode == out
    assert row.ttft == doc["mean_ttft_ms"] / 1000 and row.itl == doc["mean_tpot_ms"] / 1000
    assert row.strategy == "poisson" and np.isnan(row.concurrency)


def test_vllm_append_result_lines_inf_rate_and_shortfall():
    df = read(FIX / "vllm_append_result.json")
    assert len(df) == 3
    closed, e2el, short = df.iloc[0], df.iloc[1], df.iloc[2]
    assert closed.strategy == "concurrent" and closed.concurrency == 8
    assert np.isnan(closed.target_rps)
    assert e2el.latency == 0.4 and e2el.latency_source == "mean_e2el"
    assert e2el.latency_p50 == 0.39 and e2el.latency_p99 == 0.6
    assert short.saturated and "rate shortfall" in short.saturation_reason
    assert closed.source.endswith("#line[1]") and short.source.endswith("#line[3]")


def test_vllm_detailed_arrays_give_exact_latency():
    doc = load("vllm_detailed.json")
    row = read(FIX / "vllm_detailed.json").iloc[0]
    ok = [j for j, e in enumerate(doc["errors"]) if e == ""]
    lat = [doc["ttfts"][j] + sum(doc["itls"][j]) for j in ok]
    assert row.latency == pytest.approx(np.mean(lat))
    assert row.latency_source == "per_request"
    assert row.latency_p50 == pytest.approx(np.percentile(lat, 50))
    assert row.n_errored == 1 and row.saturated and "errored: 1 of 3" in row.saturation_reason


def test_vllm_e2el_cross_checked_against_arrays(tmp_path):
    doc = load("vllm_detailed.json")
    doc["mean_e2el_ms"] = 999.0
    path = tmp_path / "x.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(IngestError, match=r"mean_e2el_ms.*disagrees"):
        read(path)


def test_vllm_latencies_list_used_when_no_e2el(tmp_path):
    doc = load("vllm_default.json")
    doc["latencies"] = [0.2, 0.4, 0.0]  # a failed request has latency 0
    path = tmp_path / "x.json"
    path.write_text(json.dumps(doc))
    row = read(path).iloc[0]
    assert row.latency == pytest.approx(0.3) and row.latency_source == "latencies"


def test_vllm_spec_decode_fields():
    doc = load("vllm_spec_decode.json")
    row = read(FIX / "vllm_spec_decode.json").iloc[0]
    assert row.acceptance_marginal == doc["spec_decode_acceptance_rate"] / 100
    assert (
        row.acceptance_length
        == 1 + doc["spec_decode_accepted_tokens"] / doc["spec_decode_num_drafts"]
    )
    assert row.k == 3  # from the per-position list
    assert row.alpha == pytest.approx(float(laws.alpha_from_marginal(0.6, 3)))
    assert row.alpha_source == "marginal"
    assert row.latency == 0.8


def test_vllm_spec_decode_inconsistent_is_an_error(tmp_path):
    doc = load("vllm_spec_decode.json")
    doc["spec_decode_acceptance_rate"] = 70.0
    path = tmp_path / "x.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(IngestError, match="spec_decode_acceptance_rate"):
        read(path)


def test_vllm_old_benchmark_serving_without_failed():
    doc = load("vllm_old_benchmark_serving.json")
    row = read(FIX / "vllm_old_benchmark_serving.json").iloc[0]
    assert row.n_errored == doc["num_prompts"] - doc["completed"]


def test_sglang_line():
    row = read(FIX / "sglang_bench.jsonl").iloc[0]
    assert row.latency == 1.5 and row.latency_source == "mean_e2el"
    assert row.concurrency == 16 and row.mean_batch == 15.0 and np.isnan(row.target_rps)


def test_sglang_percentiles_its_line_carries():
    row = read(FIX / "sglang_bench.jsonl").iloc[0]
    assert (row.latency_p50, row.latency_p99) == (1.45, 2.5)
    assert (row.ttft_p50, row.ttft_p99) == (0.09, 0.25)
    # SGLang's TPOT (per token after the first) is itl; its per-chunk ITL, with p95, chunk_itl
    assert (row.itl, row.itl_p50, row.itl_p99) == (0.011, 0.0105, 0.016)
    assert (row.chunk_itl_p50, row.chunk_itl_p95, row.chunk_itl_p99) == (0.01, 0.02, 0.03)
    for col in ("latency_p90", "latency_p95", "ttft_p90", "ttft_p95", "itl_p95", "tpot"):
        assert np.isnan(row[col]), col


def test_vllm_every_requested_percentile_kept():
    doc = load("vllm_all_percentiles.json")
    row = read(FIX / "vllm_all_percentiles.json").iloc[0]
    for metric, column in (
        ("e2el", "latency"),
        ("ttft", "ttft"),
        ("tpot", "itl"),
        ("itl", "chunk_itl"),
    ):
        for level in (50, 90, 95, 99):
            assert row[f"{column}_p{level}"] == doc[f"p{level}_{metric}_ms"] / 1000, (column, level)
    assert row.latency_p90 == 0.45 and row.ttft_p95 == 0.033


def test_vllm_latency_percentiles_from_complete_per_request_arrays():
    doc = load("vllm_detailed.json")
    row = read(FIX / "vllm_detailed.json").iloc[0]
    ok = [j for j, e in enumerate(doc["errors"]) if e == ""]
    lat = [doc["ttfts"][j] + sum(doc["itls"][j]) for j in ok]
    for level in (50, 90, 95, 99):
        assert row[f"latency_p{level}"] == pytest.approx(np.percentile(lat, level), rel=1e-12)


def test_guidellm_fixture_percentiles_and_legacy_median():
    v2 = read(FIX / "guidellm_v2.json.gz")
    assert v2.latency_p50[4] == 3.1 and v2.latency_p90[4] == 3.1 and v2.latency_p99[4] == 4.0
    assert v2.ttft_p99[4] == 0.9 and v2.itl_p95[0] == 0.005
    assert v2.tpot.isna().all()  # the fixture has no time_per_output_token_ms
    legacy = read(FIX / "guidellm_legacy.json")
    doc = load("guidellm_legacy.json")
    lat = doc["benchmarks"][0]["metrics"]["request_latency"]["successful"]
    assert "p50" not in lat["percentiles"] and legacy.latency_p50[0] == lat["median"]


def test_littles_law_for_closed_loop_without_latency(tmp_path):
    doc = load("vllm_default.json")
    for key in ("mean_ttft_ms", "mean_tpot_ms"):
        del doc[key]
    doc.update(request_rate="inf", max_concurrency=8, request_throughput=16.0)
    path = tmp_path / "x.json"
    path.write_text(json.dumps(doc))
    row = read(path).iloc[0]
    assert row.latency == 0.5 and row.latency_source == "littles_law"


# --------------------------------------------------------------------------------------------
# errors: one clear message naming the file and the field
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "pattern"),
    [
        ("truncated.json", r"truncated\.json: invalid or truncated JSON"),
        ("other_tool.json", r"other_tool\.json: not a GuideLLM report.*results"),
        ("empty.json", r"empty\.json: file is empty"),
        ("guidellm_empty_benchmarks.json", r"field 'benchmarks': empty list"),
        (
            "guidellm_zero_successful.json",
            r"field 'benchmarks\[0\]\.metrics\.request_totals\.successful': 0 successful",
        ),
        (
            "guidellm_legacy_missing_field.json",
            r"field 'benchmarks\[0\]\.metrics\.output_token_count\.successful\.mean': missing",
        ),
    ],
)
def test_bad_files_raise_one_clear_error(name, pattern):
    with pytest.raises(IngestError, match=pattern) as info:
        read(FIX / name)
    assert str(FIX / name) in str(info.value)
    assert not isinstance(info.value, KeyError)


def test_missing_file():
    with pytest.raises(FileNotFoundError, match="no such file"):
        read(FIX / "nope.json")


def test_truncated_gzip_and_jsonl(tmp_path):
    blob = (FIX / "guidellm_v2.json.gz").read_bytes()
    (tmp_path / "a.json.gz").write_bytes(blob[: len(blob) // 2])
    with pytest.raises(IngestError, match="truncated or corrupt gzip"):
        read(tmp_path / "a.json.gz")
    text = (FIX / "vllm_append_result.json").read_text()
    (tmp_path / "b.json").write_text(text[: len(text) - 40])
    with pytest.raises(IngestError, match="line 3 of a JSON Lines file"):
        read(tmp_path / "b.json")


def test_vllm_zero_completed_and_bad_rate(tmp_path):
    doc = load("vllm_default.json")
    path = tmp_path / "x.json"
    path.write_text(json.dumps({**doc, "completed": 0, "failed": 50}))
    with pytest.raises(IngestError, match="'completed': 0 successful requests"):
        read(path)
    path.write_text(json.dumps({**doc, "request_rate": "fast"}))
    with pytest.raises(IngestError, match="'request_rate': expected a number"):
        read(path)
    path.write_text(json.dumps({**doc, "duration": -1}))
    with pytest.raises(IngestError, match="'duration': must be > 0"):
        read(path)


def test_guidellm_unknown_version_and_strategy(tmp_path):
    doc = load("guidellm_v1.json")
    path = tmp_path / "x.json"
    path.write_text(json.dumps({**doc, "metadata": {"version": 7}}))
    with pytest.raises(IngestError, match=r"metadata\.version.*unknown GuideLLM report schema"):
        read(path)
    doc["benchmarks"][0]["config"]["strategy"]["type_"] = "sweep"
    path.write_text(json.dumps(doc))
    with pytest.raises(IngestError, match=r"benchmarks\[0\]\.config\.strategy\.type_"):
        read(path)


# --------------------------------------------------------------------------------------------
# labels, sidecar, the whole table
# --------------------------------------------------------------------------------------------


def test_ingest_files_labels_and_validation():
    df = ingest_files(
        [FIX / "guidellm_v1.json", FIX / "vllm_append_result.json"],
        hardware="H100-SXM",
        verifier="tiny",
        cell="chat",
    )
    assert len(df) == 7
    assert (df.hardware == "H100-SXM").all() and (df.verifier == "tiny").all()
    assert (df.k == 0).all() and (df.drafter == "none").all() and (df.cell == "chat").all()
    assert [f[2] for f in df.attrs["files"]] == [4, 3]
    table = validate_sweeps(df)
    flagged = set(df.index[df.saturated])
    assert set(table.excluded.index) >= flagged
    assert all(table.excluded.reason.str.len() > 0)


def test_ingest_files_sd_labels():
    df = ingest_files(
        [FIX / "guidellm_v1.json"],
        hardware="A100",
        drafter="eagle",
        k=4,
        acceptance_length=3.0,
    )
    assert (df.k == 4).all() and (df.alpha_source == "acceptance_length").all()
    assert df.alpha.iloc[0] == pytest.approx(float(laws.alpha_from_acceptance_length(3.0, 4)))
    with pytest.raises(ValueError, match="not both"):
        ingest_files([FIX / "guidellm_v1.json"], hardware="A", alpha=0.5, acceptance_length=2)
    with pytest.raises(IngestError, match="without the draft length k"):
        ingest_files([FIX / "guidellm_v1.json"], hardware="A", drafter="eagle")
    with pytest.raises(IngestError, match="acceptance_length"):
        ingest_files([FIX / "guidellm_v1.json"], hardware="A", k=2, acceptance_length=5.0)


def test_k_conflicting_with_file_is_an_error():
    with pytest.raises(IngestError, match="k = 5 was given but the file says k = 3"):
        ingest_files([FIX / "vllm_spec_decode.json"], hardware="A", drafter="d", k=5)


def test_sidecar_labels_and_precedence():
    df = ingest_files(
        [FIX / "vllm_spec_decode.json", FIX / "vllm_default.json"],
        sidecar=FIX / "sidecar.yaml",
        verifier="override",
    )
    assert (df.hardware == "H100-SXM").all() and (df.verifier == "override").all()
    assert df.drafter.tolist() == ["eagle3", "none"] and df.k.tolist() == [3, 0]


def test_hardware_is_required():
    with pytest.raises(ValueError, match="hardware not given"):
        ingest_files([FIX / "vllm_default.json"])


def test_skip_invalid_lists_skipped_files():
    with pytest.warns(UserWarning, match="skipped"):
        df = ingest_files(
            [FIX / "truncated.json", FIX / "vllm_default.json"], hardware="A", skip_invalid=True
        )
    assert len(df) == 1 and df.attrs["skipped"][0][0].endswith("truncated.json")


def test_sweep_table_passthrough():
    df = ingest_files([FIX / "sweep_table.csv"])
    assert df.saturated.tolist() == [False, False, True]
    table = validate_sweeps(df)
    assert len(table.data) == 2 and table.excluded.index.tolist() == [2]


def test_load_file_detects_json_lines_in_json_name():
    loaded = load_file(FIX / "vllm_append_result.json")
    assert loaded.kind == "jsonl" and len(loaded.data) == 3


def test_every_row_has_positive_finite_latency():
    for path in FIX.iterdir():
        if path.suffix == ".py" or path.name == "sidecar.yaml":
            continue
        try:
            df = read(path)
        except IngestError:
            continue
        lat = df.latency.to_numpy(float)
        assert np.all(np.isfinite(lat)) and np.all(lat > 0), path
        assert all(math.isfinite(x) and x > 0 for x in df.rps.dropna()), path


def test_parquet_sweep_table_roundtrip(tmp_path):
    df = ingest_files([FIX / "sweep_table.csv"])
    df.to_parquet(tmp_path / "s.parquet", index=False)
    again = ingest_files([tmp_path / "s.parquet"])
    assert again.attrs["files"][0][1] == "sweep table"
    np.testing.assert_allclose(again.latency, df.latency)
    (tmp_path / "bad.parquet").write_bytes(b"PAR1garbage")
    with pytest.raises(IngestError, match="unreadable parquet"):
        read(tmp_path / "bad.parquet")


def test_vllm_error_list_must_match_completed(tmp_path):
    doc = load("vllm_detailed.json")
    doc["errors"] = ["", "", ""]
    path = tmp_path / "x.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(IngestError, match="'errors': mark 3 requests successful"):
        read(path)


def test_default_cell_per_benchmark_file_but_not_for_tables(tmp_path):
    doc = load("guidellm_v1.json")
    doc["benchmarks"][1]["metrics"]["prompt_token_count"]["successful"]["mean"] = 103.0
    path = tmp_path / "g.json"
    path.write_text(json.dumps(doc))
    assert set(read(path).cell) == {"100x20"}  # one workload: the file's median lengths
    table = tmp_path / "t.csv"
    table.write_text(
        "verifier,hardware,prefill,decode,k,rps,latency\nm,H,128,64,0,1,1.0\nm,H,512,64,0,1,2.0\n"
    )
    df = read(table)
    assert df.cell.isna().all()
    assert validate_sweeps(df.assign(hardware="H")).data.cell.tolist() == ["128x64", "512x64"]
