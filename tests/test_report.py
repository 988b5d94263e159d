"""Figures render under Agg and say what their titles say; the report is complete."""

from __future__ import annotations

import json
import re

import matplotlib.image as mpimg
import numpy as np
import pandas as pd
import pytest
from conftest import DrawsFit, law_rows
from matplotlib.colors import to_rgba

from specbayes import plan, plots, report

ARM_KW = dict(
    verifier="V8", hardware="A100", prefill=1024, decode=1024, drafter="eagle3", alpha=0.75, k=6
)


@pytest.fixture
def fit_with_data() -> DrawsFit:
    fit = DrawsFit()
    fit.data = law_rows(fit)
    fit.model_name = "stub"
    fit.excluded = pd.DataFrame({"reason": ["latency_growth", "preempted"]})
    return fit


def test_collapse_points_lie_on_the_law_for_law_data(fit_with_data):
    pts = report.collapse_points(fit_with_data)
    # data generated at the true coefficients; posterior means differ only by draw noise
    np.testing.assert_allclose(pts.y, 1.0 / (1.0 - pts.x), rtol=0.08)
    fig = plots.plot_collapse(pts)
    assert "collapse" in fig.axes[0].get_title().lower()


def test_each_figure_titles_and_axes(fit_with_data):
    arm = report.default_arm(fit_with_data)
    assert (arm.k, arm.alpha) in {(2, 0.6), (2, 0.8), (6, 0.6), (6, 0.8)}  # a measured sweep
    sp = {"k=2": plan.speedup(fit_with_data, arm, np.linspace(0, 10, 6))}
    fig = plots.plot_speedup(sp)
    assert "speedup" in fig.axes[0].get_ylabel().lower()
    ktab = plan.optimal_k(fit_with_data, arm, [0.6, 0.8], [1.0, 8.0])
    fig = plots.plot_k_map(ktab)
    assert "draft length" in fig.axes[0].get_title().lower()
    fig = plots.plot_cost_ratios(plan.cost_ratios(fit_with_data, arm))
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert any("C_{1R}" in t for t in labels) and any("red flag" in t for t in labels)


def test_write_report_writes_everything(fit_with_data, tmp_path):
    head = report.write_report(fit_with_data, tmp_path)
    for name in ("collapse.png", "speedup_vs_rps.png", "k_map.png", "cost_ratios.png",
                 "capacity_vs_slo.png"):  # fmt: skip
        img = mpimg.imread(tmp_path / name)
        assert img.shape[0] > 200 and img.std() > 0.01  # a real picture, not blank
    assert not (tmp_path / "speedup_vs_concurrency.png").exists()  # open loop: in req/s
    summary = (tmp_path / "summary.md").read_text()
    assert "the highest request rate whose mean latency meets an SLO" in summary
    assert "Headline answers" in summary and "2 measured points were left out" in summary
    assert len(head.lines) == 3 and "Break-even" in head.lines[0]
    data = json.loads((tmp_path / "headline.json").read_text())
    assert data["break_even"]["rps_star_median"] == pytest.approx(head.break_even.rps_star_median)
    assert (tmp_path / "k_table.csv").exists() and (tmp_path / "capacity.csv").exists()
    # the headline's best k at the lightest and the heaviest load are the k-table's
    ktab = pd.read_csv(tmp_path / "k_table.csv")
    ktab = ktab[np.isclose(ktab.alpha, head.arm.alpha)]
    best = ktab.set_index("rps")["k_bayes"]
    assert (head.k_low, head.k_high) == (best.loc[ktab.rps.min()], best.loc[ktab.rps.max()])
    assert head.k_low != head.k_high  # C2R > 1 on these draws: the best k falls with load
    assert f"k = {head.k_high} at {head.rps_high:.2g} req/s" in head.lines[1]


def _as_closed_loop(fit):
    """The same points, read as a closed-loop sweep (Little's law: N = rps x latency)."""
    data = fit.data
    fit.data = data.assign(concurrency=np.maximum(data.rps * data.latency, 1.0))
    return fit


