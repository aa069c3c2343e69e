"""Committed notebooks are clean and agree with their jupytext ``.py`` pair.

Clean means: no outputs, no execution counts, no widget state
(``metadata.widgets``), so diffs show only what a person wrote.  Each
``notebooks/NAME.ipynb`` has ``notebooks/NAME.py`` (jupytext percent format) with
the same cells; edit either and run ``jupytext --sync notebooks/*.ipynb``.
"""

from __future__ import annotations

import glob
import os

import jupytext
import nbformat
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOK_DIR = os.path.join(ROOT, "notebooks")
NOTEBOOKS = sorted(glob.glob(os.path.join(NOTEBOOK_DIR, "*.ipynb")))
EXPECTED = [
    "01_off_by_one",
    "02_startup_or_first_request",
    "03_fix_and_next_fix",
    "04_model_vs_engine",
    "05_your_traffic",
    "06_two_gpus",
    "07_is_my_server_exposed",
]


def _ids(paths):
    return [os.path.basename(p) for p in paths]


def dirt(nb) -> list[str]:
    """What makes a notebook unclean: outputs, execution counts, widget state (empty: clean)."""
    problems = []
    if "widgets" in nb.metadata:
        problems.append("metadata.widgets (saved widget state)")
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        if cell.get("outputs"):
            problems.append(f"cell {i}: outputs")
        if cell.get("execution_count") is not None:
            problems.append(f"cell {i}: execution_count={cell.execution_count}")
        if "widgets" in cell.get("metadata", {}):
            problems.append(f"cell {i}: metadata.widgets")
    return problems


def cell_sources(nb) -> list[tuple[str, str]]:
    return [(c.cell_type, c.source.strip()) for c in nb.cells]


def test_all_notebooks_are_present():
    """The five notebooks exist, each with its .py pair."""
    names = [os.path.splitext(os.path.basename(p))[0] for p in NOTEBOOKS]
    assert names == EXPECTED
    for name in EXPECTED:
        assert os.path.exists(os.path.join(NOTEBOOK_DIR, name + ".py")), name


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_committed_notebook_is_clean(path):
    """No outputs, execution counts or widget state in a committed notebook."""
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert dirt(nb) == []
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_notebook_and_py_pair_agree(path):
    """The .ipynb and its percent-format .py have the same cells, and are declared paired."""
    py = os.path.splitext(path)[0] + ".py"
    nb = jupytext.read(path)
    text = jupytext.read(py, fmt="py:percent")
    assert cell_sources(nb) == cell_sources(text)
    formats = nb.metadata.get("jupytext", {}).get("formats", "")
    assert "ipynb" in formats and "py:percent" in formats


def test_dirt_detects_outputs_counts_and_widget_state():
    """The checker itself: each kind of dirt is reported (guards against a vacuous pass)."""
    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_code_cell("1 + 1", execution_count=3,
                                              outputs=[nbformat.v4.new_output(
                                                  "execute_result", {"text/plain": "2"},
                                                  execution_count=3)]))
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    problems = dirt(nb)
    assert any("outputs" in p for p in problems)
    assert any("execution_count" in p for p in problems)
    assert any("metadata.widgets" in p for p in problems)


def test_pair_check_detects_a_diverged_py(tmp_path):
    """A .py edited without syncing the .ipynb is caught by the cell comparison."""
    src = NOTEBOOKS[0]
    nb = jupytext.read(src)
    text = jupytext.read(os.path.splitext(src)[0] + ".py", fmt="py:percent")
    text.cells[-1].source += "\n# edited in the .py only"
    assert cell_sources(nb) != cell_sources(text)
