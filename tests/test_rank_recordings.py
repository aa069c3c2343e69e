"""A DP recording compared with the model of data parallelism, rank by rank, on CPU.

No two-GPU recording exists yet, so the recording here is written by hand, as the
runner (``engine/dp_live.py``) would write it for the sweep entry
``dp2-v0.31.0-stock-s3-idle-rank``, from vLLM's DP semantics and from what one H200
recorded for the same knobs (``tests/recorded/v0.31.0-stock-s3.json``: its start-up
rows and sizes, and how a 2- and 4-token prefill and a decode-plus-prefill step route),
never from the model's output.
"""

from __future__ import annotations

import copy
import json
import os

import pytest

from hisparse_model.recorded.rank_recordings import compare_dp_recording

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ERR = ("ValueError: HiSparse swap rows exceed the configured speculative decode capacity: "
       "stop=4, capacity=3.")


def _one_gpu() -> dict:
    with open(os.path.join(REPO, "tests", "recorded", "v0.31.0-stock-s3.json")) as f:
        return json.load(f)


def _row(phase, n, mode, calls=8, error=None):
    return {"phase": phase, "num_tokens": n, "route": "swap_in", "cudagraph_mode": mode,
            "error": error, "calls": calls}


def _dp_recording() -> dict:
    """DP = 2, S = 3 on 0.31.0: C = min(960, 3 * 1) = 3, W = 4, capture sizes 1, 2, 3, 4.

    Requests (split of 3 over 2: 0, 0 -> rank 0; 2 -> rank 1): r0 2 tokens at step 0,
    r1 3 tokens at step 2, r2 2 tokens at step 30.
    step 0: rank 0 prefills r0 (2 tokens, PIECEWISE graph 2; a prefill routes all its
            tokens, as prompt:0's 3 did on one GPU); rank 1 has no request, so LLMEngine
            asks for a dummy (has_unfinished_requests_dp): one request of q = 1 token,
            which would replay FULL, but the ranks agree on the lowest mode, PIECEWISE,
            and the largest count, 2: a 2-token dummy prefill, routed whole: 2 <= W.
    step 1: rank 0 decodes r0 (async scheduling: 1 token, FULL graph 1); rank 1's dummy is
            a 1-token decode, FULL too: both replay, nothing is routed.
    step 2: rank 0 runs r0's decode and r1's prefill, 1 + 3 = 4 tokens, PIECEWISE graph 4,
            and hands only the decode token to the routing (as w-v0.31.0-stock-long's
            step 1 did); rank 1's dummy is padded to 4 and is one 4-token request, a
            prefill, routed whole: 4 = C + 1 <= W goes to swap_in, which holds C = 3 rows:
            stop=4, capacity=3, in the first layer (calls 1).
    Rank 0 then waits on rank 1 in a collective inside its step-2 forward (here after
    4 of its 8 routing layers) until the runner kills it: ``hung``, last step 2; its
    stream holds the steps it scheduled before (step 2's schedule is written only once
    its step() returns).
    """
    one = _one_gpu()
    startup = [r for r in one["routing_log"] if not r["phase"].startswith("prompt:")]
    knobs = {**one["knobs"], "data_parallel_size": 2,
             "enable_prefix_caching": one["provenance"]["engine_args"]["enable_prefix_caching"]}
    workload = [{"prompt_len": 2, "max_tokens": 8, "arrival_step": 0},
                {"prompt_len": 3, "max_tokens": 8, "arrival_step": 2},
                {"prompt_len": 2, "max_tokens": 8, "arrival_step": 30}]
    ok = {"ok": True, "error": None}
    rank0 = {"dp_rank": 0, "status": "hung", "exit": None, "last_step": 2, "startup": ok,
             "engine": one["engine"],
             "steps": [{"step": 0, "scheduled": {"0": 2}}, {"step": 1, "scheduled": {"0": 1}}],
             "dummy_steps": [],
             "routing_log": startup + [_row("step:0", 2, "PIECEWISE"),
                                       _row("step:2", 1, "PIECEWISE", calls=4)]}
    crash = {"step": 2, "error": ERR, "dummy": True}
    rank1 = {"dp_rank": 1, "status": "crashed", "exit": "exit 0", "startup": ok,
             "engine": one["engine"], "requests": [2], "steps": [], "dummy_steps": [0, 1, 2],
             "crash": crash, "finished": [],
             "routing_log": startup + [_row("dummy:0", 2, "PIECEWISE"),
                                       _row("dummy:2", 4, "PIECEWISE", calls=1, error=ERR)]}
    return {"knobs": knobs, "workload": workload, "startup": ok,
            "crash": {"dp_rank": 1, **crash}, "ranks": [rank0, rank1]}


def test_hand_written_dp_recording_agrees_with_the_model():
    """The idle rank's padded dummy crash, written from vLLM's DP semantics, is the model's."""
    assert compare_dp_recording(_dp_recording()) == []


def _set(path, value):
    def change(rec):
        *keys, last = path
        target = rec
        for k in keys:
            target = target[k]
        target[last] = value
    return change


@pytest.mark.parametrize("change, first", [
    # rank 1 ran no dummy at step 0 (as if an idle rank did not step with the busy one)
    (_set(("ranks", 1, "dummy_steps"), [1, 2]), "dp rank 1: dummy steps: engine [1, 2]"),
    # rank 0 prefilled 3 tokens at step 0 instead of r0's 2
    (_set(("ranks", 0, "steps", 0, "scheduled"), {"0": 3}), "dp rank 0: scheduled: engine"),
    # the crash on rank 0's own batch instead of rank 1's dummy
    (_set(("crash",), {"dp_rank": 0, "step": 2, "error": ERR, "dummy": False}),
     "crash: engine (2, 0, "),
    # rank 1's step-2 dummy routed 3 tokens, no error
    (_set(("ranks", 1, "routing_log", -1), _row("dummy:2", 3, "PIECEWISE")),
     "dp rank 1: routing row"),
    # the killed survivor was still at step 1 (it never began the crash step)
    (_set(("ranks", 0, "last_step"), 1), "dp rank 0: last step: engine 1 != model 2"),
    # the survivor finished serving: the model stops every rank at the crash
    (_set(("ranks", 0, "status"), "finished"), "ranks [0] finished"),
])
def test_a_dp_recording_that_differs_is_named(change, first):
    """Each departure from the model's DP schedule is reported, naming the rank and what."""
    rec = copy.deepcopy(_dp_recording())
    change(rec)
    diffs = compare_dp_recording(rec)
    assert any(d.startswith(first) for d in diffs), diffs


def test_a_crash_the_model_does_not_have_is_named():
    """The same recording compared as 0.32.0 (routes on C = 3: the 4-token dummy goes
    all-resident, every rank serves its requests): the engine's crash, the ranks that did not
    finish and the finished requests are each reported."""
    rec = _dp_recording()
    rec["knobs"] = {**rec["knobs"], "vllm_version": "0.32.0"}
    diffs = compare_dp_recording(rec)
    assert any(d.startswith("crash: engine {") and d.endswith("!= model none") for d in diffs)
    assert "ranks [0, 1] did not finish; the model crashes none" in diffs
    assert "finished: engine [] != model [0, 1, 2]" in diffs


def test_a_one_gpu_recording_is_not_a_dp_recording():
    """compare_dp_recording refuses a recording whose data_parallel_size is 1 (one line)."""
    rec = _dp_recording()
    rec["knobs"] = {**rec["knobs"], "data_parallel_size": 1}
    with pytest.raises(ValueError, match="data_parallel_size is 1"):
        compare_dp_recording(rec)
