"""Beyond the measured loads: fit the lower half of each SD pair's loads, predict the upper half.

Issue 43. A *pair* is a dense arm and an SD arm of one workload measured at the same loads:
every SD arm of ``data/real`` (closed loop, 1–128 streams) and a set of simulated pairs
(:data:`SIM_PAIRS`: several verifiers, GPUs, k and alpha, open and closed loop, one whose
drafter is poor enough that SD loses inside the range). The default ``sd`` fit of the pair's
lower half of loads predicts the upper half; per held-out load it is scored on

* whether the 90 % and 50 % predictive intervals of each arm's latency hold the observed one;
* whether those of the speedup (dense latency / SD latency, both predictive, one posterior
  draw each) hold the observed speedup;
* whether P(SD faster) (from the expected latencies, as the planner reports it) lies on the
  observed side of 0.5 — counted where the observed speedup is below 0.9 or above 1.1.

Rows that validation leaves out of a fit (saturated, latency growth) are not scored and are
listed. Sweeps of your own — GuideLLM or ``vllm bench serve`` results turned into a sweep
table by ``specbayes ingest FILES --out table.csv`` — are scored the same way with
``--table`` (pairs: each SD arm with the dense arm of its cell, or the one dense arm of its
verifier and GPU; the speedup where both arms ran the same load, each arm's latency
wherever it ran). ::

    .venv/bin/python benchmarks/load_extrapolation.py --write
    .venv/bin/python benchmarks/load_extrapolation.py --cases real --fit-all   # inside the data
    .venv/bin/python benchmarks/load_extrapolation.py --cases none --table table.csv

``--fit-all`` fits every load and scores the same upper half (coverage inside the data).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from specbayes import sim
from specbayes.data import cell_label, read_sweeps, validate_sweeps
from specbayes.fit import fit
from specbayes.report import markdown_table

REPO = Path(__file__).resolve().parents[1]
OUT = Path(__file__).with_name("load_extrapolation.md")
REAL = REPO / "data/real/speculators_qwen3.8-27b_b200_sweeps.csv"


@dataclass(frozen=True)
class SimPair:
    """A simulated pair: one workload, dense and SD arms at the same loads."""

    name: str
    verifier: str
    drafter: str
    hardware: str
    prefill: int
    decode: int
    alpha: float
    k: int
    loop: str  # "open" or "closed"
    tp: int = 1


#: Simulated pairs: verifiers of three sizes, both GPUs of the paper set, EAGLE-3 heads and a
#: vanilla draft model, k 2–6, alpha 0.4–0.85, open and closed loop. ``q8-h100-poor`` has the
#: drafter of the closed-loop break-even test (SD loses from about 6 streams on).
SIM_PAIRS = (
    SimPair("q8-h100-closed", "Qwen3-8B", "EAGLE3-Qwen3-8B", "H100-SXM", 512, 256, 0.7, 3,
            "closed"),
    SimPair("q8-h100-poor", "Qwen3-8B", "EAGLE3-Qwen3-8B", "H100-SXM", 512, 512, 0.4, 4,
            "closed"),
    SimPair("l8-a100-open", "Llama-3.1-8B", "EAGLE3-Llama-3.1-8B", "A100-SXM-80GB", 1024, 256,
            0.8, 5, "open"),
    SimPair("q32-h100-open", "Qwen3-32B", "EAGLE3-Qwen3-32B", "H100-SXM", 256, 1024, 0.6, 2,
            "open", tp=2),
    SimPair("q14v-a100-closed", "Qwen3-14B", "Qwen3-1.7B", "A100-SXM-80GB", 512, 512, 0.75, 4,
            "closed"),
    SimPair("l8-h100-open", "Llama-3.1-8B", "EAGLE3-Llama-3.1-8B", "H100-SXM", 768, 768, 0.55,
            6, "open"),
    SimPair("q14-h100-closed", "Qwen3-14B", "EAGLE3-Qwen3-14B", "H100-SXM", 1024, 512, 0.85, 6,
            "closed"),
    SimPair("q8-a100-open", "Qwen3-8B", "EAGLE3-Qwen3-8B", "A100-SXM-80GB", 256, 768, 0.5, 3,
            "open"),
)  # fmt: skip

STREAMS = (1, 2, 4, 8, 16, 32, 64, 128)
N_RATES = 8


# -- the pairs ---------------------------------------------------------------------------------
def table_pairs(path: Path, prefix: str) -> dict[str, pd.DataFrame]:
    """Every SD arm of a sweep table with the dense arm of its workload.

    An SD arm (verifier, hardware, cell, drafter, k) pairs with the dense arm of its cell,
    or — where its cell has none, as when real prompts give each run its own mean lengths —
    with the one dense arm of its (verifier, hardware). Arms left without a partner are
    listed on stderr. Any table :func:`specbayes.data.read_sweeps` reads: ``data/real``'s, or
    what ``specbayes ingest FILES --out table.csv`` writes from GuideLLM / ``vllm bench serve``
    results.
    """
    rows = read_sweeps(path)
    # the labels validation gives unlabelled rows (specbayes.data): "<prefill>x<decode>",
    # "none" for dense rows and "unspecified" for an unnamed drafter
    given = rows["cell"] if "cell" in rows else pd.Series(np.nan, index=rows.index)
    rows["cell"] = given.where(given.notna(), cell_label(rows.prefill, rows.decode).to_numpy())
    given = rows["drafter"] if "drafter" in rows else pd.Series(np.nan, index=rows.index)
    rows["drafter"] = given.where(given.notna(), np.where(rows.k > 0, "unspecified", "none"))
    dense_all = rows[rows.k == 0]
    pairs = {}
    for (v, hw, cell, drafter, k), arm in rows[rows.k > 0].groupby(
        ["verifier", "hardware", "cell", "drafter", "k"]
    ):
        mine = dense_all[(dense_all.verifier == v) & (dense_all.hardware == hw)]
        if (mine.cell == cell).any():
            dense = mine[mine.cell == cell]
        else:  # the one dense workload of the verifier and GPU, if there is one: the same
            # workload under the dense arm's label, so the fit sees one cell
            dense = mine if mine.cell.nunique() == 1 else mine.iloc[:0]
            arm = arm.assign(cell=dense.cell.iloc[0]) if len(dense) else arm
        if dense.empty:
            print(f"{path.name}: {v} {hw} {cell} {drafter} k={k}: no dense arm to pair with",
                  file=sys.stderr)  # fmt: skip
            continue
        pairs[f"{prefix}-{drafter}-k{k}-{cell}"] = pd.concat([dense, arm], ignore_index=True)
    return pairs


def _arm(p: SimPair, sd: bool) -> dict:
    return {
        "hardware": p.hardware, "tp": p.tp, "prefill": p.prefill, "decode": p.decode,
        "drafter": p.drafter if sd else None, "alpha": p.alpha if sd else None,
        "k": p.k if sd else 0,
    }  # fmt: skip


def simulate_pair(p: SimPair, seed: int = 0) -> pd.DataFrame:
    """Both arms of ``p`` at one grid of loads.

    Closed loop: :data:`STREAMS`. Open loop: :data:`N_RATES` rates evenly spaced from an
    eighth of the lower of the two arms' top rates (each found by a GuideLLM-like sweep,
    :func:`specbayes.sim.sweep`) up to it, so both arms run unsaturated at every rate.
    """
    arms = (_arm(p, False), _arm(p, True))
    if p.loop == "closed":
        loads = [{"concurrency": n, "n_requests": max(200, 6 * n)} for n in STREAMS]
    else:
        tops = []
        for a in arms:
            s = sim.sweep(p.verifier, seed=seed, **a)
            tops.append(s.loc[(s.sweep_index >= 0) & ~s.saturated, "rps"].max())
        top = min(tops)
        loads = [{"rps": r, "n_requests": 1500} for r in np.linspace(top / 8, top, N_RATES)]
    rows = [
        sim.simulate_point(p.verifier, seed=seed + 10 * i + j, **a, **load)
        for i, load in enumerate(loads)
        for j, a in enumerate(arms)
    ]
    return pd.DataFrame(rows)


# -- one pair ----------------------------------------------------------------------------------
def _level(rows: pd.DataFrame) -> pd.Series:
    """A row's load level: its stream count (closed loop), or its target rate (open loop —
    the two arms' achieved rates differ by a little at one target). In a pair run mostly
    open loop, its closed-loop rows (GuideLLM's synchronous point) are the lightest load,
    level -1: always fitted, never scored."""
    closed = rows["concurrency"].notna()
    target = rows["target_rps"] if "target_rps" in rows else rows["rps"]
    if closed.mean() < 0.5:
        return target.where(~closed, -1.0).round(6)
    return rows["concurrency"].where(closed, target).round(6)


def split(rows: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(fit rows, held-out rows, left-out rows) of a pair.

    Load levels (:func:`_level`) in order; the lower half of them (the smaller half when odd)
    is fitted. Held-out rows are the upper half's rows that validation keeps; the rows it
    leaves out are returned with ``upper`` (whether they would have been held out)."""
    table = validate_sweeps(rows, allow_unknown_alpha=True)
    level = _level(rows)
    levels = np.sort(level.dropna().unique())
    lower = level <= levels[len(levels) // 2 - 1]
    kept = table.data
    return (
        rows[lower.to_numpy()],
        kept[~lower.loc[kept.index].to_numpy()],
        table.excluded.assign(upper=~lower.loc[table.excluded.index]),
    )


def score(f, held: pd.DataFrame, seed: int | None = None) -> pd.DataFrame:
    """One row per held-out load: each arm's observed and predicted latency where that arm
    was measured there, the speedup and P(SD faster) where both were (``NaN`` otherwise —
    e.g. GuideLLM's sweep profile picks each arm's rates itself)."""
    held = held.assign(_level=_level(held))
    pred = f.predict(held, seed=seed).values  # (sample, row)
    mean = f.mean_latency(held).values
    out = []
    at, sd = held["_level"].to_numpy(), (held.k > 0).to_numpy()
    for lev in np.unique(at):
        dense, spec = np.flatnonzero((at == lev) & ~sd), np.flatnonzero((at == lev) & sd)
        row = {"load": lev, "obs_speedup": np.nan, "p_faster": np.nan}
        for name, idx in (("dense", dense), ("sd", spec)):
            if len(idx) == 1:
                row.update(_interval(name, pred[:, idx[0]], held.latency.iat[idx[0]]))
        if len(dense) == 1 and len(spec) == 1:
            d, s = dense[0], spec[0]
            row["obs_speedup"] = held.latency.iat[d] / held.latency.iat[s]
            row.update(_interval("speedup", pred[:, d] / pred[:, s], row["obs_speedup"]))
            row["p_faster"] = float(np.mean(mean[:, s] < mean[:, d]))
        out.append(row)
    cols = [f"{n}_{c}" for n in ("speedup", "dense", "sd") for c in ("in90", "in50")]
    frame = pd.DataFrame(out)
    return frame.assign(**{c: np.nan for c in cols if c not in frame})


def _interval(name: str, draws: np.ndarray, observed: float) -> dict:
    draws = np.where(np.isfinite(draws), draws, np.inf)
    q = np.quantile(draws, [0.05, 0.25, 0.5, 0.75, 0.95])
    return {
        f"{name}_med": q[2],
        f"{name}_lo90": q[0],
        f"{name}_hi90": q[4],
        f"{name}_in90": float(q[0] <= observed <= q[4]),
        f"{name}_in50": float(q[1] <= observed <= q[3]),
    }


def run_pair(
    name: str, rows: pd.DataFrame, fit_all: bool, seed: int | None, priors: dict | None = None
) -> tuple[pd.DataFrame, dict]:
    train, held, left = split(rows)
    if fit_all:
        train = rows
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = {} if seed is None else {"seed": seed}
        f = fit(train, model="sd", sampler_config=config, priors=priors, progress=False)
    s = f.summary()
    info = {
        "pair": name,
        "loop": "closed" if rows["concurrency"].notna().all() else "open",
        "fitted rows": len(f.data),
        "held-out loads": 0,
        "held-out points": 0,
        "left out (upper half)": int(left.upper.sum()),
        "divergences": s["divergences"],
        "max R-hat": round(s["max_r_hat"], 3),
        "min ESS": int(s["min_ess_bulk"]),
        "fit s": round(time.perf_counter() - t0, 1),
    }
    scores = score(f, held, seed)
    info["held-out loads"] = int(scores["obs_speedup"].notna().sum())
    info["held-out points"] = int(scores[["dense_in90", "sd_in90"]].notna().sum().sum())
    return scores.assign(pair=name), info


# -- the benchmark -----------------------------------------------------------------------------
def summarise(scores: pd.DataFrame) -> pd.DataFrame:
    """Coverage and direction over all held-out loads, and per source (real, simulated)."""
    groups = {"all pairs": scores}
    groups.update({source: g for source, g in scores.groupby("source", sort=False)})
    rows = []
    for label, g in groups.items():
        if g.empty:
            continue
        decisive = g[(g.obs_speedup < 0.9) | (g.obs_speedup > 1.1)]
        right = ((decisive.p_faster > 0.5) == (decisive.obs_speedup > 1)).sum()
        rows.append({
            "pairs": label,
            "loads": int(g.obs_speedup.notna().sum()),
            "speedup 90 %": g.speedup_in90.mean(),
            "speedup 50 %": g.speedup_in50.mean(),
            "dense 90 %": g.dense_in90.mean(),
            "dense 50 %": g.dense_in50.mean(),
            "SD 90 %": g.sd_in90.mean(),
            "SD 50 %": g.sd_in50.mean(),
            "P(SD faster) right side": f"{right} of {len(decisive)}",
        })  # fmt: skip
    return pd.DataFrame(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="real,sim", help="comma list: real, sim, or pair names")
    ap.add_argument(
        "--table", type=Path, action="append", default=[],
        help="also score the pairs of this sweep table (e.g. written by specbayes ingest)",
    )  # fmt: skip
    ap.add_argument("--fit-all", action="store_true", help="fit every load (inside the data)")
    ap.add_argument(
        "--seed", type=int, default=None,
        help="sampler seed of every fit (default: the package's, as a user's fit has)",
    )  # fmt: skip
    ap.add_argument("--priors", type=json.loads, default=None, help="prior overrides (JSON)")
    ap.add_argument("--write", action="store_true", help="append the result to the .md")
    args = ap.parse_args()
    wanted = args.cases.split(",")

    pairs = {}  # name: (source, rows)
    if "real" in wanted:
        pairs.update({n: ("data/real", r) for n, r in table_pairs(REAL, "real").items()})
    for path in args.table:
        pairs.update({n: (path.name, r) for n, r in table_pairs(path, path.stem).items()})
    for p in SIM_PAIRS:
        if "sim" in wanted or p.name in wanted:
            pairs[p.name] = ("simulated", simulate_pair(p))
    t0 = time.perf_counter()
    scores, infos = [], []
    for name, (source, rows) in pairs.items():
        s, info = run_pair(name, rows, args.fit_all, args.seed, args.priors)
        scores.append(s.assign(source=source))
        infos.append(info)
        print(f"{name}: {info}", file=sys.stderr, flush=True)
    scores = pd.concat(scores, ignore_index=True)
    wall = time.perf_counter() - t0
    text = _record(args, scores, pd.DataFrame(infos), wall)
    print(text)
    if args.write:
        with OUT.open("a") as fh:
            fh.write("\n" + text)


def _record(args, scores: pd.DataFrame, infos: pd.DataFrame, wall: float) -> str:
    what = "all loads fitted (inside the data)" if args.fit_all else "lower half fitted"
    cmd = "benchmarks/load_extrapolation.py" + (" --fit-all" if args.fit_all else "")
    cmd += f" --cases {args.cases}" + ("" if args.seed is None else f" --seed {args.seed}")
    cmd += "".join(f" --table {p}" for p in args.table)
    if args.priors is not None:
        cmd += f" --priors '{json.dumps(args.priors)}'"
        what += f", priors {json.dumps(args.priors)}"
    cmd += " --write"
    cols = ["pair", "load", "obs_speedup", "speedup_med", "speedup_lo90", "speedup_hi90",
            "speedup_in90", "speedup_in50", "dense_in90", "sd_in90", "p_faster"]  # fmt: skip
    # 1 / 0: the observed value inside / outside the interval; "–": that arm or the speedup
    # was not measured at that load
    return "\n".join([
        f"### {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC — {platform.machine()}, {what}, "
        f"{len(infos)} pairs, {int(scores.obs_speedup.notna().sum())} held-out loads with both "
        f"arms ({len(scores)} with either), wall {wall:.0f} s",
        "",
        f"Command: `.venv/bin/python {cmd}`",
        "",
        markdown_table(summarise(scores), floatfmt=".2f"),
        "",
        markdown_table(infos, floatfmt=".3g"),
        "",
        "<details><summary>every held-out load</summary>",
        "",
        markdown_table(scores.reindex(columns=cols), floatfmt=".3g"),
        "",
        "</details>",
        "",
    ])  # fmt: skip


if __name__ == "__main__":
    main()
