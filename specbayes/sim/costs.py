r"""Roofline step cost of one forward pass (verifier or drafter) on one GPU of a TP group.

A forward pass over a set of scheduled tokens costs

.. math::

    t = K\!\Big(\frac{B_W}{BW}, \frac{F_\mathrm{lin}}{F}\Big)
        + K\!\Big(\frac{B_\mathrm{KV}}{BW}, \frac{F_\mathrm{attn}}{F}\Big)
        + n_\mathrm{ar}\,(\ell_\mathrm{ar} + T\,b_\mathrm{ar})
        + t_\mathrm{step} + n_\mathrm{seq}\,t_\mathrm{seq},
    \qquad K(a, b) = \max(a, b) + (1 - o)\min(a, b)

per GPU of a tensor-parallel group of size ``tp``: a roofline per kernel class — the weight
GEMMs and the attention — where

* :math:`B_W` = streamed non-expert weights :math:`W/tp` + distinct experts touched × bytes
  of one expert :math:`/tp` (MoE); :math:`F_\mathrm{lin} = 2 P_\mathrm{active} T / tp`
  (layer GEMMs; MoE counts ``m`` experts per token) + :math:`2 h V n_\mathrm{logits}/tp`
  (LM head, only for sampled positions);
* :math:`B_\mathrm{KV}` = KV cache read for the context of every scheduled sequence
  (:math:`\sum_i s_i` tokens × KV bytes per token per GPU; sliding-window layers read at most
  the window) + KV written for the ``T`` new tokens; :math:`F_\mathrm{attn}` =
  :math:`4 L n_q d \sum_i q_i (s_i + (q_i + 1)/2) / tp` (QKᵀ and PV over the causal pairs);
* ``o`` (``overlap``) is the fraction of the smaller of memory and compute time hidden under
  the larger: ``o = 1`` is the ideal roofline max, ``o = 0`` no overlap. Real steps are chains
  of kernels, some memory- and some compute-bound, with imperfect overlap; a pure max would
  make extra verified tokens free until the ridge point, which GPUs do not show. Default
  ``o = 0`` (CALIBRATED, issue 31): on the real B200 sweeps in ``data/real`` the step time
  grows by ~80-100 µs per token added to the step from the smallest batches on, for dense
  decoding, for MTP's 3 and for DSpark's 8 verified tokens per sequence alike — the compute
  of each token adds to the weight streaming rather than hiding under it
  (``benchmarks/sim_realism.md``; ``o = 0.5`` left the simulated SD speedup up to 31 % above
  the measured one at N = 16-64 and dense latency 36 % low at N = 128);
* the layer GEMMs of a *decode* token (a verified or drafted position, not a prefill-chunk
  token) cost :math:`\kappa` times a prefill token's compute (``decode_compute_scale``,
  :math:`F_\mathrm{lin} = 2 P_\mathrm{active} (T + (\kappa - 1) T_d)/tp + \dots`; CALIBRATED
  on ``data/real`` and a public H200 sweep, issue 40, see :class:`EngineConfig`): a step's
  decode rows are GEMMs of a few to a few hundred rows, a prefill chunk's thousands;
* :math:`BW_\mathrm{eff}, F_\mathrm{eff}` are the hardware peaks × the catalog's *assumed*
  achievable fractions;
* with ``tp > 1`` each layer does two all-reduces of :math:`T h` activations (ring:
  :math:`2(tp-1)/tp` of the bytes over half the NVLink bandwidth, plus a fixed latency);
* :math:`t_\mathrm{step}` (per pass) and :math:`t_\mathrm{seq}` (per scheduled sequence) are
  CPU/launch overheads of the engine — assumptions, see :class:`EngineConfig`;
* on GPUs where vLLM runs FlashAttention 2 (the A100), the engine scales the decode KV
  bytes by :func:`kv_reread_factor` and replaces the decode pairs by
  :func:`unpacked_decode_pairs` in steps whose longest query is > 1 (speculative
  verification, prefill chunks): that kernel packs the GQA group only for one-token queries.

The parameters live in a flat float64 vector (indices below) so the numba engine can use
them; :func:`pass_time` is the one implementation, callable from Python and from the engine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit

from specbayes.catalog import Geometry, HardwareSpec

__all__ = ["EngineConfig", "cost_vector", "pass_time"]

# indices into the cost vector
W_BYTES = 0  # streamed non-expert weight bytes per GPU
EXPERT_BYTES = 1  # bytes of one expert of one layer per GPU
KV_FULL = 2  # KV bytes per context token per GPU, full-attention layers
KV_SW = 3  # KV bytes per context token per GPU, sliding-window layers
WINDOW = 4  # sliding window (tokens); 0 = none
KV_WRITE = 5  # KV bytes written per new token per GPU (all layers)
FLOP_TOKEN = 6  # layer FLOPs per token per GPU
FLOP_LOGIT = 7  # LM-head FLOPs per sampled position per GPU
FLOP_PAIR = 8  # attention FLOPs per (query, key) pair per GPU
BANDWIDTH = 9  # sustained B/s
COMPUTE = 10  # sustained FLOP/s
AR_FIXED = 11  # all-reduce latency per pass (s)
AR_TOKEN = 12  # all-reduce seconds per token
STEP_OVERHEAD = 13  # fixed seconds per pass
SEQ_OVERHEAD = 14  # seconds per scheduled sequence
OVERLAP = 15  # overlap of memory and compute time within a kernel class (1 = pure roofline max)
LAYERS = 16  # decoder layers (for the per-layer launch cost of a pass run without a CUDA graph)
EAGER_LAYER = 17  # seconds per layer of a pass run without a CUDA graph
GQA_GROUP = 18  # query heads per KV head (1 = multi-head attention)
KV_HEAD_TOKEN = 19  # KV bytes of one token, one KV head, one layer (K and V)
L2_BYTES = 20  # last-level cache per GPU; 0 = attention packs the GQA group at every query length
DECODE_SCALE = 21  # compute time of a decode token's layer GEMMs relative to a prefill token's
N_COST = 22


@dataclass(frozen=True)
class EngineConfig:
    r"""Engine settings of the simulated vLLM-like server (defaults are vLLM-like choices).

    Attributes
    ----------
    max_num_seqs : int
        Most sequences running at once (vLLM ``--max-num-seqs``, default 256).
    max_num_batched_tokens : int
        Token budget per step, shared by decode tokens and prefill chunks (chunked prefill;
        vLLM V1 uses 8192 for online serving on large GPUs).
    block_size : int
        Tokens per KV-cache block (vLLM default 16).
    gpu_memory_utilization : float
        Fraction of GPU memory the engine may use (vLLM default 0.9).
    activation_reserve_gib : float
        Memory held back per GPU for activations and CUDA graphs (ASSUMPTION: 2 GiB).
    step_overhead_s : float
        Fixed CPU/launch cost of one verifier step (ASSUMPTION: 1.5 ms — scheduler,
        input preparation and sampling of a vLLM V1 step with CUDA graphs).
    seq_overhead_s : float
        Extra CPU cost per scheduled sequence per step (ASSUMPTION: 10 µs).
    draft_pass_overhead_s : float
        Fixed cost of one drafter pass (ASSUMPTION: 0.6 ms, was 0.2 ms). vLLM V1's drafter
        loop rebuilds the attention metadata on the CPU before every pass and runs the
        drafter under PIECEWISE CUDA graphs only (attention outside the graph):
        ``vllm/v1/spec_decode/llm_base_proposer.py`` (``propose``,
        ``initialize_cudagraph_keys``: "Only supports PIECEWISE cudagraphs"; vllm-project/vllm
        at 00c4f22d). The value is bounded by the real B200 sweeps (MTP's two passes and
        DSpark's one at N = 1 stay within ±15 % of the measured speedup for 0-1 ms).
    draft_seq_overhead_s : float
        Extra cost per decoding sequence per drafter pass (ASSUMPTION: 5 µs — input
        preparation and draft sampling per request).
    spec_step_overhead_s : float
        Fixed cost per speculative step outside the forward passes: rejection sampling of
        the ``k + 1`` verified positions, the proposer's bookkeeping (next-token and
        rejected-token indices, ``prepare_inputs`` of the padded drafter batch) and the
        extra GPU->CPU synchronisation. ASSUMPTION: 1 ms (0.5 ms up to ``specbayes.sim 3``).
        Until vLLM 0.14 EAGLE/MTP ran without async scheduling (vllm-project/vllm PR #31998
        turned it on by default for them in January 2026), so a speculative step waits for
        the CPU between passes. Bounded on both sides by measurements (issue 40): the public
        H200 sweep's light-load speedup (1.44 measured) asks for a dearer step — 1.75 at
        0.5 ms, 1.70 at 1 ms at an acceptance length of 2.25 — while ``data/real``'s MTP arms
        (vLLM with async scheduling) fall to 0.80 of their measured speedup at 2 streams
        with 1 ms (0.77 with 1.5 ms).
    spec_seq_overhead_s : float
        The same per decoding sequence (ASSUMPTION).
    roofline_overlap : float
        Overlap ``o`` of memory and compute time within a kernel class (ASSUMPTION,
        calibrated on ``data/real``, see ``benchmarks/sim_realism.md``).
    max_cudagraph_capture_size : int or None
        Largest step (tokens) replayed from a CUDA graph; larger steps run without one and
        pay ``eager_layer_overhead_s`` per layer. ``None`` = vLLM's rule
        ``min(max_num_seqs * (1 + k) * 2, 512, max_num_batched_tokens)``
        (``vllm/config/vllm.py`` ``_set_cudagraph_sizes``; the dispatcher returns
        ``CUDAGraphMode.NONE`` above it).
    eager_layer_overhead_s : float
        Launch cost per decoder layer of a pass run without a CUDA graph (ASSUMPTION:
        30 µs — some 15 kernels per layer at ~2 µs of CPU launch each).
    decode_compute_scale : float
        Compute time of a decode token's layer GEMMs (verified and drafted positions, drafter
        passes included) relative to a prefill-chunk token's. ASSUMPTION, CALIBRATED (issue
        40): 5/3 — decode tokens at 0.36 of the peak FLOP/s where the catalog's sustained
        fraction (0.6) holds for prefill. A step's decode rows enter the weight GEMMs as a
        few to a few hundred rows (``B`` dense, ``B(k + 1)`` verified), tiles a prefill
        chunk's thousands of rows fill; the simulator's roofline adds each decode token's
        compute to the weight streaming (``roofline_overlap`` 0), so the scale is the
        per-token marginal cost of a decode step. Two measurements set it: the real B200
        sweeps (``data/real``, decode-dominated: the B200 had been calibrated to 0.45 of
        peak for *every* token, issue 31; 0.36 for decode tokens keeps every unsaturated
        point's latency within 0.83-1.09 of the measured one, and DSpark's 512-1,024
        verified tokens per pass at 64-128 streams within a few points of the dense arm,
        which ``specbayes.sim 3`` got from a hinge at 2.5 roofline ridges instead) and the
        public H200 sweep (Qwen3-32B, TP 2, 2,048-token prompts, prefill-dominated: its dense
        p50 needs prefill at 0.6, its SD speedup's fall from 1.44 to 1.14 between 1 and
        4 req/s needs the SD step to grow with the batch by ``k + 1`` decode tokens' cost per
        sequence — at an acceptance length of 2.25, an 8 % fall at a scale of 1, 18 % at
        5/3; ``benchmarks/sd_load_shape.md``).
    kv_blocks_override : int or None
        Force the number of KV blocks (tests use it to provoke preemption).
    """

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    block_size: int = 16
    gpu_memory_utilization: float = 0.9
    activation_reserve_gib: float = 2.0
    step_overhead_s: float = 1.5e-3
    seq_overhead_s: float = 1.0e-5
    draft_pass_overhead_s: float = 6.0e-4
    draft_seq_overhead_s: float = 5.0e-6
    spec_step_overhead_s: float = 1.0e-3
    spec_seq_overhead_s: float = 0.0
    roofline_overlap: float = 0.0
    max_cudagraph_capture_size: int | None = None
    eager_layer_overhead_s: float = 3.0e-5
    decode_compute_scale: float = 5.0 / 3.0
    kv_blocks_override: int | None = None

    def capture_limit(self, k: int) -> int:
        """Largest CUDA-graph step (tokens) for draft length ``k`` (vLLM's default rule)."""
        if self.max_cudagraph_capture_size is not None:
            return int(self.max_cudagraph_capture_size)
        return min(self.max_num_seqs * (1 + k) * 2, 512, self.max_num_batched_tokens)


def cost_vector(
    geom: Geometry,
    hw: HardwareSpec,
    tp: int,
    *,
    step_overhead_s: float,
    seq_overhead_s: float,
    overlap: float = 0.5,
    eager_layer_s: float = 0.0,
    unpacked_gqa_l2_bytes: float = 0.0,
    decode_compute_scale: float = 1.0,
) -> np.ndarray:
    """The flat cost vector of one network (verifier or drafter) on ``tp`` GPUs of ``hw``.

    Parameters
    ----------
    geom : Geometry
        Network geometry from the catalog.
    hw : HardwareSpec
        One GPU.
    tp : int
        Tensor-parallel degree: weights, FLOPs and KV heads are split ``tp`` ways.
    step_overhead_s, seq_overhead_s : float
        Per-pass and per-sequence overheads (s).
    overlap : float
        Fraction of the smaller of memory and compute time hidden under the larger.
    eager_layer_s : float
        Launch cost per layer of a pass run without a CUDA graph (added by the engine).
    unpacked_gqa_l2_bytes : float
        L2 cache of a GPU whose attention kernel packs the GQA group only for one-token
        queries (FlashAttention 2, see :func:`kv_reread_factor`); ``0`` = always packed.
    decode_compute_scale : float
        Compute time of a decode token's layer GEMMs relative to a prefill token's
        (:class:`EngineConfig`); 1 = the same.

    Returns
    -------
    ndarray
        Float64 vector of length ``N_COST``.
    """
    c = np.zeros(N_COST)
    c[W_BYTES] = geom.streamed_params * geom.weight_bytes / tp
    c[EXPERT_BYTES] = geom.expert_params * geom.expert_weight_bytes / tp
    per_layer_kv = 2.0 * geom.kv_heads_per_gpu(tp) * geom.head_dim * geom.kv_bytes
    full_layers = geom.layers - geom.sliding_layers
    c[KV_FULL] = per_layer_kv * full_layers
    c[KV_SW] = per_layer_kv * geom.sliding_layers
    c[WINDOW] = float(geom.sliding_window if geom.sliding_layers else 0)
    c[KV_WRITE] = per_layer_kv * geom.layers
    c[FLOP_TOKEN] = 2.0 * geom.active_layer_params / tp
    c[FLOP_LOGIT] = 2.0 * geom.lm_head_params / tp
    c[FLOP_PAIR] = 4.0 * geom.layers * geom.q_heads * geom.head_dim / tp
    c[BANDWIDTH] = hw.bandwidth
    c[COMPUTE] = hw.compute
    if tp > 1:
        n_ar = 2.0 * geom.layers
        ring = 2.0 * (tp - 1) / tp
        c[AR_FIXED] = n_ar * hw.allreduce_latency_s
        c[AR_TOKEN] = n_ar * geom.hidden * 2.0 * ring / (0.5 * hw.nvlink_bandwidth)
    c[STEP_OVERHEAD] = step_overhead_s
    c[SEQ_OVERHEAD] = seq_overhead_s
    c[OVERLAP] = overlap
    c[LAYERS] = float(geom.layers)
    c[EAGER_LAYER] = eager_layer_s
    # query heads per KV head on one GPU (KV heads are replicated when tp > kv_heads)
    c[GQA_GROUP] = max(1.0, (geom.q_heads / tp) / geom.kv_heads_per_gpu(tp))
    c[KV_HEAD_TOKEN] = 2.0 * geom.head_dim * geom.kv_bytes
    c[L2_BYTES] = unpacked_gqa_l2_bytes
    c[DECODE_SCALE] = decode_compute_scale
    return c


# FlashAttention 2's paged-KV path always runs the split-KV kernel (``run_mha_fwd(params,
# stream, paged_KV)``), whose query tile is ``kBlockM = 64`` rows "for all head dimensions"
# (``csrc/flash_attn/src/flash_fwd_launch_template.h``, ``run_mha_fwd_splitkv_dispatch``).
FA2_TILE_M = 64.0


@njit(cache=True)
def unpacked_decode_pairs(c, ctx_dec, n_dec, q):
    r"""Attention (query, key) pairs a FA2 step *computes* for decode sequences of ``q`` queries.

    Unpacked (:func:`kv_reread_factor`), every query head of a sequence runs its own tile of
    ``kBlockM = 64`` query rows, of which only ``q`` are real; the tensor cores multiply the
    whole tile, so the step computes :math:`64\lceil q/64\rceil (s_i + q)` pairs per sequence
    instead of :math:`q\,(s_i + (q + 1)/2)`. Returns the real pairs when the GPU packs GQA.
    """
    if c[L2_BYTES] <= 0.0 or c[GQA_GROUP] <= 1.0:
        return q * (ctx_dec + n_dec * (q + 1) / 2.0)
    rows = FA2_TILE_M * np.ceil(q / FA2_TILE_M)
    return rows * (ctx_dec + n_dec * q)


@njit(cache=True)
def kv_reread_factor(c, ctx_dec):
    r"""How many times the decode KV cache is read from HBM in a step whose longest query > 1.

    FlashAttention 2 (vLLM's kernel on Ampere) packs the ``G`` query heads of a KV head
    into one tile — reading each KV head once — only when every query of the batch has
    length 1 (``seqlenq_ngroups_swapped = max_seqlen_q == 1 && num_heads > num_heads_k``
    in ``mha_varlen_fwd``, vllm-project/flash-attention ``csrc/flash_attn/flash_api.cpp``
    at 04325b67; the same branch is the only one that enables split-KV; vLLM V1's
    ``v1/attention/backends/flash_attn.py`` names "special max_query_len=1 packed-GQA
    handling in FA2"). A speculative verification step (``k + 1`` queries per sequence),
    or any step carrying a prefill chunk, launches one thread block per *query* head,
    each streaming the KV of its group's head: ``G`` reads of every KV byte. The grid
    orders heads outermost (``grid(m_blocks, batch, heads)``), so the next read of a
    sequence's KV head comes after the KV of all ``B`` sequences for that head, a working
    set :math:`W = \sum_i s_i \cdot b_{head}` per layer; the re-reads hit the L2 cache
    while it holds ``W``. ASSUMPTION: a miss fraction :math:`m = \max(0, 1 - L_2/W)`,

    .. math::  f = 1 + (G - 1)\,m .

    Returns 1 for GPUs whose kernel packs the group at every query length (FlashAttention 3
    on Hopper packs GQA for every varlen/paged call, ``hopper/flash_api.cpp``
    ``get_pack_gqa``), for multi-head attention, and for an empty batch.
    """
    l2 = c[L2_BYTES]
    g = c[GQA_GROUP]
    if l2 <= 0.0 or g <= 1.0 or ctx_dec <= 0.0:
        return 1.0
    w = ctx_dec * c[KV_HEAD_TOKEN]
    miss = 1.0 - l2 / w
    if miss <= 0.0:
        return 1.0
    return 1.0 + (g - 1.0) * miss


@njit(cache=True)
def _kernel(t_mem, t_compute, overlap):
    """Time of a kernel class: the roofline max plus the non-overlapped part of the min."""
    return max(t_mem, t_compute) + (1.0 - overlap) * min(t_mem, t_compute)


@njit(cache=True)
def pass_time(c, n_tokens, n_logits, ctx_full, ctx_sw, pairs, experts, n_seqs, n_decode=0.0):
    r"""Seconds of one forward pass (see the module docstring).

    Parameters
    ----------
    c : ndarray
        Cost vector from :func:`cost_vector`.
    n_tokens : float
        Tokens processed ``T`` (decode tokens + prefill-chunk tokens).
    n_logits : float
        Positions whose logits are computed (sampled / verified positions).
    ctx_full : float
        :math:`\sum_i s_i`, context tokens whose KV is read (full-attention layers).
    ctx_sw : float
        :math:`\sum_i \min(s_i, w)` for sliding-window layers (0 if none).
    pairs : float
        Causal attention (query, key) pairs :math:`\sum_i q_i (s_i + (q_i + 1)/2)`.
    experts : float
        Distinct experts touched, summed over layers (0 for dense networks).
    n_seqs : float
        Scheduled sequences.
    n_decode : float
        The decode tokens among ``n_tokens`` — verified and drafted positions, not prefill
        chunks — whose layer GEMMs cost ``c[DECODE_SCALE]`` times a prefill token's
        (:class:`EngineConfig` ``decode_compute_scale``); 0 = none.

    Returns
    -------
    float
        Seconds.
    """
    w_bytes = c[W_BYTES] + experts * c[EXPERT_BYTES]
    kv_bytes = ctx_full * c[KV_FULL] + ctx_sw * c[KV_SW] + n_tokens * c[KV_WRITE]
    lin_flops = (n_tokens + (c[DECODE_SCALE] - 1.0) * n_decode) * c[FLOP_TOKEN]
    lin_flops += n_logits * c[FLOP_LOGIT]
    attn_flops = pairs * c[FLOP_PAIR]
    t = _kernel(w_bytes / c[BANDWIDTH], lin_flops / c[COMPUTE], c[OVERLAP]) + _kernel(
        kv_bytes / c[BANDWIDTH], attn_flops / c[COMPUTE], c[OVERLAP]
    )
    return t + c[AR_FIXED] + c[AR_TOKEN] * n_tokens + c[STEP_OVERHEAD] + c[SEQ_OVERHEAD] * n_seqs


def attention_pairs(context: float, new_tokens: float) -> float:
    """Causal (query, key) pairs of ``new_tokens`` queries appended to ``context`` keys."""
    return new_tokens * (context + (new_tokens + 1) / 2.0)


def kv_capacity_blocks(
    verifier: Geometry,
    drafter: Geometry | None,
    hw: HardwareSpec,
    tp: int,
    engine: EngineConfig,
) -> tuple[int, float, float]:
    """KV-cache blocks per GPU: (memory x utilisation - weights - reserve) / block bytes.

    Returns
    -------
    (n_blocks, weight_gib, available_gib)
        ``n_blocks`` may be <= 0 when the weights do not fit.
    """
    weights = verifier.resident_bytes / tp
    kv_token = verifier.kv_bytes_per_token(tp)
    if drafter is not None:
        weights += drafter.resident_bytes / tp
        kv_token += drafter.kv_bytes_per_token(tp)
    budget = hw.memory_bytes * engine.gpu_memory_utilization
    free = budget - weights - engine.activation_reserve_gib * 2.0**30
    n_blocks = math.floor(free / (engine.block_size * kv_token)) if free > 0 else 0
    return n_blocks, weights / 2.0**30, budget / 2.0**30
