r"""Roofline centres of the six cycle coefficients: what the model and the GPU make plausible.

The pooled structure puts a Normal prior on each (verifier, hardware) group's log coefficient
(:data:`~specbayes.model.priors.DEFAULT_PRIORS` ``coef_mu``). A generic centre with a
log sd of 2 is honest for every model size but leaves the prefill coefficient :math:`c_{1p}`,
which the data bound only from above, to mix slowly. A tighter prior is honest only around a
centre that knows the model and the GPU: :func:`roofline_centres` gives it from the catalog
(:mod:`specbayes.catalog`), for the cycle decomposition of docs/model.md §3

.. math::

    C_1 = c_{1p} + \frac{g}{E}\,(c_{1v} + k\,c_{1d}), \qquad
    C_2 = c_{2p} + \frac{g}{E}\,(c_{2v} + k\,c_{2d}).

Cost of a forward pass
----------------------
Per GPU of a tensor-parallel group of size ``tp``, with sustained bandwidth :math:`BW` and
compute :math:`F` (the catalog's peaks × its *assumed* achievable fractions,
:attr:`~specbayes.catalog.HardwareSpec.bandwidth`, :attr:`~specbayes.catalog.HardwareSpec.compute`),
a pass costs its bytes over :math:`BW` **plus** its FLOPs over :math:`F` — memory and compute
time add rather than overlap (the simulator's calibrated default, ``specbayes/sim/costs.py``:
on the real B200 sweeps every verified token adds its compute to the weight streaming from
the smallest batches on). The pieces, per network (verifier or drafter, catalog
:class:`~specbayes.catalog.Geometry`):

* weights :math:`W = P_\mathrm{streamed}\,b_w / tp` bytes, read once per pass;
* per token :math:`f = 2 P_\mathrm{active} / tp` FLOPs, plus :math:`f_\ell = 2 h V / tp` for
  each position whose logits are computed;
* attention :math:`f_a = 4 L n_q d / tp` FLOPs per (query, key) pair; a query at context
  :math:`s` has :math:`s + 1` pairs;
* KV read per sequence at context :math:`s`: :math:`\kappa(s) = s\,b_\mathrm{full} +
  \min(s, w)\,b_\mathrm{sw}` bytes (full-attention and sliding-window layers), KV written
  :math:`b_\mathrm{kv}` bytes per new token;
* with ``tp > 1`` two all-reduces per layer: a fixed :math:`a_0 = 2L\ell_\mathrm{ar}` per
  pass and :math:`a_1 = 2L \cdot 2h \cdot 2(tp-1)/tp \,/\, (BW_\mathrm{NVLink}/2)` per token;
* engine overheads (ASSUMPTIONS, those of a vLLM V1 server with CUDA graphs — the values the
  simulator's ``EngineConfig`` uses, bounded on the real B200 sweeps,
  ``benchmarks/sim_realism.md``): :math:`t_\mathrm{step}` = 1.5 ms per verifier pass,
  :math:`t_\mathrm{seq}` = 10 µs per sequence in it; :math:`t_\mathrm{dstep}` = 0.6 ms per
  drafter pass, :math:`t_\mathrm{dseq}` = 5 µs per sequence; a drafter run without a CUDA
  graph (catalog ``[sim] cuda_graph = false``) pays 30 µs per layer per pass. The
  speculative step's own fixed cost is not a centre here: it is the pooled structure's
  ``c1c`` with its own prior (:data:`specbayes.model.priors.CYCLE_OVERHEAD`). Since
  ``specbayes.sim 4`` the simulator also charges a decode token's GEMMs 5/3 of a prefill
  token's compute (``EngineConfig.decode_compute_scale``); the centres keep the plain
  roofline, within their log sd of 1.

MoE verifiers read, besides :math:`W`, the distinct experts a pass touches,
:math:`e(T) = L\,M\,\varphi(T)\,b_e / BW` for :math:`T` routed tokens, with the coverage
:math:`\varphi` of :func:`specbayes.laws.expert_coverage` (docs/model.md §5). :math:`e` is
concave in :math:`T`, the law :math:`L = C_1 + B C_2` linear in the batch: a least-squares line
through a load sweep is close to the tangent of :math:`e` at the batches the sweep spends its
points on, not to its batch-1 value. The centres use the tangent at
:math:`T_\mathrm{ref} = 32` routed tokens, :math:`e(T) \approx e_0 + e_1 T` with
:math:`e_1 = e'(T_\mathrm{ref})` (ASSUMPTION: a mid-sweep batch; chosen between 16 and 64 on
the paper data's MoE fits, ``benchmarks/roofline_priors.md``). Dense verifiers: :math:`e = 0`.

The coefficients
----------------
Write :math:`\bar s = p + g/2` for the time-averaged context of a request (docs/model.md §6)
and the per-token increment of a verifier pass for one sequence

.. math::

    \delta(s) = \frac{f + f_\ell + f_a (s + 1)}{F} + \frac{b_\mathrm{kv}}{BW} + a_1 .

``c2v`` — what one more sequence adds to a decode step: its KV read at :math:`\bar s`, its
token's compute and scheduling cost, and (MoE) the tangent's experts per token,

.. math::

    c_{2v} = \frac{\kappa(\bar s)}{BW} + \delta(\bar s) + t_\mathrm{seq} + e_1 .

``c1v`` — one decode step at batch 1: the weights, the fixed costs and the one sequence,

.. math::

    c_{1v} = \frac{W}{BW} + a_0 + t_\mathrm{step} + e_0 + c_{2v} .

``c1p`` — the prefill of :math:`p` tokens at batch 1. The step that completes the prefill also
samples the first output token, so its weights and fixed costs belong to the first of the
:math:`g` decode steps; what is left is the prompt's compute and KV writes, the per-layer
launch cost when the prompt exceeds the CUDA-graph size (512 tokens, vLLM's default rule),
and for MoE the experts the prompt reads beyond a decode token's :math:`m`; plus a fixed
request cost :math:`t_\mathrm{req}` outside the GPU (``request_s``, default 0):

.. math::

    c_{1p} = \frac{p f + f_a\,p(p+1)/2}{F} + p\Big(\frac{b_\mathrm{kv}}{BW} + a_1\Big)
           + [p > 512]\, L\, t_\mathrm{eager}
           + \Big(e(p) - \frac{L m b_e}{BW}\Big) + t_\mathrm{req}.

``c2p`` — the prefill one more concurrent request adds to everyone's latency: within a
request's lifetime each of the :math:`B` others prefills about once, and its chunk joins a
step everyone waits for. The same compute, KV and launch terms; for MoE the experts it adds
to a step that already routes :math:`T_\mathrm{ref}` tokens,
:math:`e(T_\mathrm{ref} + p) - e(T_\mathrm{ref})`; no :math:`t_\mathrm{req}`.

``c1d`` — one draft token at batch 1: one drafter pass (autoregressive drafters, EAGLE-3,
MTP, vanilla: :math:`k` passes per cycle) plus what one more verified token costs the
verifier pass — the decomposition has no other place for it:

.. math::

    c_{1d} = \Big[\frac{W_d}{BW} + a_{0,d} + t_\mathrm{dstep} + \frac{\kappa_d(\bar s)}{BW}
             + \delta_d(\bar s) + t_\mathrm{dseq}\Big] + \delta(\bar s)
             + \frac{e(k+1) - e(1)}{k}

(subscript :math:`d`: the drafter's own numbers, :math:`t_\mathrm{eager} L_d` added to the
fixed part of a drafter without a CUDA graph; the last term, MoE only, is the new experts the
:math:`k` extra verified tokens read at batch 1). A *parallel* drafter (DSpark, DFlash;
catalog ``[sim] drafting = "parallel"``) drafts the whole block in one pass whose queries are
the :math:`k` block positions and whose context gains the :math:`k + 1` verified tokens, so its
pass is shared by the :math:`k` drafts:

.. math::

    c_{1d} = \frac{1}{k}\Big[\frac{W_d + \kappa_d(\bar s)}{BW} + a_{0,d} + t_\mathrm{dstep}
             + t_\mathrm{dseq} + \frac{(2k+1) f_d + k f_{\ell,d} + f_{a,d}\,k(\bar s
             + (k+1)/2)}{F} + (2k+1)\Big(\frac{b_{\mathrm{kv},d}}{BW} + a_{1,d}\Big)\Big]
             + \delta(\bar s) + \frac{e(k+1) - e(1)}{k}.

``c2d`` — the same for one more sequence: the bracket without the pass's fixed part
(:math:`W_d, a_{0,d}, t_\mathrm{dstep}`) plus the verified token's :math:`\delta(\bar s)`;
no expert term (under load the :math:`B(k+1)` routed tokens of a step sit on the flat part of
the coverage; the paper data's MoE fits agree, ``benchmarks/roofline_priors.md``).

Assumptions, in one place: the achievable fractions of the catalog's hardware entries, the
additive (non-overlapping) roofline, the engine overheads above, :math:`T_\mathrm{ref}` for
MoE, :math:`t_\mathrm{req}`. The costs of a speculative cycle beyond its passes are the
pooled structure's ``c1c`` (its own prior) and ``c2c`` (:func:`spec_seq_centre`: a
verification's unpacked attention tiles on FlashAttention 2). Not modelled: a drafter's pass
over the prompt. These are centres of a prior, not predictions:
``benchmarks/roofline_priors.md`` measures how far they lie from least-squares coefficients of
the bundled and the real data, and from the measured prefill (TTFT less one ITL).
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass

from specbayes import catalog, laws

__all__ = ["roofline_centres"]

#: Engine overheads (s), ASSUMPTIONS: a vLLM V1 server with CUDA graphs (module docstring).
STEP_S = 1.5e-3
SEQ_S = 1.0e-5
DRAFT_STEP_S = 6.0e-4
DRAFT_SEQ_S = 5.0e-6
EAGER_LAYER_S = 3.0e-5
#: Largest step (tokens) replayed from a CUDA graph: vLLM's default rule caps it at 512.
CUDA_GRAPH_TOKENS = 512
#: Routed tokens per step at which the MoE expert cost is linearised (ASSUMPTION, docstring).
MOE_REFERENCE_TOKENS = 32.0


@dataclass(frozen=True)
class _Pass:
    """Roofline numbers of one network on one GPU of a ``tp`` group (module docstring)."""

    weight_s: float  # W / BW + a_0: fixed memory and all-reduce time of a pass
    token_s: float  # (f + a_1 + b_kv) per token, without logits and attention
    logit_s: float  # f_l / F per position with logits
    pair_s: float  # f_a / F per (query, key) pair
    kv_full: float  # bytes per context token, full-attention layers
    kv_sw: float  # bytes per context token, sliding-window layers
    window: float
    bandwidth: float
    expert_s: float  # one expert of every layer, b_e L / BW
    layers: int
    num_experts: int
    experts_per_tok: int

    def kv_read_s(self, s: float) -> float:
        r""":math:`\kappa(s) / BW`: reading one sequence's KV cache at context ``s``."""
        sw = min(s, self.window) if self.window > 0 else 0.0
        return (s * self.kv_full + sw * self.kv_sw) / self.bandwidth

    def prompt_s(self, p: float) -> float:
        r"""A prompt of ``p`` tokens: their GEMM and KV time and causal attention pairs."""
        return self.token_s * p + self.pair_s * p * (p + 1.0) / 2.0

    def delta_s(self, s: float) -> float:
        r""":math:`\delta(s)`: one more token (with logits) of one sequence at context ``s``."""
        return self.token_s + self.logit_s + self.pair_s * (s + 1.0)

    def experts_s(self, tokens: float) -> float:
        r"""Reading the experts ``tokens`` routed tokens touch: :math:`L M \varphi(T) b_e / BW`."""
        if self.num_experts == 0:
            return 0.0
        phi = laws.expert_coverage(tokens, self.experts_per_tok, self.num_experts)
        return float(phi) * self.num_experts * self.expert_s

    def expert_tangent(self, tokens: float) -> tuple[float, float]:
        r"""Intercept and slope (s, s per token) of :meth:`experts_s` linearised at ``tokens``.

        :math:`\varphi'(T) = -\log(1 - m/M)\,(1 - \varphi(T))`; (0, 0) for dense networks.
        """
        if self.num_experts == 0:
            return 0.0, 0.0
        m, big_m = self.experts_per_tok, self.num_experts
        phi = float(laws.expert_coverage(tokens, m, big_m))
        slope = big_m * self.expert_s * -math.log1p(-m / big_m) * (1.0 - phi)
        return self.experts_s(tokens) - slope * tokens, slope


