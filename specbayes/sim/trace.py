r"""Time-varying load on the simulated server, with k chosen at run time (issue 46).

A :class:`Trace` is a piecewise-constant request rate (a compressed daily ramp, bursts of
3× the base, a Markov-modulated Poisson process) and a piecewise-constant acceptance (a shift
when the prompt mix changes). :func:`run_trace` serves it on one configuration of the
embedded engine (:mod:`specbayes.sim.engine`) with either a fixed draft length or a
controller that decides k from what a server exports — the request counter, the speculative
cycles and accepted draft tokens, the requests in flight — scraped every ``scrape_s``
seconds (:class:`specbayes.control.Sample`).

The engine runs to completion in one compiled call, so a controller in the loop is served by
*re-running* the trace up to each decision time with the schedule decided so far: the engine
is causal (its random draws come in step order and nothing after a time changes what
happened before it), so each re-run reproduces the past exactly and the decision sees only
it. A switch of k stops the engine for :attr:`Schedule.switch_s <specbayes.sim.engine.Schedule>`
(ASSUMPTION, stated there).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from specbayes.sim import engine as eng
from specbayes.sim.point import make_config

__all__ = ["Trace", "TraceResult", "arrivals", "goodput_profile", "run_trace", "trace"]


@dataclass(frozen=True)
class Trace:
    """A request-rate and acceptance profile: piece ``i`` holds from ``times[i]`` (s)."""

    name: str
    times: np.ndarray
    rates: np.ndarray
    alpha_times: np.ndarray
    alphas: np.ndarray
    duration: float

    def rate_at(self, t: float) -> float:
        return float(self.rates[np.searchsorted(self.times, t, side="right") - 1])

    def alpha_at(self, t: float) -> float:
        return float(self.alphas[np.searchsorted(self.alpha_times, t, side="right") - 1])


def trace(
    name: str,
    base: float,
    alpha: float,
    *,
    duration: float = 1200.0,
    alpha_shift: float | None = None,
    seed: int = 0,
) -> Trace:
    """One of the named load profiles around ``base`` req/s.

    ``ramp``: a day compressed into ``duration``, 12 steps from 0.3× up to 3× the base and
    back; ``bursts``: the base with 60 s bursts at 3× every 240 s; ``modulated``: a two-state
    Markov-modulated Poisson process (base and 3× base, exponential holding times of mean
    90 s). ``alpha_shift``: the acceptance after the middle of the trace (a change of prompt
    mix), else ``alpha`` throughout.
    """
    if not (base > 0 and 0 < alpha <= 1 and duration > 0):
        raise ValueError("trace: need base > 0, alpha in (0, 1], duration > 0")
    if name == "ramp":
        steps = np.concatenate([np.linspace(0.3, 3.0, 6), np.linspace(3.0, 0.3, 6)])
        times = np.arange(12) * duration / 12
        rates = base * steps
    elif name == "bursts":
        times = np.arange(0.0, duration, 60.0)
        rates = np.where((np.arange(len(times)) % 4) == 2, 3.0 * base, base)
    elif name == "modulated":
        rng = np.random.default_rng([seed, 46])
        times, rates, t, high = [], [], 0.0, False
        while t < duration:
            times.append(t)
            rates.append(3.0 * base if high else base)
            t += rng.exponential(90.0)
            high = not high
        times, rates = np.array(times), np.array(rates)
    else:
        raise ValueError(f"unknown trace {name!r}; choose ramp, bursts or modulated")
    a_times = np.array([0.0] if alpha_shift is None else [0.0, duration / 2])
    a_vals = np.array([alpha] if alpha_shift is None else [alpha, alpha_shift])
    return Trace(name, np.asarray(times, float), np.asarray(rates, float), a_times, a_vals,
                 float(duration))  # fmt: skip


def arrivals(tr: Trace, rng: np.random.Generator) -> np.ndarray:
    """Sorted arrival times of a non-homogeneous Poisson process with the trace's rates."""
    ends = np.append(tr.times[1:], tr.duration)
    out = [
        np.sort(rng.uniform(a, b, rng.poisson(r * (b - a))))
        for a, b, r in zip(tr.times, ends, tr.rates, strict=True)
    ]
    return np.concatenate(out)


@dataclass
class TraceResult:
    """Requests served over a trace and the k schedule that served them."""

    arrival: np.ndarray
    finish: np.ndarray
    k_times: np.ndarray
    k_values: np.ndarray
    duration: float
    decisions: list = field(default_factory=list, repr=False)

    @property
    def latency(self) -> np.ndarray:
        return self.finish - self.arrival

    def summary(self) -> dict:
        """Mean and p99 latency (s), switches, and the share of time at each k."""
        lat = self.latency
        ends = np.append(self.k_times[1:], self.duration)
        share: dict[int, float] = {}
        for t0, t1, k in zip(self.k_times, ends, self.k_values, strict=True):
            share[int(k)] = share.get(int(k), 0.0) + max(min(t1, self.duration) - t0, 0.0)
        return dict(
            requests=int(lat.size),
            mean_latency=float(lat.mean()),
            p99_latency=float(np.quantile(lat, 0.99)),
            switches=int(np.sum(np.diff(self.k_values) != 0)),
            time_at_k={k: round(v / self.duration, 3) for k, v in sorted(share.items())},
        )


