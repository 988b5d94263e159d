"""Roofline centres of the cycle coefficients (specbayes.model.physics)."""

from __future__ import annotations

import math

import pytest

from specbayes import catalog
from specbayes.model.physics import roofline_centres

COEFS = {"c1p", "c1v", "c1d", "c2p", "c2v", "c2d"}


def test_llama_8b_on_h100_by_hand():
    """Every term written out from the config numbers (models/verifiers/llama-3.1-8b.toml,
    models/drafters/eagle3-llama-3.1-8b.toml, models/hardware/h100-sxm.toml)."""
    h, layers, q, kv, d, inter, vocab = 4096, 32, 32, 8, 128, 14336, 128256
    bw, flops = 3.35e12 * 0.8, 989e12 * 0.6
    layer = 2 * h * q * d + 2 * h * kv * d + 3 * h * inter
    weights = (layers * layer + vocab * h) * 2.0
    kv_token = 2 * kv * d * 2.0  # K and V, BF16, one layer
    p, g = 256, 256
    s = p + g / 2
    # one more verified/decoded token of one sequence: layer GEMMs + LM head + attention + KV write
    delta = (2 * layers * layer + 2 * vocab * h + 4 * layers * q * d * (s + 1)) / flops
    delta += layers * kv_token / bw
    c2v = s * layers * kv_token / bw + delta + 1e-5
    c1v = weights / bw + 1.5e-3 + c2v
    c1p = (2 * layers * layer * p + 4 * layers * q * d * p * (p + 1) / 2) / flops
    c1p += p * layers * kv_token / bw
    # EAGLE-3 head: Q/K/V read [embedding; features] (2h), fc 3h -> h, draft vocab 32000
    head = 2 * h * (q * d + 2 * kv * d) + q * d * h + 3 * h * inter + 3 * h * h
    d_delta = (2 * head + 2 * 32000 * h + 4 * q * d * (s + 1)) / flops + kv_token / bw
    d_seq = s * kv_token / bw + d_delta + 5e-6
    c1d = (head + 32000 * h) * 2.0 / bw + 6e-4 + d_seq + delta
    c2d = d_seq + delta
    got = roofline_centres("Llama-3.1-8B", "H100-SXM", "EAGLE3-Llama-3.1-8B", p, g)
    want = dict(c1p=c1p, c1v=c1v, c1d=c1d, c2p=c1p, c2v=c2v, c2d=c2d)
    assert got == pytest.approx(want, rel=1e-9)
    # the magnitudes, rounded (what the docstring derivation gives): 7.2 ms per decode step
    assert got["c1v"] == pytest.approx(7.155e-3, rel=1e-3)
    assert got["c1p"] == pytest.approx(6.06e-3, rel=1e-2)
    assert got["c2v"] == pytest.approx(5.45e-5, rel=1e-2)


def test_bigger_model_costs_more_per_decode_step():
    sizes = ["Qwen3-0.6B", "Qwen3-1.7B", "Qwen3-8B", "Qwen3-14B", "Qwen3-32B"]
    c1v = [roofline_centres(v, "H100-SXM", None, 512, 512)["c1v"] for v in sizes]
    assert c1v == sorted(c1v) and len(set(c1v)) == len(c1v)
    # weight streaming dominates: 32B over 0.6B is most of the ratio of their weights
    assert c1v[-1] / c1v[0] > 10


@pytest.mark.parametrize("verifier", ["Llama-3.1-8B", "Qwen3.8-27B", "Qwen3-30B-A3B"])
def test_longer_prompt_more_prefill_and_more_context_more_kv(verifier):
    c1p = [roofline_centres(verifier, "H100-SXM", None, p, 256)["c1p"] for p in (64, 512, 2048)]
    assert c1p[0] < c1p[1] < c1p[2]
    c2p = [roofline_centres(verifier, "H100-SXM", None, p, 256)["c2p"] for p in (64, 512, 2048)]
    assert c2p[0] < c2p[1] < c2p[2]
    # c2v grows with the time-averaged context p + g/2, through the prompt or the output
    by_g = [roofline_centres(verifier, "H100-SXM", None, 256, g)["c2v"] for g in (16, 512, 4096)]
    by_p = [roofline_centres(verifier, "H100-SXM", None, p, 16)["c2v"] for p in (16, 512, 4096)]
    assert by_g[0] < by_g[1] < by_g[2] and by_p[0] < by_p[1] < by_p[2]


