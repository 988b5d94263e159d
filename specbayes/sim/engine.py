r"""The iteration-level engine: continuous batching, chunked prefill, paged KV, SD, MoE.

One call of :func:`run_engine` simulates one load point. The loop advances *step by step*
(one engine iteration = one verifier forward pass, preceded by the drafter passes when
speculating), compiled with numba: a step costs a few hundred nanoseconds plus a few per
running sequence, so a point of thousands of requests runs in milliseconds. Idle gaps jump
straight to the next arrival.

Scheduler (vLLM V1-like), each step:

1. **decode first** — running sequences that finished their prefill, in admission order,
   each take ``q = k + 1`` tokens (the last token + k drafts to verify; ``q = 1`` dense) from
   the token budget; a sequence needing a new KV block when none is free preempts the most
   recently admitted running sequence (*recompute*: its blocks are freed and it returns to the
   front of the waiting queue with prompt + generated tokens to prefill again);
2. running sequences still prefilling take a chunk of the remaining budget (limited by the
   free blocks);
3. waiting sequences are admitted (FCFS) while there is budget, a free slot
   (``max_num_seqs``) and KV blocks for their first chunk.

A prefill that completes samples the first output token (TTFT is the end of that step);
each decode step commits ``1`` token (dense) or ``1 + a`` tokens (SD), where ``a``, the
accepted drafts, is drawn i.i.d.: draft ``j`` is accepted with probability ``alpha`` only if
drafts ``1..j-1`` were (forced acceptance, as the paper forced vLLM's rejection sampler).

Step time = verifier pass (:func:`costs.pass_time` over the scheduled tokens; MoE: distinct
experts drawn from the routing table for the step's token count; on a GPU whose attention
kernel packs the GQA group only for one-token queries — FlashAttention 2, the A100 — a step
whose longest query is > 1 reads the decode sequences' KV once per query head past the L2
cache and computes 64-row query tiles, :func:`costs.kv_reread_factor`,
:func:`costs.unpacked_decode_pairs`; decode tokens' GEMMs at the decode compute scale,
``EngineConfig.decode_compute_scale``), plus the per-layer launch
cost when the step is larger than the CUDA-graph limit (vLLM: ``max_cudagraph_capture_size``,
default ``min(2·max_num_seqs·(1 + k), 512)`` tokens; larger steps run without a graph), plus
the drafter, as vLLM V1 runs it (``vllm/v1/spec_decode/llm_base_proposer.py`` ``propose``,
vllm-project/vllm at 00c4f22d):

* **autoregressive** drafters (EAGLE-3, MTP, vanilla draft models): a first pass over *every*
  token the verifier processed in the step — the ``k + 1`` verified tokens of each decoding
  sequence and the prefill chunks (``set_inputs_first_pass`` takes the target's tokens and
  hidden states), logits for one position per sequence — then ``k - 1`` one-token passes;
* **parallel** drafters (DFlash, DSpark: ``vllm/v1/spec_decode/dspark.py``, a
  ``DFlashProposer``): one pass whose queries are the ``k`` block positions of each decoding
  sequence, attending to the context and the block, with the verified tokens' hidden states
  entering the drafter's context in the same pass; logits for ``k`` positions per sequence;
  a drafter whose forward is not graph-captured (DSpark's graph is opt-in) pays the per-layer
  launch cost on every pass;
* each speculative step adds a fixed and a per-sequence overhead for rejection sampling and
  the proposer's bookkeeping (``EngineConfig.spec_step_overhead_s`` /
  ``spec_seq_overhead_s``).

Measurement window: open loop — requests *arriving* in ``[t_a, t_b]`` (given); closed loop —
``t_a`` / ``t_b`` are the times of the ``n_warm``-th / ``n_end``-th completion. The running
batch and SD acceptance are accumulated over steps inside the window.

Run time (:class:`Schedule`, issue 46): k and alpha may change at given times (a switch of k
stalls the engine), or a SmartSpec-style chooser may pick every step's k; the run then logs
its counters after every step (:class:`StepLog`) for a controller to read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit

from specbayes.sim.costs import (
    EAGER_LAYER,
    LAYERS,
    kv_reread_factor,
    pass_time,
    unpacked_decode_pairs,
)

# indices of the stats vector returned by the kernel
S_PREEMPT = 0
S_PREEMPT_WIN = 1
S_RUN_INT = 2
S_WIN_A = 3
S_WIN_B = 4
S_STEPS = 5
S_ACCEPTED = 6
S_CYCLES = 7
S_FULL = 8
S_END = 9
S_BUSY = 10
N_STATS = 11


@dataclass(frozen=True)
class Emissions:
    """Each request's output emission times: one per step that gave it >= 1 token.

    Request ``r``'s times are ``times[start[r] : start[r] + count[r]]``, in order: the
    prefill's end (the first token), then every decode step (dense: one token; speculative:
    the ``a + 1`` tokens of a verify step, one streamed chunk). The last is its finish.
    """

    times: np.ndarray
    start: np.ndarray
    count: np.ndarray

    def gaps(self, selected: np.ndarray | None = None) -> np.ndarray:
        """The gaps between successive emissions of the selected requests, pooled (s)."""
        start, count = self.start, self.count
        if selected is not None:
            start, count = start[selected], count[selected]
        lens = np.maximum(count - 1, 0)
        total = int(lens.sum())
        if total == 0:
            return np.empty(0)
        # index of each gap's earlier emission: start[r] + 0 .. lens[r] - 1, concatenated
        base = np.repeat(start - (np.cumsum(lens) - lens), lens)
        idx = base + np.arange(total)
        return self.times[idx + 1] - self.times[idx]


@dataclass
class StepLog:
    """The engine's counters after every step: time (s), speculative cycles and accepted
    draft tokens since the start (what ``vllm:spec_decode_num_drafts`` and
    ``vllm:spec_decode_num_accepted_tokens`` count)."""

    t: np.ndarray
    cycles: np.ndarray
    accepted: np.ndarray
    k: np.ndarray


@dataclass
class Schedule:
    """k and alpha changed at run time: entry ``i`` holds from ``*_times[i]`` (s) on.

    The first entries (time 0) are the run's ``k`` and ``alpha``. A change of k stops the
    engine for ``switch_s`` seconds (ASSUMPTION: vLLM sizes its KV budget and captures its
    CUDA graphs per draft length, so a server switching k swaps to a pre-built set; 0.2 s is
    the order of draining the step in flight and re-planning the batch, not of a restart).
    ``capture``: the CUDA-graph limit for a k (default: :meth:`EngineConfig.capture_limit`
    rule via the caller's value for the run's k). :attr:`log` is filled by the run.

    ``goodput`` (instead of the k schedule): a SmartSpec-style chooser picks every step's k
    (0 included) by the highest estimated goodput — ``(v0, v1, d0, d1, w, alpha0, kmax, s)``:
    the linear profiles of a verifier step's time in its batched tokens (``v0 + v1 T``) and of
    a drafter pass in its sequences (``d0 + d1 n``), the weight ``w`` of the moving average of
    the accepted share of drafted tokens and its start ``alpha0``, the largest k, the fixed
    cost of a speculative step (:func:`_goodput_k`). Its k changes per step without a stall.
    """

    k_times: np.ndarray
    k_values: np.ndarray
    alpha_times: np.ndarray
    alpha_values: np.ndarray
    switch_s: float = 0.2
    capture_of: Any = None
    log: StepLog | None = None
    goodput: Any = None

    def capture(self, k: int, default: int) -> int:
        return int(default if self.capture_of is None else self.capture_of(k))


@njit(cache=True)
def _goodput_k(gp, run, nr, comp, target, wq, wh, wc, cap, prompt, budget, alpha, current):
    r"""The k in ``0..gp[6]`` of highest estimated goodput for the next step (SmartSpec).

    Goodput = the decoding sequences' expected tokens, :math:`n\,E(\hat\alpha, k)`, over the
    step's estimated time from linear profiles, :math:`v_0 + v_1 T + [k > 0]\,(s + k\,(d_0 +
    d_1 n))`, with :math:`T = n(k + 1) +` the prefill tokens that fit the budget and
    :math:`s` = ``gp[7]`` the speculative step's fixed cost. A step without decoding
    sequences keeps ``current`` (nothing to draft for; the drafter still reads the prefill).
    """
    n_dec = 0
    pending = 0.0
    for i in range(nr):
        r = run[i]
        if comp[r] >= target[r]:
            n_dec += 1
        else:
            pending += target[r] - comp[r]
    for j in range(wc):
        pending += prompt[wq[(wh + j) % cap]]
    if n_dec == 0:
        return current
    best_k = 0
    best = -1.0
    a = min(max(alpha, 1e-6), 1.0 - 1e-6)
    for k in range(int(gp[6]) + 1):
        tokens = float(n_dec * (k + 1))
        tokens += min(pending, max(budget - tokens, 0.0))
        spec = gp[7] + k * (gp[2] + gp[3] * n_dec) if k > 0 else 0.0
        time = gp[0] + gp[1] * tokens + spec
        gain = n_dec * (1.0 - a ** (k + 1)) / (1.0 - a)
        if gain / time > best:
            best = gain / time
            best_k = k
    return best_k


@njit(cache=True)
def _simulate(
    arrival,
    prompt,
    output,
    closed_n,
    vcost,
    dcost,
    speculate,
    k,
    alpha,
    max_seqs,
    budget,
    block_size,
    n_blocks,
    moe_table,
    moe_full,
    t_a,
    t_b,
    n_warm,
    n_end,
    seed,
    parallel_draft,
    draft_graph,
    capture,
    spec_step_s,
    spec_seq_s,
    emit_off,
    k_t,
    k_v,
    a_t,
    a_v,
    capture_k,
    switch_s,
    log_t,
    log_c,
    log_a,
    log_k,
    goodput,
):
    np.random.seed(seed)  # noqa: NPY002 (numba: per-thread legacy RNG)
    n = arrival.shape[0]
    arrival = arrival.copy()
    comp = np.zeros(n, dtype=np.int64)  # tokens with KV computed
    target = prompt.astype(np.int64).copy()  # tokens to prefill (prompt, + generated on recompute)
    gen = np.zeros(n, dtype=np.int64)
    blocks = np.zeros(n, dtype=np.int64)
    first = np.full(n, -1.0)
    finish = np.full(n, -1.0)
    stats = np.zeros(N_STATS)
    # output emissions (one per step that gave the request >= 1 token): request r's times
    # are emit[emit_off[r] : emit_off[r] + n_emit[r]] (at most output[r] of them)
    emit = np.empty(emit_off[n])
    n_emit = np.zeros(n, dtype=np.int64)

    run = np.empty(max_seqs, dtype=np.int64)
    sched = np.zeros(max_seqs, dtype=np.int64)
    is_dec = np.zeros(max_seqs, dtype=np.bool_)
    nr = 0
    cap = n + 1
    wq = np.empty(cap, dtype=np.int64)
    wh = 0
    wc = 0
    free = n_blocks
    done = 0
    t = 0.0
    nxt = 0  # next request to arrive (open loop) / to issue (closed loop)
    if closed_n > 0:
        for i in range(min(closed_n, n)):
            arrival[i] = 0.0
        issue_limit = min(closed_n, n)
    else:
        issue_limit = n
    # measurement window [wa, wb): open loop given; closed loop set at completions
    wa = t_a if t_a >= 0.0 else np.inf
    wb = t_b if t_a >= 0.0 else np.inf
    # run-time schedules of k and alpha (one entry each: fixed) and the step log;
    # ``speculate`` says a drafter is loaded, used where k > 0
    can_draft = speculate
    speculate = can_draft and k > 0
    q_dec = k + 1 if speculate else 1
    table_rows = moe_table.shape[0]
    table_cols = moe_table.shape[1]
    sw = vcost[4]
    ki = 0
    ai = 0
    n_log = 0
    cyc_all = 0.0
    acc_all = 0.0
    # the goodput chooser's moving average of the accepted share of drafted tokens
    g_alpha = goodput[5] if goodput.shape[0] > 0 else 0.0
    step_acc = 0.0
    step_drafted = 0.0

    while done < n:
        while ki + 1 < k_t.shape[0] and k_t[ki + 1] <= t:
            ki += 1
            if k_v[ki] != k:
                t += switch_s  # the engine stops to switch (KV budget, graphs): ASSUMPTION
                k = k_v[ki]
                speculate = can_draft and k > 0
                q_dec = k + 1 if speculate else 1
                capture = capture_k[k]
        while ai + 1 < a_t.shape[0] and a_t[ai + 1] <= t:
            ai += 1
            alpha = a_v[ai]
        while nxt < issue_limit and arrival[nxt] <= t:
            wq[(wh + wc) % cap] = nxt
            wc += 1
            nxt += 1
        if nr == 0 and wc == 0:
            t = arrival[nxt]
            continue
        if goodput.shape[0] > 0 and can_draft:
            # SmartSpec-style: this step's k maximises the estimated goodput
            k = _goodput_k(
                goodput, run, nr, comp, target, wq, wh, wc, cap, prompt, budget, g_alpha, k
            )
            speculate = k > 0
            q_dec = k + 1 if speculate else 1
            capture = capture_k[k]

        left = budget
        # --- 1. decode first -----------------------------------------------------------
        n_dec = 0
        ctx_dec = 0.0
        ctx_dec_sw = 0.0
        pairs = 0.0
        i = 0
        while i < nr:
            r = run[i]
            sched[i] = 0
            is_dec[i] = comp[r] >= target[r]
            if is_dec[i]:
                if q_dec > left:
                    i += 1
                    continue
                need = (comp[r] + q_dec + block_size - 1) // block_size - blocks[r]
                if need < 0:
                    need = 0
                self_preempted = False
                while need > free:
                    v = run[nr - 1]
                    free += blocks[v]
                    blocks[v] = 0
                    target[v] = prompt[v] + gen[v]
                    comp[v] = 0
                    wh = (wh - 1) % cap
                    wq[wh] = v
                    wc += 1
                    nr -= 1
                    stats[S_PREEMPT] += 1
                    if wa <= t < wb:
                        stats[S_PREEMPT_WIN] += 1
                    if v == r:
                        self_preempted = True
                        break
                if self_preempted:
                    break
                free -= need
                blocks[r] += need
                sched[i] = q_dec
                left -= q_dec
                n_dec += 1
                s = comp[r]
                ctx_dec += s
                ctx_dec_sw += min(s, sw) if sw > 0 else 0.0
                pairs += q_dec * (s + (q_dec + 1) / 2.0)
            i += 1
        # --- 2. running prefills ---------------------------------------------------------
        tok_pre = 0
        n_pre = 0
        pairs_pre = 0.0
        ctx_pre = 0.0
        ctx_pre_sw = 0.0
        for i in range(nr):
            r = run[i]
            if is_dec[i] or left <= 0:
                continue
            chunk = min(target[r] - comp[r], left)
            room = (blocks[r] + free) * block_size - comp[r]
            chunk = min(chunk, room)
            if chunk <= 0:
                continue
            need = (comp[r] + chunk + block_size - 1) // block_size - blocks[r]
            if need > 0:
                free -= need
                blocks[r] += need
            sched[i] = chunk
            left -= chunk
            tok_pre += chunk
            n_pre += 1
            s = comp[r]
            ctx_pre += s
            ctx_pre_sw += min(s, sw) if sw > 0 else 0.0
            pairs_pre += chunk * (s + (chunk + 1) / 2.0)
        # --- 3. admit waiting ------------------------------------------------------------
        while wc > 0 and nr < max_seqs and left > 0:
            r = wq[wh]
            chunk = min(target[r] - comp[r], left)
            room = free * block_size
            chunk = min(chunk, room)
            if chunk <= 0:
                break
            need = (chunk + block_size - 1) // block_size
            wh = (wh + 1) % cap
            wc -= 1
            free -= need
            blocks[r] = need
            run[nr] = r
            sched[nr] = chunk
            is_dec[nr] = False
            nr += 1
            left -= chunk
            tok_pre += chunk
            n_pre += 1
            pairs_pre += chunk * (chunk + 1) / 2.0
        if n_dec + n_pre == 0:
            # nothing fits (cannot happen when one request fits the cache); avoid a hang
            t = arrival[nxt] if nxt < issue_limit else t + 1e-3
            continue

        # --- cost ------------------------------------------------------------------------
        n_tok = n_dec * q_dec + tok_pre
        experts = 0.0
        if table_rows > 1:
            if n_tok < table_rows:
                experts = moe_table[n_tok, np.random.randint(0, table_cols)]  # noqa: NPY002 (numba: per-thread legacy RNG)
            else:
                experts = moe_full
        # longest query > 1 (verification or a prefill chunk): FA2 reads the KV per query head
        f_kv = 1.0
        v_pairs = pairs + pairs_pre
        if q_dec > 1 or tok_pre > n_pre:
            f_kv = kv_reread_factor(vcost, ctx_dec)
            v_pairs = unpacked_decode_pairs(vcost, ctx_dec, float(n_dec), float(q_dec)) + pairs_pre
        dt = pass_time(
            vcost,
            float(n_tok),
            float(n_dec * q_dec + n_pre),
            ctx_dec * f_kv + ctx_pre,
            ctx_dec_sw * f_kv + ctx_pre_sw,
            v_pairs,
            experts,
            float(n_dec + n_pre),
            float(n_dec * q_dec),  # decode tokens: their GEMMs at the decode compute scale
        )
        if n_tok > capture:  # no CUDA graph for this step size: per-layer launch cost
            dt += vcost[LAYERS] * vcost[EAGER_LAYER]
        if speculate:
            ctx_d = ctx_dec + ctx_pre
            if parallel_draft:
                # one pass drafts the whole block: k query tokens per decoding sequence,
                # attending to the context and the block; the verified tokens' (and the
                # prefill's) hidden states enter the drafter's context as well
                n_q = n_dec * k
                n_d = n_q + n_dec * q_dec + tok_pre
                d_pairs = k * ctx_dec + n_dec * k * (k + 1) / 2.0 + pairs + pairs_pre
                ctx_d1 = ctx_dec * kv_reread_factor(dcost, ctx_dec) + ctx_pre
                dt += pass_time(
                    dcost,
                    float(n_d),
                    float(n_q),
                    ctx_d1,
                    0.0,
                    d_pairs,
                    0.0,
                    float(n_dec),
                    float(n_q + n_dec * q_dec),
                )
                if n_d > capture or not draft_graph:
                    dt += dcost[LAYERS] * dcost[EAGER_LAYER]
            else:
                # first pass over every token the verifier processed (k + 1 per decoding
                # sequence + prefill), logits for one position per sequence
                n_d = n_dec * q_dec + tok_pre
                ctx_d1 = ctx_d
                if q_dec > 1 or tok_pre > n_pre:
                    ctx_d1 = ctx_dec * kv_reread_factor(dcost, ctx_dec) + ctx_pre
                dt += pass_time(
                    dcost,
                    float(n_d),
                    float(n_dec),
                    ctx_d1,
                    0.0,
                    pairs + pairs_pre,
                    0.0,
                    float(n_dec),
                    float(n_dec * q_dec),
                )
                if n_d > capture or not draft_graph:
                    dt += dcost[LAYERS] * dcost[EAGER_LAYER]
                if n_dec > 0 and k > 1:
                    one = pass_time(
                        dcost,
                        float(n_dec),
                        float(n_dec),
                        ctx_dec,
                        0.0,
                        ctx_dec + n_dec,
                        0.0,
                        float(n_dec),
                        float(n_dec),
                    )
                    if n_dec > capture or not draft_graph:
                        one += dcost[LAYERS] * dcost[EAGER_LAYER]
                    dt += (k - 1) * one
            if n_dec > 0:
                dt += spec_step_s + spec_seq_s * n_dec
        t0 = t
        t += dt
        stats[S_STEPS] += 1
        stats[S_BUSY] += dt
        overlap = min(t, wb) - max(t0, wa)
        in_window = overlap > 0.0
        if in_window:
            stats[S_RUN_INT] += overlap * nr

        # --- apply -----------------------------------------------------------------------
        kept = 0
        for i in range(nr):
            r = run[i]
            q = sched[i]
            finished = False
            if q > 0:
                if is_dec[i]:
                    commit = 1
                    if speculate:
                        a = 0
                        while a < k and np.random.random() < alpha:  # noqa: NPY002 (numba: per-thread legacy RNG)
                            a += 1
                        cyc_all += 1.0
                        acc_all += a
                        step_acc += a
                        step_drafted += k
                        if in_window:
                            stats[S_ACCEPTED] += a
                            stats[S_CYCLES] += 1
                            if a == k:
                                stats[S_FULL] += 1
                        commit = a + 1
                    commit = min(commit, output[r] - gen[r])
                    gen[r] += commit
                    comp[r] += commit
                    emit[emit_off[r] + n_emit[r]] = t
                    n_emit[r] += 1
                else:
                    comp[r] += q
                    if comp[r] >= target[r]:
                        gen[r] += 1
                        emit[emit_off[r] + n_emit[r]] = t
                        n_emit[r] += 1
                        if first[r] < 0.0:
                            first[r] = t
                if gen[r] >= output[r]:
                    finished = True
            if finished:
                finish[r] = t
                free += blocks[r]
                blocks[r] = 0
                done += 1
                if closed_n > 0:
                    if issue_limit < n:
                        arrival[issue_limit] = t
                        issue_limit += 1
                    if done == n_warm:
                        wa = t
                    if done == n_end:
                        wb = t
            else:
                run[kept] = r
                kept += 1
        nr = kept
        if n_log < log_t.shape[0]:  # counters after the step, as a server exports them
            log_t[n_log] = t
            log_c[n_log] = cyc_all
            log_a[n_log] = acc_all
            log_k[n_log] = k if speculate else 0
            n_log += 1
        if step_drafted > 0 and goodput.shape[0] > 0:
            w = goodput[4]
            g_alpha = (1.0 - w) * g_alpha + w * step_acc / step_drafted
        step_acc = 0.0
        step_drafted = 0.0
    stats[S_WIN_A] = wa
    stats[S_WIN_B] = wb
    stats[S_END] = t
    return arrival, first, finish, stats, emit, n_emit, n_log


def run_engine(
    arrival: np.ndarray,
    prompt: np.ndarray,
    output: np.ndarray,
    *,
    closed_n: int,
    vcost: np.ndarray,
    dcost: np.ndarray,
    speculate: bool,
    k: int,
    alpha: float,
    max_seqs: int,
    budget: int,
    block_size: int,
    n_blocks: int,
    moe_table: np.ndarray,
    moe_full: float,
    window: tuple[float, float] | None,
    n_warm: int,
    n_end: int,
    seed: int,
    parallel_draft: bool = False,
    draft_graph: bool = True,
    capture: int = 1 << 30,
    spec_step_s: float = 0.0,
    spec_seq_s: float = 0.0,
    schedule: Schedule | None = None,
):
    """Run the compiled engine; see the module docstring for the mechanism.

    ``schedule`` changes k and alpha at run time (:class:`Schedule`; default: ``k`` and
    ``alpha`` throughout) and has the step log filled in.

    Returns
    -------
    (arrival, first_token, finish, stats, emissions)
        Per-request arrival (closed loop: issue time), first-token and finish times (s), the
        stats vector (``S_*`` indices), and an :class:`Emissions` (the times of each
        request's output emissions: one per step that gave it at least one token).
    """
    t_a, t_b = window if window is not None else (-1.0, -1.0)
    output = np.ascontiguousarray(output, dtype=np.int64)
    off = np.zeros(output.shape[0] + 1, dtype=np.int64)
    np.cumsum(np.maximum(output, 1), out=off[1:])
    sch = schedule or Schedule(np.zeros(1), np.array([int(k)]), np.zeros(1), np.array([alpha]))
    if sch.k_values[0] != int(k) or sch.alpha_values[0] != float(alpha):
        raise ValueError("the schedule's first k and alpha must be the run's k and alpha")
    top = int(sch.k_values.max()) if sch.goodput is None else max(int(sch.goodput[6]), int(k))
    capture_k = np.array([sch.capture(j, capture) for j in range(top + 1)])
    n_log = int(output.sum() + np.sum(prompt) // max(int(budget), 1) + 2 * output.shape[0] + 16)
    logs = [np.zeros(n_log if schedule is not None else 0) for _ in range(4)]
    gp = np.zeros(0) if sch.goodput is None else np.asarray(sch.goodput, dtype=np.float64)
    arrival, first, finish, stats, emit, n_emit, used = _simulate(
        np.ascontiguousarray(arrival, dtype=np.float64),
        np.ascontiguousarray(prompt, dtype=np.int64),
        output,
        int(closed_n),
        vcost,
        dcost,
        bool(speculate),
        int(k),
        float(alpha),
        int(max_seqs),
        int(budget),
        int(block_size),
        int(n_blocks),
        moe_table,
        float(moe_full),
        float(t_a),
        float(t_b),
        int(n_warm),
        int(n_end),
        int(seed),
        bool(parallel_draft),
        bool(draft_graph),
        int(capture),
        float(spec_step_s),
        float(spec_seq_s),
        off,
        np.ascontiguousarray(sch.k_times, dtype=np.float64),
        np.ascontiguousarray(sch.k_values, dtype=np.int64),
        np.ascontiguousarray(sch.alpha_times, dtype=np.float64),
        np.ascontiguousarray(sch.alpha_values, dtype=np.float64),
        capture_k.astype(np.int64),
        float(sch.switch_s),
        *logs,
        gp,
    )
    if schedule is not None:
        schedule.log = StepLog(*(x[:used] for x in logs))
    return arrival, first, finish, stats, Emissions(emit, off[:-1], n_emit)