def _pass(geom: catalog.Geometry, hw: catalog.HardwareSpec, tp: int) -> _Pass:
    bw, flops = hw.bandwidth, hw.compute
    per_layer_kv = 2.0 * geom.kv_heads_per_gpu(tp) * geom.head_dim * geom.kv_bytes
    ar_fixed = ar_token = 0.0
    if tp > 1:
        n_ar = 2.0 * geom.layers
        ar_fixed = n_ar * hw.allreduce_latency_s
        ar_token = n_ar * geom.hidden * 2.0 * (2.0 * (tp - 1) / tp) / (0.5 * hw.nvlink_bandwidth)
    return _Pass(
        weight_s=geom.streamed_params * geom.weight_bytes / tp / bw + ar_fixed,
        token_s=2.0 * geom.active_layer_params / tp / flops
        + per_layer_kv * geom.layers / bw
        + ar_token,
        logit_s=2.0 * geom.lm_head_params / tp / flops,
        pair_s=4.0 * geom.layers * geom.q_heads * geom.head_dim / tp / flops,
        kv_full=per_layer_kv * (geom.layers - geom.sliding_layers),
        kv_sw=per_layer_kv * geom.sliding_layers,
        window=float(geom.sliding_window if geom.sliding_layers else 0),
        bandwidth=bw,
        expert_s=geom.layers * geom.expert_params * geom.expert_weight_bytes / tp / bw,
        layers=geom.layers,
        num_experts=geom.num_experts,
        experts_per_tok=geom.experts_per_tok,
    )


