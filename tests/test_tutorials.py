"""Every notebook in tutorials/ runs top to bottom without error, copied alone into an empty
folder (as a user copies one out of the repository)."""

import shutil
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).parents[1] / "tutorials").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_from_an_empty_folder(path, tmp_path):
    copy = Path(shutil.copy(path, tmp_path))
    nb = nbformat.read(copy, as_version=4)
    NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "max |difference|" in outputs


def test_every_plot_has_a_title_labelled_axes_and_a_zero_origin():
    """Plots say what they show: a title, axis labels (a horizontal bar chart's categories label its
    y axis) and a value axis that starts at zero."""
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        for cell in (c for c in nb.cells if c.cell_type == "code" and "plt.subplots" in c.source):
            src = cell.source
            needed = ["set_title(", "set_xlabel("] + ([] if "barh(" in src else ["set_ylabel("])
            missing = [call for call in needed if call not in src]
            assert not missing, f"{path.name}: a plot without {missing}"
            zero = "set_xlim(0" in src or "set_xlim(left=0" in src if "barh(" in src else "set_ylim(bottom=0" in src
            assert zero, f"{path.name}: a plot whose value axis may not start at zero"


def test_there_are_tutorials():
    assert len(NOTEBOOKS) >= 3
