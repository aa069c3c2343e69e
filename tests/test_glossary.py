"""Notebook 1's glossary defines the words the rest of the pages use before explaining them.

Invariant: every piece of jargon the "Assumptions" fold shows on every dashboard has a
glossary row in notebook 1, and so have the two questions a learner asked of the picture
(why W has one row more than C; why a larger batch goes all-resident); notebook 6's cell
notation is explained under its table.
"""

import pathlib
import re

import pytest

from hisparse_model import Knobs, simulate
from hisparse_model.model.reproduction import ASSUMPTIONS
from hisparse_model.views.two_gpus import timelines_html, two_rank_workload

NB1 = pathlib.Path(__file__).resolve().parents[1] / "notebooks" / "01_off_by_one.py"


def _glossary_words() -> list[str]:
    text = NB1.read_text().split("## Glossary", 1)[1].split("## A primer", 1)[0]
    return [m.group(1) for m in re.finditer(r"^# \| \*\*(.+?)\*\* \|", text, flags=re.M)]


@pytest.mark.parametrize("word, row", [
    ("TP", "TP / DP"), ("EngineDeadError", "EngineDeadError"),
    ("-O2", "-O2"), ("Model Runner V2", "Model Runner V2"),
    ("num_gpu_blocks_override", "num_gpu_blocks_override"),
])
def test_the_assumptions_jargon_has_a_glossary_row(word, row):
    assert any(word in a for a in ASSUMPTIONS)  # the Assumptions fold does use it
    assert row in _glossary_words()


def test_the_learners_two_questions_are_answered_in_the_glossary():
    words = _glossary_words()
    assert "why W has one row more than C" in words
    assert "why a batch larger than W goes all-resident" in words


def test_notebook_6_explains_its_cell_notation():
    """S = 7 (notebook 6's crash): a dummy batch appears, and the legend says what it is."""
    sched = simulate(Knobs(vllm_version="0.31.0", max_num_seqs=7, data_parallel_size=2),
                     two_rank_workload(7))
    html = timelines_html(sched)
    assert "dummy 1" in html and " pad " in html
    assert "dummy 1+1: the dummy batch a rank with nothing scheduled runs" in html
