r"""The "user's small sweep" cases: one cell, a dense arm and one SD arm (alpha unknown unless
the case says otherwise).

What a new user brings (issue 28): one workload measured with GuideLLM, a dense sweep and
one speculative-decoding sweep, 3–4 unsaturated load points per arm, no acceptance numbers.

Real cases (``real:<cell>:<drafter>``)
    From ``data/real/speculators_qwen3.8-27b_b200_sweeps.csv`` (closed loop, Qwen3.8-27B on
    one B200): one dataset (cell) and one SD arm at a time — 2 cells × {dspark k = 7,
    mtp k = 2} = 4 cases. Kept loads: **N = 8, 16, 32, 64** in both arms. Why these: the
    upper half of the sweep is where latency visibly grows with N, so both C1 (level) and
    C2 (slope) have leverage; N = 1, 2, 4 sit on the flat, noisy stretch (Little's-law
    latencies there are not even monotone, e.g. dense HumanEval 8.18 / 9.00 / 9.23 / 8.67 s
    at N = 1, 2, 4, 8); N = 128 is flagged saturated for DSpark by the source and the dense
    math_reasoning N = 128 point is excluded by ``validate_sweeps``' growth rule, so it is
    dropped for every arm to keep the loads matched. Acceptance columns are dropped: alpha
    is unknown.

Real cases with a per-point measured alpha (``real-alpha:<cell>:dspark``)
    The same file, both cells: the DSpark k = 7 arm with its dense arm over the **whole**
    concurrency range N = 1 … 128, written as a user gives it — an ``alpha`` column computed
    per row from that row's ``acceptance_length``
    (:func:`specbayes.laws.alpha_from_acceptance_length`; it differs in the 3rd decimal along
    the sweep) and the columns ``alpha_source``, ``acceptance_length``,
    ``acceptance_marginal``, ``alpha_hat`` dropped. ``validate_sweeps`` marks these alphas
    ``measured`` (one sweep per arm) and excludes one row per case: DSpark N = 128 (flagged
    saturated by the source). Kept: SD N = 1 … 64 (7 rows), dense N = 1 … 128 (8 rows);
    speedups at the 7 matched loads N = 1 … 64.

Uncatalogued cases (``uncatalogued:<cell>:<alpha|no-alpha>``)
    As ``real-alpha`` (same rows, same exclusions) with the verifier, GPU and drafter renamed
    to names the catalog (``models/``) does not know (:data:`UNCATALOGUED_NAMES`), so the
    model falls back on its generic priors. ``alpha``: per-point alpha as in ``real-alpha``;
    ``no-alpha``: acceptance columns stripped (alpha unknown). Listed: HumanEval with alpha,
    math_reasoning without.

Simulator cases (``sim:<name>``)
    ``specbayes.sim`` (open loop, constant arrivals): a dense sweep of 4 open-loop rates
    (``sweep(n_rates=5)`` minus its synchronous and throughput points), then the SD arm
    simulated at the **same** rates, so speedups are measured at matched load; rows where
    either arm is flagged saturated are dropped. Alpha is forced in the simulator and then
    removed from the table (unknown to the fit).

Every case goes through :func:`specbayes.data.validate_sweeps` (``allow_unknown_alpha``).

Matched load for the speedup check: closed loop — the same concurrency N; open loop — the
same offered (target) rate.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from specbayes import laws
from specbayes.data import SweepTable, validate_sweeps

REAL_CSV = Path(__file__).resolve().parents[1] / "data/real/speculators_qwen3.8-27b_b200_sweeps.csv"
#: Closed-loop concurrencies kept in both arms of a real case (see the module docstring).
REAL_LOADS = (8, 16, 32, 64)
#: Acceptance information removed from every case (alpha unknown to the fit).
ACCEPTANCE_COLUMNS = (
    "alpha",
    "acceptance_length",
    "acceptance_marginal",
    "alpha_hat",
    "alpha_source",
)

#: Names the catalog does not know (``uncatalogued`` cases): original -> renamed.
UNCATALOGUED_NAMES = {
    "Qwen3.8-27B": "Acme-30B-Instruct",
    "B200": "XPU-9",
    "dspark": "acme-draft",
}
#: What ``validate_sweeps`` is expected to exclude from a ``real-alpha`` / ``uncatalogued``
#: case: (k, concurrency) of the row flagged saturated by the source (DSpark N = 128).
REAL_ALPHA_EXCLUDED = {(7, 128.0)}

#: Simulator cases: name -> (verifier, drafter, hardware, prefill, decode, alpha, k, seed).
SIM_CASES: dict[str, tuple] = {
    "llama8b-eagle3-a0.7-k3": (
        "Llama-3.1-8B",
        "EAGLE3-Llama-3.1-8B",
        "H100-SXM",
        512,
        256,
        0.7,
        3,
        1,
    ),
    "qwen8b-eagle3-a0.8-k5": ("Qwen3-8B", "EAGLE3-Qwen3-8B", "H100-SXM", 1024, 512, 0.8, 5, 2),
}


@dataclass(frozen=True)
class Case:
    """One small-sweep case: the validated table and the observed speedups at matched load."""

    name: str
    table: SweepTable
    speedups: pd.DataFrame  # columns: load, speedup (dense latency / SD latency)
    closed: bool
    alpha_true: float | None = None


def _strip_acceptance(df: pd.DataFrame) -> pd.DataFrame:
    return df.drop(columns=[c for c in ACCEPTANCE_COLUMNS if c in df.columns])


def _observed_speedups(data: pd.DataFrame, load: str) -> pd.DataFrame:
    dense = data[data["k"] == 0].set_index(load)["latency"]
    sd = data[data["k"] > 0].set_index(load)["latency"]
    common = dense.index.intersection(sd.index)
    out = pd.DataFrame({"load": common, "speedup": (dense[common] / sd[common]).to_numpy()})
    return out.sort_values("load").reset_index(drop=True)


def real_case(cell: str, drafter: str) -> Case:
    """A real case: ``cell`` in {HumanEval, math_reasoning}, ``drafter`` in {dspark, mtp}."""
    raw = pd.read_csv(REAL_CSV)
    rows = raw[(raw["cell"] == cell) & raw["drafter"].isin(["none", drafter])]
    rows = rows[rows["concurrency"].isin(REAL_LOADS)]
    table = validate_sweeps(
        _strip_acceptance(rows).reset_index(drop=True),
        source=f"real:{cell}:{drafter}",
        allow_unknown_alpha=True,
    )
    if len(table.excluded):
        raise RuntimeError(f"real:{cell}:{drafter}: rows excluded unexpectedly\n{table.excluded}")
    return Case(
        f"real:{cell}:{drafter}", table, _observed_speedups(table.data, "concurrency"), True
    )


def _per_point_alpha(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` as a user gives them: ``alpha`` per row from its acceptance length, and the
    acceptance columns (and ``alpha_source``) dropped."""
    rows = rows.copy()
    sd = (rows["k"] > 0).to_numpy()
    rows["alpha"] = np.nan
    rows.loc[sd, "alpha"] = laws.alpha_from_acceptance_length(
        rows.loc[sd, "acceptance_length"].to_numpy(), rows.loc[sd, "k"].to_numpy()
    )
    return rows.drop(columns=[c for c in ACCEPTANCE_COLUMNS if c in rows and c != "alpha"])


