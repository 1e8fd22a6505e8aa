"""Execute every notebook end to end at its small size; each ends with assertions on its numbers.

They run in the float32 pass only: the notebooks are demonstrations whose numerics (learners,
metrics, grid) are tested in both dtypes by the other test files, and each notebook costs
10-45 s of the CI's 20 minutes.
"""
import os
import pathlib

import pytest

from conftest import X64

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOKS = sorted((pathlib.Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))


def test_there_are_four_notebooks():
    assert [p.name[:2] for p in NOTEBOOKS] == ["01", "02", "03", "04"]


@pytest.mark.skipif(X64, reason="notebooks run in the float32 pass (see the module docstring)")
# the GPU benchmark notebook's small run repeats the grid runner's tests, the GP and kernel regression one
# (77 s) test_gp's and test_kernel_regression's: with the slow checks, to keep CI within its budget
@pytest.mark.parametrize("path", [pytest.param(p, marks=pytest.mark.slow) if p.stem.startswith(("01", "04")) else p
                                  for p in NOTEBOOKS], ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_and_its_assertions_hold(path, tmp_path, monkeypatch):
    monkeypatch.setenv("ONLINEJAX_NB_SIZE", "small")
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError, with the cell and traceback, on any failure
    last = [c for c in nb.cells if c.cell_type == "code"][-1]
    assert "assert" in last.source, "a notebook must end with assertions on its numbers"
    assert not [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
