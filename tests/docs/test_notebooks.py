"""The notebooks of ``docs/notebooks/`` (jupytext percent-format text files) run from top to bottom in a Jupyter
kernel, so none can rot: each is read by jupytext and executed cell by cell by nbclient (the executor nbmake uses);
a failing cell fails the test with its traceback. Their assertions are their claims (beam 2 beats greedy on the
table, the attention weights match the formulas, the loss falls from ln V)."""

from pathlib import Path

import jupytext
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).parents[2] / "docs" / "notebooks").glob("*.py"))


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 3


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_notebook_runs(path, monkeypatch, tmp_path):
    monkeypatch.setenv("MPLBACKEND", "Agg")
    notebook = jupytext.read(path)
    NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
