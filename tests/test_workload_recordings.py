"""Every live workload recording (tests/recorded/workloads/) agrees with simulate, step by step.

Each was served on an H200 by ``python -m hisparse_model live --workload``
(see its ``provenance``): requests added at their arrival step, every engine
step's scheduled tokens recorded with the routing rows of its forward.  The
model must reproduce the sizes, start-up, every step's tokens per request, the
crash (step and vLLM's exact text), the finished requests (what the caller
received), the requests a crash lost (recorded since the runner reads them) and
every routing row, the MTP drafter's uncaptured draft steps included.
"""

import copy
import glob
import importlib
import os

import pytest

from hisparse_model.recordings import load, recorded_dir, recording_knobs
from hisparse_model.simulate import simulate
from hisparse_model.workload import Workload
from hisparse_model.workload_recordings import compare_workload_recording
from provenance import check_provenance

PATHS = sorted(glob.glob(os.path.join(recorded_dir(), "workloads", "*.json")))
RECORDINGS = [load(p) for p in PATHS]
IDS = [os.path.basename(p) for p in PATHS]


def test_the_issue_workloads_are_recorded():
    """Inventory: >= 8 workloads on 0.31.0 (stock and fix) and 0.32.0, incl. a concurrency-only crash."""
    names = set(IDS)
    for must in ("w-v0.31.0-stock-concurrent.json", "w-v0.31.0-stock-spaced.json",
                 "w-v0.31.0-fix-concurrent.json", "w-v0.32.0-stock-concurrent.json",
                 "w-v0.31.0-stock-chunked.json", "w-v0.31.0-stock-prefix.json",
                 "w-v0.31.0-stock-mtp1.json", "w-v0.32.0-stock-long.json",
                 # issue 20: a crash's lost outputs; the drafter's uncaptured draft steps
                 "w-v0.31.0-stock-lost.json", "w-v0.31.0-stock-mtp2-eager-lost.json",
                 "w-v0.31.0-stock-mtp2-eager.json", "w-v0.31.0-stock-mtp2-s5.json",
                 "w-v0.31.0-stock-mtp2-piecewise.json"):
        assert must in names
    assert len(RECORDINGS) >= 8
    assert max(len(r["workload"]) for r in RECORDINGS) >= 50  # a long run of 50+ requests


@pytest.mark.parametrize("rec", RECORDINGS, ids=IDS)
def test_workload_recording_matches_simulate(rec):
    """simulate() reproduces the engine's schedule, routing rows, crash and finished requests."""
    assert check_provenance(rec) == []
    assert compare_workload_recording(rec) == []


# name -> (crash step, stop = C + 1, capacity = C): what the engine raised
CRASHES = {
    # S=4 (C = 4): a 3- and a 2-token prompt arriving together: 3 + 2 = 5 = C + 1 at step 0
    "w-v0.31.0-stock-concurrent.json": (0, 5, 4),
    # a 69-token prompt whose first 64 tokens hit the prefix cache computes 5 = C + 1
    "w-v0.31.0-stock-prefix.json": (30, 5, 4),
    # S=4: r1 (3) + r2 (2) arrive at step 3, r0 is done: 3 + 2 = 5 = C + 1 at step 3
    "w-v0.31.0-stock-lost.json": (3, 5, 4),
    # S=4, K=2 (C = min(256, 4 * 3) = 12): prompts of 6 and 7 tokens arrive at step 4,
    # each longer than q = 3, so no decode split: all 6 + 7 = 13 = C + 1 tokens routed
    "w-v0.31.0-stock-mtp2-eager-lost.json": (4, 13, 12),
}


def _simulated(rec: dict):
    return simulate(recording_knobs(rec), Workload.from_json(rec["workload"]), rec.get("accepted"))


@pytest.mark.parametrize("name,expected", sorted(CRASHES.items()))
def test_recorded_crashes(name, expected):
    """The engine and simulate() both crash exactly where the hand arithmetic says, with vLLM's text."""
    rec = RECORDINGS[IDS.index(name)]
    step, stop, cap = expected
    want = {"step": step, "error": (
        "ValueError: HiSparse swap rows exceed the configured speculative decode capacity: "
        f"stop={stop}, capacity={cap}.")}
    assert rec["crash"] == want  # the engine
    assert _simulated(rec).crash == want  # the model


def test_spaced_out_requests_do_not_crash():
    """The same two requests 12 steps apart never share a step: no crash, both finish (engine and model)."""
    rec = RECORDINGS[IDS.index("w-v0.31.0-stock-spaced.json")]
    assert rec["crash"] is None and rec["finished"] == [0, 1]
    sched = _simulated(rec)
    assert sched.crash is None and sorted(sched.finished) == [0, 1]


def test_a_changed_step_is_caught():
    """Altering one recorded step's tokens makes the comparison fail (the check can fail)."""
    rec = copy.deepcopy(RECORDINGS[IDS.index("w-v0.31.0-stock-chunked.json")])
    first = rec["steps"][1]["scheduled"]
    key = next(iter(first))
    first[key] += 1
    assert any("step #1" in d for d in compare_workload_recording(rec))


