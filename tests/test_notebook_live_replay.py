"""Notebooks 4 and 5 with their live cells on, in CI: a committed recording played back stands in for the GPU.

The CPU twin of ``tests/test_notebook_live_gpu.py``.  Each test executes a notebook
headless (nbclient) with ``HISPARSE_NOTEBOOK_LIVE=1`` and ``HISPARSE_LIVE_REPLAY`` naming a
committed real recording, so the live cell's ``check_available`` answers the recording's
vLLM version and its ``run_one`` (notebook 4) or ``hisparse live
--workload`` (notebook 5) plays the recording back (:mod:`hisparse_model.engine.replay`)
instead of starting vLLM.  What the notebook then shows is checked by the very functions
the GPU test runs (``tests/live_checks.py``).  They must fail when the recording played back
disagrees with the model (an altered copy) and when the views write a digest the one reader
(``views/digest.py``) does not read.

Notebook 5's dashboard starts at ``max_num_seqs=4``, prompts 3 and 2 arriving together,
8 tokens each; the committed recordings of that workload (``w-v0.3x.0-stock-concurrent``)
also ran ``max_num_batched_tokens=256`` and prefix caching off, so the test sets those two
controls in the dashboard (an inserted cell, as a reader would) before the live cell runs.
"""

from __future__ import annotations

import json
import os

import pytest

from hisparse_model.engine.replay import REPLAY_ENV
from hisparse_model.recorded.recordings import recorded_dir
from hisparse_model.views import live_output_path
from hisparse_model.views.engine_runs import LIVE_OUT_ENV
from hisparse_model.views.digest import WIDGET_STATE, read_digests, saved_digests, summary_html

from live_checks import NOTEBOOK_4, NOTEBOOK_5, check_notebook_4, check_notebook_5, execute_live

TIMEOUT = 120  # s per cell: a replay starts no engine

# the reader's moves that make notebook 5's dashboard ask for what the recordings ran
AS_RECORDED = ('dash.controls["max_num_batched_tokens"].value = 256\n'
               'dash.controls["enable_prefix_caching"].value = False')
AFTER_DASHBOARD = "TrafficDashboard("

# version -> notebook 4's live digest, from the recording alone (the model is not asked):
NB4_SHOWN = {
    # C = min(640, 2 * 1) = 2, W = C + 1 = 3: the 3-token prompt routes 3 rows to swap_in,
    # which holds 2 (stop=3, capacity=2); the engine stops there, 200 never runs
    "0.31.0": ("recordings=1 agree=1 differ=0 | live: start-up model=ok engine=ok; "
               "prompt n=2 model=ok engine=ok; prompt n=3 model=crash engine=crash; "
               "prompt n=200 model=not_run engine=not_run"),
    # 0.33.0 routes on C = 2: the 3-token prompt goes all-resident, every prompt is served
    "0.33.0": ("recordings=1 agree=1 differ=0 | live: start-up model=ok engine=ok; "
               "prompt n=2 model=ok engine=ok; prompt n=3 model=ok engine=ok; "
               "prompt n=200 model=ok engine=ok"),
}
# recording -> notebook 5's live crash (engine, model), from the recording alone:
NB5_CRASH = {
    # C = min(256, 4 * 1) = 4, W = 5: step 0 runs both prefills, 3 + 2 = 5 tokens <= W,
    # routed to swap_in, which holds 4 (stop=5, capacity=4)
    "w-v0.31.0-stock-concurrent": "crash engine=step0 model=step0",
    # 0.32.0 routes on C = 4: the 5-token step goes all-resident, nothing crashes
    "w-v0.32.0-stock-concurrent": "crash engine=none model=none",
}


@pytest.fixture(autouse=True)
def _own_live_folder(monkeypatch, tmp_path):
    """The live cells write into this test's folder: tests side by side under pytest -n
    must not read each other's run."""
    monkeypatch.setenv(LIVE_OUT_ENV, str(tmp_path))


def _committed(name: str) -> str:
    return os.path.join(recorded_dir(), f"{name}.json")


def _workload(name: str) -> str:
    return os.path.join(recorded_dir(), "workloads", f"{name}.json")


def _altered(path: str, tmp_path, change) -> str:
    """A copy of a committed recording with ``change`` applied (in tmp_path, same name)."""
    with open(path) as f:
        rec = json.load(f)
    change(rec)
    out = tmp_path / os.path.basename(path)
    out.write_text(json.dumps(rec))
    return str(out)


def _replayed(monkeypatch, recording: str, filename: str) -> str:
    """Replay ``recording``; the live cell's output path (this test's own folder), emptied."""
    monkeypatch.setenv(REPLAY_ENV, recording)
    out = live_output_path(filename)
    if os.path.exists(out):
        os.unlink(out)
    return out


def _load(out: str, recording: str) -> dict:
    with open(out) as f:
        rec = json.load(f)
    assert rec["provenance"]["replay"]["of"] == os.path.basename(recording)  # not a new run
    return rec


