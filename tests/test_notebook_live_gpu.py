"""Notebooks 4 and 5 with their live cells on, on a CUDA GPU: what they show for the live run is the model's.

``pytest -m gpu tests/test_notebook_live_gpu.py`` executes ``04_model_vs_engine``
headless (nbclient) with ``HISPARSE_NOTEBOOK_LIVE=1``: the live cell runs the
fix PR's configuration (``max_num_seqs=2``, prefix caching off, prompts 2, 3, 200) on the
installed vLLM and shows it in a recordings dashboard named ``live``.  Notebook 5's live
cell serves its dashboard's workload (``live --workload``) and shows it in a
workload-recordings dashboard named ``live_traffic``.  What each shows is checked by
``tests/live_checks.py`` (``check_notebook_4``, ``check_notebook_5``): the same functions
its CPU twin, ``tests/test_notebook_live_replay.py``, runs in CI on committed recordings
played back.  Off a GPU, or without vLLM, both skip with the reason ``check_available`` gives;
under ``HISPARSE_LIVE_REPLAY`` they fail (a GPU test never passes on a replay).
"""

from __future__ import annotations

import json
import os

import pytest

from hisparse_model.views import live_output_path

from live_checks import (NOTEBOOK_4, NOTEBOOK_5, assert_engine_ran, check_notebook_4,
                         check_notebook_5, execute_live, real_engine_version)

pytestmark = pytest.mark.gpu


def _fresh(filename: str) -> str:
    out = live_output_path(filename)
    if os.path.exists(out):
        os.unlink(out)  # the cell must write a fresh one
    return out


def _load(path: str) -> dict:
    with open(path) as f:
        rec = json.load(f)
    assert_engine_ran(rec)
    return rec


def test_notebook_4_live_run_shows_the_models_prediction(monkeypatch):
    """Each event the live dashboard shows: model = predict(), engine = model where it ran, verdict = compare_recording."""
    version = real_engine_version()
    out = _fresh("live-notebook.json")
    nb = execute_live(NOTEBOOK_4, monkeypatch)
    digest = check_notebook_4(nb, _load(out), version)
    print(f"notebook 4 shows, for the live run: {digest}")  # the test's output, with -s


def test_notebook_5_live_run_shows_the_models_schedule(monkeypatch):
    """Notebook 5's live cell serves the dashboard's workload; what it shows is simulate()'s, step by step."""
    real_engine_version()
    out = _fresh("live-traffic.json")
    nb = execute_live(NOTEBOOK_5, monkeypatch)
    digest = check_notebook_5(nb, _load(out))
    print(f"notebook 5 shows, for the live run: {digest}")