# name -> (finished, lost): what the caller received and what the crash lost
LOSSES = {
    # r0 (2 tokens, max_tokens 3): output 1 from its prefill (step 0), then decodes in
    # steps 1 and 2; step 2's output (its 3rd token) is handed back only after step 3 is
    # scheduled and run, and step 3's forward raises: computed, never returned
    "w-v0.31.0-stock-lost.json": ([], [(0, "computed but never returned"),
                                       (1, "still running"), (2, "still running")]),
    # K=2, no draft accepted: r0 (max_tokens 3) prefills in step 0 and verifies in steps 1
    # and 2, handed back by step 3; r1 (arrives at 1) verifies last in step 3, whose
    # output step 4's crash keeps from the caller
    "w-v0.31.0-stock-mtp2-eager-lost.json": ([0], [(1, "computed but never returned"),
                                                   (2, "still running"),
                                                   (3, "still running")]),
}


@pytest.mark.parametrize("name,expected", sorted(LOSSES.items()))
def test_recorded_losses(name, expected):
    """The caller received exactly the finished requests; the crash lost the others as labelled."""
    rec = RECORDINGS[IDS.index(name)]
    finished, lost = expected
    assert rec["finished"] == finished
    assert [(x["request"], x["why"]) for x in rec["lost"]] == lost


# name -> (steps with the drafter's routed draft steps, tokens each): K = 2, one draft step
DRAFT_ROWS = {
    # enforce_eager: nothing is captured, every step drafts eagerly; 4 requests at most
    "w-v0.31.0-stock-mtp2-eager.json": 8,
    # PIECEWISE: draft steps never use PIECEWISE graphs, so they run eagerly
    "w-v0.31.0-stock-mtp2-piecewise.json": 6,
    # FULL_AND_PIECEWISE, S=5: draft graphs for 1, 2, 3, 4 requests (capture sizes <= 5),
    # so the 5 requests of every step draft eagerly while the target replays FULL graphs
    "w-v0.31.0-stock-mtp2-s5.json": 6,
}


@pytest.mark.parametrize("name,steps", sorted(DRAFT_ROWS.items()))
def test_uncaptured_draft_steps_are_logged(name, steps):
    """Every serving step of these recordings logs one eager draft-step row (drafter layer)."""
    rec = RECORDINGS[IDS.index(name)]
    served = {s["step"]: len(s["scheduled"]) for s in rec["steps"]}
    drafts = [r for r in rec["routing_log"] if r["phase"].startswith("step:")
              and r["cudagraph_mode"] == "NONE" and r["calls"] == 1 and not r["error"]
              and r["num_actual_tokens"] == served[int(r["phase"][5:])]]
    assert len(served) == steps
    assert sorted(int(r["phase"][5:]) for r in drafts) == sorted(served)


def test_without_draft_steps_the_model_misses_rows(monkeypatch):
    """A model without serving draft steps disagrees with the K = 2 eager recording."""
    sim = importlib.import_module("hisparse_model.simulate")
    monkeypatch.setattr(sim, "draft_steps", lambda *a, **k: None)
    rec = RECORDINGS[IDS.index("w-v0.31.0-stock-mtp2-eager.json")]
    assert any(d.startswith("routing row") for d in compare_workload_recording(rec))


def test_counting_the_unreturned_output_as_finished_is_caught(monkeypatch):
    """A model that counts the step before the crash as returned disagrees with the engine."""
    sim = importlib.import_module("hisparse_model.simulate")

    def old(steps, crash, arrivals):  # every step that ran before the crash handed back
        ran = [st for st in steps if crash is None or st.index < crash]
        return [r for st in ran for r in st.finished], []

    monkeypatch.setattr(sim, "returned_and_lost", old)
    rec = RECORDINGS[IDS.index("w-v0.31.0-stock-lost.json")]
    diffs = compare_workload_recording(rec)
    assert any(d.startswith("finished:") for d in diffs)
    assert any(d.startswith("lost:") for d in diffs)


@pytest.mark.parametrize("field,change,needle", [
    ("startup", lambda r: r["startup"].update(error="IndexError: list index out of range"),
     "startup:"),
    ("steps", lambda r: r["steps"].pop(), "steps: engine scheduled"),
    ("crash", lambda r: r.update(crash={"step": 3, "error": "ValueError: x"}), "crash: engine"),
    ("finished", lambda r: r["finished"].pop(), "finished: engine"),
])
def test_each_changed_field_is_caught(field, change, needle):
    """Altering the recording's start-up, step count, crash or finished requests is reported."""
    rec = copy.deepcopy(RECORDINGS[IDS.index("w-v0.31.0-stock-spaced.json")])
    assert compare_workload_recording(rec) == []
    change(rec)
    assert any(d.startswith(needle) for d in compare_workload_recording(rec)), field


def test_after_a_startup_crash_no_step_is_logged():
    """S=1 dies on the 2-token capture (C = 1, stop = 2): the expected log ends there, no step rows."""
    from hisparse_model.knobs import Knobs
    from hisparse_model.workload_recordings import expected_workload_log

    sched = simulate(Knobs(max_num_seqs=1), Workload.from_json([{"prompt_len": 3}]))
    rows = expected_workload_log(sched)
    assert not any(r["phase"].startswith("step:") for r in rows)
    assert rows[-1]["error"] == ("ValueError: HiSparse swap rows exceed the configured "
                                 "speculative decode capacity: stop=2, capacity=1.")