def _verifier_centres(v: _Pass, p: float, s: float, coverage: bool) -> dict[str, float]:
    """``c1p, c1v, c2p, c2v`` of a verifier at prompt ``p`` and mean context ``s`` (and
    ``c1s`` with ``coverage``: the experts' tangent leaves ``c1v, c2v`` for :math:`c_{1s}`)."""
    per_seq = v.kv_read_s(s) + v.delta_s(s) + SEQ_S
    prompt = v.prompt_s(p)
    if p > CUDA_GRAPH_TOKENS:  # the prefill step runs without a CUDA graph
        prompt += v.layers * EAGER_LAYER_S
    e0, e1 = (0.0, 0.0) if coverage else v.expert_tangent(MOE_REFERENCE_TOKENS)
    batch1 = v.experts_s(p) - v.experts_per_tok * v.expert_s  # experts beyond a decode step's
    loaded = v.experts_s(MOE_REFERENCE_TOKENS + p) - v.experts_s(MOE_REFERENCE_TOKENS)
    out = {
        "c1p": prompt + max(batch1, 0.0),
        "c1v": v.weight_s + STEP_S + e0 + e1 + per_seq,
        "c2p": prompt + loaded,
        "c2v": per_seq + e1,
    }
    if coverage:
        out["c1s"] = v.experts_s(math.inf)  # every expert of every layer: phi = 1
    return out


