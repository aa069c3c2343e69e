"""The checks of every live (``gpu``) test, shared with their CPU replay twins.

A GPU test runs the real engine and hands what it produced (an executed notebook, a
recording) to one of the ``check_*`` functions here; its twin in CI
(``tests/test_notebook_live_replay.py``, ``tests/test_live_replay.py``) produces the same
things with :mod:`hisparse_model.engine.replay` playing back a committed real recording,
and calls the same function.  So a check that rots (reads a markup the views no longer
write, compares the wrong numbers) fails in CI, not first on a GPU.  Every check raises
``AssertionError`` and reads a dashboard's state only through the views' one digest
reader (:mod:`hisparse_model.views.digest`).  ``tests/gpu_twins.py`` lists which twin
runs which GPU test's checks.
"""

from __future__ import annotations

import os
import re

from hisparse_model import Knobs, Workload, compare_recording, predict, simulate
from hisparse_model.text.chart_data import outcome_key
from hisparse_model.engine import parallel
from hisparse_model.recorded.recordings import recording_knobs
from hisparse_model.recorded.workload_recordings import compare_workload_recording

# The views (ipywidgets) are imported only by the notebook checks: tests/test_live_gpu.py runs
# where only ``.[gpu]`` and pytest are installed (docs/gpu.md).

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOK_4 = os.path.join(ROOT, "notebooks", "04_model_vs_engine.ipynb")
NOTEBOOK_5 = os.path.join(ROOT, "notebooks", "05_your_traffic.ipynb")
CELL_TIMEOUT = 900  # s: the live cell's child has 600 s, plus engine start-up and probes

# Notebook 4's live cell: the fix PR's configuration (max_num_seqs=2, prefix caching off,
# prompts 2, 3, 200) on the installed vLLM.
NB4_KNOBS = dict(max_num_seqs=2, enable_prefix_caching=False)
NB4_PROMPTS = [2, 3, 200]
EVENT = re.compile(r"(?P<event>start-up|prompt n=\d+) model=(?P<model>\w+) engine=(?P<engine>\w+)")


def real_engine_version(gpus: int = 1) -> str:
    """A GPU test's probe: the installed vLLM's version; skips off a GPU or without vLLM, and
    fails under ``HISPARSE_LIVE_REPLAY`` (a GPU test runs the real engine, never a replay)."""
    import pytest

    from hisparse_model.engine.live import LiveUnavailable, check_available
    from hisparse_model.engine.replay import REPLAY_ENV

    if os.environ.get(REPLAY_ENV):
        pytest.fail(f"{REPLAY_ENV} is set: a gpu test runs the real engine; unset it")
    try:
        return check_available(gpus)
    except LiveUnavailable as exc:
        pytest.skip(f"live engine unavailable: {exc}")


def assert_engine_ran(rec: dict) -> None:
    """A GPU test's recording came from the engine, not from a replay."""
    assert "replay" not in rec.get("provenance", {}), rec["provenance"]["replay"]


def execute_live(path: str, monkeypatch, *, timeout: int = CELL_TIMEOUT, inserts=()):
    """Run a notebook headless (nbclient, kernel python3) with its live cells on; the executed
    notebook.  ``inserts``: ``(text, code)`` pairs, each a code cell put after the first cell
    whose source contains ``text`` (``""``: before every cell), as a reader would type it."""
    import nbformat

    import kernels

    monkeypatch.setenv("HISPARSE_NOTEBOOK_LIVE", "1")
    nb = nbformat.read(path, as_version=4)
    for text, code in inserts:
        at = 0 if text == "" else 1 + next(i for i, c in enumerate(nb.cells)
                                           if text in c.source)
        nb.cells.insert(at, nbformat.v4.new_code_cell(code))
    kernels.execute(nb, path, timeout)
    return nb


