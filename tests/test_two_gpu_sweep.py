"""The two-GPU sweep says what the model predicts: each entry's ``why``, checked.

``scripts/sweeps/two-gpu-v031.json`` is what the two-GPU runs record; each entry's
``why`` states the outcome expected from reading vLLM.  The outcomes below are
written from that reading (sizes by the formula, the failing batch and its error
text), not taken from the model, and the model must give them.
"""

from __future__ import annotations

import os

import pytest

from hisparse_model.engine.live import validate_sweep
from hisparse_model.model.parallel import caller_error
from hisparse_model.model.plan import plan
from hisparse_model.answers.predict import predict
from hisparse_model.answers.simulate import simulate
from hisparse_model.schedule.workload import Workload

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENTRIES = {e["name"]: e for e in validate_sweep(
    os.path.join(REPO, "scripts", "sweeps", "two-gpu-v031.json"))}
ERR = ("ValueError: HiSparse swap rows exceed the configured speculative decode capacity: "
       "stop={}, capacity={}.")


def test_the_sweep_holds_the_four_entries_checked_here():
    """Every entry of the sweep has its expectation checked below."""
    assert sorted(ENTRIES) == sorted(["tp2-v0.31.0-stock-s2", "tp2-v0.31.0-stock-s1",
                                      "dp2-v0.31.0-stock-s3-idle-rank",
                                      "dp2-v0.31.0-stock-s2-control"])


@pytest.mark.parametrize("name, c, w", [
    ("tp2-v0.31.0-stock-s2", 2, 3),  # B = min(2 * 320, 16384) = 640; C = min(640, 2 * 1) = 2
    ("tp2-v0.31.0-stock-s1", 1, 2),  # B = 320; C = min(320, 1 * 1) = 1
    ("dp2-v0.31.0-stock-s3-idle-rank", 3, 4),  # B = 960; C = min(960, 3 * 1) = 3
    ("dp2-v0.31.0-stock-s2-control", 2, 3),
])
def test_sweep_sizes(name, c, w):
    """C = min(B, S * q) and W = C + 1 per rank, as each entry's why states."""
    p = plan(ENTRIES[name]["knobs"])
    assert (p.swap_capacity, p.workspace_rows) == (c, w)


def test_tp2_s2_the_3_token_prompt_dies_in_every_worker():
    """TP=2, S=2: start-up survives; the 3-token prompt routes C + 1 = 3 to swap_in
    (stop=3, capacity=2); in process the caller sees the executor's 'Worker failed' wrap."""
    e = ENTRIES["tp2-v0.31.0-stock-s2"]
    pred = predict(e["knobs"], e["prompt_lens"])
    assert pred.startup_ok
    assert [p.error for p in pred.prompts[:2]] == [None, ERR.format(3, 2)]  # prompts 2, 3
    wrapped = ("RuntimeError: Worker failed with error 'HiSparse swap rows exceed the "
               "configured speculative decode capacity: stop=3, capacity=2.', please check "
               "the stack trace above for the root cause")
    assert caller_error(e["knobs"], ERR.format(3, 2), startup=False, in_process=True) == wrapped


def test_tp2_s1_dies_at_start_up_in_the_memory_profile():
    """TP=2, S=1: the 2-token PIECEWISE capture of the CUDA-graph memory profile is the
    first batch to route C + 1 = 2 tokens to swap_in (stop=2, capacity=1)."""
    pred = predict(ENTRIES["tp2-v0.31.0-stock-s1"]["knobs"], [2, 3, 200])
    assert pred.startup_error == ERR.format(2, 1)
    first = next(b for b in pred.startup if b.error)
    assert (first.phase, first.cudagraph_mode, first.routed, first.route) == (
        "cudagraph_memory_profile", "PIECEWISE", 2, "swap_in")


def test_dp2_s3_the_idle_rank_dies_on_its_padded_dummy():
    """DP=2, S=3: at step 2 rank 0 runs 1 decode + a 3-token prefill (4 tokens, PIECEWISE)
    and routes only its decode; idle rank 1's dummy, padded to 4 = C + 1, dies."""
    e = ENTRIES["dp2-v0.31.0-stock-s3-idle-rank"]
    sched = simulate(e["knobs"], Workload.from_json(e["workload"]))
    assert sched.assignment == [0, 0, 1]  # split of 3 over 2: rank 0 takes 2, rank 1 one
    assert sched.crash == {"step": 2, "rank": 1, "scheduled": False, "error": ERR.format(4, 3)}
    step = sched.steps[-1]
    assert step.mode == "PIECEWISE"
    r0, r1 = step.ranks
    assert (r0.scheduled, r0.routed_tokens, r0.route, r0.error) == ({0: 1, 1: 3}, 1, "swap_in",
                                                                    None)
    assert (r1.dummy, r1.padded, r1.routed_tokens, r1.route) == ((4,), 4, 4, "swap_in")


def test_dp2_s2_control_the_padded_dummy_goes_all_resident_and_both_finish():
    """DP=2, S=2: rank 1's step-2 dummy is padded to 4 > W = 3, the all-resident path; no
    batch routes more than C = 2 to swap_in; every request finishes."""
    e = ENTRIES["dp2-v0.31.0-stock-s2-control"]
    sched = simulate(e["knobs"], Workload.from_json(e["workload"]))
    assert sched.crash is None and sorted(sched.finished) == [0, 1, 2]
    step2 = next(s for s in sched.steps if s.step == 2)
    assert (step2.ranks[1].dummy, step2.ranks[1].routed_tokens, step2.ranks[1].route) == (
        (4,), 4, "all_resident")
    swapped = [r.routed_tokens for s in sched.steps for r in s.ranks if r.route == "swap_in"]
    assert swapped and max(swapped) <= 2
