"""The notebooks run top to bottom (smoke mode: tiny sampler settings)."""

from __future__ import annotations

import os

import nbformat
import pytest
from conftest import REPO
from nbclient import NotebookClient

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_in_smoke_mode(path, monkeypatch, tmp_path):
    monkeypatch.setenv("SPECBAYES_SMOKE", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()
    errors = [
        o
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if o.get("output_type") == "error"
    ]
    assert not errors
    assert os.environ["SPECBAYES_SMOKE"] == "1"


def test_notebooks_exist():
    names = {p.name for p in NOTEBOOKS}
    assert names == {
        "leave_n_out_validation.ipynb",
        "posterior_predictive_checks.ipynb",
        "capacity_planning.ipynb",
    }
