"""Simulator realism: the simulator against real sweeps (``data/real``) and published facts.

For every point of the real B200 sweeps (``data/real/speculators_qwen3.8-27b_b200_sweeps.csv``:
Qwen3.8-27B on 1 x B200, closed loop N = 1..128, dense / DSpark k = 7 / MTP k = 2, two
datasets) the simulator runs the same closed loop: N streams, the point's mean prompt and output
lengths, the arm's draft length and the per-token acceptance alpha derived from the point's
*measured* acceptance length (``laws.alpha_from_acceptance_length``). It reports the latency
per arm and load, the speedup ``L_dense / L_sd`` per load, and simulated / measured.

A second, public sweep (Qwen3-32B on 2 x H200, TP 2, ~2048 prompt / ~256 output tokens, EAGLE-3
k = 3, constant rate 1..4 req/s) is not in the repository; the facts quoted in issues 31 and 40
(dense p50 3.33 / 3.92 s at 1 / 2 req/s, SD speedup 1.44 at 1 req/s and 1.14 at 4 req/s,
acceptance not reported) are checked at alpha 0.6, 0.65 and 0.75 (acceptance length 2.2-2.7).
Issue 40 asks for the 1 req/s speedup within ±20 % of 1.44 and a fall of at least 15 % by
4 req/s (``benchmarks/sd_load_shape.md`` records why the simulator does not reach it yet).

The paper's cell (Kong et al. measured C1R < 1 everywhere and C2R > 1 except at alpha >= 0.9 for
Qwen3-8B, 1024 x 1024): the Qwen3-8B 1024 x 1024 EAGLE-3 configurations of the ``paper`` design
(``specbayes.sim.datasets.design("paper")``) and their dense sweeps are simulated on both GPUs by
this code (the targeted check, no dataset rebuild), and the same ratios are read from the bundled
``data/paper.parquet``.

Run: ``.venv/bin/python benchmarks/sim_realism.py [--write] [--demo-dir DIR]`` (``--write``
rewrites ``benchmarks/sim_realism.md``; ``--demo-dir``: a ``specbayes demo`` report folder,
default ``specbayes-demo``); ``--paper-cell`` prints only the targeted check (~20 s).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from specbayes import laws
from specbayes.sim import EngineConfig, simulate_point

ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT / "data" / "real" / "speculators_qwen3.8-27b_b200_sweeps.csv"
OUT = ROOT / "benchmarks" / "sim_realism.md"
DRAFTERS = {"dspark": "DSpark-Qwen3.8-27B", "mtp": "MTP-Qwen3.8-27B"}
TOLERANCE = 0.20


def _requests(n: int) -> int:
    return int(max(40, 5 * n))


def simulate_real(engine: EngineConfig | None = None, seed: int = 0) -> pd.DataFrame:
    """One simulated point per real point (closed loop at the real N, lengths and acceptance)."""
    real = pd.read_csv(REAL)
    rows = []
    for _, r in real.iterrows():
        k = int(r.k)
        alpha = None
        if k > 0:
            alpha = float(laws.alpha_from_acceptance_length(r.acceptance_length, k))
        sim = simulate_point(
            "Qwen3.8-27B",
            hardware="B200",
            drafter=DRAFTERS.get(r.drafter),
            prefill=round(r.prefill),
            decode=round(r.decode),
            k=k,
            alpha=alpha,
            concurrency=int(r.concurrency),
            n_requests=_requests(int(r.concurrency)),
            seed=seed,
            engine=engine,
        )
        rows.append(
            {
                "cell": r.cell,
                "arm": r.drafter,
                "k": k,
                "N": int(r.concurrency),
                "alpha": alpha,
                "real_latency": r.latency,
                "sim_latency": sim["latency"],
                "real_al": r.acceptance_length,
                "sim_al": sim["acceptance_length"],
                "saturated": bool(r.saturated),
            }
        )
    df = pd.DataFrame(rows)
    df["latency_ratio"] = df.sim_latency / df.real_latency
    return df


def speedups(df: pd.DataFrame) -> pd.DataFrame:
    """Speedup L_dense / L_sd per (cell, arm, N), real and simulated."""
    dense = df[df.arm == "none"].set_index(["cell", "N"])
    out = []
    for _, r in df[df.arm != "none"].iterrows():
        d = dense.loc[(r.cell, r.N)]
        out.append(
            {
                "cell": r.cell,
                "arm": r.arm,
                "N": r.N,
                "real_speedup": d.real_latency / r.real_latency,
                "sim_speedup": d.sim_latency / r.sim_latency,
                "saturated": r.saturated,
            }
        )
    s = pd.DataFrame(out)
    s["ratio"] = s.sim_speedup / s.real_speedup
    return s


# Issue 40 quotes the measured speedups directly (acceptance not reported): 1.44 at 1 req/s and
# 1.14 at 4 req/s, a fall of a fifth; it asks for an acceptance length in 2.2-2.7, the
# light-load speedup within ±20 % of 1.44 and a fall of at least 15 % from 1 to 4 req/s.
# (Issue 31 gave the same light-load value indirectly: 1.94 / 1.35 = 1.437, 2.36 / 1.65 = 1.430.)
H200_ALPHAS = (0.62, 0.65, 0.7, 0.74)  # acceptance lengths 2.25-2.69 at k = 3
H200_AL_RANGE = (2.2, 2.7)  # the acceptance lengths issue 40 admits (EAGLE-3 on this model)
H200_MEASURED_LIGHT = 1.44
H200_MEASURED_HEAVY = 1.14
H200_MIN_FALL = 0.15


def h200_check(engine: EngineConfig | None = None, seed: int = 0) -> pd.DataFrame:
    """Qwen3-32B, 2 x H200 (TP 2), 2048 x 256, EAGLE-3 k = 3: p50 and speedup, 1-4 req/s."""
    rows = []
    for rps in (1.0, 2.0, 3.0, 4.0):
        common = dict(
            hardware="H200", tp=2, prefill=2048, decode=256, rps=rps, n_requests=400, seed=seed
        )
        d = simulate_point("Qwen3-32B", engine=engine, **common)
        row = {"rps": rps, "dense_p50": d["latency_p50"], "dense_saturated": d["saturated"]}
        for a in H200_ALPHAS:
            s = simulate_point("Qwen3-32B", k=3, alpha=a, engine=engine, **common)
            row[f"sd{a}_p50"] = s["latency_p50"]
            row[f"speedup{a}"] = d["latency_p50"] / s["latency_p50"]
            row[f"al{a}"] = s["acceptance_length"]
        rows.append(row)
    return pd.DataFrame(rows)


def summary(engine: EngineConfig | None = None, seed: int = 0) -> dict:
    """The headline numbers of one engine setting (for the ablation table)."""
    df = simulate_real(engine=engine, seed=seed)
    sp = speedups(df)
    unsat = sp[~sp.saturated]
    dense = df[df.arm == "none"]
    h = h200_check(engine=engine, seed=seed)
    out = {
        "B200 SD speedup sim/real": f"{unsat.ratio.min():.2f}-{unsat.ratio.max():.2f}",
        "B200 dense latency sim/real": f"{dense.latency_ratio.min():.2f}-"
        f"{dense.latency_ratio.max():.2f}",
    }
    for a in H200_ALPHAS:
        s = h[f"speedup{a}"]
        out[f"H200 speedup at 1 req/s, alpha {a}"] = f"{s.iloc[0]:.2f}"
        out[f"H200 fall 1 -> 4 req/s, alpha {a}"] = f"{1 - s.iloc[-1] / s.iloc[0]:.0%}"
    out["H200 dense p50 at 1 / 2 req/s"] = f"{h.dense_p50.iloc[0]:.2f} / {h.dense_p50.iloc[1]:.2f}"
    r = paper_cell_sim(engine=engine, seed=seed)
    for hw, g in r.groupby("hardware"):
        sel = (g.alpha < 0.9) & (g.k >= 2)
        out[f"{hw} C2R > 1 (alpha < 0.9, k >= 2)"] = (
            f"{int((g.c2r[sel] > 1).sum())}/{int(sel.sum())}"
        )
    return out


# Each variant changes one calibrated choice back (engine keyword arguments; "b200_compute":
# the B200's achievable compute fraction, through a temporary copy of models/).
VARIANTS = {
    "this simulator": {},
    "decode tokens at a prefill token's compute (before issue 40)": {"decode_compute_scale": 1.0},
    "speculative step 0.5 ms (before issue 40)": {"spec_step_overhead_s": 5e-4},
    "roofline overlap 0.5 (before)": {"roofline_overlap": 0.5},
    "B200 compute fraction 0.45, decode tokens at prefill cost (before issue 40)": {
        "b200_compute": 0.45,
        "decode_compute_scale": 1.0,
    },
    "draft pass 0.2 ms, no speculative-step overhead (before)": {
        "draft_pass_overhead_s": 2e-4,
        "spec_step_overhead_s": 0.0,
    },
    "no CUDA-graph limit": {"max_cudagraph_capture_size": 1 << 30},
    "A100 attention packs GQA at every query length (before)": {"a100_packed": True},
    "A100 L2 holds every FA2 re-read (64-row tiles only)": {"a100_l2_mib": 1e9},
}


def _variant(spec: dict, seed: int) -> dict:
    """Run :func:`summary` for one variant in a fresh interpreter (the catalog is cached)."""
    env = dict(os.environ)
    spec = dict(spec)
    cf = spec.pop("b200_compute", None)
    packed = spec.pop("a100_packed", False)
    l2 = spec.pop("a100_l2_mib", None)
    a100 = packed or l2 is not None
    with tempfile.TemporaryDirectory() as tmp:
        if cf is not None or a100:
            models = Path(tmp) / "models"
            shutil.copytree(ROOT / "models", models)
        if cf is not None:
            hw = models / "hardware" / "b200.toml"
            text = re.sub(
                r"(?m)^achievable_compute_fraction = .*$",
                f"achievable_compute_fraction = {cf}",
                hw.read_text(),
            )
            hw.write_text(text)
        if a100:
            hw = models / "hardware" / "a100-sxm-80gb.toml"
            text = hw.read_text()
            if packed:
                text = re.sub(r'(?m)^attention = "fa2"$', 'attention = "packed"', text)
            if l2 is not None:
                text = re.sub(r"(?m)^l2_cache_mib = \S+", f"l2_cache_mib = {l2:.0f}", text)
            hw.write_text(text)
        if cf is not None or a100:
            env["SPECBAYES_MODELS"] = str(models)
        out = subprocess.run(
            [sys.executable, __file__, "--summary", json.dumps(spec), "--seed", str(seed)],
            capture_output=True,
            text=True,
            check=True,
            env=env,
        ).stdout
    return json.loads(out.strip().splitlines()[-1])


def ablation(seed: int = 0) -> pd.DataFrame:
    rows = {name: _variant(spec, seed) for name, spec in VARIANTS.items()}
    return pd.DataFrame(rows).T.rename_axis("variant").reset_index()


PAPER = ROOT / "data" / "paper.parquet"
PAPER_CELL = ("Qwen3-8B", 1024, 1024)


def _paper_cell_sweep(args) -> list[dict]:
    from specbayes.sim.datasets import group_config
    from specbayes.sim.sweep import sweep_config

    group, alpha, k, engine, seed = args
    return sweep_config(group_config(group, alpha, k, engine), seed=seed)


def paper_cell_sim(
    engine: EngineConfig | None = None,
    seed: int = 0,
    workers: int | None = None,
    all_cells: bool = False,
) -> pd.DataFrame:
    """C1R, C2R of the paper design's Qwen3-8B 1024 x 1024 EAGLE-3 sweeps, simulated now.

    The same (alpha, k) pairs, seeds and sweeps as ``design("paper", seed)`` builds into
    ``data/paper.parquet`` for that verifier and cell (dense + 22 EAGLE-3 pairs per GPU), so
    with the default engine the ratios equal those of a rebuilt dataset. ``all_cells``: the
    verifier's 16 cells instead of one (the paper's Fig. 3 claim; ~70 s).
    """
    import multiprocessing as mp

    from specbayes.sim.datasets import design
    from specbayes.sim.properties import fit_per_config, sd_ratios

    v, p, g = PAPER_CELL
    groups = [
        x
        for x in design("paper", seed)
        if x.verifier == v and (all_cells or (x.prefill, x.decode) == (p, g)) and x.drafter is None
    ]
    tasks = [(x, a, k, engine, seed) for x in groups for a, k in x.pairs]
    workers = workers or min(2, os.cpu_count() or 1)
    if workers > 1:
        with mp.get_context("fork").Pool(workers) as pool:
            parts = pool.map(_paper_cell_sweep, tasks, chunksize=1)
    else:
        parts = [_paper_cell_sweep(t) for t in tasks]
    df = pd.DataFrame([row for part in parts for row in part])
    r = sd_ratios(fit_per_config(df))
    r = r[r.drafter.astype(str).str.startswith("EAGLE3")]
    cols = ["hardware", "cell", "alpha", "k", "c1r", "c2r"] if all_cells else []
    cols = cols or ["hardware", "alpha", "k", "c1r", "c2r"]
    return r[cols].sort_values(cols[:-2])


def _all_cells_section(r: pd.DataFrame) -> list[str]:
    """Shares of C2R > 1 below and above alpha 0.9, and of C1R < 1, per GPU (16 cells)."""
    rows = []
    for hw, g in r.groupby("hardware"):
        lo, hi = g[g.alpha < 0.9], g[g.alpha >= 0.9]
        rows.append(
            {
                "GPU": hw,
                "configurations": len(g),
                "C2R > 1, alpha < 0.9": f"{(lo.c2r > 1).mean():.0%}",
                "C2R > 1, alpha >= 0.9": f"{(hi.c2r > 1).mean():.0%}",
                "C1R < 1": f"{(g.c1r < 1).mean():.0%}",
            }
        )
    return [_md_table(pd.DataFrame(rows), {})]


def per_sequence_step_cost(hardware: str, k: int, ctx: float = 1536.0) -> float:
    """Marginal step seconds per decoding sequence (verifier + drafter), batch 64 -> 128.

    Qwen3-8B with its EAGLE-3 head at a context of ``ctx`` tokens (the mean context of a
    1024 x 1024 request), decode-only steps, from the simulator's cost model.
    """
    from specbayes.sim.costs import kv_reread_factor, pass_time, unpacked_decode_pairs
    from specbayes.sim.point import make_config

    cfg = make_config("Qwen3-8B", hardware=hardware, k=k, alpha=0.8 if k else None)
    e = cfg.engine
    q = k + 1

    def step(b: int) -> float:
        ctx_all = b * ctx
        f, pairs = 1.0, b * (ctx + 1.0)  # one-token queries: packed, the real pairs
        if q > 1:
            f = kv_reread_factor(cfg.vcost, ctx_all)
            pairs = unpacked_decode_pairs(cfg.vcost, ctx_all, float(b), float(q))
        t = pass_time(cfg.vcost, b * q, b * q, ctx_all * f, 0.0, pairs, 0.0, b, b * q)
        if k:
            fd = kv_reread_factor(cfg.dcost, ctx_all)
            t += pass_time(cfg.dcost, b * q, b, ctx_all * fd, 0.0, b * q * ctx, 0.0, b, b * q)
            t += (k - 1) * pass_time(cfg.dcost, b, b, ctx_all, 0.0, ctx_all, 0.0, b, b)
            t += e.spec_step_overhead_s + e.spec_seq_overhead_s * b
        return t

    return (step(128) - step(64)) / 64


def _cost_arithmetic() -> list[str]:
    """Why C2R stays below 1 on the H100 at high alpha: the per-sequence costs, in numbers."""
    a, k = 0.85, 5
    e = float(laws.expected_tokens(a, k))
    lines = [
        f"Per-sequence step cost (marginal step time per decoding sequence, batch 64 -> 128, "
        f"context 1536, decode-only steps) and what C2R > 1 at alpha {a}, k = {k} "
        f"(E = {e:.2f}) needs (SD's decode part of C2 is g/E times its per-sequence step "
        "cost, dense's g times its own; the common prefill term only pulls C2R towards 1):",
        "",
        "| GPU | dense | EAGLE-3 k = 5 | E x dense (needed) |",
        "|---|---|---|---|",
    ]
    for hw in ("A100-SXM-80GB", "H100-SXM"):
        d, sd = per_sequence_step_cost(hw, 0), per_sequence_step_cost(hw, k)
        lines.append(f"| {hw} | {d * 1e6:.0f} µs | {sd * 1e6:.0f} µs | {e * d * 1e6:.0f} µs |")
    return lines


def paper_cell_verdict(r: pd.DataFrame) -> dict[str, bool]:
    """Per GPU: C2R > 1 at every alpha < 0.9 with k >= 2, and C1R < 1 everywhere."""
    out = {}
    for hw, g in r.groupby("hardware"):
        sel = (g.alpha < 0.9) & (g.k >= 2)
        out[f"{hw} C2R > 1"] = bool((g.c2r[sel] > 1).all())
        out[f"{hw} C1R < 1"] = bool((g.c1r < 1).all())
    return out


def paper_cell_ratios(verifier: str = "Qwen3-8B", cell: str = "1024x1024") -> pd.DataFrame | None:
    """Per-configuration least-squares C1R, C2R of one verifier and cell of ``data/paper.parquet``.

    ``None`` when the file is absent or was built by another simulator version.
    """
    from specbayes.sim.point import SIM_VERSION
    from specbayes.sim.properties import fit_per_config, sd_ratios

    if not PAPER.exists():
        return None
    df = pd.read_parquet(PAPER)
    if set(df["source"]) != {SIM_VERSION}:
        return None
    df = df[(df.verifier == verifier) & (df.cell.astype(str) == cell)]
    r = sd_ratios(fit_per_config(df))
    r = r[r.drafter.astype(str).str.startswith("EAGLE3")]
    return r[["hardware", "alpha", "k", "c1r", "c2r"]].sort_values(["hardware", "alpha", "k"])


def _paper_section(r: pd.DataFrame | None) -> list[str]:
    if r is None:
        return ["(data/paper.parquet absent or from another simulator version: not checked)"]
    lines = []
    for hw, g in r.groupby("hardware"):
        sel = (g.alpha < 0.9) & (g.k >= 2)
        lines += [
            f"**{hw}**: C1R < 1 in {(g.c1r < 1).mean():.0%} of the {len(g)} EAGLE-3 "
            f"configurations; C2R > 1 in {(g.c2r > 1).mean():.0%} overall and in "
            f"{(g.c2r[sel] > 1).mean():.0%} of the {int(sel.sum())} with alpha < 0.9, k >= 2 "
            f"(C2R there {g.c2r[sel].min():.2f}-{g.c2r[sel].max():.2f}).",
            "",
        ]
    wide = r.assign(ratios=[f"{a:.2f} / {b:.2f}" for a, b in zip(r.c1r, r.c2r, strict=True)])
    table = wide.pivot_table(
        index=["alpha", "k"], columns="hardware", values="ratios", aggfunc="first"
    ).reset_index()
    return [*lines, "C1R / C2R per configuration:", "", _md_table(table, {"alpha": ".2f"})]


def _demo_section(folder: Path) -> list[str]:
    """The planned arm's speedup vs load and break-even from a ``specbayes demo`` report."""
    head, curve = folder / "headline.json", folder / "speedup.csv"
    if not (head.exists() and curve.exists()):
        return [f"(no demo report in `{folder}`: run `specbayes demo --out {folder}` first)"]
    h = json.loads(head.read_text())
    d = pd.read_csv(curve)
    lines = [f"Planned arm: {h['arm']}, {h['hardware']}, workload {h['workload']['cell']}.", ""]
    for cfg, g in d.groupby("config"):
        g = g[g["median"] > 0]
        pts = " · ".join(
            f"{r:.0f}: {m:.2f}" for r, m in zip(g.rps.iloc[::4], g["median"].iloc[::4], strict=True)
        )
        lines.append(f"* speedup (median) by req/s, {cfg}: {pts}")
    return [*lines, "", *(f"* {line}" for line in h["lines"])]


