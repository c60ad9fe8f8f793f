"""Every notebook in tutorials/ runs top to bottom without error, copied alone into an empty
folder (as a user copies one out of the repository)."""

import re
import shutil
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).parents[1] / "tutorials").glob("*.ipynb"))


def _text(nb) -> str:
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_from_an_empty_folder(path, tmp_path):
    """... and its committed outputs are today's: the same cycle counts (re-execute the notebooks
    when the compiler changes them), no warnings or errors."""
    copy = Path(shutil.copy(path, tmp_path))
    nb = nbformat.read(copy, as_version=4)
    NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = _text(nb)
    assert "max |difference|" in outputs
    committed = nbformat.read(path, as_version=4)
    cycles = re.compile(r"[\d,]+ cycles")
    assert cycles.findall(_text(committed)) == cycles.findall(outputs)
    cells = [c for c in committed.cells if c.cell_type == "code"]
    assert all(c.get("execution_count") for c in cells), "a cell without committed output"
    assert not [o for c in cells for o in c.get("outputs", []) if o.get("name") == "stderr" or "ename" in o]


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