def test_report_of_a_closed_loop_fit_answers_in_streams(fit_with_data, tmp_path):
    _as_closed_loop(fit_with_data)
    head = report.write_report(fit_with_data, tmp_path, arm=plan.Arm(**ARM_KW))
    assert head.lines[0].startswith("Break-even concurrency (closed loop")
    summary = (tmp_path / "summary.md").read_text()
    assert "## Closed loop: speedup per stream count" in summary and "| streams N |" in summary
    # the figures are in streams: the open-loop speedup figure is not written
    assert not (tmp_path / "speedup_vs_rps.png").exists()
    for name in ("speedup_vs_concurrency.png", "capacity_vs_slo.png"):
        assert mpimg.imread(tmp_path / name).std() > 0.01 and f"![{name}]({name})" in summary
    assert "break-even concurrency N*" in summary and "the most streams" in summary
    assert "capacity_streams" in pd.read_csv(tmp_path / "capacity.csv")
    assert "concurrency" in pd.read_csv(tmp_path / "speedup.csv")
    table = pd.read_csv(tmp_path / "speedup_concurrency.csv")
    assert table.concurrency.iloc[0] == 1 and (np.diff(table.concurrency) > 0).all()
    doc = _strict((tmp_path / "headline.json").read_text())
    n_star = plan.break_even(fit_with_data, plan.Arm(**ARM_KW), closed_loop=True)
    assert doc["break_even_concurrency"]["n_star_median"] == pytest.approx(
        n_star.n_star_median.item()
    )


def _strict(text: str):
    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_report_json_is_strict_and_excluded_points_are_grouped(fit_with_data, tmp_path):
    fit_with_data.excluded = pd.DataFrame(
        {
            "verifier": ["V8"] * 5,
            "cell": ["1024x1024"] * 5,
            "rps": [9.0, 9.5, 10.0, 10.5, 11.0],
            "rule": ["flagged", "flagged", "flagged", "preempted", "flagged+preempted"],
            "reason": ["saturated: throughput mode (all requests at once)"] * 3
            + ["preempted", "saturated; 463 preemptions; " + "preempted " * 20],
        }
    )
    report.write_report(fit_with_data, tmp_path)
    doc = _strict((tmp_path / "headline.json").read_text())
    assert "null_means" in doc and doc["workload"]["cell"] == "1024x1024"
    summary = (tmp_path / "summary.md").read_text()
    assert "| rule | rows | example point | reason |" in summary
    assert (
        "| flagged | 3 | V8, 1024x1024 at 9 req/s | saturated: throughput mode (all requests "
        "at once) |" in summary
    )
    long_reason = next(ln for ln in summary.splitlines() if ln.startswith("| flagged + pre"))
    assert long_reason.endswith("preempted … |")  # cut at a word, and marked
    # a browser-rendered view shows the figures inline, each with its caption
    for name in ("collapse.png", "k_map.png", "cost_ratios.png"):
        assert f"![{name}]({name})" in summary and (tmp_path / name).exists()
    ratio_rows = [ln for ln in summary.split("## Cost ratios")[1].splitlines() if ln[:3] == "| 1"]
    mean, interval = r"\d+\.\d{3}", r"\d+\.\d{3}–\d+\.\d{3}"  # one format for every ratio
    cells = [c.strip() for c in ratio_rows[0].split("|")[2:6]]
    assert all(re.fullmatch(f, c) for f, c in zip((mean, interval) * 2, cells, strict=True))
    assert "load_fit(path).excluded" in summary and "excluded_data" in summary
    assert max(len(line) for line in summary.splitlines() if not line.startswith("|")) < 400


def test_failed_report_leaves_nothing_behind(fit_with_data, tmp_path):
    out = tmp_path / "report"
    with pytest.raises(ValueError, match="zero-load latency"):
        report.write_report(fit_with_data, out, slo=1e-4)
    assert list(tmp_path.iterdir()) == []


def test_speedup_band_stops_where_it_is_undefined():
    t = pd.DataFrame(
        dict(
            rps=[0.0, 1.0, 2.0, 3.0],
            median=[2.0, 1.8, 1.5, np.inf],
            lo=[1.9, 1.6, 1.2, 1.0],
            hi=[2.1, 2.0, np.inf, np.inf],
        )
    )
    fig = plots.plot_speedup({"k=2": t})
    ax = fig.axes[0]
    line = ax.get_lines()[0]
    assert list(line.get_xdata()) == [0.0, 1.0]  # not into the undefined band
    assert any(ln.get_linestyle() == ":" for ln in ax.get_lines())  # saturation marked


