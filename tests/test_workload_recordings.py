"""Every live workload recording (tests/recorded/workloads/) agrees with simulate, step by step.

Each was served on an H200 by ``hisparse live --workload``
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

from hisparse_model.recorded.recordings import load, recorded_dir, recording_knobs
from hisparse_model.answers.simulate import simulate
from hisparse_model.schedule.workload import Workload
from hisparse_model.recorded.workload_recordings import compare_workload_recording
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
                 "w-v0.31.0-stock-mtp2-piecewise.json",
                 # issue 20 on 0.33.0: skip_drafts, no crash where 0.31.0 loses, start-up IndexError
                 "w-v0.33.0-stock-mtp2-eager.json", "w-v0.33.0-stock-mtp2-s5.json",
                 "w-v0.33.0-stock-lost.json", "w-v0.33.0-stock-mtp2-b3-startup.json",
                 # issue 20 on 0.32.0: no skip_drafts, no crash where 0.31.0 loses
                 "w-v0.32.0-stock-mtp2-eager.json", "w-v0.32.0-stock-mtp2-s5.json",
                 "w-v0.32.0-stock-lost.json"):
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
    # the traffic of w-v0.31.0-stock-lost on 0.33.0: step 3's two prefills (3 + 2 = 5 = C + 1)
    # go to the all-resident path, so no crash; r0 (max_tokens 3: steps 0-2) finishes first,
    # r1 and r2 (8 output tokens each, the default: steps 3-10) together after it: nothing lost
    "w-v0.33.0-stock-lost.json": ([0, 1, 2], []),
    # the same traffic on 0.32.0: step 3's 5 tokens exceed C = 4, so its fixed predicate
    # sends them to the all-resident path; the same steps, nothing lost
    "w-v0.32.0-stock-lost.json": ([0, 1, 2], []),
    # start-up dies (B = 3 < K + 2 = 4): no request was ever submitted, so none is lost
    "w-v0.33.0-stock-mtp2-b3-startup.json": ([], []),
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
    step_record = importlib.import_module("hisparse_model.model.step_record")  # one rank's forward
    monkeypatch.setattr(step_record, "draft_steps", lambda *a, **k: None)
    rec = RECORDINGS[IDS.index("w-v0.31.0-stock-mtp2-eager.json")]
    assert any(d.startswith("routing row") for d in compare_workload_recording(rec))


def test_counting_the_unreturned_output_as_finished_is_caught(monkeypatch):
    """A model that counts the step before the crash as returned disagrees with the engine."""
    sim = importlib.import_module("hisparse_model.answers.simulate")

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
    from hisparse_model.model.knobs import Knobs
    from hisparse_model.recorded.workload_recordings import expected_workload_log

    sched = simulate(Knobs(max_num_seqs=1), Workload.from_json([{"prompt_len": 3}]))
    rows = expected_workload_log(sched)
    assert not any(r["phase"].startswith("step:") for r in rows)
    assert rows[-1]["error"] == ("ValueError: HiSparse swap rows exceed the configured "
                                 "speculative decode capacity: stop=2, capacity=1.")


def _draft_rows(rec: dict) -> set[int]:
    """Steps whose routing rows hold an eager draft step: the drafter's one layer
    (``calls`` 1), uncaptured, one token per request of the step."""
    served = {s["step"]: len(s["scheduled"]) for s in rec["steps"]}
    return {int(r["phase"][5:]) for r in rec["routing_log"] if r["phase"].startswith("step:")
            and r["cudagraph_mode"] == "NONE" and r["calls"] == 1 and not r["error"]
            and r["num_actual_tokens"] == served[int(r["phase"][5:])]}


# name -> the draft steps after each serving step on 0.33.0 (K = 2, no draft accepted):
# "eager" (routed, a row), "replay" (a FULL draft graph: no row) or "skipped" (skip_drafts:
# every request of the step is a partial prefill chunk or samples its last output token;
# with async scheduling a request with a step in flight counts that step's token too)
SKIP_DRAFTS = {
    # S = 4, enforce_eager (every draft step that runs is eager):
    # step 0: r0 (max_tokens 1) alone samples its only token -> skipped;
    # steps 1-4: r2 (max_tokens 6, first token at step 1) has outputs to come -> eager;
    # step 5: r2 alone samples its 5th of 6 -> eager;
    # step 6: r2 samples its 6th and last, r3 computes 253 of its 300 prompt tokens
    #   (256 - 3 budget left) -> both sure to leave the drafts unused -> skipped;
    # step 7: r3's last chunk (47 tokens) samples its 1st of 3 -> eager; step 8 its 2nd -> eager;
    # step 9: r3 samples its last, r4 (max_tokens 3) prefills, its 1st -> eager;
    # step 10: r4's 2nd -> eager; step 11: r4's 3rd and last, alone -> skipped
    "w-v0.33.0-stock-mtp2-eager.json": {
        0: "skipped", 1: "eager", 2: "eager", 3: "eager", 4: "eager", 5: "eager",
        6: "skipped", 7: "eager", 8: "eager", 9: "eager", 10: "eager", 11: "skipped"},
    # S = 5, default mode: draft graphs for 1, 2, 3, 4 requests (capture sizes <= S);
    # steps 0-3: 5 requests, r0/r1/r2/r4 (max_tokens 6) sample their 1st..4th -> eager;
    # step 4: r3 (max_tokens 4) finished at step 3, 4 requests -> replay;
    # step 5: r0/r1/r2/r4 sample their 6th and last, r5 (max_tokens 1) its only one:
    #   5 requests, so without skip_drafts an eager row -> skipped
    "w-v0.33.0-stock-mtp2-s5.json": {
        0: "eager", 1: "eager", 2: "eager", 3: "eager", 4: "replay", 5: "skipped"},
    # The same two workloads on 0.32.0, which has no skip_drafts: the same steps (the same
    # schedule), but a draft step after every one; where 0.33.0 skips, 0.32.0 drafts.
    # S = 4, enforce_eager (nothing captured): all 12 steps eager, 0.33.0's skipped
    # steps included: step 0 (r0 alone), step 6 (r2 and r3's chunk), step 11 (r4 alone)
    "w-v0.32.0-stock-mtp2-eager.json": {step: "eager" for step in range(12)},
    # S = 5: steps 0-3 and step 5 hold 5 requests, more than the largest draft graph (4):
    # eager; step 4 holds 4: replay
    "w-v0.32.0-stock-mtp2-s5.json": {
        0: "eager", 1: "eager", 2: "eager", 3: "eager", 4: "replay", 5: "eager"},
}
# the 0.32.0 recording of each 0.33.0 skip_drafts workload (same workload, same steps)
V032_OF_V033 = {"w-v0.33.0-stock-mtp2-eager.json": "w-v0.32.0-stock-mtp2-eager.json",
                "w-v0.33.0-stock-mtp2-s5.json": "w-v0.32.0-stock-mtp2-s5.json"}
_MODEL_KIND = {None: "skipped", "NONE": "eager", "FULL": "replay"}


@pytest.mark.parametrize("name,kinds", sorted(SKIP_DRAFTS.items()))
def test_skip_drafts_fires_in_some_steps_only(name, kinds):
    """The engine drafts after exactly the steps the hand arithmetic names, and so does the model."""
    rec = RECORDINGS[IDS.index(name)]
    assert rec["accepted"] is None or set(rec["accepted"]["table"].values()) == {0}
    assert sorted(s["step"] for s in rec["steps"]) == sorted(kinds)
    assert _draft_rows(rec) == {k for k, v in kinds.items() if v == "eager"}  # the engine
    model = {st.step: _MODEL_KIND[st.draft and st.draft.mode] for st in _simulated(rec).steps}
    assert model == kinds  # the model


@pytest.mark.parametrize("name", sorted(V032_OF_V033))
def test_without_skip_drafts_the_model_adds_rows(monkeypatch, name):
    """A model that drafts after every 0.33.0 step disagrees with these recordings."""
    sim = importlib.import_module("hisparse_model.answers.simulate")
    real = sim._rank_schedule  # one rank's steps and its host cache

    def always_drafting(*args, **kwargs):
        steps, cache = real(*args, **kwargs)
        for st in steps:
            st.drafts = True
        return steps, cache

    monkeypatch.setattr(sim, "_rank_schedule", always_drafting)
    rec = RECORDINGS[IDS.index(name)]
    assert any(d.startswith("routing row") for d in compare_workload_recording(rec))


@pytest.mark.parametrize("name033,name032", sorted(V032_OF_V033.items()))
def test_skip_drafts_on_v032_misses_rows(monkeypatch, name033, name032):
    """A model that skips 0.32.0's draft steps where 0.33.0 skipped them disagrees with 0.32.0."""
    sim = importlib.import_module("hisparse_model.answers.simulate")
    real = sim._rank_schedule  # one rank's steps and its host cache
    skipped = {step for step, kind in SKIP_DRAFTS[name033].items() if kind == "skipped"}
    assert skipped  # 0.33.0 skipped some steps (hand arithmetic above)

    def skipping_like_v033(*args, **kwargs):
        steps, cache = real(*args, **kwargs)
        for st in steps:
            if st.index in skipped:
                st.drafts = False
        return steps, cache

    monkeypatch.setattr(sim, "_rank_schedule", skipping_like_v033)
    rec = RECORDINGS[IDS.index(name032)]
    assert any(d.startswith("routing row") for d in compare_workload_recording(rec))


