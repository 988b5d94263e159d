"""Redraw the README's pictures of the default model: ``pm.model_to_graphviz`` of the pooled
structure (the bundled demo) and of the anchored structure (one real dense + SD pair).

Needs the ``graphviz`` Python package and Graphviz's ``dot`` (not dependencies of specbayes)::

    .venv/bin/python docs/make_model_graphs.py
"""

from pathlib import Path

import pandas as pd
import pymc as pm

from specbayes.data import validate_sweeps
from specbayes.datasets import load_dataset
from specbayes.model import build_design, build_model
from specbayes.model.fitted import prepare_table

HERE = Path(__file__).resolve().parent
REAL = HERE.parent / "data/real/speculators_qwen3.8-27b_b200_sweeps.csv"


def main() -> None:
    demo = build_design(prepare_table(load_dataset("demo"), "sd"), "sd")
    raw = pd.read_csv(REAL)
    pair = raw[(raw["cell"] == "HumanEval") & raw["drafter"].isin(["none", "dspark"])]
    pair = pair.drop(columns=["acceptance_length", "alpha_source"])  # alpha unknown
    small = build_design(validate_sweeps(pair, allow_unknown_alpha=True), "sd")
    for design in (demo, small):
        graph = pm.model_to_graphviz(build_model(design))
        graph.render(HERE / f"model_graph_{design.structure}", format="png", cleanup=True)
        print(f"wrote docs/model_graph_{design.structure}.png")


if __name__ == "__main__":
    main()
