"""The notebooks run top to bottom (smoke mode) and are committed with their outputs.

Smoke mode loads the tiny saved fit shared with the CLI tests (:mod:`tiny_fit`) instead of
fitting, so all three notebooks execute in well under a minute.
"""

from __future__ import annotations

import nbformat
import pytest
from conftest import REPO
from nbclient import NotebookClient
from tiny_fit import tiny_fit_path

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))


def _outputs(nb, kind: str) -> list:
    return [
        o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
        if o.get("output_type") == kind or kind in o.get("data", {})
    ]  # fmt: skip


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_in_smoke_mode(path, monkeypatch, tmp_path):
    monkeypatch.setenv("SPECBAYES_SMOKE", "1")
    monkeypatch.setenv("SPECBAYES_FIT", str(tiny_fit_path()))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()
    assert not _outputs(nb, "error")
    assert "smoke mode" in str(nb.cells[1].outputs)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_committed_executed_in_full_mode(path):
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.get("execution_count") for c in code), "run it: notebooks/README.md"
    assert "full mode" in str(code[0].outputs)
    assert _outputs(nb, "image/png"), "no figure in the committed notebook"
    assert not _outputs(nb, "error")


def test_notebooks_do_not_silence_warnings():
    for path in NOTEBOOKS:
        text = path.read_text()
        assert 'filterwarnings("ignore", category=UserWarning)' not in text, path.name
        assert "DESIGN.md" not in text and "reading note" not in text, path.name


def test_notebooks_exist():
    names = {p.name for p in NOTEBOOKS}
    assert names == {
        "leave_n_out_validation.ipynb",
        "posterior_predictive_checks.ipynb",
        "capacity_planning.ipynb",
    }