def test_report_with_inferred_alpha_reads_the_k_table_at_its_posterior_median(tmp_path):
    class Inferred(DrawsFit):
        def alpha_draws(self, verifier, drafter, cell):
            return np.random.default_rng(1).beta(40, 12, self.n)

    fit = Inferred()
    fit.data = law_rows(fit, alphas=(0.77,)).assign(alpha=lambda d: d.alpha.where(d.k == 0, np.nan))
    head = report.write_report(fit, tmp_path)
    assert head.arm.alpha is None  # the plan itself uses the alpha draws
    median = round(float(np.median(fit.alpha_draws("V8", "eagle3", "1024x1024"))), 3)
    assert f"(alpha = {median:g}, the posterior median of the inferred alpha)" in head.lines[1]
    assert np.isclose(pd.read_csv(tmp_path / "k_table.csv").alpha, median).any()


def _report_figures(fit, tmp_path, monkeypatch, **kwargs):
    """The figures ``write_report`` draws, by file name, kept open for inspection."""
    import matplotlib.pyplot as plt

    drawn = {}

    def keeper(plot, file):
        def keep(*args, **kwargs):
            drawn[file] = plot(*args, **kwargs)
            return drawn[file]

        return keep

    for name, file in (
        ("plot_collapse", "collapse"),
        ("plot_speedup", "speedup"),
        ("plot_k_map", "k_map"),
        ("plot_cost_ratios", "cost_ratios"),
        ("plot_capacity", "capacity"),
    ):
        monkeypatch.setattr(plots, name, keeper(getattr(plots, name), file))
    close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig=None: None)
    head = report.write_report(fit, tmp_path, **kwargs)
    yield head, drawn
    for fig in drawn.values():
        close(fig)


@pytest.fixture
def report_figures(fit_with_data, tmp_path, monkeypatch):
    yield from _report_figures(fit_with_data, tmp_path, monkeypatch)


@pytest.fixture
def closed_loop_figures(fit_with_data, tmp_path, monkeypatch):
    fit = _as_closed_loop(fit_with_data)
    yield from _report_figures(fit, tmp_path, monkeypatch, arm=plan.Arm(**ARM_KW))


def _lines(ax) -> dict[str, tuple]:
    return {ln.get_label(): to_rgba(ln.get_color()) for ln in ax.get_lines()}


def test_every_figure_names_its_configuration(report_figures):
    head, drawn = report_figures
    arm = head.arm
    config = ["V8", "eagle3", "A100", "1024x1024"]
    for name in ("speedup", "capacity", "cost_ratios", "k_map"):
        title = drawn[name].axes[0].get_title()
        assert all(part in title for part in config), (name, title)
        if name != "k_map":  # the k map spans every alpha: it marks the arm's instead
            assert f"alpha={arm.alpha:g}" in title, (name, title)
    collapse = drawn["collapse"].axes[0]
    assert "V8" in collapse.get_title() and "A100" in collapse.get_title()
    assert r"$\mu$: the fitted mean latency" in collapse.get_xlabel()  # mu is defined


def test_speedup_and_capacity_draw_the_planned_and_recommended_k_and_break_even(report_figures):
    head, drawn = report_figures
    k, be = head.arm.k, head.break_even
    assert head.k_low != head.k_high and head.k_low > 0
    for name in ("speedup", "capacity"):
        lines = _lines(drawn[name].axes[0])
        planned = next(label for label in lines if label.startswith(f"k={k} (planned"))
        assert lines[planned] == to_rgba(plots.k_color(k))  # the k's own colour
        for rec, rps in ((head.k_low, head.rps_low), (head.k_high, head.rps_high)):
            name_k = "dense" if rec == 0 else f"k={rec}"
            assert any(
                label.startswith(name_k) and f"best at {rps:.2g}" in label for label in lines
            ), (name, rec, list(lines))
        crossing = next(label for label in lines if label.startswith("break-even"))
        assert f"{be.rps_star_median:.3g} req/s" in crossing
        assert f"{be.rps_star_lo:.3g}–{be.rps_star_hi:.3g}" in crossing  # with its interval
    legend = [t.get_text() for t in drawn["speedup"].axes[0].get_legend().get_texts()]
    assert any("90% interval of posterior draws" in t for t in legend)  # bands explained
    assert any(t.startswith("headline SLO") for t in _lines(drawn["capacity"].axes[0]))


