"""Every live workload recording (tests/recorded/workloads/) agrees with simulate, step by step.

Each was served on an H200 by ``python -m hisparse_model live --workload``
(see its ``provenance``): requests added at their arrival step, every engine
step's scheduled tokens recorded with the routing rows of its forward.  The
model must reproduce the sizes, start-up, every step's tokens per request, the
crash (step and vLLM's exact text), the finished requests and every routing row.
"""

import copy
import glob
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
                 "w-v0.31.0-stock-mtp1.json", "w-v0.32.0-stock-long.json"):
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
