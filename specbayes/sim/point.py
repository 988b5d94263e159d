r"""One simulated load point: configuration checks, the engine run, the sweep-schema row.

:func:`make_config` resolves catalog names, checks the arguments (one clear ``ValueError``
each: unknown model, alpha outside (0, 1], k < 0, a configuration that does not fit in
memory) and precomputes everything a point needs. :func:`run_point` simulates one load and
returns a row in the sweep schema of :mod:`specbayes.data`.

Measured quantities (over the measurement window; warm-up and cool-down excluded)
-----------------------------------------------------------------------------------
* ``latency`` (mean) and ``latency_p50/p90/p95/p99`` — end-to-end latency (finish − arrival)
  of the requests in the window; likewise the mean and the same percentiles over those
  requests of ``ttft`` (first token − arrival), ``itl`` ((finish − first token)/(g − 1); 0
  when g = 1) and ``tpot`` (latency / g, the first token included);
* ``chunk_itl`` (mean) and its percentiles — the gaps between a request's successive output
  emissions, pooled over all gaps of those requests: one emission per step that gave the
  request at least one token (dense: every token; speculative: one verify step's a + 1
  tokens, ≈ the step time). NaN when there are no gaps (g = 1);
* ``rps`` — achieved rate: completions inside the window / window length;
* ``mean_in_system`` — time-average number of requests in the system over the window, from
  the requests' [arrival, finish) intervals (Little's law: ≈ rps × latency);
* ``mean_batch`` — time-average number of running (scheduled, KV-resident) sequences;
* ``preemptions`` — recompute preemptions during the whole run;
* ``acceptance_length`` = 1 + accepted/cycles, ``acceptance_marginal`` = accepted/(k·cycles)
  and ``alpha_hat`` — the maximum-likelihood per-token alpha of the truncated-geometric
  acceptance counts, :math:`\hat\alpha = \sum a / (\sum a + \#\{a < k\})`;
* ``saturated`` with ``saturation_reason``: throughput mode; preemptions; achieved rate
  < 95 % of the target; latency still growing (last quarter of the window > 1.5 × first);
  the running batch within 10 % of ``max_num_seqs``; or requests queueing for admission
  (time-average waiting > 1 + 10 % of the running batch).
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field

import numpy as np

from specbayes import catalog
from specbayes.data import PERCENTILE_LEVELS
from specbayes.sim import engine as eng
from specbayes.sim.arrivals import CLOSED, STRATEGIES, arrival_times
from specbayes.sim.costs import EngineConfig, cost_vector, kv_capacity_blocks
from specbayes.sim.routing import routing_table

__all__ = ["SimConfig", "make_config", "point_seed", "run_point"]

SIM_VERSION = "specbayes.sim 4"


@dataclass(frozen=True)
class SimConfig:
    """A checked, precomputed simulator configuration (one verifier/drafter/hardware/cell/α/k)."""

    verifier: str
    drafter: str
    hardware: str
    tp: int
    prefill: int
    decode: int
    k: int
    alpha: float
    engine: EngineConfig
    n_blocks: int
    weight_gib: float
    vcost: np.ndarray = field(repr=False)
    dcost: np.ndarray = field(repr=False)
    moe_table: np.ndarray = field(repr=False)
    moe_full: float = 0.0
    parallel_draft: bool = False
    draft_graph: bool = True

    def engine_kwargs(self, k: int) -> dict:
        """The arguments of :func:`specbayes.sim.engine.run_engine` this configuration fixes
        — pass costs, scheduler limits, KV blocks, drafting mode, the step overheads and the
        CUDA-graph capture for draft length ``k`` — one list for every caller."""
        e = self.engine
        return dict(
            vcost=self.vcost, dcost=self.dcost, max_seqs=e.max_num_seqs,
            budget=e.max_num_batched_tokens, block_size=e.block_size, n_blocks=self.n_blocks,
            moe_table=self.moe_table, moe_full=self.moe_full,
            parallel_draft=self.parallel_draft, draft_graph=self.draft_graph,
            capture=e.capture_limit(k), spec_step_s=e.spec_step_overhead_s,
            spec_seq_s=e.spec_seq_overhead_s,
        )  # fmt: skip

    @property
    def key(self) -> str:
        a = f"{self.alpha:.4f}" if self.k > 0 else "-"
        return (
            f"{self.verifier}|{self.drafter}|{self.hardware}|tp{self.tp}|"
            f"{self.prefill}x{self.decode}|k{self.k}|a{a}"
        )


def point_seed(seed: int, *parts: object) -> int:
    """A stable 31-bit seed from the user's seed and labels (crc32, not Python's hash)."""
    text = "|".join(str(p) for p in (seed, *parts))
    return zlib.crc32(text.encode()) & 0x7FFFFFFF


def make_config(
    verifier: str,
    *,
    hardware: str = "H100-SXM",
    drafter: str | None = None,
    tp: int = 1,
    prefill: int = 512,
    decode: int = 256,
    alpha: float | None = None,
    k: int = 0,
    engine: EngineConfig | None = None,
) -> SimConfig:
    """Resolve and check one configuration.

    Parameters
    ----------
    verifier, hardware : str
        Catalog names (``models/verifiers``, ``models/hardware``).
    drafter : str, optional
        ``models/drafters`` name; default the verifier's EAGLE-3 head when ``k > 0``.
    tp : int
        Tensor-parallel degree (GPUs).
    prefill, decode : int
        Prompt and output tokens per request.
    alpha : float
        Forced per-token acceptance in (0, 1]; required when ``k > 0``.
    k : int
        Draft length, ``0`` = dense decoding.
    engine : EngineConfig, optional
        Engine settings.

    Raises
    ------
    ValueError
        Unknown names; ``k < 0``; alpha outside (0, 1]; non-positive lengths or ``tp``; a
        configuration whose weights, or one request's KV cache, do not fit in memory.
    """
    engine = engine or EngineConfig()
    if isinstance(k, float) and not float(k).is_integer():
        raise ValueError(f"k must be an integer >= 0 (got {k})")
    k = int(k)
    if k < 0:
        raise ValueError(f"k must be >= 0 (0 = no speculation); got k = {k}")
    if int(tp) < 1:
        raise ValueError(f"tp must be >= 1; got {tp}")
    tp = int(tp)
    if int(prefill) < 1 or int(decode) < 1:
        raise ValueError(f"prefill and decode must be >= 1 token; got {prefill}, {decode}")
    vmodel = catalog.load_model(verifier)
    hw = catalog.load_hardware(hardware)
    if k > 0:
        if alpha is None or not (0.0 < float(alpha) <= 1.0):
            raise ValueError(f"alpha must lie in (0, 1] when k > 0; got alpha = {alpha}")
        dspec = catalog.load_drafter(drafter or catalog.default_drafter(vmodel.name))
        dgeom = dspec.geometry()
        dname = dspec.name
        alpha = float(alpha)
    else:
        if alpha is not None and not (0.0 < float(alpha) <= 1.0):
            raise ValueError(f"alpha must lie in (0, 1]; got alpha = {alpha}")
        dspec, dgeom, dname, alpha = None, None, "none", float("nan")
    parallel_draft, draft_graph = _drafting(dspec)
    vgeom = vmodel.geometry()
    n_blocks, weight_gib, budget_gib = kv_capacity_blocks(vgeom, dgeom, hw, tp, engine)
    if engine.kv_blocks_override is not None:
        n_blocks = int(engine.kv_blocks_override)
    label = f"{vmodel.name}" + (f" + {dname}" if dspec else "") + f" on {tp} x {hw.name}"
    if weight_gib + engine.activation_reserve_gib >= budget_gib:
        raise ValueError(
            f"{label} does not fit in memory: {weight_gib:.1f} GiB of weights per GPU "
            f"(+{engine.activation_reserve_gib:.0f} GiB reserve) exceed "
            f"{engine.gpu_memory_utilization:.0%} of {hw.memory_gib:.0f} GiB; raise --tp"
        )
    one_request = prefill + decode + k + 1
    if n_blocks * engine.block_size < one_request:
        raise ValueError(
            f"{label} does not fit in memory: the KV cache holds "
            f"{n_blocks * engine.block_size} tokens, one request needs {one_request}"
        )
    if engine.max_num_batched_tokens < k + 1:
        raise ValueError(
            f"max_num_batched_tokens ({engine.max_num_batched_tokens}) must be >= k + 1"
        )
    l2_unpacked = _unpacked_gqa_l2(hw, vmodel)
    vcost = cost_vector(
        vgeom,
        hw,
        tp,
        step_overhead_s=engine.step_overhead_s,
        seq_overhead_s=engine.seq_overhead_s,
        overlap=engine.roofline_overlap,
        eager_layer_s=engine.eager_layer_overhead_s,
        unpacked_gqa_l2_bytes=l2_unpacked,
        decode_compute_scale=engine.decode_compute_scale,
    )
    if dgeom is not None:
        dcost = cost_vector(
            dgeom,
            hw,
            tp,
            step_overhead_s=engine.draft_pass_overhead_s,
            seq_overhead_s=engine.draft_seq_overhead_s,
            overlap=engine.roofline_overlap,
            eager_layer_s=engine.eager_layer_overhead_s,
            unpacked_gqa_l2_bytes=l2_unpacked,
            decode_compute_scale=engine.decode_compute_scale,
        )
    else:
        dcost = np.zeros_like(vcost)
    if vgeom.is_moe:
        table = routing_table(vgeom.experts_per_tok, vgeom.num_experts, vgeom.layers)
        full = float(vgeom.num_experts * vgeom.layers)
    else:
        table, full = np.zeros((1, 1)), 0.0
    return SimConfig(
        verifier=vmodel.name,
        drafter=dname,
        hardware=hw.name,
        tp=tp,
        prefill=int(prefill),
        decode=int(decode),
        k=k,
        alpha=alpha,
        engine=engine,
        n_blocks=int(n_blocks),
        weight_gib=weight_gib,
        vcost=vcost,
        dcost=dcost,
        moe_table=table,
        moe_full=full,
        parallel_draft=parallel_draft,
        draft_graph=draft_graph,
    )


def _drafting(dspec) -> tuple[bool, bool]:
    """How the engine runs a drafter: (parallel block drafting, CUDA-graph replay).

    Read from the drafter file's optional ``[sim]`` table (``drafting = "parallel"`` for
    DFlash/DSpark-style drafters that draft the whole block in one pass, vLLM
    ``vllm/v1/spec_decode/dflash.py`` / ``dspark.py``; ``cuda_graph = false`` when the
    engine runs the draft forward eagerly). Default: autoregressive, graph-captured.
    """
    if dspec is None:
        return False, True
    import tomllib

    with dspec.path.open("rb") as fh:
        extra = tomllib.load(fh).get("sim", {})
    mode = extra.get("drafting", "autoregressive")
    if mode not in ("autoregressive", "parallel"):
        raise ValueError(f"{dspec.path}: [sim] drafting must be 'autoregressive' or 'parallel'")
    return mode == "parallel", bool(extra.get("cuda_graph", True))


def _unpacked_gqa_l2(hw, vmodel) -> float:
    """L2 bytes of a GPU whose attention packs GQA only for one-token queries, else 0.

    Read from the hardware file's optional ``[sim]`` table: ``attention = "fa2"`` (vLLM runs
    FlashAttention 2 below compute capability 9.0, FlashAttention 3 on Hopper) with
    ``l2_cache_mib``; see :func:`specbayes.sim.costs.kv_reread_factor`. Default: packed. A
    verifier file's ``[sim] attention = "packed"`` overrides it (a model vLLM serves with
    another backend there).
    """
    import tomllib

    with vmodel.path.open("rb") as fh:
        model_kernel = tomllib.load(fh).get("sim", {}).get("attention")
    with hw.path.open("rb") as fh:
        extra = tomllib.load(fh).get("sim", {})
    kernel = extra.get("attention", "packed")
    if model_kernel == "packed":
        return 0.0
    if model_kernel is not None:
        raise ValueError(f"{vmodel.path}: [sim] attention may only be 'packed'")
    if kernel not in ("packed", "fa2"):
        raise ValueError(f"{hw.path}: [sim] attention must be 'packed' or 'fa2', got {kernel!r}")
    if kernel == "packed":
        return 0.0
    l2 = float(extra.get("l2_cache_mib", 0.0))
    if not l2 > 0.0:
        raise ValueError(f"{hw.path}: [sim] attention = 'fa2' needs l2_cache_mib > 0")
    return l2 * 2.0**20


def _window_counts(n: int, warm: float, cool: float) -> tuple[int, int]:
    n_warm = min(n - 2, max(1, math.ceil(warm * n)))
    n_end = max(n_warm + 2, n - math.ceil(cool * n))
    return n_warm, min(n_end, n)


def run_point(
    cfg: SimConfig,
    strategy: str,
    *,
    rate: float | None = None,
    concurrency: int | None = None,
    n_requests: int = 200,
    seed: int = 0,
    warmup: float = 0.2,
    cooldown: float = 0.1,
    details: bool = False,
):
    """Simulate one load point of ``cfg``.

    Parameters
    ----------
    cfg : SimConfig
        From :func:`make_config`.
    strategy : {"poisson", "constant", "throughput", "synchronous", "concurrent"}
        Load strategy.
    rate : float, optional
        Target request rate (poisson, constant).
    concurrency : int, optional
        Streams N (concurrent).
    n_requests : int
        Requests simulated (>= 5), including warm-up and cool-down.
    seed : int
        Seed; the run is a deterministic function of (cfg, strategy, load, n, seed).
    warmup, cooldown : float
        Fractions of the requests left out at the start and the end: open loop by arrival
        order, closed loop by completion order.
    details : bool
        Also return a dict with per-request times and engine statistics.

    Returns
    -------
    dict
        A sweep-schema row (and the details dict when ``details``).
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    n = int(n_requests)
    if n < 5:
        raise ValueError(f"n_requests must be >= 5; got {n}")
    closed_n = 0
    if strategy == "synchronous":
        closed_n = 1
    elif strategy == "concurrent":
        if concurrency is None or int(concurrency) < 1:
            raise ValueError(f"strategy 'concurrent' needs concurrency >= 1; got {concurrency}")
        closed_n = int(concurrency)
    s = point_seed(seed, cfg.key, strategy, rate, concurrency, n)
    rng = np.random.default_rng(s)
    n_warm, n_end = _window_counts(n, warmup, cooldown)
    if strategy in CLOSED:
        arrival = np.zeros(n)
        window = None
    else:
        arrival = arrival_times(strategy, n, rate, rng)
        if strategy == "throughput":
            window = None  # all arrive at 0: window by completions, like closed loop
        else:
            window = (float(arrival[n_warm]), float(arrival[n_end - 1]))
    by_completion = window is None
    prompt = np.full(n, cfg.prefill, dtype=np.int64)
    output = np.full(n, cfg.decode, dtype=np.int64)
    arrival, first, finish, stats, emissions = eng.run_engine(
        arrival,
        prompt,
        output,
        closed_n=closed_n if not by_completion or strategy != "throughput" else 0,
        speculate=cfg.k > 0,
        k=cfg.k,
        alpha=cfg.alpha if cfg.k > 0 else 0.0,
        window=window,
        n_warm=n_warm,
        n_end=n_end,
        seed=s,
        **cfg.engine_kwargs(cfg.k),
    )
    if by_completion and strategy == "throughput":
        # window from completion order, computed here (the kernel sets it for closed loops)
        order = np.sort(finish)
        wa, wb = float(order[n_warm - 1]), float(order[n_end - 1])
    else:
        wa, wb = float(stats[eng.S_WIN_A]), float(stats[eng.S_WIN_B])
    span = wb - wa
    lat = finish - arrival
    if by_completion:
        sel = (finish > wa) & (finish <= wb)
        achieved = sel.sum() / span if span > 0 else float("nan")
    else:
        sel = (arrival >= wa) & (arrival <= wb)
        achieved = ((finish > wa) & (finish <= wb)).sum() / span
    lw = lat[sel]
    # time-average number in system over [wa, wb]
    overlap = np.clip(np.minimum(finish, wb) - np.maximum(arrival, wa), 0.0, None)
    in_system = overlap.sum() / span if span > 0 else float("nan")
    run_int = stats[eng.S_RUN_INT]
    if by_completion and strategy == "throughput":
        mean_batch = float("nan")  # kernel window not known in advance for this mode
    else:
        mean_batch = run_int / span if span > 0 else float("nan")
    ttft = (first - arrival)[sel]
    g = cfg.decode
    itl = ((finish - first) / (g - 1))[sel] if g > 1 else np.zeros(sel.sum())
    tpot = lw / g
    chunk = emissions.gaps(sel)
    preempt = int(stats[eng.S_PREEMPT])

    reasons = []
    target = None
    if strategy == "throughput":
        reasons.append("throughput mode (all requests at once)")
    if preempt > 0:
        reasons.append(f"{preempt} preemptions")
    if strategy in ("poisson", "constant"):
        target = float(rate)
        if achieved < 0.95 * target:
            reasons.append(f"achieved {achieved:.3g} < 95% of target {target:.3g} req/s")
        q = max(2, lw.size // 4)
        if lw.size >= 8 and lw[-q:].mean() > 1.5 * lw[:q].mean():
            reasons.append("latency still growing across the window (queue unstable)")
        if mean_batch >= 0.9 * cfg.engine.max_num_seqs:
            reasons.append(f"running batch within 10% of max_num_seqs ({cfg.engine.max_num_seqs})")
        elif in_system - mean_batch > 1.0 + 0.1 * mean_batch:
            reasons.append(
                f"{in_system - mean_batch:.1f} requests waiting for admission on average"
            )

    row = {
        "verifier": cfg.verifier,
        "drafter": cfg.drafter,
        "hardware": cfg.hardware,
        "tp": cfg.tp,
        "prefill": cfg.prefill,
        "decode": cfg.decode,
        "cell": f"{cfg.prefill}x{cfg.decode}",
        "k": cfg.k,
        "alpha": cfg.alpha if cfg.k > 0 else float("nan"),
        "alpha_source": "given" if cfg.k > 0 else "dense",
        "strategy": strategy,
        "target_rps": target if target is not None else float("nan"),
        "concurrency": float(closed_n) if strategy in CLOSED else float("nan"),
        "rps": float(achieved),
        "latency": float(lw.mean()),
        **_timing("latency", lw),
        **_timing("ttft", ttft),
        **_timing("itl", itl),
        **_timing("tpot", tpot),
        **_timing("chunk_itl", chunk),
        "n_requests": int(sel.sum()),
        "mean_batch": float(mean_batch),
        "mean_in_system": float(in_system),
        "preemptions": preempt,
        "saturated": bool(reasons),
        "saturation_reason": "; ".join(reasons),
        "seed": int(seed),
        "source": SIM_VERSION,
    }
    cycles = stats[eng.S_CYCLES]
    if cfg.k > 0 and cycles > 0:
        acc = stats[eng.S_ACCEPTED]
        misses = cycles - stats[eng.S_FULL]
        row["acceptance_length"] = 1.0 + acc / cycles
        row["acceptance_marginal"] = acc / (cfg.k * cycles)
        row["alpha_hat"] = acc / (acc + misses) if acc + misses > 0 else float("nan")
    else:
        row["acceptance_length"] = float("nan")
        row["acceptance_marginal"] = float("nan")
        row["alpha_hat"] = float("nan")
    if not details:
        return row
    info = {
        "arrival": arrival,
        "first_token": first,
        "finish": finish,
        "window": (wa, wb),
        "selected": sel,
        "steps": int(stats[eng.S_STEPS]),
        "busy_s": float(stats[eng.S_BUSY]),
        "end_s": float(stats[eng.S_END]),
        "preemptions_in_window": int(stats[eng.S_PREEMPT_WIN]),
        "cycles": float(cycles),
        "emissions": emissions,
    }
    return row, info


def _timing(metric: str, values: np.ndarray) -> dict[str, float]:
    """``<metric>`` (mean; not for latency, whose mean the row has) and its percentiles.

    Percentiles over ``values`` (per request, or per chunk gap for ``chunk_itl``) at
    :data:`specbayes.data.PERCENTILE_LEVELS`; NaN when there are none.
    """
    out = {} if metric == "latency" else {metric: float(values.mean()) if values.size else math.nan}
    for level in PERCENTILE_LEVELS:
        out[f"{metric}_p{level}"] = float(np.percentile(values, level)) if values.size else math.nan
    return out