def _drafter_centres(
    v: _Pass, d: _Pass, s: float, k: int, parallel: bool, graph: bool, coverage: bool
) -> dict[str, float]:
    """``c1d, c2d``: one draft token at batch 1 and per extra sequence (module docstring)."""
    verified = v.delta_s(s)
    # MoE: at batch 1 the k extra verified tokens route to new experts; under load they land
    # on experts the step's B (k + 1) routed tokens already touch (nothing more for c2d).
    # With ``coverage`` the coverage of the B (k + 1) tokens is c1s's, not c1d's.
    new_experts = 0.0 if coverage else (v.experts_s(k + 1.0) - v.experts_s(1.0)) / k
    verified_1 = verified + new_experts
    fixed = d.weight_s + DRAFT_STEP_S + (0.0 if graph else d.layers * EAGER_LAYER_S)
    if not parallel:
        per_seq = d.kv_read_s(s) + d.delta_s(s) + DRAFT_SEQ_S
        return {"c1d": fixed + per_seq + verified_1, "c2d": per_seq + verified}
    tokens = 2.0 * k + 1.0  # k block queries + the k + 1 verified tokens entering the context
    per_seq = (
        d.kv_read_s(s)
        + DRAFT_SEQ_S
        + tokens * d.token_s
        + k * d.logit_s
        + d.pair_s * k * (s + (k + 1.0) / 2.0)
    ) / k
    return {"c1d": fixed / k + per_seq + verified_1, "c2d": per_seq + verified}


