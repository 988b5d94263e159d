"""The online k controller (specbayes.control): estimators on known streams, the table,
hysteresis and dwell, the CLI export."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from tiny_fit import tiny_fit_path

from specbayes import control, laws, plan
from specbayes.cli import main
from specbayes.control import ControllerConfig, KController, KTable, Sample


def _stream(rate, alpha, k, seconds=120.0, step=5.0, start=0.0, requests=0.0, cycles_per_s=200.0):
    """Counter scrapes of a server receiving ``rate`` req/s and running k with acceptance
    alpha: every cycle accepts E(alpha, k) - 1 draft tokens on average."""
    out, acc, drafts = [], 0.0, 0.0
    for t in np.arange(start, start + seconds + 1e-9, step):
        out.append(Sample(t=float(t), requests=requests + rate * (t - start), drafts=drafts,
                          accepted=acc, k=k, running=rate * 2.0))  # fmt: skip
        if k > 0:
            drafts += cycles_per_s * step
            acc += cycles_per_s * step * (laws.expected_tokens(alpha, k) - 1.0)
    return out


def test_estimators_recover_known_streams():
    w = _stream(rate=7.5, alpha=0.7, k=4)
    assert control.arrival_rate(w, now=120.0, seconds=30.0) == pytest.approx(7.5)
    assert control.in_flight(w, now=120.0) == pytest.approx(15.0)
    assert control.acceptance(w, now=120.0) == pytest.approx(0.7, abs=1e-6)
    # only the window counts: a rate change 30 s ago is all the estimator sees
    late = _stream(rate=2.0, alpha=0.5, k=2, start=125.0, requests=w[-1].requests, seconds=30.0)
    both = w + late
    assert control.arrival_rate(both, now=155.0, seconds=30.0) == pytest.approx(2.0)
    assert control.acceptance(both, now=155.0, seconds=30.0) == pytest.approx(0.5, abs=1e-6)
    # nothing to estimate from: one sample, dense decoding, too few cycles
    assert control.arrival_rate(w[:1], now=0.0) is None
    assert control.acceptance(_stream(3.0, 0.7, k=0), now=120.0) is None
    few = _stream(3.0, 0.7, k=3, cycles_per_s=1.0)
    assert control.acceptance(few, now=120.0, min_drafts=100) is None


def _table(load="rps") -> KTable:
    """A hand-made table: k = 0 best at high load, k = 4 at low load, k = 2 between."""
    alphas, loads, ks = np.array([0.5, 0.9]), np.array([0.0, 10.0, 20.0]), np.array([0, 2, 4])
    lat = np.array([[3.0, 2.0, 1.6], [4.0, 3.0, 3.2], [6.0, 7.0, 9.0]])  # (load, k)
    expected = np.stack([lat, lat])
    k_bayes = np.tile([4, 2, 0], (2, 1))
    ones = np.ones((2, 3))
    return KTable(alphas, loads, ks, expected, k_bayes, 0 * ones, ones, load=load, arm="a")


def test_table_interpolates_and_round_trips_through_its_frame():
    t = _table()
    assert t.best(0.7, 0.0) == 4 and t.best(0.7, 10.0) == 2 and t.best(0.7, 20.0) == 0
    # between grid points: geometric interpolation of each k's latency; clamped outside
    np.testing.assert_allclose(t.latencies(0.7, 5.0), np.sqrt([3.0 * 4.0, 2.0 * 3.0, 1.6 * 3.2]))
    np.testing.assert_allclose(t.latencies(0.1, 99.0), [6.0, 7.0, 9.0])
    back = KTable.from_frame(t.to_frame())
    np.testing.assert_array_equal(back.expected, t.expected)
    np.testing.assert_array_equal(back.k_bayes, t.k_bayes)
    with pytest.raises(ValueError, match="grid"):
        KTable.from_frame(t.to_frame().iloc[:-1])


def test_hysteresis_no_switch_inside_the_dwell_a_sustained_change_switches():
    cfg = ControllerConfig(window_s=30.0, min_dwell_s=60.0, margin=0.03)
    ctl = KController(_table(), k=4, alpha=0.7, config=cfg, start=0.0)
    w = _stream(rate=1.0, alpha=0.7, k=4, seconds=300.0)
    assert ctl.decide(100.0, w) == 4  # low load: k = 4 is best
    # a burst to 20 req/s at t = 100: inside the dwell from a switch at t = 130 nothing moves
    burst = _stream(rate=20.0, alpha=0.7, k=4, start=105.0, seconds=300.0,
                    requests=w[21].requests)  # fmt: skip
    stream = w[:22] + burst
    assert ctl.decide(140.0, stream) == 0  # sustained: 60 s since the start, switch to dense
    assert ctl.state.switched and ctl.state.since == 140.0
    # the load drops back at once: the dwell holds k = 0 for 60 s, then k returns
    calm = _stream(rate=1.0, alpha=0.7, k=0, start=145.0, seconds=300.0,
                   requests=burst[8].requests)  # fmt: skip
    stream = stream[:30] + calm
    assert [ctl.decide(t, stream) for t in (180.0, 195.0)] == [0, 0]
    assert "dwell" in ctl.state.reason
    assert ctl.decide(205.0, stream) == 4
    assert sum(d.switched for d in ctl.history) == 2


def test_margin_keeps_a_nearly_as_good_k():
    t = _table()
    # at 10 req/s k = 2 (3.0 s) beats k = 4 (3.2 s) by 6.7 %: switched with a 3 % margin,
    # kept with a 10 % margin
    w = _stream(rate=10.0, alpha=0.7, k=4)
    d = control.choose(t, 4, -1e9, 0.7, 120.0, w, ControllerConfig(margin=0.03))
    assert d.switched and d.k == 2
    d = control.choose(t, 4, -1e9, 0.7, 120.0, w, ControllerConfig(margin=0.10))
    assert not d.switched and d.k == 4 and "margin" in d.reason


def test_closed_loop_table_reads_the_streams_in_flight():
    t = _table(load="concurrency")
    w = _stream(rate=10.0, alpha=0.7, k=4)  # running = 20 streams
    assert control.choose(t, 4, -1e9, 0.7, 120.0, w).k == 0


def test_k_table_is_the_planners(draws_fit):
    arm = plan.Arm("V8", "A100", 1024, 1024, drafter="eagle3", alpha=0.75, k=3)
    t = control.k_table(draws_fit, arm, alphas=[0.6, 0.8], rps=[1.0, 8.0], ks=range(0, 5))
    ref = plan.optimal_k(draws_fit, arm, [0.6, 0.8], [1.0, 8.0], ks=range(0, 5))
    np.testing.assert_array_equal(t.k_bayes.ravel(), ref["k_bayes"].to_numpy())
    for _, row in ref.iterrows():
        i, j = list(t.alphas).index(row["alpha"]), list(t.loads).index(row["rps"])
        assert t.best(row["alpha"], row["rps"]) == row["k_bayes"]
        assert t.expected[i, j, list(t.ks).index(row["k_bayes"])] == row["expected_latency"]


def test_cli_exports_a_table_the_controller_reads(tmp_path, capsys):
    out = tmp_path / "table.csv"
    assert main(["control", "table", str(tiny_fit_path()), "--out", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    table = KTable.from_frame(pd.read_csv(out))
    assert table.expected.shape == (len(control.DEFAULT_ALPHAS), len(table.loads), 8)
    assert set(np.unique(table.k_bayes)) <= set(range(-1, 8))
    assert main(["control", "table", str(tiny_fit_path()), "--out", str(tmp_path / "t.txt")]) == 2
    assert "CSV" in capsys.readouterr().err


def test_a_switch_that_relieves_the_server_is_made_inside_the_dwell():
    t = _table()
    np.testing.assert_allclose(t.utilisation(0.7, 20.0), 1.0 - np.array([3, 2, 1.6]) / [6, 7, 9])
    cfg = ControllerConfig(min_dwell_s=60.0)
    # at 20 req/s k = 4 runs at utilisation 1 - 1.6/9.0 = 0.82, k = 0 (the best) at 0.5:
    # leaving is made 10 s after the last switch
    w = _stream(rate=20.0, alpha=0.7, k=4)
    d = control.choose(t, 4, 110.0, 0.7, 120.0, w, cfg)
    assert d.switched and d.k == 0
    # so is leaving a k that saturates in some draws (utilisation 1)
    expected = t.expected.copy()
    expected[:, 2, 2] = np.inf
    sat = KTable(t.alphas, t.loads, t.ks, expected, t.k_bayes, t.regret, t.p_best, arm="a")
    assert sat.utilisation(0.7, 20.0)[2] == 1.0
    assert control.choose(sat, 4, 110.0, 0.7, 120.0, w, cfg).k == 0
    # at 10 req/s k = 2 (3.0 s, utilisation 0.33) relieves k = 4 (3.2 s, 0.5): switched
    w = _stream(rate=10.0, alpha=0.7, k=4)
    assert control.choose(t, 4, 110.0, 0.7, 120.0, w, cfg).k == 2
    # the other way, a raise: at 10 req/s from k = 0 (4.0 s, 0.25) to k = 2 waits the dwell
    d = control.choose(t, 0, 110.0, 0.7, 120.0, w, cfg)
    assert not d.switched and d.k == 0 and "dwell" in d.reason
    assert control.choose(t, 0, 50.0, 0.7, 120.0, w, cfg).k == 2


def test_a_flapping_load_raises_k_at_most_once_per_dwell():
    cfg = ControllerConfig(window_s=30.0, min_dwell_s=60.0)
    table = _table()
    ctl = KController(table, k=4, alpha=0.7, config=cfg)
    per_cycle = laws.expected_tokens(0.7, 2) - 1.0
    window, requests = [], 0.0
    for t in np.arange(0.0, 900.0, 5.0):  # 1 and 20 req/s in turn, 30 s each
        window.append(Sample(t=float(t), requests=requests, drafts=200.0 * t,
                             accepted=200.0 * t * per_cycle, k=2))  # fmt: skip
        requests += 5.0 * (20.0 if (t // 30) % 2 else 1.0)
        if t >= 10.0:
            ctl.decide(float(t), window[-13:])
    before = [4] + [d.k for d in ctl.history[:-1]]  # the k each decision started from
    switches = [(k, d) for k, d in zip(before, ctl.history, strict=True) if d.switched]
    assert len(switches) >= 4  # it follows the load ...
    last, ks = 0.0, list(table.ks)
    for old, d in switches:
        util = table.utilisation(d.alpha, d.load)
        if util[ks.index(d.k)] >= util[ks.index(old)]:  # ... but raises wait the dwell
            assert d.since - last >= cfg.min_dwell_s
        last = d.since


def test_recent_rate_follows_a_burst_and_ignores_poisson_noise():
    calm = _stream(rate=7.0, alpha=0.7, k=2, seconds=100.0)
    burst = _stream(rate=21.0, alpha=0.7, k=2, start=105.0, seconds=10.0,
                    requests=calm[-1].requests + 35.0)  # fmt: skip
    w = calm + burst
    # 10 s into a 3x burst the 30 s window reads 7 + 14 * 10/30 ~ 11.7 req/s; the split at
    # its first scrape (105 s) is the change point: the 21 req/s since then is read
    assert control.arrival_rate(w, 115.0, 30.0) == pytest.approx(350.0 / 30.0)
    assert control.recent_rate(w, 115.0, 30.0) == pytest.approx(21.0)
    # ... from the first scrape on (one 5 s interval of it: G ~ 70 against z^2 = 16)
    assert control.recent_rate(w[:-1], 110.0, 30.0) == pytest.approx(21.0)
    # a steady stream whose last scrape counts 2.8 Poisson sd high keeps the window's rate
    wobble = [*calm[:-1], replace(calm[-1], requests=calm[-1].requests + 2.0 * np.sqrt(70.0))]
    assert control.recent_rate(wobble, 100.0) == control.arrival_rate(wobble, 100.0, 30.0)
    # and the end of a burst is read as soon as it shows
    after = _stream(rate=1.0, alpha=0.7, k=2, start=120.0, seconds=10.0,
                    requests=burst[-1].requests + 5.0)  # fmt: skip
    assert control.recent_rate(w + after, 130.0) == pytest.approx(1.0)
    # a stream that stops: the rate since it stopped is 0
    stop = _stream(rate=0.0, alpha=0.7, k=2, start=120.0, seconds=10.0,
                   requests=burst[-1].requests)  # fmt: skip
    assert control.recent_rate(w + stop, 130.0) == pytest.approx(0.0)


def test_recent_rate_rarely_reads_a_change_in_a_steady_poisson_stream():
    rng = np.random.default_rng(46)
    counts = np.cumsum(rng.poisson(7.0 * 5.0, size=2000))
    w = [Sample(t=5.0 * i, requests=float(c)) for i, c in enumerate(counts)]
    changed = [
        control.recent_rate(w[i - 6 : i + 1], 5.0 * i)
        != control.arrival_rate(w[i - 6 : i + 1], 5.0 * i)
        for i in range(6, len(w))
    ]
    # max over five splits of a chi-square(1) beyond 16: ~3e-4 if they were independent,
    # 0.1 % measured here (17 % at z = 2)
    assert np.mean(changed) < 0.005


def test_near_ties_for_the_mean_go_to_the_lower_utilisation():
    # at 20 req/s k = 2 is the fastest (6.0 s, utilisation 1 - 1.5/6.0 = 0.75) and k = 0 is
    # 1.7 % slower (6.1 s) at utilisation 1 - 3/6.1 = 0.51: inside the 3 % margin, k = 0
    alphas, loads, ks = np.array([0.5, 0.9]), np.array([0.0, 20.0]), np.array([0, 2, 4])
    lat = np.array([[3.0, 1.5, 1.2], [6.1, 6.0, 9.0]])
    ones = np.ones((2, 2))
    t = KTable(alphas, loads, ks, np.stack([lat, lat]), np.tile([4, 2], (2, 1)), 0 * ones, ones)
    w = _stream(rate=20.0, alpha=0.7, k=4)
    d = control.choose(t, 4, 0.0, 0.7, 120.0, w, ControllerConfig(margin=0.03))
    assert d.switched and d.k == 0 and d.best == 0
    # from k = 2 (the fastest) nothing is gained beyond the margin: it stays
    d = control.choose(t, 2, 0.0, 0.7, 120.0, w, ControllerConfig(margin=0.03))
    assert not d.switched and d.k == 2
    # with no margin there are no near-ties: the fastest is taken
    assert control.choose(t, 4, 0.0, 0.7, 120.0, w, ControllerConfig(margin=0.0)).k == 2


def test_acceptance_reads_a_change_of_prompt_mix_from_its_first_scrape():
    # 1 s scrapes at k = 3, 1,700 cycles a second: acceptance 0.75, then 0.5 for the last
    # second only — the 5 s window's average (~0.71) would hold the old mix for seconds
    before = _stream(rate=21.0, alpha=0.75, k=3, seconds=10.0, step=1.0, cycles_per_s=1700.0)
    last = before[-1]
    after = _stream(rate=21.0, alpha=0.5, k=3, seconds=1.0, step=1.0, cycles_per_s=1700.0,
                    start=last.t, requests=last.requests)  # fmt: skip
    shifted = [replace(s, drafts=s.drafts + last.drafts, accepted=s.accepted + last.accepted)
               for s in after[1:]]  # fmt: skip
    w = before + shifted
    assert control.acceptance(w, now=11.0, seconds=5.0) == pytest.approx(0.5, abs=1e-6)
    # with no evidence demanded beyond any split the whole window is averaged
    whole = control.acceptance(w, now=11.0, seconds=5.0, z=np.inf)
    assert 0.65 < whole < 0.75
    # a change needs min_drafts cycles after it: past one scrape's 1,700 the split moves a
    # scrape back, to the last two seconds (one of each mix)
    two = (laws.expected_tokens(0.75, 3) + laws.expected_tokens(0.5, 3)) / 2.0
    assert control.acceptance(w, now=11.0, seconds=5.0, min_drafts=2000.0) == pytest.approx(
        laws.alpha_from_acceptance_length(two, 3), abs=1e-6
    )


def test_acceptance_rarely_reads_a_change_in_a_steady_stream():
    # i.i.d. acceptance 0.7 at k = 4, 300 cycles per 1 s scrape: the accepted tokens of a
    # cycle are a truncated geometric, less dispersed than Poisson, so z = 4 rarely fires
    rng = np.random.default_rng(46)
    k, alpha, cycles = 4, 0.7, 300
    run_lengths = np.minimum(rng.geometric(1.0 - alpha, size=(400, cycles)) - 1, k)
    accepted = np.concatenate([[0.0], np.cumsum(run_lengths.sum(axis=1))])
    w = [Sample(t=float(i), requests=7.0 * i, drafts=float(cycles * i), accepted=float(a), k=k)
         for i, a in enumerate(accepted)]  # fmt: skip
    est = np.array([control.acceptance(w[i - 5 : i + 1], float(i), 5.0) for i in range(5, 401)])
    whole = np.array(
        [control.acceptance(w[i - 5 : i + 1], float(i), 5.0, z=np.inf) for i in range(5, 401)]
    )
    assert np.mean(est != whole) < 0.01
    assert np.abs(whole - alpha).max() < 0.03


def test_just_after_a_change_of_the_rate_the_choice_is_made_without_the_margin():
    # the near-tie table: at 20 req/s k = 2 (6.0 s) and k = 0 (6.1 s, lower utilisation)
    alphas, loads, ks = np.array([0.5, 0.9]), np.array([0.0, 20.0]), np.array([0, 2, 4])
    lat = np.array([[3.0, 1.5, 1.2], [6.1, 6.0, 9.0]])
    ones = np.ones((2, 2))
    t = KTable(alphas, loads, ks, np.stack([lat, lat]), np.tile([4, 2], (2, 1)), 0 * ones, ones)
    calm = _stream(rate=1.0, alpha=0.7, k=2, seconds=100.0)
    burst = _stream(rate=20.0, alpha=0.7, k=2, start=105.0, seconds=10.0,
                    requests=calm[-1].requests + 5.0)  # fmt: skip
    w = calm + burst
    found = control.rate_change(w, 115.0)
    assert found[0] == pytest.approx(20.0) and found[1] == pytest.approx(105.0)
    assert control.rate_change(calm, 100.0)[1] is None
    # k = 2 was chosen for the calm: within fresh_s (5 s) of the burst the table's choice is
    # taken, k = 0, though k = 2 is within the margin of the fastest
    d = control.choose(t, 2, 0.0, 0.7, 110.0, w[:-1])
    assert d.switched and d.k == 0 and "changed" in d.reason
    # later, or on a steady 20 req/s, the margin keeps k = 2
    assert not control.choose(t, 2, 0.0, 0.7, 115.0, w).switched
    assert not control.choose(t, 2, 0.0, 0.7, 120.0, _stream(rate=20.0, alpha=0.7, k=2)).switched
    assert not control.choose(t, 2, 0.0, 0.7, 110.0, w[:-1], ControllerConfig(fresh_s=0)).switched
    # a raise inside the dwell is still held: from k = 0 at the calm's level nothing moves
    calm_again = _stream(rate=1.0, alpha=0.7, k=0, start=120.0, seconds=5.0,
                         requests=w[-1].requests + 5.0)  # fmt: skip
    d = control.choose(t, 0, 110.0, 0.7, 125.0, w + calm_again)
    assert not d.switched and "dwell" in d.reason
