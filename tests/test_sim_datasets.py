"""The bundled datasets: the paper design, and the shipped parquet files."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from specbayes.data import validate_sweeps
from specbayes.sim import design
from specbayes.sim.datasets import ALPHAS, CELLS_16, KS
from specbayes.sim.point import SIM_VERSION
from specbayes.sim.properties import summary

DATA = Path(__file__).resolve().parent.parent / "data"


def test_paper_design_matches_the_paper():
    groups = design("paper", seed=0)
    verifiers = {g.verifier for g in groups}
    assert len(verifiers) == 10
    assert {"Qwen3-30B-A3B", "gpt-oss-20b", "Qwen3-235B-A22B"} <= verifiers
    assert {g.hardware for g in groups} == {"A100-SXM-80GB", "H100-SXM"}
    assert {(g.prefill, g.decode) for g in groups} == set(CELLS_16)
    union = set()
    for g in groups:
        sd = [(a, k) for a, k in g.pairs if k > 0]
        assert len(sd) == 22 and len(set(sd)) == 22
        assert sorted({a for a, _ in sd}) == list(ALPHAS)  # every alpha in every group
        union |= set(sd)
        if g.drafter is None:
            assert g.pairs[0] == (None, 0)  # dense sweep first
    assert union == {(a, k) for a in ALPHAS for k in KS}
    assert design("paper", seed=0) == groups  # deterministic


def test_unknown_dataset():
    with pytest.raises(ValueError, match="unknown dataset"):
        design("huge")


@pytest.mark.parametrize("name", ["demo", "paper"])
def test_shipped_dataset_validates(name):
    path = DATA / f"{name}.parquet"
    if not path.exists():
        pytest.skip(f"{path} not built")
    df = pd.read_parquet(path)
    table = validate_sweeps(df, source=str(path))
    assert len(table.data) > 0.8 * len(df)
    assert set(df["source"]) == {SIM_VERSION}  # built by the code as it is
    assert (
        df.groupby(["verifier", "drafter", "hardware", "cell", "k", "alpha"], dropna=False).size()
        == 10
    ).all()  # 9 rates + the throughput row


def test_demo_properties_show_the_papers_phenomena():
    path = DATA / "demo.parquet"
    if not path.exists():
        pytest.skip("data/demo.parquet not built")
    s = summary(pd.read_parquet(path))
    assert s["dense_collapse_r2"] >= 0.97
    assert s["share_c1r_below_1"] > 0.9
    assert s["share_c2r_above_1_alpha_0.5_0.7"] > 0.5