def _drafting(spec: catalog.DrafterSpec) -> tuple[bool, bool]:
    """(parallel block drafting, CUDA-graph replay) from the drafter file's ``[sim]`` table."""
    with spec.path.open("rb") as fh:
        extra = tomllib.load(fh).get("sim", {})
    return extra.get("drafting", "autoregressive") == "parallel", bool(
        extra.get("cuda_graph", True)
    )


def _find(loader, *names: str):
    """The first catalog entry among ``names``, or None (users bring their own models)."""
    for name in names:
        try:
            return loader(name)
        except (ValueError, FileNotFoundError):
            continue
    return None


def roofline_centres(
    verifier: str,
    hardware: str,
    drafter: str | None,
    prefill: float,
    decode: float,
    *,
    tp: int = 1,
    k: int | None = None,
    request_s: float = 0.0,
    coverage: bool = False,
) -> dict[str, float] | None:
    r"""Roofline magnitudes of the cycle coefficients of one (verifier, drafter, GPU, cell).

    Parameters
    ----------
    verifier, hardware : str
        Catalog names or aliases (:func:`specbayes.catalog.load_model`,
        :func:`~specbayes.catalog.load_hardware`).
    drafter : str or None
        Catalog drafter, or its method name prefixed to the verifier's (``"mtp"`` for
        ``MTP-Qwen3.8-27B``, as ``data/real`` names them); ``None`` or ``"none"`` for dense.
    prefill, decode : float
        Prompt tokens :math:`p \ge 0` and output tokens :math:`g \ge 1` of the cell (for a
        group prior: the cell at the centre of the group's trend covariates).
    tp : int
        Tensor-parallel degree.
    k : int, optional
        Draft length. Needed for a parallel drafter (its one pass is shared by the ``k``
        drafts) and for MoE verifiers (experts of the ``k + 1`` verified tokens); an
        autoregressive drafter of a dense verifier does not depend on it. Default 1 where
        it is optional.
    request_s : float
        Fixed cost per request outside the GPU passes that a client-side latency includes
        (HTTP, tokenisation, scheduling), added to ``c1p``. 0 for the simulator; the real
        B200 vLLM sweeps (``data/real``) imply about 0.022 s: their TTFT less one ITL grows by
        the roofline's prefill compute per prompt token but starts ~22 ms above it
        (``benchmarks/roofline_priors.md``).
    coverage : bool
        The centres of the ``moe`` level (docs/model.md §5): a verifier pass's expert reads
        are :math:`\varphi(T)\,c_{1s}` of the tokens it routes, so ``c1v, c2v, c1d`` carry no
        expert tangent and ``c1s`` (every expert of every layer, read once) is returned too.

    Returns
    -------
    dict or None
        Seconds (``c2*``: seconds per concurrent request) keyed ``c1p, c1v, c2p, c2v`` (and
        ``c1s`` with ``coverage``) and, when the drafter is in the catalog, ``c1d, c2d``.
        ``None`` when the verifier or the hardware is not in the catalog — the caller keeps
        its generic centre. The formulas and their assumptions are in the module docstring.

    Raises
    ------
    ValueError
        ``prefill < 0``, ``decode < 1``, ``tp < 1``, ``k < 1``, or a parallel drafter without
        ``k``.
    """
    if not (prefill >= 0 and decode >= 1 and tp >= 1 and request_s >= 0):
        raise ValueError(
            f"roofline_centres: need prefill >= 0, decode >= 1, tp >= 1, request_s >= 0; "
            f"got prefill={prefill}, decode={decode}, tp={tp}, request_s={request_s}"
        )
    if k is not None and k < 1:
        raise ValueError(f"roofline_centres: k must be >= 1 (draft tokens per cycle); got {k}")
    model, hw = _find(catalog.load_model, verifier), _find(catalog.load_hardware, hardware)
    if model is None or hw is None:
        return None
    v = _pass(model.geometry(), hw, int(tp))
    s = float(prefill) + 0.5 * float(decode)
    out = _verifier_centres(v, float(prefill), s, coverage)
    out["c1p"] += float(request_s)
    if drafter is None or drafter.strip().lower() == "none":
        return out
    spec = _find(catalog.load_drafter, drafter, f"{drafter}-{model.name}")
    if spec is None:
        return out
    parallel, graph = _drafting(spec)
    if parallel and k is None:
        raise ValueError(
            f"roofline_centres: drafter {spec.name!r} drafts a block of k tokens in one pass, "
            "so its cost per draft token depends on k — pass k="
        )
    d = _pass(spec.geometry(), hw, int(tp))
    out.update(_drafter_centres(v, d, s, int(k or 1), parallel, graph, coverage))
    names = ("c1p", "c1v", "c1d", "c2p", "c2v", "c2d", "c1s")
    return {c: float(out[c]) for c in names if c in out}