def test_one_colour_per_k_across_figures(report_figures):
    _, drawn = report_figures
    seen: dict[int, set] = {}
    for name in ("speedup", "capacity", "cost_ratios"):
        for label, color in _lines(drawn[name].axes[0]).items():
            m = re.match(r"(?:k=(\d+)|dense)\b", label)
            if m:
                seen.setdefault(int(m.group(1) or 0), set()).add(color)
    assert seen and all(colors == {to_rgba(plots.k_color(k))} for k, colors in seen.items())
    assert len({to_rgba(plots.k_color(k)) for k in range(0, 11)}) == 11  # dense its own
    # the k map's cells and the collapse plot's dense points use the same mapping
    k_map = drawn["k_map"].axes[0]
    cmap = k_map.collections[0].get_cmap()
    ks = [0, *range(1, 11)]
    assert [to_rgba(cmap(i + 1)) for i in range(len(ks))] == [to_rgba(plots.k_color(k)) for k in ks]
    collapse = drawn["collapse"].axes[0].collections
    colors = {tuple(c.get_facecolor()[0][:3]) for c in collapse if len(c.get_offsets())}
    assert {to_rgba(plots.k_color(k))[:3] for k in (0, 2, 6)} <= colors


def test_k_map_marks_the_planned_alpha_and_uncertain_cells():
    import matplotlib.pyplot as plt

    fit = DrawsFit(spread=0.3)  # wide draws: near a switch of best k, the choice is uncertain
    arm = plan.Arm("V8", "A100", 1024, 1024, drafter="eagle3", alpha=0.7, k=4)
    ktab = plan.optimal_k(fit, arm, [0.6, 0.7, 0.8], np.linspace(0.5, 10, 8), ks=range(0, 9))
    fig = plots.plot_k_map(ktab, planned=(0.7, 4), title="V8 + eagle3 on A100")
    ax = fig.axes[0]
    assert any(ln.get_label() == "planned arm: alpha=0.7, k=4" for ln in ax.get_lines())
    p_best = [row[f"p_best_k{int(row.k_bayes)}"] for _, row in ktab.iterrows()]
    unsure = sum(p < 0.5 for p in p_best)
    assert unsure > 0  # the fixture must exercise the mark
    dots = next(c for c in ax.collections if "uncertain" in str(c.get_label()))
    assert len(dots.get_offsets()) == unsure and f": {unsure} cells" in dots.get_label()
    plt.close(fig)


def test_closed_loop_figures_are_in_streams_with_n_star_and_the_measured_range(
    closed_loop_figures,
):
    head, drawn = closed_loop_figures
    n, k = head.n_star, head.arm.k
    assert np.isfinite(n.n_star_median)  # the fixture must exercise the mark
    speedup, capacity = drawn["speedup"].axes[0], drawn["capacity"].axes[0]
    assert speedup.get_xscale() == "log" and "streams N" in speedup.get_xlabel()
    assert "streams" in capacity.get_ylabel() and "concurrency" in speedup.get_title()
    for ax in (speedup, capacity):
        title = ax.get_title()
        assert all(part in title for part in ("V8", "eagle3", "A100", "alpha=0.75")), title
        lines = _lines(ax)
        planned = next(label for label in lines if label.startswith(f"k={k} (planned"))
        assert lines[planned] == to_rgba(plots.k_color(k)) and "req/s" not in planned
        crossing = next(label for label in lines if label.startswith("break-even"))
        assert f"N* = {n.n_star_median:.0f} streams" in crossing
        assert f"{n.n_star_lo:.0f}–{n.n_star_hi:.0f}" in crossing
        assert len(ax.collections) >= len({lbl for lbl in lines if lbl.startswith("k=")})  # bands
    beyond = [p.get_label() for p in speedup.patches if "extrapolated" in p.get_label()]
    assert beyond and beyond[0].startswith("beyond the highest measured")  # hatched
    legend = [t.get_text() for t in speedup.get_legend().get_texts()]
    assert any("90% interval of posterior draws" in t for t in legend)