def _full_range_case(name: str, rows: pd.DataFrame) -> Case:
    """Validate a whole-range dense + SD case; only the expected rows may be excluded."""
    table = validate_sweeps(rows.reset_index(drop=True), source=name, allow_unknown_alpha=True)
    ex = table.excluded
    if set(zip(ex["k"], ex["concurrency"], strict=True)) != REAL_ALPHA_EXCLUDED:
        raise RuntimeError(f"{name}: rows excluded unexpectedly\n{ex}")
    return Case(name, table, _observed_speedups(table.data, "concurrency"), True)


def real_alpha_case(cell: str, drafter: str = "dspark") -> Case:
    """DSpark + dense over the whole range with a per-point measured alpha (no alpha_source)."""
    raw = pd.read_csv(REAL_CSV)
    rows = raw[(raw["cell"] == cell) & raw["drafter"].isin(["none", drafter])]
    return _full_range_case(f"real-alpha:{cell}:{drafter}", _per_point_alpha(rows))


def uncatalogued_case(cell: str, alpha: str) -> Case:
    """``real-alpha`` rows renamed off the catalog; ``alpha`` in {alpha, no-alpha}."""
    if alpha not in ("alpha", "no-alpha"):
        raise KeyError(alpha)
    raw = pd.read_csv(REAL_CSV)
    rows = raw[(raw["cell"] == cell) & raw["drafter"].isin(["none", "dspark"])]
    rows = _per_point_alpha(rows) if alpha == "alpha" else _strip_acceptance(rows)
    for col in ("verifier", "hardware", "drafter"):
        rows[col] = rows[col].replace(UNCATALOGUED_NAMES)
    return _full_range_case(f"uncatalogued:{cell}:{alpha}", rows)