def test_unknown_names_give_none_or_the_verifier_coefficients():
    assert roofline_centres("my-finetune-7b", "H100-SXM", None, 256, 256) is None
    assert roofline_centres("Qwen3-8B", "TPU-v5", "EAGLE3-Qwen3-8B", 256, 256) is None
    own = roofline_centres("Qwen3-8B", "H100-SXM", "my-own-drafter", 256, 256)
    dense = roofline_centres("Qwen3-8B", "H100", "none", 256, 256)
    assert set(own) == set(dense) == {"c1p", "c1v", "c2p", "c2v"}
    assert own == dense == roofline_centres("qwen3-8b", "h100", None, 256, 256)


def test_drafter_method_names_resolve_against_the_verifier():
    mtp = roofline_centres("Qwen3.8-27B", "B200", "mtp", 190, 760, k=2)
    full = roofline_centres("Qwen3.8-27B", "B200", "MTP-Qwen3.8-27B", 190, 760, k=2)
    assert set(mtp) == COEFS and mtp == full


def test_parallel_drafter_shares_its_pass_over_the_block():
    with pytest.raises(ValueError, match="pass k="):
        roofline_centres("Qwen3.8-27B", "B200", "dspark", 190, 760)
    ds = [roofline_centres("Qwen3.8-27B", "B200", "dspark", 190, 760, k=k) for k in (1, 4, 8)]
    c1d = [c["c1d"] for c in ds]
    assert c1d[0] > c1d[1] > c1d[2]
    # an autoregressive drafter of a dense verifier runs one pass per draft: k does not matter
    ar = {
        roofline_centres("Qwen3-8B", "H100", "EAGLE3-Qwen3-8B", 512, 512, k=k)["c1d"]
        for k in (1, 3, 7)
    }
    assert len(ar) == 1


def test_tensor_parallel_splits_the_weights():
    one = roofline_centres("Llama-3.1-70B", "H100-SXM", None, 512, 512, tp=1)
    four = roofline_centres("Llama-3.1-70B", "H100-SXM", None, 512, 512, tp=4)
    weights = 2.0 * catalog.load_model("Llama-3.1-70B").geometry().streamed_params
    bw = catalog.load_hardware("H100-SXM").bandwidth
    assert one["c1v"] - four["c1v"] == pytest.approx(0.75 * weights / bw, rel=0.05)
    assert four["c1p"] < one["c1p"] / 3  # prefill compute splits 4 ways (plus all-reduces)


def test_moe_step_cost_is_linearised_above_its_batch_one_value():
    """The linear law's c1v of an MoE verifier is the tangent intercept of the concave expert
    cost (many more experts than the m a single token reads); its c2v the tangent slope."""
    geom = catalog.load_model("Qwen3-30B-A3B").geometry()
    hw = catalog.load_hardware("H100-SXM")
    expert_all_layers = geom.layers * geom.expert_params * 2.0 / hw.bandwidth
    c = roofline_centres("Qwen3-30B-A3B", "H100-SXM", "EAGLE3-Qwen3-30B-A3B", 512, 512, k=3)
    batch_one = geom.streamed_params * 2.0 / hw.bandwidth + 1.5e-3 + 8 * expert_all_layers
    assert c["c1v"] > batch_one + 8 * expert_all_layers
    assert c["c2v"] > 1.0 * expert_all_layers  # about one more expert per layer per sequence
    # at batch 1 the 3 extra verified tokens read ~7 new experts each; under load none
    assert c["c1d"] > 6 * expert_all_layers
    assert c["c2d"] < 0.5 * expert_all_layers