def test_closed_loop_k_map_and_best_k_are_in_streams(closed_loop_figures, fit_with_data, tmp_path):
    head, drawn = closed_loop_figures
    k_map = drawn["k_map"].axes[0]
    assert k_map.get_xscale() == "log" and "streams N" in k_map.get_xlabel()
    # the k-table is over stream counts and holds the lightest and heaviest measured in both
    ktab = pd.read_csv(tmp_path / "k_table.csv")
    assert "concurrency" in ktab and "rps" not in ktab
    low, high = plan.measured_stream_range(fit_with_data, head.arm)
    assert 1 <= low < high and (head.streams_low, head.streams_high) == (low, high)
    assert np.isnan(head.rps_low) and np.isnan(head.rps_high)
    best = ktab[np.isclose(ktab.alpha, head.arm.alpha)].set_index("concurrency")["k_bayes"]
    assert (head.k_low, head.k_high) == (best.loc[low], best.loc[high])
    assert head.k_low > head.k_high  # C2R > 1 on these draws: the best k falls with N
    line = next(ln for ln in head.lines if ln.startswith("Best draft length"))
    assert "req/s" not in line and f"k = {head.k_low} at {low:g} stream" in line
    assert f"k = {head.k_high} at {report._streams(high)} streams" in line
    cap_line = next(ln for ln in head.lines if ln.startswith("Capacity"))
    assert "streams per server" in cap_line and "capacity_streams" in head.capacity
    # the cells past the highest measured stream count are hatched, whole cells: from the
    # edge between the last measured one and the first beyond
    hatch = [p for p in k_map.patches if "extrapolated" in p.get_label()]
    assert len(hatch) == 1 and hatch[0].get_label() == (
        f"beyond the highest measured {report._streams(high)} streams: extrapolated"
    )  # as people write a count (here N = rps x latency is fractional: 83.2, not 83.1612)
    grid = np.sort(ktab.concurrency.unique())
    assert grid[-1] > high  # the grid runs past the data
    assert high < hatch[0].get_x() < grid[grid > high][0]
    # the speedup figure names the recommended k, best at a stream count
    labels = list(_lines(drawn["speedup"].axes[0]))
    assert any(f"best at {report._streams(high)} streams" in lb for lb in labels), labels
    summary = (tmp_path / "summary.md").read_text()
    assert "loads in streams in flight" in summary
    assert "(acceptance rate, number of streams" in summary  # the k-map's closed caption
    doc = _strict((tmp_path / "headline.json").read_text())
    assert (doc["k_low"], doc["k_high"]) == (head.k_low, head.k_high)
    assert (doc["k_low_streams"], doc["k_high_streams"]) == (low, high)
    assert doc["capacity"][0]["capacity_streams"] == head.capacity.capacity_streams.iloc[0]


def test_arm_note_counts_streams_for_a_closed_loop_fit(fit_with_data):
    from specbayes.arms import arm_notes

    arm = plan.Arm(**ARM_KW)
    (open_note,) = arm_notes(fit_with_data, arm)
    assert "rows up to" in open_note and "req/s" in open_note  # open loop: as before
    _as_closed_loop(fit_with_data)
    (note,) = arm_notes(fit_with_data, arm)
    top = plan.measured_max_rps(fit_with_data, arm, [arm.k], load="concurrency")[0]
    assert f"rows up to {top:g} streams" in note and "req/s" not in note


def test_break_even_sentences_follow_the_crossing_direction():
    """Where most crossing draws have SD slower below the crossing (a MoE verifier's dense
    arm reads more experts as its batch grows), the headline says SD *starts* paying there,
    with that direction's probability — not 'stops paying'."""
    from specbayes.report import _break_even_text, n_star_line

    arm = plan.Arm("V", "G", 256, 256, "D", alpha=0.8, k=3)
    row = dict(p_always_wins=0.1, p_never_wins=0.0, p_wins_then_loses=0.2, p_loses_then_wins=0.7)
    gains = pd.Series(dict(row, rps_star_median=2.0, rps_star_lo=1.0, rps_star_hi=3.0))
    text = _break_even_text(arm, gains)
    assert "starts paying at 2.00 req/s" in text and "P(loses then wins) = 0.70" in text
    loses = gains.copy()
    loses[["p_wins_then_loses", "p_loses_then_wins"]] = [0.7, 0.2]
    assert "stops paying at 2.00 req/s" in _break_even_text(arm, loses)
    closed = pd.DataFrame([dict(row, n_star_median=12.0, n_star_lo=8.0, n_star_hi=20.0)])
    assert "SD wins beyond N* = 12 streams" in n_star_line(closed)
    assert "P(loses, then wins) 0.70)" in n_star_line(closed)
    closed[["p_wins_then_loses", "p_loses_then_wins"]] = [0.7, 0.2]
    assert "SD loses beyond N* = 12 streams" in n_star_line(closed)
