"""Notebook 4 names each recording by its knobs: every committed recording's name is made of
parts the page defines (views/engine_runs.py NAME_PARTS), and the page lists each part."""

import pathlib

import pytest

from hisparse_model.views.engine_runs import NAME_PARTS, NAMING, name_parts

ROOT = pathlib.Path(__file__).resolve().parents[1]
NAMES = sorted(p.stem for p in (ROOT / "tests" / "recorded").glob("*.json")) + sorted(
    p.stem for p in (ROOT / "tests" / "recorded" / "workloads").glob("*.json"))


@pytest.mark.parametrize("name", NAMES)
def test_every_part_of_a_recordings_name_is_defined(name):
    """Each dash-separated part of the name matches one entry, whose words the page shows."""
    parts = name_parts(name)
    assert "-".join(p for p, _ in parts) == name


# (name, the words of its parts): notebook 4's three names the learner could not read
READ = [
    ("v0.34.0-serve-s64-b8192-l16384", ["the vLLM release",
                                        "served through AsyncLLM, the engine class vllm serve runs",
                                        "max_num_seqs (s2: 2)", "max_num_batched_tokens (b64: 64)",
                                        "max_model_len (l16384: 16,384)"]),
    ("v0.32.0-stock-s8-blocks100", ["the vLLM release", "vLLM's own routing",
                                    "max_num_seqs (s2: 2)",
                                    "num_gpu_blocks_override: a KV pool of that many blocks"]),
]


@pytest.mark.parametrize("name,words", READ)
def test_the_names_a_learner_asked_about_read(name, words):
    assert [w for _, w in name_parts(name)] == words


def test_a_part_no_entry_reads_is_named():
    with pytest.raises(ValueError, match="'xyz' says nothing"):
        name_parts("v0.31.0-stock-xyz")


def test_the_page_lists_every_part():
    assert NAMING.count("<li>") == len(NAME_PARTS) and len(NAMES) >= 60