def goodput_profile(cfg, prefill: int, decode: int) -> tuple[float, float, float, float]:
    """SmartSpec's offline profile: least-squares lines of a verifier step's time in its
    batched tokens (``v0 + v1 T``) and of one drafter pass in its sequences (``d0 + d1 n``),
    from the engine's own pass costs at the workload's mean context, over 1-64 sequences of
    1-8 tokens each (the paper profiles the model the same way, per batch size)."""
    from specbayes.sim.costs import pass_time

    s = prefill + decode / 2.0
    xs, ys, nd, yd = [], [], [], []
    for n in (1, 2, 4, 8, 16, 32, 64):
        for q in range(1, 9):
            tok = float(n * q)
            pairs = n * q * (s + (q + 1) / 2.0)
            xs.append(tok)
            ys.append(pass_time(cfg.vcost, tok, tok, n * s, 0.0, pairs, 0.0, float(n), tok))
        nd.append(float(n))
        yd.append(pass_time(cfg.dcost, float(n), float(n), n * s, 0.0, n * (s + 1), 0.0,
                            float(n), float(n)))  # fmt: skip
    v1, v0 = np.polyfit(xs, ys, 1)
    d1, d0 = np.polyfit(nd, yd, 1)
    return float(v0), float(v1), float(d0), float(d1)


def run_trace(
    tr: Trace,
    policy: int | str | Callable[[float, Sequence], int],
    *,
    verifier: str,
    hardware: str,
    drafter: str,
    prefill: int,
    decode: int,
    k0: int = 1,
    seed: int = 0,
    epoch_s: float = 10.0,
    scrape_s: float = 5.0,
    history_s: float = 60.0,
    switch_s: float = 0.2,
    progress: Callable[[float], None] | None = None,
    kmax: int = 7,
    ema: float = 0.05,
    alpha0: float = 0.7,
) -> TraceResult:
    """Serve ``tr`` with a fixed k (``policy`` an int), a controller ``policy(now, window)
    -> k`` (e.g. :meth:`specbayes.control.KController.decide`) asked every ``epoch_s``
    seconds with the scrapes of the last ``history_s`` seconds, starting at ``k0``, or
    ``policy="goodput"``: the SmartSpec-style chooser inside the engine, every step's k in
    ``0..kmax`` from :func:`goodput_profile` and a moving average (weight ``ema``) of the
    accepted share of drafted tokens, starting at ``alpha0``. Arrivals depend on ``seed``
    only, so every policy serves the same requests."""
    from specbayes.control import Sample

    cfg = make_config(verifier, hardware=hardware, drafter=drafter, prefill=prefill,
                      decode=decode, alpha=tr.alphas[0], k=1)  # fmt: skip
    arrival = arrivals(tr, np.random.default_rng([seed, 460]))
    chooser = None
    if isinstance(policy, str):
        if policy != "goodput":
            raise ValueError(f"unknown policy {policy!r}: an int k, 'goodput' or a callable")
        prof = goodput_profile(cfg, prefill, decode)
        chooser = (*prof, ema, alpha0, kmax, cfg.engine.spec_step_overhead_s)
        policy = int(k0)
    fixed = not callable(policy)
    k_times, k_values = [0.0], [int(policy) if fixed else int(k0)]

    def serve(until: float) -> tuple[np.ndarray, np.ndarray, eng.StepLog]:
        arr = arrival[arrival <= until]
        sch = eng.Schedule(np.array(k_times), np.array(k_values, dtype=np.int64),
                           tr.alpha_times, tr.alphas, switch_s=switch_s,
                           capture_of=cfg.engine.capture_limit, goodput=chooser)  # fmt: skip
        a, _, fin, *_ = eng.run_engine(
            arr, np.full(arr.size, prefill), np.full(arr.size, decode), closed_n=0,
            speculate=True, k=k_values[0], alpha=float(tr.alphas[0]), window=None, n_warm=0,
            n_end=arr.size, seed=seed, schedule=sch, **cfg.engine_kwargs(k_values[0]),
        )  # fmt: skip
        return a, fin, sch.log

    decisions = []
    if not fixed:
        for now in np.arange(epoch_s, tr.duration, epoch_s):
            a, fin, log = serve(now)
            window = _scrapes(a, fin, log, k_times, k_values, now, scrape_s, history_s, Sample)
            k = int(policy(float(now), window))
            decisions.append((float(now), k))
            if k != k_values[-1]:
                k_times.append(float(now))
                k_values.append(k)
            if progress is not None:
                progress(float(now) / tr.duration)
    a, fin, log = serve(np.inf)
    if chooser is not None:  # every step's k, from the step log
        change = np.flatnonzero(np.diff(log.k, prepend=-1) != 0)
        k_times = list(np.append(0.0, log.t[change[1:] - 1]))
        k_values = list(log.k[change].astype(int))
    return TraceResult(a, fin, np.array(k_times), np.array(k_values), tr.duration, decisions)


def _scrapes(arrival, finish, log, k_times, k_values, now, scrape_s, history_s, sample):
    """Counter scrapes every ``scrape_s`` over the last ``history_s`` before ``now``; each
    sample's k is the one in effect up to it (a switch at a scrape's time acts after it)."""
    out = []
    for ts in np.arange(max(now - history_s, 0.0), now + 1e-9, scrape_s):
        i = np.searchsorted(log.t, ts, side="right") - 1
        cycles = float(log.cycles[i]) if i >= 0 else 0.0
        accepted = float(log.accepted[i]) if i >= 0 else 0.0
        k = int(k_values[max(np.searchsorted(k_times, ts, side="left") - 1, 0)])
        running = float(np.sum((arrival <= ts) & ((finish > ts) | (finish < 0))))
        out.append(sample(t=float(ts), requests=float(np.sum(arrival <= ts)), drafts=cycles,
                          accepted=accepted, k=k, running=running))  # fmt: skip
    return out