def _md_table(df: pd.DataFrame, fmt: dict[str, str]) -> str:
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, r in df.iterrows():
        cells = []
        for c in cols:
            v = r[c]
            f = fmt.get(c)
            cells.append(format(v, f) if f and isinstance(v, (float, np.floating)) else str(v))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def report(seed: int = 0, demo_dir: Path = ROOT / "specbayes-demo") -> tuple[str, dict]:
    t0 = time.perf_counter()
    df = simulate_real(seed=seed)
    sp = speedups(df)
    h = h200_check(seed=seed)
    paper_cell = paper_cell_sim(seed=seed)
    paper_cells = paper_cell_sim(seed=seed, all_cells=True)
    abl = ablation(seed)
    wall = time.perf_counter() - t0
    unsat = sp[~sp.saturated]
    dense = df[df.arm == "none"]
    verdict = {
        "sd_speedup_within": bool((unsat.ratio.sub(1).abs() <= TOLERANCE).all()),
        "sd_worst_ratio": (float(unsat.ratio.min()), float(unsat.ratio.max())),
        "dense_within": bool((dense.latency_ratio.sub(1).abs() <= TOLERANCE).all()),
        "dense_worst_ratio": (float(dense.latency_ratio.min()), float(dense.latency_ratio.max())),
    }
    # issue 40: an SD arm's sim/real latency no more than 10 points below dense's at the same load
    lat = df.set_index(["cell", "N"])
    gaps = [
        r.latency_ratio - lat[lat.arm == "none"].loc[(r.cell, r.N), "latency_ratio"]
        for _, r in df[(df.arm != "none") & ~df.saturated].iterrows()
    ]
    arms = df[~df.saturated].latency_ratio
    verdict["all_within"] = bool((arms.sub(1).abs() <= TOLERANCE).all())
    verdict["all_worst_ratio"] = (float(arms.min()), float(arms.max()))
    verdict["sd_vs_dense_gap"] = float(min(gaps))
    verdict["sd_vs_dense"] = bool(min(gaps) >= -0.10)
    trend = []
    for (cell, arm), g in unsat.groupby(["cell", "arm"]):
        g = g.sort_values("N")
        real_fall = g.real_speedup.iloc[-1] < g.real_speedup.max()
        sim_fall = g.sim_speedup.iloc[-1] < g.sim_speedup.max()
        peak_sim = int(g.N.iloc[int(np.argmax(g.sim_speedup.to_numpy()))])
        peak_real = int(g.N.iloc[int(np.argmax(g.real_speedup.to_numpy()))])
        trend.append(
            {
                "cell": cell,
                "arm": arm,
                "real: peak N → last unsaturated": f"{peak_real} → {int(g.N.iloc[-1])}: "
                f"{g.real_speedup.max():.2f} → {g.real_speedup.iloc[-1]:.2f}",
                "sim: peak N → last unsaturated": f"{peak_sim} → {int(g.N.iloc[-1])}: "
                f"{g.sim_speedup.max():.2f} → {g.sim_speedup.iloc[-1]:.2f}",
                "falls in both": bool(real_fall and sim_fall),
            }
        )
    trend = pd.DataFrame(trend)
    verdict["trend"] = bool(trend["falls in both"].all())
    h200_rows = []
    for a in H200_ALPHAS:
        light = float(h[f"speedup{a}"].iloc[0])
        fall = float(1 - h[f"speedup{a}"].iloc[-1] / light)
        al = float(h[f"al{a}"].iloc[0])
        verdict[f"h200_light_{a}"] = light
        verdict[f"h200_fall_{a}"] = fall
        verdict[f"h200_al_{a}"] = al
        ratio = light / H200_MEASURED_LIGHT
        h200_rows.append(
            {
                "alpha": a,
                "acceptance length": al,
                "sim speedup at 1 req/s": light,
                "sim / measured 1.44": ratio,
                "within ±20%": bool(abs(ratio - 1) <= TOLERANCE),
                "fall 1 -> 4 req/s": f"{fall:.0%}",
                "falls >= 15%": bool(fall >= H200_MIN_FALL),
            }
        )
    h200_table = pd.DataFrame(h200_rows)
    # issue 40's line: at an acceptance length in H200_AL_RANGE (the sweep does not report it),
    # both criteria
    in_range = h200_table["acceptance length"].between(*H200_AL_RANGE)
    both = h200_table["within ±20%"] & h200_table["falls >= 15%"]
    h200_table["both"] = both & in_range
    verdict["h200"] = bool(h200_table["both"].any())
    verdict["h200_met_at"] = [float(a) for a in h200_table.alpha[h200_table["both"]]]
    verdict.update(paper_cell_verdict(paper_cell))
    rev = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    e = EngineConfig()
    lines = [
        "# Simulator realism — simulated vs measured",
        "",
        f"Recorded {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {platform.machine()}, "
        f"code at `{rev}` + working tree, seed {seed}, wall {wall:.0f} s. "
        "Command: `.venv/bin/python benchmarks/sim_realism.py --write"
        + (f" --demo-dir {demo_dir}`." if demo_dir != ROOT / "specbayes-demo" else "`."),
        "",
        "Engine settings (`specbayes.sim.EngineConfig` defaults): "
        f"step overhead {e.step_overhead_s * 1e3:.2f} ms, "
        f"per sequence {e.seq_overhead_s * 1e6:.0f} µs; "
        f"drafter pass {e.draft_pass_overhead_s * 1e3:.2f} ms, per sequence "
        f"{e.draft_seq_overhead_s * 1e6:.0f} µs; "
        f"speculative step {e.spec_step_overhead_s * 1e3:.2f} ms, "
        f"per sequence {e.spec_seq_overhead_s * 1e6:.0f} µs; "
        f"roofline overlap {e.roofline_overlap}; "
        f"eager layer {e.eager_layer_overhead_s * 1e6:.0f} µs; CUDA-graph limit vLLM's rule; "
        f"a decode token's GEMMs at {e.decode_compute_scale:.3g} x a prefill token's compute "
        "(issue 40).",
        "",
        "## 1. Real B200 sweeps (`data/real`), every point",
        "",
        "Qwen3.8-27B on 1 x B200 (stand-in geometry: `models/verifiers/qwen3.8-27b.toml`), closed "
        "loop, each point at its own mean prompt/output length; SD arms at the alpha whose "
        "acceptance length E(alpha, k) equals the measured one. Latency = mean end-to-end (s).",
        "",
        _md_table(
            df[
                [
                    "cell",
                    "arm",
                    "k",
                    "N",
                    "alpha",
                    "real_al",
                    "sim_al",
                    "real_latency",
                    "sim_latency",
                    "latency_ratio",
                    "saturated",
                ]
            ],
            {
                "alpha": ".3f",
                "real_al": ".2f",
                "sim_al": ".2f",
                "real_latency": ".3f",
                "sim_latency": ".3f",
                "latency_ratio": ".2f",
            },
        ),
        "",
        "### Speedup per load (L_dense / L_sd at the same N)",
        "",
        _md_table(sp, {"real_speedup": ".2f", "sim_speedup": ".2f", "ratio": ".2f"}),
        "",
        "### Trend (unsaturated points)",
        "",
        _md_table(trend, {}),
        "",
        "## 2. Qwen3-32B, 2 x H200 (TP 2), 2048 x 256, EAGLE-3 k = 3 (issue 40's judged line)",
        "",
        "Constant-rate points, 400 requests; p50 end-to-end latency (s); "
        "speedup = dense p50 / SD p50. "
        "Measured (issues 31 and 40, not in the repository): dense p50 3.33 s at 1 req/s and "
        f"3.92 s at 2 req/s; SD speedup {H200_MEASURED_LIGHT:.2f} at 1 req/s and "
        f"{H200_MEASURED_HEAVY:.2f} at 4 req/s (acceptance not reported). Judged: at an "
        "acceptance length in 2.2-2.7, the 1 req/s speedup within ±20 % of "
        f"{H200_MEASURED_LIGHT:.2f} ({0.8 * H200_MEASURED_LIGHT:.2f}-"
        f"{1.2 * H200_MEASURED_LIGHT:.2f}) and a fall of at least {H200_MIN_FALL:.0%} from 1 "
        "to 4 req/s; the alphas below span that acceptance range at k = 3.",
        "",
        _md_table(h, {c: ".3f" for c in h.columns if c != "rps"} | {"rps": ".1f"}),
        "",
        _md_table(
            h200_table,
            {
                "acceptance length": ".2f",
                "sim speedup at 1 req/s": ".2f",
                "sim / measured 1.44": ".2f",
            },
        ),
        "",
        "## 3. The paper's cell: Qwen3-8B, 1024 x 1024, EAGLE-3",
        "",
        "Per-configuration least-squares fits of L = C1/(1 - lambda C2) "
        "(`specbayes.sim.properties`), SD over dense of the same hardware and cell. The paper "
        "measured C1R < 1 everywhere and C2R > 1 except at alpha >= 0.9.",
        "",
        "### 3a. Simulated by this code (targeted check: the paper design's 22 EAGLE-3 pairs "
        "and the dense sweep of this cell per GPU; `--paper-cell`)",
        "",
        *_paper_section(paper_cell),
        "",
        *_cost_arithmetic(),
        "",
        "On the A100 (FlashAttention 2, `specbayes.sim.costs.kv_reread_factor`) the verification "
        "reads each KV head once per query head past the L2 cache and computes 64-row query "
        "tiles, so SD's per-sequence cost exceeds E x dense up to alpha ~0.85. On the H100 "
        "FlashAttention 3 packs the GQA group at every query length (`hopper/flash_api.cpp` "
        "`get_pack_gqa`: always for paged KV without TMA and for varlen), so the k + 1 queries "
        "share one read of the context's KV, which dominates dense decoding at this context; "
        "C2R > 1 at alpha 0.85, k = 5 would need the H100's per-sequence step cost at the "
        "table's last column — no such cost was found in vLLM V1's verification, sampling or "
        "EAGLE proposer.",
        "",
        "Where the paper measured: Kong et al. (2026, §3) ran every SD sweep on A100 SXM "
        "(one GPU up to 32B; 4 and 8 for Llama-3.1-70B and Qwen3-235B-A22B) with vLLM 0.13.0 "
        "and used the H100 only to cross-check dense Qwen3. The C2R finding for this cell is an "
        "A100 measurement, which the A100 arm above reproduces; the H100 arm is a prediction "
        "the paper did not test.",
        "",
        "### 3b. Qwen3-8B over all 16 cells, simulated by this code",
        "",
        "The paper's Fig. 3 claim (C2R > 1 in most configurations, < 1 only in the very-high-"
        "alpha corner), on the same design's EAGLE-3 sweeps of every cell "
        "(`paper_cell_sim(all_cells=True)`):",
        "",
        *_all_cells_section(paper_cells),
        "",
        "### 3c. Read from the bundled `data/paper.parquet`",
        "",
        "(built by the simulator named in `data/README.md`; it equals 3a only after a rebuild)",
        "",
        *_paper_section(paper_cell_ratios()),
        "",
        "## 4. The demo (`specbayes demo`, what `make demo` runs)",
        "",
        f"From the report in `{demo_dir}` (`.venv/bin/specbayes demo --out {demo_dir}`; the "
        "sd fit of `data/demo.parquet`, posterior medians):",
        "",
        *_demo_section(demo_dir),
        "",
        "## 5. Ablation: each calibrated choice undone alone",
        "",
        _md_table(abl, {}),
        "",
        "## Verdict",
        "",
        f"* SD speedup within ±{TOLERANCE:.0%} at every unsaturated real point: "
        f"**{verdict['sd_speedup_within']}** (sim/real from {verdict['sd_worst_ratio'][0]:.2f} "
        f"to {verdict['sd_worst_ratio'][1]:.2f}).",
        f"* Trend (speedup falls with load) in every real SD arm, real and simulated: "
        f"**{verdict['trend']}**.",
        f"* Dense latency within ±{TOLERANCE:.0%} at every real point: "
        f"**{verdict['dense_within']}** (sim/real from {verdict['dense_worst_ratio'][0]:.2f} "
        f"to {verdict['dense_worst_ratio'][1]:.2f}).",
        "* H200 sweep: simulated light-load (1 req/s) speedup "
        + " / ".join(f"{verdict[f'h200_light_{a}']:.2f}" for a in H200_ALPHAS)
        + f" (alpha {', '.join(map(str, H200_ALPHAS))}) against the measured "
        f"{H200_MEASURED_LIGHT:.2f}; fall from 1 to 4 req/s "
        + " / ".join(f"{verdict[f'h200_fall_{a}']:.0%}" for a in H200_ALPHAS)
        + f" (measured {1 - H200_MEASURED_HEAVY / H200_MEASURED_LIGHT:.0%}); both criteria at "
        f"an acceptance length in {H200_AL_RANGE[0]}-{H200_AL_RANGE[1]}: **{verdict['h200']}**"
        + (
            " (at alpha "
            + ", ".join(
                f"{a} (acceptance length {verdict[f'h200_al_{a}']:.2f})"
                for a in verdict["h200_met_at"]
            )
            + " only)."
            if verdict["h200"]
            else "."
        ),
        f"* Latency within ±{TOLERANCE:.0%} at every unsaturated point of every arm: "
        f"**{verdict['all_within']}** (sim/real from {verdict['all_worst_ratio'][0]:.2f} to "
        f"{verdict['all_worst_ratio'][1]:.2f}).",
        f"* Every unsaturated SD point's latency ratio at most 10 points below the dense arm's "
        f"at the same load: **{verdict['sd_vs_dense']}** (worst gap "
        f"{verdict['sd_vs_dense_gap']:+.2f}).",
        *(
            f"* Paper cell (3a), {key}"
            + (" at every alpha < 0.9 with k >= 2" if "C2R" in key else " in every configuration")
            + f": **{val}**."
            for key, val in verdict.items()
            if key.endswith(("C2R > 1", "C1R < 1"))
        ),
        "",
    ]
    return "\n".join(lines), verdict


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="rewrite benchmarks/sim_realism.md")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--demo-dir", type=Path, default=ROOT / "specbayes-demo")
    ap.add_argument("--summary", help=argparse.SUPPRESS)  # JSON engine kwargs: one summary line
    ap.add_argument(
        "--paper-cell",
        action="store_true",
        help="print only the targeted check of the paper's cell (Qwen3-8B 1024x1024 EAGLE-3)",
    )
    args = ap.parse_args(argv)
    if args.paper_cell:
        cell = paper_cell_sim(seed=args.seed)
        print("\n".join(_paper_section(cell)))
        for key, val in paper_cell_verdict(cell).items():
            print(f"{key}: {val}")
        return 0
    if args.summary is not None:
        print(json.dumps(summary(EngineConfig(**json.loads(args.summary)), args.seed)))
        return 0
    text, _ = report(args.seed, args.demo_dir)
    print(text)
    if args.write:
        OUT.write_text(text)
        print(f"wrote {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