#: Compute time of a decode token's weight GEMMs relative to a prefill token's (ASSUMPTION,
#: the simulator's calibrated ``EngineConfig.decode_compute_scale``, issue 40): a decode
#: pass's GEMMs have a few to a few hundred rows and run at 0.36 of peak where prefill runs
#: at the catalog's 0.6.
DECODE_COMPUTE_SCALE = 5.0 / 3.0

#: Knee of a GPU the catalog does not know, in tokens per pass (between the A100's and the
#: H100's decode ridge at the catalog's sustained fractions).
GENERIC_RIDGE_TOKENS = 100.0


def ridge_tokens(hardware: str) -> float:
    r"""Tokens per decode pass at which its bf16 weight GEMMs' compute equals their weight
    streaming.

    Each token costs :math:`2P` FLOPs and the pass streams :math:`2P` bytes of weights, so
    the ridge is :math:`F/(\kappa\,BW)` tokens: sustained compute over sustained bandwidth
    (the catalog's assumed fractions; tensor parallelism divides both alike), with a decode
    token's GEMMs at :math:`\kappa` = :data:`DECODE_COMPUTE_SCALE` times a prefill token's
    compute — the passes that bend under load are decode and verify passes.
    :data:`GENERIC_RIDGE_TOKENS` where the catalog does not know the GPU. Where a pass turns
    compute-bound is the roofline's first guess of where the latency law bends
    (:func:`specbayes.laws.token_knee_curvature`); the model scales it by a learned factor.
    """
    hw = _find(catalog.load_hardware, hardware)
    if hw is None:
        return GENERIC_RIDGE_TOKENS
    return float(hw.compute / (DECODE_COMPUTE_SCALE * hw.bandwidth))


#: Rows of a FlashAttention 2 query tile (``kBlockM``): an unpacked query head of a sequence
#: computes a whole tile whatever its real query count.
FA2_TILE_ROWS = 64


