"""The model and hardware catalog: entries load, numbers are consistent with their sources."""

from __future__ import annotations

import pytest

from specbayes import catalog

VERIFIERS = [
    "Qwen3-0.6B",
    "Qwen3-1.7B",
    "Qwen3-8B",
    "Qwen3-14B",
    "Qwen3-32B",
    "Llama-3.1-8B",
    "Llama-3.1-70B",
    "Qwen3-30B-A3B",
    "gpt-oss-20b",
    "Qwen3-235B-A22B",
]
HARDWARE = ["A100-SXM-80GB", "H100-SXM", "H200", "B200"]


def test_catalog_lists_everything_the_issue_asks_for():
    assert set(VERIFIERS) <= set(catalog.list_entries("verifiers"))
    assert set(HARDWARE) <= set(catalog.list_entries("hardware"))
    drafters = set(catalog.list_entries("drafters"))
    assert {f"EAGLE3-{v}" for v in VERIFIERS} <= drafters
    assert {"Qwen3-1.7B", "Llama-3.1-8B"} <= drafters


@pytest.mark.parametrize("name", VERIFIERS)
def test_parameter_count_from_architecture_matches_model_card(name):
    m = catalog.load_model(name)
    assert m.card_total is not None
    assert m.total_parameters == pytest.approx(m.card_total, rel=0.02)
    if m.is_moe:
        # cards differ on whether the (untied) LM head counts as "active"; accept either
        alt = m.active_parameters + (0 if m.tie_word_embeddings else m.embedding_params)
        assert (
            min(abs(m.active_parameters / m.card_active - 1), abs(alt / m.card_active - 1)) < 0.03
        )
        assert 0 < m.num_experts_per_tok < m.num_experts
    else:
        assert m.active_parameters <= m.total_parameters


@pytest.mark.parametrize("name", VERIFIERS)
def test_every_entry_cites_a_source(name):
    m = catalog.load_model(name)
    text = m.path.read_text()
    assert "config.json" in text and "from memory" in text
    assert m.source


def test_drafter_files_mark_assumptions_and_resolve():
    for name in catalog.list_entries("drafters"):
        d = catalog.load_drafter(name)
        assert d.type in ("eagle3", "vanilla")
        if d.type == "eagle3":
            assert "ASSUMPTION" in d.path.read_text()
            # a one-layer head is a few percent of its verifier
            assert d.parameters < 0.25 * d.base.total_parameters
    assert catalog.load_drafter("Qwen3-1.7B").parameters == pytest.approx(1.72e9, rel=0.02)


@pytest.mark.parametrize("name", HARDWARE)
def test_hardware_numbers(name):
    hw = catalog.load_hardware(name)
    assert hw.memory_gib >= 80
    assert 1e12 < hw.hbm_bandwidth < 1e13
    assert 1e14 < hw.bf16_flops < 1e16
    assert 0 < hw.achievable_bandwidth_fraction <= 1
    text = hw.path.read_text()
    assert "datasheet" in text and "ASSUMPTION" in text
    assert hw.bandwidth < hw.hbm_bandwidth


def test_aliases_and_case_insensitive_names():
    assert catalog.load_hardware("h100").name == "H100-SXM"
    assert catalog.load_hardware("A100").name == "A100-SXM-80GB"
    assert catalog.load_model("qwen3-8b").name == "Qwen3-8B"


def test_unknown_names_are_one_clear_error():
    with pytest.raises(ValueError, match=r"unknown verifier 'Qwen3-9B'.*Qwen3-8B"):
        catalog.load_model("Qwen3-9B")
    with pytest.raises(ValueError, match="unknown hardware"):
        catalog.load_hardware("TPU-v9")
    with pytest.raises(ValueError, match="unknown catalog kind"):
        catalog.list_entries("gpus")


def test_missing_catalog_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECBAYES_MODELS", str(tmp_path / "nowhere"))
    # the env var is tried first, then the repository folder, which exists here
    assert catalog.catalog_dir().name == "models"
    monkeypatch.setattr(catalog, "__file__", str(tmp_path / "pkg" / "catalog.py"))
    with pytest.raises(FileNotFoundError, match="model catalog not found"):
        catalog.catalog_dir()


def test_kv_geometry():
    m = catalog.load_model("Qwen3-8B").geometry()
    # 2 (K, V) x 36 layers x 8 KV heads x 128 x 2 bytes
    assert m.kv_bytes_per_token(1) == 2 * 36 * 8 * 128 * 2
    assert m.kv_bytes_per_token(2) == m.kv_bytes_per_token(1) / 2
    # more GPUs than KV heads: heads are replicated
    big = catalog.load_model("Qwen3-235B-A22B").geometry()
    assert big.kv_heads_per_gpu(8) == 1
