"""k and alpha changed at run time in the engine, time-varying load, a controller in the loop
(specbayes.sim.engine.Schedule, specbayes.sim.trace)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from specbayes.control import acceptance
from specbayes.sim import engine as eng
from specbayes.sim.point import make_config
from specbayes.sim.trace import _scrapes, arrivals, run_trace, trace

KW = dict(verifier="Qwen3-8B", hardware="H100-SXM", drafter="EAGLE3-Qwen3-8B", prefill=256,
          decode=128)  # fmt: skip


def _run(k, alpha, schedule=None, n=400, rate=4.0, seed=3):
    cfg = make_config(KW["verifier"], hardware=KW["hardware"], drafter=KW["drafter"],
                      prefill=KW["prefill"], decode=KW["decode"], alpha=0.5, k=1)  # fmt: skip
    arr = np.arange(n) / rate
    out = eng.run_engine(
        arr, np.full(n, KW["prefill"]), np.full(n, KW["decode"]), closed_n=0, speculate=True,
        k=k, alpha=alpha, window=None, n_warm=0, n_end=n, seed=seed, schedule=schedule,
        **cfg.engine_kwargs(k),
    )  # fmt: skip
    return out[2], schedule


def _one(k, alpha, **kw):
    return eng.Schedule(np.zeros(1), np.array([k]), np.zeros(1), np.array([alpha]), **kw)


def test_a_fixed_schedule_is_the_plain_run():
    plain, _ = _run(3, 0.7)
    fixed, sch = _run(3, 0.7, _one(3, 0.7))
    np.testing.assert_array_equal(plain, fixed)
    # the step log counts every cycle and accepted token: alpha 0.7 at k = 3
    log = sch.log
    assert np.all(np.diff(log.t) >= 0) and log.cycles[-1] > 1000
    per_cycle = log.accepted[-1] / log.cycles[-1]
    assert per_cycle == pytest.approx(0.7 + 0.7**2 + 0.7**3, rel=0.03)


def test_switches_act_at_their_time_and_leave_the_past_alone():
    base, _ = _run(1, 1.0)
    sch = eng.Schedule(np.array([0.0, 50.0]), np.array([1, 4]), np.array([0.0, 70.0]),
                       np.array([1.0, 0.5]), switch_s=0.2)  # fmt: skip
    switched, sch = _run(1, 1.0, sch)
    # causal: every request finished before the switch finished at the same time
    early = base < 50.0
    np.testing.assert_array_equal(switched[early], base[early])
    assert not np.array_equal(switched, base)
    log = sch.log

    def accepted_per_cycle(t0, t1):
        i0, i1 = np.searchsorted(log.t, [t0, t1])
        return (log.accepted[i1] - log.accepted[i0]) / (log.cycles[i1] - log.cycles[i0])

    assert accepted_per_cycle(5.0, 49.0) == pytest.approx(1.0)  # k = 1, alpha 1
    assert accepted_per_cycle(51.0, 69.0) == pytest.approx(4.0)  # k = 4, alpha 1
    expect = sum(0.5**i for i in range(1, 5))
    assert accepted_per_cycle(71.0, 99.0) == pytest.approx(expect, rel=0.05)  # alpha 0.5
    with pytest.raises(ValueError, match="first k"):
        _run(2, 1.0, sch)


def test_traces_rates_and_arrivals():
    tr = trace("bursts", 5.0, 0.7, duration=480.0, alpha_shift=0.5)
    assert tr.rate_at(130.0) == 15.0 and tr.rate_at(10.0) == 5.0
    assert tr.alpha_at(100.0) == 0.7 and tr.alpha_at(300.0) == 0.5
    arr = arrivals(tr, np.random.default_rng(0))
    expected = sum(r * 60.0 for r in tr.rates)
    assert abs(arr.size - expected) < 4 * np.sqrt(expected) and np.all(np.diff(arr) >= 0)
    ramp = trace("ramp", 2.0, 0.7, duration=1200.0)
    assert ramp.rates.max() == pytest.approx(6.0) and ramp.rates[0] == pytest.approx(0.6)
    with pytest.raises(ValueError, match="unknown trace"):
        trace("daily", 2.0, 0.7)


def test_a_controller_in_the_loop_sees_only_the_past_and_is_obeyed():
    tr = trace("bursts", 4.0, 0.7, duration=300.0)
    seen = []

    def policy(now, window):
        seen.append((now, max(s.t for s in window)))
        return 3 if now < 150 else 1

    res = run_trace(tr, policy, k0=2, epoch_s=30.0, seed=2, **KW)
    assert all(last <= now for now, last in seen)
    np.testing.assert_array_equal(res.k_values, [2, 3, 1])
    np.testing.assert_array_equal(res.k_times, [0.0, 30.0, 150.0])
    s = res.summary()
    assert s["switches"] == 2 and sum(s["time_at_k"].values()) == pytest.approx(1.0)
    assert s["time_at_k"] == {1: 0.5, 2: 0.1, 3: 0.4}
    # the same requests as a fixed k, which serves them differently
    fixed = run_trace(tr, 2, seed=2, **KW)
    np.testing.assert_array_equal(fixed.arrival, res.arrival)


def test_acceptance_estimate_from_the_engine_counters():
    tr = trace("bursts", 4.0, 0.7, duration=200.0)
    seen = []

    def policy(now, window):
        seen.append(acceptance(window, now, seconds=30.0))
        return 3

    run_trace(tr, policy, k0=3, epoch_s=50.0, seed=4, **KW)
    assert all(a == pytest.approx(0.7, abs=0.04) for a in seen)
    # the scrapes: request counter and in-flight requests at each scrape time
    a = np.array([0.0, 1.0, 2.0])
    log = eng.StepLog(np.array([0.5, 1.5]), np.array([10.0, 20.0]), np.array([5.0, 9.0]), None)
    out = _scrapes(a, np.array([1.2, 3.0, -1.0]), log, [0.0], [3], 2.0, 1.0, 2.0, _Sample)
    assert [s.requests for s in out] == [1, 2, 3] and [s.running for s in out] == [1, 2, 2]
    assert [s.drafts for s in out] == [0.0, 10.0, 20.0]
    # a switch to k = 0 at 1 s: the interval up to the scrape at 1 s ran k = 3 (the switch
    # acts after the scrape its decision read), the next one k = 0
    out = _scrapes(a, np.array([1.2, 3.0, -1.0]), log, [0.0, 1.0], [3, 0], 2.0, 1.0, 2.0, _Sample)
    assert [s.k for s in out] == [3, 3, 0]


def test_the_acceptance_read_at_a_switch_to_dense_is_the_one_before_it():
    # the prompt mix changes at 100 s (0.75 -> 0.45); a controller that switches to k = 0 at
    # the first scrape that shows it must keep reading 0.45 while dense decoding drafts nothing
    tr = trace("bursts", 4.0, 0.75, duration=140.0)
    tr = replace(tr, alpha_times=np.array([0.0, 100.0]), alphas=np.array([0.75, 0.45]))
    seen = {}

    def policy(now, window):
        seen[now] = acceptance(window, now, seconds=5.0)
        return 0 if now >= 101.0 else 3

    run_trace(tr, policy, k0=3, epoch_s=1.0, scrape_s=1.0, seed=4, **KW)
    assert seen[99.0] == pytest.approx(0.75, abs=0.05)
    # one second of cycles at the new mix, read from the first scrape and still at the next
    # (before the fix the interval up to the switch was labelled k = 0: 0.75 again)
    assert seen[101.0] < 0.6 and seen[102.0] == seen[101.0]
    assert seen[110.0] is None  # nothing drafted in the window: the caller keeps its last


def _Sample(**kw):
    from specbayes.control import Sample

    return Sample(**kw)


def test_goodput_chooser_speculates_when_drafts_are_accepted_and_not_when_rejected():
    from specbayes.sim.trace import goodput_profile

    cfg = make_config(KW["verifier"], hardware=KW["hardware"], drafter=KW["drafter"],
                      prefill=KW["prefill"], decode=KW["decode"], alpha=0.5, k=1)  # fmt: skip
    v0, v1, d0, d1 = goodput_profile(cfg, KW["prefill"], KW["decode"])
    assert v0 > 0 and v1 > 0 and d0 > 0 and d1 > 0
    light = trace("bursts", 1.0, 0.95, duration=200.0)
    res = run_trace(light, "goodput", seed=1, alpha0=0.95, **KW).summary()
    assert max(res["time_at_k"], key=res["time_at_k"].get) >= 4  # long drafts pay
    poor = trace("bursts", 1.0, 0.02, duration=200.0)
    res = run_trace(poor, "goodput", seed=1, alpha0=0.5, **KW).summary()
    assert res["time_at_k"].get(0, 0.0) > 0.8  # it learns that nothing is accepted
    with pytest.raises(ValueError, match="unknown policy"):
        run_trace(poor, "smartspec", **KW)