@pytest.mark.parametrize("name", ["w-v0.32.0-stock-lost.json", "w-v0.33.0-stock-lost.json"])
def test_the_031_crash_traffic_routes_all_resident(name):
    """The step that crashes 0.31.0 (3 + 2 = 5 = C + 1 prefill tokens, C = min(256, 4 * 1) = 4)
    goes to the all-resident path on 0.32.0 (5 > C) and 0.33.0 (prefills), engine and model."""
    rec = RECORDINGS[IDS.index(name)]
    rows = [r for r in rec["routing_log"] if r["phase"] == "step:3"]
    assert [(r["num_tokens"], r["swap_capacity"], r["route"], r["error"]) for r in rows] == [
        (5, 4, "all_resident", None)]
    step3 = next(st for st in _simulated(rec).steps if st.step == 3)
    assert (step3.num_tokens, step3.route, step3.error) == (5, "all_resident", None)


def test_v033_mtp_startup_index_error():
    """B = 3 < K + 2 = 4 leaves 0.33.0's JIT warmup without a request: IndexError at start-up."""
    rec = RECORDINGS[IDS.index("w-v0.33.0-stock-mtp2-b3-startup.json")]
    want = {"step": None, "error": "IndexError: list index out of range"}
    assert rec["crash"] == want and rec["steps"] == []  # the engine
    sched = _simulated(rec)
    assert sched.crash == want and sched.steps == []  # the model