@pytest.mark.parametrize("hardware", ["A100-SXM-80GB", "H100-SXM", "H200", "B200"])
def test_every_catalog_pair_gives_positive_finite_centres(hardware):
    pairs = {("Qwen3-14B", "Qwen3-1.7B"), ("Llama-3.1-70B", "Llama-3.1-8B")}  # vanilla
    for name in catalog.list_entries("drafters"):
        spec = catalog.load_drafter(name)
        if spec.verifier is not None:  # the EAGLE-3 / MTP / DSpark heads of one verifier
            pairs.add((spec.verifier, spec.name))
    assert {v for v, _ in pairs} == set(catalog.list_entries("verifiers"))
    for v, drafter in sorted(pairs):
        c = roofline_centres(v, hardware, drafter, 512, 512, k=3)
        assert set(c) == COEFS
        assert all(math.isfinite(x) and x > 0 for x in c.values()), (v, c)
        assert c["c2v"] < c["c1v"] and c["c2d"] < c["c1d"]


def test_request_cost_adds_to_c1p_only():
    base = roofline_centres("Qwen3.8-27B", "B200", None, 200, 700)
    real = roofline_centres("Qwen3.8-27B", "B200", None, 200, 700, request_s=0.022)
    assert real["c1p"] == pytest.approx(base["c1p"] + 0.022)
    assert {c: real[c] for c in ("c1v", "c2p", "c2v")} == {
        c: base[c] for c in ("c1v", "c2p", "c2v")
    }


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(prefill=-1, decode=10),
        dict(prefill=10, decode=0),
        dict(tp=0),
        dict(k=0),
        dict(request_s=-1.0),
    ],
)
def test_bad_workload_is_refused(kwargs):
    args = dict(prefill=256, decode=256) | kwargs
    with pytest.raises(ValueError, match="roofline_centres"):
        roofline_centres("Qwen3-8B", "H100-SXM", "EAGLE3-Qwen3-8B", **args)


def test_spec_seq_centre_is_the_unpacked_attention_work_of_a_verification():
    """c2c's centre: on an FA2 GPU (A100) a verification computes whole 64-row query tiles
    per query head, which the simulator charges (sim.costs.unpacked_decode_pairs); on a GPU
    whose kernel packs the GQA group, nothing."""
    import numpy as np

    from specbayes.model import physics
    from specbayes.sim import costs

    model, hw = catalog.load_model("Qwen3-14B"), catalog.load_hardware("A100-SXM-80GB")
    k, s = 3, 768.0
    c = physics.spec_seq_centre("Qwen3-14B", "A100-SXM-80GB", "EAGLE3-Qwen3-14B", 512, 512, k=k)
    pairs = physics._pass(model.geometry(), hw, 1).pair_s
    drafter = catalog.load_drafter("EAGLE3-Qwen3-14B").geometry()
    pairs += physics._pass(drafter, hw, 1).pair_s
    assert c == pytest.approx(pairs * (64 - (k + 1)) * s)
    # the simulator's extra pairs of one sequence's verification, against packed GQA
    vec = np.zeros(costs.N_COST)
    vec[costs.L2_BYTES], vec[costs.GQA_GROUP] = 40 * 2.0**20, 5.0
    q = k + 1.0
    extra = costs.unpacked_decode_pairs(vec, s, 1.0, q) - q * (s + (q + 1) / 2)
    assert (64 - q) * s == pytest.approx(extra, rel=0.05)
    # proportional to the context, one value for every k whose block fits one tile
    at = physics.spec_seq_centre("Qwen3-14B", "A100-SXM-80GB", "EAGLE3-Qwen3-14B", 1024, 1024, k=k)
    assert at == pytest.approx(2 * c, rel=0.01)
    # a kernel that packs the group (FlashAttention 3 on Hopper): none; unknown: no centre
    assert physics.spec_seq_centre("Qwen3-14B", "H100-SXM", None, 512, 512) == 0.0
    assert physics.spec_seq_centre("NoSuchModel", "A100-SXM-80GB", None, 512, 512) is None
    assert physics.spec_seq_centre("Qwen3-14B", "NoSuchGPU", None, 512, 512) is None
