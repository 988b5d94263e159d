"""The bundled datasets (``data/demo.parquet``, ``data/paper.parquet``) and their designs.

A *design* is a list of sweep groups: one (verifier, drafter, hardware, tp, cell) with the
(alpha, k) pairs to sweep, dense (k = 0) first. :func:`build_dataset` runs every sweep of a
design over worker processes (one task per group) and returns one tidy frame, sorted, so the
result does not depend on the number of workers.

``demo``
    Qwen3-8B and Llama-3.1-8B (EAGLE-3 heads) on one H100-SXM, the four corner cells of the
    {256, 1024}² grid, dense + 6 (alpha, k) pairs, 9 rates + the throughput row each.
``paper``
    The paper's design (Kong et al. 2026, §3): verifiers Qwen3-{0.6B, 1.7B, 8B, 14B, 32B},
    Llama-3.1-{8B, 70B} (dense) and Qwen3-30B-A3B, gpt-oss-20b, Qwen3-235B-A22B (MoE), each
    with its EAGLE-3 head, plus the vanilla pairs Qwen3-14B ← Qwen3-1.7B and
    Llama-3.1-70B ← Llama-3.1-8B; hardware A100-SXM-80GB and H100-SXM (Llama-3.1-70B on 4
    GPUs, Qwen3-235B-A22B on 8, the rest on 1); the 16 cells {256, 512, 768, 1024}²;
    alpha ∈ {0.50, 0.55, …, 1.00} × k ∈ {1..10} **subsampled**: each group sweeps 22 of the
    110 pairs — every alpha twice, with k drawn so each k appears 2–3 times — a different
    draw per group (seeded by the group), so the union covers the grid; plus dense.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
from dataclasses import dataclass

import numpy as np
import pandas as pd

from specbayes.sim.point import make_config, point_seed
from specbayes.sim.sweep import sweep_config

__all__ = ["DESIGNS", "SweepGroup", "build_dataset", "design"]

ALPHAS = tuple(round(0.5 + 0.05 * i, 2) for i in range(11))
KS = tuple(range(1, 11))
CELLS_16 = tuple((p, g) for p in (256, 512, 768, 1024) for g in (256, 512, 768, 1024))
CORNERS = ((256, 256), (256, 1024), (1024, 256), (1024, 1024))


@dataclass(frozen=True)
class SweepGroup:
    """One (verifier, drafter, hardware, tp, cell) and its (alpha, k) pairs; k = 0 is dense."""

    verifier: str
    drafter: str | None
    hardware: str
    tp: int
    prefill: int
    decode: int
    pairs: tuple[tuple[float | None, int], ...]


def _subsample_pairs(rng: np.random.Generator, per_alpha: int = 2) -> list[tuple[float, int]]:
    """Every alpha ``per_alpha`` times with distinct k's, each k used as evenly as possible."""
    ks = np.concatenate([rng.permutation(KS) for _ in range(per_alpha * len(ALPHAS) // 10 + 1)])
    pairs: list[tuple[float, int]] = []
    pos = 0
    for a in ALPHAS:
        chosen: list[int] = []
        while len(chosen) < per_alpha:
            k = int(ks[pos % len(ks)])
            pos += 1
            if k not in chosen:
                chosen.append(k)
        pairs.extend((a, k) for k in sorted(chosen))
    return pairs


def _demo() -> list[SweepGroup]:
    pairs = ((None, 0), (0.6, 3), (0.7, 5), (0.8, 2), (0.8, 4), (0.9, 6), (1.0, 3))
    return [
        SweepGroup(v, None, "H100-SXM", 1, p, g, pairs)
        for v in ("Qwen3-8B", "Llama-3.1-8B")
        for p, g in CORNERS
    ]


PAPER_VERIFIERS: dict[str, int] = {
    "Qwen3-0.6B": 1,
    "Qwen3-1.7B": 1,
    "Qwen3-8B": 1,
    "Qwen3-14B": 1,
    "Qwen3-32B": 1,
    "Llama-3.1-8B": 1,
    "Llama-3.1-70B": 4,
    "Qwen3-30B-A3B": 1,
    "gpt-oss-20b": 1,
    "Qwen3-235B-A22B": 8,
}
VANILLA = {"Qwen3-14B": "Qwen3-1.7B", "Llama-3.1-70B": "Llama-3.1-8B"}
PAPER_HARDWARE = ("A100-SXM-80GB", "H100-SXM")


def _paper(seed: int) -> list[SweepGroup]:
    groups = []
    for hw in PAPER_HARDWARE:
        for v, tp in PAPER_VERIFIERS.items():
            drafters: list[str | None] = [None]
            if v in VANILLA:
                drafters.append(VANILLA[v])
            for d in drafters:
                for p, g in CELLS_16:
                    rng = np.random.default_rng(point_seed(seed, "design", v, d, hw, p, g))
                    sd = _subsample_pairs(rng)
                    pairs = ((None, 0), *sd) if d is None else tuple(sd)
                    groups.append(SweepGroup(v, d, hw, tp, p, g, pairs))
    return groups


DESIGNS = ("demo", "paper")


def design(name: str, seed: int = 0) -> list[SweepGroup]:
    """The sweep groups of a bundled dataset (``demo`` or ``paper``)."""
    if name == "demo":
        return _demo()
    if name == "paper":
        return _paper(seed)
    raise ValueError(f"unknown dataset {name!r}; choose one of {', '.join(DESIGNS)}")


def _run_group(args: tuple[SweepGroup, int]) -> list[dict]:
    group, seed = args
    rows: list[dict] = []
    for alpha, k in group.pairs:
        cfg = make_config(
            group.verifier,
            hardware=group.hardware,
            drafter=group.drafter if k > 0 else None,
            tp=group.tp,
            prefill=group.prefill,
            decode=group.decode,
            alpha=alpha,
            k=k,
        )
        rows.extend(sweep_config(cfg, seed=seed))
    return rows


def build_dataset(
    name: str,
    *,
    seed: int = 0,
    progress: bool = True,
    workers: int | None = None,
) -> pd.DataFrame:
    """Simulate a bundled dataset.

    Parameters
    ----------
    name : {"demo", "paper"}
        Which design (module docstring).
    seed : int
        Seed of the design draw and of every point.
    progress : bool
        Show a tqdm bar on stderr.
    workers : int, optional
        Worker processes (default: all CPUs). ``1`` runs in-process.

    Returns
    -------
    pandas.DataFrame
        Sweep-schema rows, one per load point (the throughput row of each sweep included,
        flagged ``saturated``), sorted by configuration and ``sweep_index``.
    """
    groups = design(name, seed)
    workers = workers or os.cpu_count() or 1
    tasks = [(g, seed) for g in groups]
    rows: list[dict] = []
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(tasks), desc=f"simulate {name}", unit="group", file=sys.stderr)
    if workers <= 1:
        for t in tasks:
            rows.extend(_run_group(t))
            if bar is not None:
                bar.update()
    else:
        method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
        with mp.get_context(method).Pool(workers) as pool:
            for out in pool.imap_unordered(_run_group, tasks, chunksize=1):
                rows.extend(out)
                if bar is not None:
                    bar.update()
    if bar is not None:
        bar.close()
    df = pd.DataFrame(rows)
    order = ["verifier", "drafter", "hardware", "prefill", "decode", "k", "alpha", "sweep_index"]
    df = df.sort_values(order, kind="stable", na_position="first").reset_index(drop=True)
    df.attrs["source"] = f"specbayes.sim {name} seed={seed}"
    return df