def spec_seq_centre(
    verifier: str, hardware: str, drafter: str | None, prefill: float, decode: float,
    *, tp: int = 1, k: int = 1,
) -> float | None:  # fmt: skip
    r"""Roofline magnitude of :math:`c_{2c}`, a speculative cycle's cost per sequence beyond
    its verifier and drafter passes (:func:`specbayes.laws.effective_costs`), at the cell
    ``(prefill, decode)``.

    Where vLLM runs FlashAttention 2 (catalog hardware ``[sim] attention = "fa2"``: compute
    capability 8.0), a step whose longest query is longer than one token — every
    verification of :math:`k + 1` tokens — runs one query tile of ``FA2_TILE_ROWS`` rows per
    *query* head instead of packing the GQA group into it (``flash_api.cpp``
    ``mha_varlen_fwd``: ``seqlenq_ngroups_swapped`` only when ``max_seqlen_q == 1``), so the
    tensor cores multiply :math:`64\lceil q/64\rceil` rows where :math:`q = k + 1` are real:

    .. math::  c_{2c} = (f_{a,v} + f_{a,d})\,\big(64\lceil q/64\rceil - q\big)\,\bar s / F

    for the verifier's pass and the drafter's first pass (which reads the :math:`k + 1`
    verified tokens), :math:`\bar s = p + g/2` — per sequence, so in :math:`C_2`, and
    proportional to the context. It is what a dense step does not pay, whatever k is; without
    a term for it the decomposition can only spread it over :math:`k\,c_{2d}` or, where alpha
    is unknown, over the acceptance (alpha then comes out 0.15–0.25 too high on the serving
    simulator's A100 sweeps, ``benchmarks/model_core.md``). 0 where the kernel packs the GQA
    group (FlashAttention 3 on Hopper and Blackwell, a multi-head verifier): there a
    verification's attention is its real query pairs, already in :math:`c_{2v} + k\,c_{2d}`.
    ``None`` when the catalog does not know the GPU, or the verifier on an FA2 GPU.
    """
    hw = _find(catalog.load_hardware, hardware)
    if hw is None:
        return None
    if not _fa2(hw):
        return 0.0
    model = _find(catalog.load_model, verifier)
    if model is None:
        return None
    if not _unpacks_gqa(model):
        return 0.0
    pair_s = _pass(model.geometry(), hw, int(tp)).pair_s
    spec = None
    if drafter is not None and drafter.strip().lower() != "none":
        spec = _find(catalog.load_drafter, drafter, f"{drafter}-{model.name}")
    if spec is not None:
        pair_s += _pass(spec.geometry(), hw, int(tp)).pair_s
    q = k + 1.0
    rows = FA2_TILE_ROWS * math.ceil(q / FA2_TILE_ROWS)
    return pair_s * (rows - q) * (float(prefill) + 0.5 * float(decode))


def drafter_prefill_share(
    verifier: str, hardware: str, drafter: str, prefill: float, *, tp: int = 1
) -> float | None:
    r"""Roofline magnitude of :math:`\rho`, the drafter's prefill over the verifier's
    (:func:`specbayes.laws.effective_costs`), at a prompt of ``prefill`` tokens.

    vLLM V1's proposer runs its first pass over every token the verifier processed in a step,
    prefill chunks included (``vllm/v1/spec_decode/llm_base_proposer.py``
    ``set_inputs_first_pass``; a parallel drafter's one pass likewise): a draft model builds
    its KV cache of the prompt, an EAGLE head its hidden states. So an SD request's prefill
    costs the verifier's and the drafter's prompt compute,

    .. math::  \rho = \frac{\tau_d\,p + f_{a,d}\,p(p + 1)/2}{\tau_v\,p + f_{a,v}\,p(p + 1)/2}

    (per-token GEMM and KV time :math:`\tau`, attention pairs :math:`f_a`; the module
    docstring). Without it a dense and an SD sweep of a cell share one :math:`c_p`, and the
    drafter's prefill, paid once per request, is read as fewer accepted tokens per cycle
    (the serving simulator's two-drafter set: the EAGLE-3 head's alpha ~0.02 low; with the
    term unbiased at one seed, not at every one; ``benchmarks/model_core.md``). ``None`` when
    the catalog does not know the verifier, the GPU or the drafter.
    """
    model, hw = _find(catalog.load_model, verifier), _find(catalog.load_hardware, hardware)
    if model is None or hw is None or drafter.strip().lower() == "none":
        return None
    spec = _find(catalog.load_drafter, drafter, f"{drafter}-{model.name}")
    if spec is None:
        return None
    p = max(float(prefill), 1.0)
    v, d = (_pass(g, hw, int(tp)) for g in (model.geometry(), spec.geometry()))
    return float(d.prompt_s(p) / v.prompt_s(p))


def _fa2(hw) -> bool:
    """Whether vLLM runs FlashAttention 2 on the GPU (hardware file ``[sim] attention``)."""
    with hw.path.open("rb") as fh:
        return tomllib.load(fh).get("sim", {}).get("attention", "packed") == "fa2"


def _unpacks_gqa(model) -> bool:
    """Whether FA2 runs the verifier's multi-token queries unpacked: grouped-query attention,
    unless the model file says ``[sim] attention = "packed"`` (the tables
    :mod:`specbayes.sim.point` reads)."""
    geom = model.geometry()
    if geom.q_heads <= geom.kv_heads:
        return False
    with model.path.open("rb") as fh:
        return tomllib.load(fh).get("sim", {}).get("attention") != "packed"