def _notebook_4(monkeypatch, recording: str, inserts=()):
    out = _replayed(monkeypatch, recording, "live-notebook.json")
    nb = execute_live(NOTEBOOK_4, monkeypatch, timeout=TIMEOUT, inserts=inserts)
    return nb, _load(out, recording)


def _notebook_5(monkeypatch, recording: str):
    out = _replayed(monkeypatch, recording, "live-traffic.json")
    nb = execute_live(NOTEBOOK_5, monkeypatch, timeout=TIMEOUT,
                      inserts=[(AFTER_DASHBOARD, AS_RECORDED)])
    return nb, _load(out, recording)


@pytest.mark.parametrize("version", sorted(NB4_SHOWN))
def test_notebook_4_replayed_run_shows_the_models_prediction(version, monkeypatch):
    """Notebook 4's live dashboard on a replayed recording of the fix PR's configuration passes the GPU test's checks."""
    nb, rec = _notebook_4(monkeypatch, _committed(f"v{version}-stock-s2"))
    assert check_notebook_4(nb, rec, version) == NB4_SHOWN[version]


@pytest.mark.parametrize("name", sorted(NB5_CRASH))
def test_notebook_5_replayed_run_shows_the_models_schedule(name, monkeypatch):
    """Notebook 5's live dashboard on a replayed workload recording passes the GPU test's checks."""
    nb, rec = _notebook_5(monkeypatch, _workload(name))
    assert check_notebook_5(nb, rec).endswith(NB5_CRASH[name])


def _prompt_3_served(rec):
    rec["prompts"][1] = {"n": 3, "ran": True, "ok": True, "error": None}


def test_a_recording_that_disagrees_with_the_model_fails_notebook_4s_checks(monkeypatch, tmp_path):
    """0.31.0's recording altered so the 3-token prompt is served: the checks reject what the notebook shows."""
    altered = _altered(_committed("v0.31.0-stock-s2"), tmp_path, _prompt_3_served)
    nb, rec = _notebook_4(monkeypatch, altered)
    with pytest.raises(AssertionError):
        check_notebook_4(nb, rec, "0.31.0")


def _no_crash(rec):
    rec["crash"] = None


def test_a_recording_that_disagrees_with_the_model_fails_notebook_5s_checks(monkeypatch, tmp_path):
    """w-v0.31.0-stock-concurrent altered so step 0 does not crash: the checks reject what the notebook shows."""
    altered = _altered(_workload("w-v0.31.0-stock-concurrent"), tmp_path, _no_crash)
    nb, rec = _notebook_5(monkeypatch, altered)
    with pytest.raises(AssertionError):
        check_notebook_5(nb, rec)


# the digest as the views wrote it before (the markup the GPU test once read): a writer that
# changes without the reader
OLD_WRITER = ("import hisparse_model.views.digest as _digest\n"
              "_digest.summary_html.__code__ = (lambda name, summary: "
              "f\"<code class='hs-summary' data-dashboard='{name}'>{summary}</code>\").__code__")


def test_a_digest_the_reader_does_not_read_fails_the_checks(monkeypatch):
    """The views' digest writer patched in the kernel (to the old markup): the checks find no live dashboard."""
    nb, rec = _notebook_4(monkeypatch, _committed("v0.31.0-stock-s2"), inserts=[("", OLD_WRITER)])
    with pytest.raises(AssertionError, match="shows no 'live' dashboard"):
        check_notebook_4(nb, rec, "0.31.0")


def test_the_recordings_played_back_are_real_ones():
    """What the replay tests play back is committed engine output: a recording, not a replay of one."""
    for path in [_committed("v0.31.0-stock-s2"), _committed("v0.33.0-stock-s2"),
                 *map(_workload, NB5_CRASH)]:
        with open(path) as f:
            prov = json.load(f)["provenance"]
        assert "replay" not in prov and prov["gpu"].startswith("NVIDIA"), (path, prov.get("gpu"))


@pytest.mark.parametrize("summary", [
    "B=640 q=1 C=2 W=3 crash_size=3",
    "recordings=1 agree=1 differ=0 | live: prompt n=3 model=crash engine=crash",
    "a <b> & 'quoted' \"line\"",  # escaped by the writer, decoded by the reader
])
def test_the_reader_reads_what_the_writer_writes(summary):
    """read_digests(summary_html(name, s)) == {name: s}; saved_digests finds it in a notebook's widget state."""
    markup = "<div>numbers</div>" + summary_html("live", summary)
    assert read_digests(markup) == {"live": summary}
    nb = {"metadata": {"widgets": {WIDGET_STATE: {"state": {
        "m1": {"state": {"value": markup}}, "m2": {"state": {"value": 3}}, "m3": {}}}}}}
    assert saved_digests(nb) == {"live": (summary, markup)}
    assert saved_digests({"metadata": {}}) == {}  # a notebook that displayed no widget
