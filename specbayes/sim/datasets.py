"""The bundled datasets (``data/demo.parquet``, ``data/paper.parquet``) and their designs.

A *design* is a list of sweep groups: one (verifier, drafter, hardware, tp, cell) with the
(alpha, k) pairs to sweep, dense (k = 0) first. :func:`build_dataset` runs every sweep of a
design as one task per group — in this process, on a local Dask cluster or on any Dask
cluster (:mod:`specbayes.parallel`) — and returns one tidy frame, sorted; every point's seed
derives from the dataset seed and its configuration, so the result does not depend on where
the groups ran or on the number of workers.

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

from dataclasses import dataclass

import numpy as np
import pandas as pd

from specbayes.parallel import default_workers, map_tasks
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


def group_config(group: SweepGroup, alpha: float, k: int, engine=None):
    """The simulator configuration of one (alpha, k) sweep of ``group`` (dense at k = 0)."""
    return make_config(
        group.verifier,
        hardware=group.hardware,
        drafter=group.drafter if k > 0 else None,
        tp=group.tp,
        prefill=group.prefill,
        decode=group.decode,
        alpha=alpha,
        k=k,
        engine=engine,
    )


def _run_group(group: SweepGroup, *, seed: int) -> list[dict]:
    """The rows of every sweep of ``group`` (one task)."""
    rows: list[dict] = []
    for alpha, k in group.pairs:
        rows.extend(sweep_config(group_config(group, alpha, k), seed=seed))
    return rows


def build_dataset(
    name: str,
    *,
    seed: int = 0,
    progress: bool = True,
    workers: int | None = None,
    scheduler=None,
) -> pd.DataFrame:
    """Simulate a bundled dataset.

    Parameters
    ----------
    name : {"demo", "paper"}
        Which design (module docstring).
    seed : int
        Seed of the design draw and of every point.
    progress : bool
        Show a tqdm bar on stderr, advanced as groups complete.
    workers : int, optional
        Workers (default: all CPUs). Without ``scheduler``: ``1`` runs in-process, more
        starts a :class:`distributed.LocalCluster` of that many processes for the call.
    scheduler : None, str or distributed.Client
        ``"serial"``, ``"local"``, ``"processes"``, a Dask scheduler's address or a client
        (:func:`specbayes.parallel.map_tasks`); the rows do not depend on it.

    Returns
    -------
    pandas.DataFrame
        Sweep-schema rows, one per load point (the throughput row of each sweep included,
        flagged ``saturated``), sorted by configuration and ``sweep_index``.
    """
    groups = design(name, seed)
    out = map_tasks(
        _run_group,
        groups,
        common=dict(seed=seed),
        scheduler=scheduler,
        workers=workers or default_workers(),
        progress=progress,
        desc=f"simulate {name}",
        unit="group",
    )
    df = pd.DataFrame([row for rows in out for row in rows])
    order = ["verifier", "drafter", "hardware", "prefill", "decode", "k", "alpha", "sweep_index"]
    df = df.sort_values(order, kind="stable", na_position="first").reset_index(drop=True)
    df.attrs["source"] = f"specbayes.sim {name} seed={seed}"
    return df
