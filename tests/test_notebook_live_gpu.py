"""Notebooks 4 and 5 with their live cells on, on a CUDA GPU: what they show for the live run is the model's.

``pytest -m gpu tests/test_notebook_live_gpu.py`` executes ``04_model_vs_engine``
headless (nbclient) with ``HISPARSE_NOTEBOOK_LIVE=1``: the live cell runs the
fix PR's configuration (``max_num_seqs=2``, prompts 2, 3, 200) on the installed
vLLM and shows it in a recordings dashboard named ``live``.  The test reads that
dashboard's digest from the saved widget state and checks, event by event, that
the model column is :func:`hisparse_model.predict`'s, that the engine column
equals it wherever the engine ran, and that the verdict shown is
``compare_recording``'s on the recording the cell wrote.  Notebook 5's live cell serves its dashboard's workload
(``live --workload``) and shows it in a workload-recordings dashboard named
``live_traffic``: its digest must equal :func:`hisparse_model.simulate`'s steps and
crash for that workload, and ``compare_workload_recording`` must find no difference.
Off a GPU, or without vLLM, both skip with the reason ``check_available`` gives.
"""

from __future__ import annotations

import json
import os
import re

import nbformat
import pytest
from nbclient import NotebookClient

from hisparse_model import Knobs, Workload, compare_recording, predict, simulate
from hisparse_model.chart_data import outcome_key
from hisparse_model.engine.live import LiveUnavailable, check_available
from hisparse_model.recordings import recording_knobs
from hisparse_model.views import live_output_path
from hisparse_model.views.traffic import crash_word
from hisparse_model.workload_recordings import compare_workload_recording

pytestmark = pytest.mark.gpu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOK = os.path.join(ROOT, "notebooks", "04_model_vs_engine.ipynb")
NOTEBOOK_5 = os.path.join(ROOT, "notebooks", "05_your_traffic.ipynb")
CELL_TIMEOUT = 900  # s: the live cell's child has 600 s, plus engine start-up and probes
EVENT = re.compile(r"(?P<event>start-up|prompt n=\d+) model=(?P<model>\w+) engine=(?P<engine>\w+)")


def _live_digest(nb, name: str = "live") -> str:
    """The digest line the dashboard ``name`` shows, read from the saved widget state."""
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    for model in state.values():
        value = model.get("state", {}).get("value")
        if isinstance(value, str):
            m = re.search(rf"data-dashboard='{name}'>([^<]*)</code>", value)
            if m:
                return m.group(1)
    raise AssertionError(f"the notebook shows no {name!r} dashboard")


def _execute_live(path: str, monkeypatch):
    """Run a notebook headless with its live cell on; the executed notebook."""
    monkeypatch.setenv("HISPARSE_NOTEBOOK_LIVE", "1")
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name="python3",
                   resources={"metadata": {"path": os.path.dirname(path)}}).execute()
    return nb


def test_notebook_4_live_run_shows_the_models_prediction(monkeypatch):
    """Each event the live dashboard shows: model = predict(), engine = model where it ran, verdict = compare_recording."""
    try:
        live_version = check_available()
    except LiveUnavailable as exc:
        pytest.skip(f"live engine unavailable: {exc}")
    out = live_output_path()
    if os.path.exists(out):
        os.unlink(out)  # the cell must write a fresh one
    nb = _execute_live(NOTEBOOK, monkeypatch)
    digest = _live_digest(nb)
    print(f"notebook 4 shows, for the live run: {digest}")  # the test's output, with -s
    with open(out) as f:
        rec = json.load(f)
    assert "startup" in rec, f"the live cell's engine child left no recording: {rec}"
    pred = predict(Knobs(vllm_version=live_version, max_num_seqs=2), [2, 3, 200])
    model = [outcome_key("ok" if pred.startup_ok else pred.startup_error)] + [
        outcome_key(("ok" if p.ok else p.error) if p.ran else None) for p in pred.prompts]
    shown = [m.groupdict() for m in EVENT.finditer(digest)]
    assert [e["event"] for e in shown] == ["start-up", "prompt n=2", "prompt n=3", "prompt n=200"]
    assert [e["model"] for e in shown] == model
    for e, want in zip(shown, model):
        assert e["engine"] in (want, "not_run"), (e, digest)  # the engine stops at a crash
    agrees = not compare_recording(rec)
    assert digest.startswith(f"recordings=1 agree={int(agrees)} differ={int(not agrees)} | ")
    assert agrees, compare_recording(rec)


def test_notebook_5_live_run_shows_the_models_schedule(monkeypatch):
    """Notebook 5's live cell serves the dashboard's workload; what it shows is simulate()'s, step by step."""
    try:
        check_available()
    except LiveUnavailable as exc:
        pytest.skip(f"live engine unavailable: {exc}")
    out = live_output_path("live-traffic.json")
    if os.path.exists(out):
        os.unlink(out)  # the cell must write a fresh one
    nb = _execute_live(NOTEBOOK_5, monkeypatch)
    digest = _live_digest(nb, "live_traffic")
    print(f"notebook 5 shows, for the live run: {digest}")
    with open(out) as f:
        rec = json.load(f)
    assert "startup" in rec, f"the live cell's engine run left no recording: {rec}"
    sched = simulate(recording_knobs(rec), Workload.from_json(rec["workload"]), rec.get("accepted"))
    assert digest == (f"workload_recordings=1 agree=1 differ=0 | live-traffic: steps engine="
                      f"{len(rec['steps'])} model={len(sched.steps)} crash engine="
                      f"{crash_word(rec.get('crash'))} model={crash_word(sched.crash)}")
    assert not compare_workload_recording(rec), compare_workload_recording(rec)