def sim_case(name: str) -> Case:
    """A simulator case from :data:`SIM_CASES` (open loop, dense + SD at the same rates)."""
    from specbayes.sim import api

    verifier, drafter, hardware, p, g, alpha, k, seed = SIM_CASES[name]
    dense = api.sweep(verifier, hardware=hardware, prefill=p, decode=g, n_rates=5, seed=seed)
    dense = dense[dense["strategy"] == "constant"]
    sd = [
        api.simulate_point(
            verifier,
            hardware=hardware,
            drafter=drafter,
            prefill=p,
            decode=g,
            alpha=alpha,
            k=k,
            rps=rate,
            seed=seed,
        )
        for rate in dense["target_rps"]
    ]
    sd = pd.DataFrame(sd)
    both = pd.concat([dense, sd], ignore_index=True)
    both = both[~both["saturated"].astype(bool)]
    matched = both.groupby("target_rps")["k"].transform("nunique") == 2
    both = both[matched].reset_index(drop=True)
    table = validate_sweeps(_strip_acceptance(both), source=f"sim:{name}", allow_unknown_alpha=True)
    speed = _observed_speedups(table.data, "target_rps")
    return Case(f"sim:{name}", table, speed, False, alpha_true=alpha)


REAL_CASES = tuple(
    f"real:{c}:{d}" for c in ("HumanEval", "math_reasoning") for d in ("dspark", "mtp")
)

REAL_ALPHA_CASES = tuple(f"real-alpha:{c}:dspark" for c in ("HumanEval", "math_reasoning"))
UNCATALOGUED_CASES = ("uncatalogued:HumanEval:alpha", "uncatalogued:math_reasoning:no-alpha")


def case(name: str) -> Case:
    """Build a case by name (``real:<cell>:<drafter>``, ``real-alpha:<cell>:dspark``,
    ``uncatalogued:<cell>:<alpha|no-alpha>`` or ``sim:<name>``)."""
    kind, _, rest = name.partition(":")
    if kind == "real":
        cell, drafter = rest.split(":")
        return real_case(cell, drafter)
    if kind == "real-alpha":
        cell, drafter = rest.split(":")
        return real_alpha_case(cell, drafter)
    if kind == "uncatalogued":
        cell, alpha = rest.split(":")
        return uncatalogued_case(cell, alpha)
    if kind == "sim":
        return sim_case(rest)
    raise KeyError(name)


def all_case_names() -> list[str]:
    """Every case name: the 4 real ones, the 2 real-alpha and 2 uncatalogued ones, then the
    simulator ones."""
    return [*REAL_CASES, *REAL_ALPHA_CASES, *UNCATALOGUED_CASES, *(f"sim:{n}" for n in SIM_CASES)]


if __name__ == "__main__":
    for n in all_case_names():
        c = case(n)
        d = c.table.data
        print(f"== {n}: {len(d)} rows ({c.table.summary()})")
        load = "concurrency" if c.closed else "rps"
        print(d[["k", load, "latency", "prefill", "decode"]].to_string(index=False))
        print(c.speedups.to_string(index=False))