def live_digest(nb, name: str) -> str:
    """The digest line the dashboard ``name`` shows, read from the saved widget state."""
    from hisparse_model.views.digest import saved_digests

    found = saved_digests(nb)
    if name not in found:
        raise AssertionError(f"the notebook shows no {name!r} dashboard "
                             f"(it shows {sorted(found) or 'none'})")
    return found[name][0]


def check_notebook_4(nb, rec: dict, version: str) -> str:
    """Notebook 4's ``live`` dashboard: each event's model column is predict()'s for the live
    cell's configuration, the engine column equals it wherever the engine ran, and the verdict
    shown is compare_recording's on the recording the cell wrote.  Returns the digest."""
    digest = live_digest(nb, "live")
    assert "startup" in rec, f"the live cell's engine child left no recording: {rec}"
    knobs = Knobs(vllm_version=version, **NB4_KNOBS)
    assert (recording_knobs(rec), rec["prompt_lens"]) == (knobs, NB4_PROMPTS), rec["knobs"]
    pred = predict(knobs, NB4_PROMPTS)
    model = [outcome_key("ok" if pred.startup_ok else pred.startup_error)] + [
        outcome_key(("ok" if p.ok else p.error) if p.ran else None) for p in pred.prompts]
    shown = [m.groupdict() for m in EVENT.finditer(digest)]
    assert [e["event"] for e in shown] == ["start-up"] + [f"prompt n={n}" for n in NB4_PROMPTS]
    assert [e["model"] for e in shown] == model, digest
    for e, want in zip(shown, model):
        assert e["engine"] in (want, "not_run"), (e, digest)  # the engine stops at a crash
    diffs = compare_recording(rec)
    assert digest.startswith(f"recordings=1 agree={int(not diffs)} differ={int(bool(diffs))} | ")
    assert not diffs, "\n".join(diffs)
    return digest


def check_notebook_5(nb, rec: dict) -> str:
    """Notebook 5's ``live_traffic`` dashboard: its digest is simulate()'s steps and crash for the
    workload served, and compare_workload_recording finds no difference.  Returns the digest."""
    from hisparse_model.views.traffic import crash_word

    digest = live_digest(nb, "live_traffic")
    assert "startup" in rec, f"the live cell's engine run left no recording: {rec}"
    sched = simulate(recording_knobs(rec), Workload.from_json(rec["workload"]), rec.get("accepted"))
    assert digest == (f"workload_recordings=1 agree=1 differ=0 | live-traffic: steps engine="
                      f"{len(rec['steps'])} model={len(sched.steps)} crash engine="
                      f"{crash_word(rec.get('crash'))} model={crash_word(sched.crash)}"), digest
    diffs = compare_workload_recording(rec)
    assert not diffs, "\n".join(diffs)
    return digest


def check_live_recording(rec: dict) -> None:
    """tests/test_live_gpu.py: a real engine run and the model agree on every number, outcome
    and routing row."""
    assert "startup" in rec, f"engine child produced no recording: {rec}"
    diffs = compare_recording(rec)
    assert not diffs, "\n".join(diffs)


def check_two_gpu_recording(rec: dict, knobs: Knobs) -> None:
    """tests/test_live_gpu_two.py: every process ran with NVLink multicast off, a TP run with
    vLLM's custom all-reduce off, and the recording agrees with the model rank by rank."""
    from hisparse_model.recorded.rank_recordings import compare_dp_recording, compare_tp_recording

    assert "startup" in rec, f"engine child produced no recording: {rec}"
    envs = [rec["provenance"]["env"]] + [r["provenance"]["env"] for r in rec.get("ranks", [])
                                         if "provenance" in r]
    for env in envs:
        got = {k: env.get(k) for k in parallel.MULTICAST_OFF_ENV}
        assert got == parallel.MULTICAST_OFF_ENV, f"NVLink multicast not off: {got}"
    if knobs.data_parallel_size > 1:
        diffs = compare_dp_recording(rec)
    else:
        assert rec["provenance"]["engine_args"]["disable_custom_all_reduce"] is True
        diffs = compare_tp_recording(rec)
    assert not diffs, "\n".join(diffs)
