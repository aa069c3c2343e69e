"""What a crash loses, and the MTP drafter's draft steps at serving time, by hand arithmetic.

``lost.returned_and_lost`` splits a crashed workload into what the caller
received and what it lost; ``draft_steps.draft_steps`` says whether a serving
step's K - 1 one-token draft steps replay a FULL graph or run (and route) eagerly.
"""

import pytest

from hisparse_model.model.draft_steps import draft_graph_sizes, draft_steps
from hisparse_model.model.knobs import Knobs
from hisparse_model.answers.lost import COMPUTED, RUNNING, Lost, lost_line, returned_and_lost
from hisparse_model.model.plan import plan
from hisparse_model.text.report import cli_request
from hisparse_model.schedule.step import Step
from hisparse_model.views.traffic_charts import request_name


def _step(index, finished, returned_at):
    return Step(index, {0: 1}, {0: "decode"}, {0: 0}, finished=finished, returned_at=returned_at)


# steps: (index, finished there, engine step that hands its output back)
ASYNC = [_step(0, [], 1), _step(1, [0], 2), _step(2, [1], 3), _step(3, [], 4)]
LOSS_CASES = [
    # no crash: everything finished is received
    (None, [0, 0, 0], [0, 1], []),
    # crash in step 2: step 1's output (r0 done) would have come back in step 2: lost;
    # r1's last token (step 2) never computed; r2 arrived at step 0: still running
    (2, [0, 0, 0], [], [Lost(0, COMPUTED), Lost(1, RUNNING), Lost(2, RUNNING)]),
    # crash in step 3: step 1's output came back in step 2 (received), step 2's not
    (3, [0, 0, 0], [0], [Lost(1, COMPUTED), Lost(2, RUNNING)]),
    # r2 arrives after the crash step: never submitted, so not lost
    (3, [0, 0, 5], [0], [Lost(1, COMPUTED)]),
]


@pytest.mark.parametrize("crash,arrivals,finished,lost", LOSS_CASES)
def test_returned_and_lost(crash, arrivals, finished, lost):
    """An output counts as received only if handed back in an engine step before the crash."""
    assert returned_and_lost(ASYNC, crash, arrivals) == (finished, lost)


def test_lost_line_names_each_request_and_why():
    """The one line the CLI and notebook 5 print lists the lost requests by label, numbered
    from 1 as a person counts (r1 is vLLM's request 0)."""
    crash = {"step": 2, "error": "x"}
    assert lost_line([Lost(0, COMPUTED), Lost(1, RUNNING)], crash, request_name) == (
        "lost at the crash: 2 requests: r1 (computed but never returned); r2 (still running)")
    assert lost_line([Lost(3, RUNNING)], crash, cli_request) == (
        "lost at the crash: 1 request: #4 (still running)")
    assert lost_line([], None, cli_request) == "lost: none (no crash)"
    assert lost_line([], {"step": None, "error": "x"}, cli_request).startswith("lost: none (the engine died")


def _plan(**kw):
    return plan(Knobs(vllm_version="0.31.0", max_num_batched_tokens=256, **kw))


# (knobs, requests in the step) -> (mode, tokens per draft step, routed, forwards) or None
DRAFT_CASES = [
    # K = 1: the drafter's prefill is its only forward: no draft steps
    (dict(max_num_seqs=4, num_speculative_tokens=1), 4, None),
    # enforce_eager: no graph; K = 3 -> 2 draft steps of 4 one-token decodes each
    (dict(max_num_seqs=4, num_speculative_tokens=3, enforce_eager=True), 4, ("NONE", 4, 4, 2)),
    # PIECEWISE: draft steps never use PIECEWISE graphs
    (dict(max_num_seqs=2, num_speculative_tokens=2, cudagraph_mode="PIECEWISE"), 2,
     ("NONE", 2, 2, 1)),
    # default mode, S = 4, K = 2: capture sizes <= 4 are 1, 2, 3, 4: 3 requests replay
    # the 3-token graph, routing nothing
    (dict(max_num_seqs=4, num_speculative_tokens=2), 3, ("FULL", 3, 0, 1)),
    # default mode, S = 5, K = 2: capture sizes 1, 2, 3 (= 1 x q), 4, 6 (= 2 x q), ...;
    # those <= 5 are 1, 2, 3, 4: a step of 5 requests has no draft graph and runs eagerly
    (dict(max_num_seqs=5, num_speculative_tokens=2), 5, ("NONE", 5, 5, 1)),
    (dict(max_num_seqs=5, num_speculative_tokens=2), 4, ("FULL", 4, 0, 1)),
]


@pytest.mark.parametrize("knobs,num_reqs,expected", DRAFT_CASES)
def test_draft_steps(knobs, num_reqs, expected):
    """Draft steps replay the smallest draft graph of at least n requests, else run eagerly."""
    d = draft_steps(_plan(**knobs), num_reqs)
    got = None if d is None else (d.mode, d.num_tokens, d.routed, d.forwards)
    assert got == expected


def test_draft_graph_sizes_are_capture_sizes_up_to_max_num_seqs():
    """S = 5, K = 2: sizes 1, 2, 3, 4 of the capture sizes are at most 5 requests."""
    assert draft_graph_sizes(_plan(max_num_seqs=5, num_speculative_tokens=2)) == (1, 2, 3, 4)


def test_the_text_output_lists_eager_draft_steps():
    """S=4, K=2, eager: step 1 (r0 verifies 3, r1's prompt is 3 <= q: all decodes) routes
    3 + 3 = 6 tokens, then K - 1 = 1 draft step of one token for each of its 2 requests."""
    from hisparse_model.text.report import format_schedule
    from hisparse_model.answers.simulate import simulate
    from hisparse_model.schedule.workload import Workload

    knobs = Knobs(vllm_version="0.31.0", max_num_batched_tokens=256, max_num_seqs=4,
                  num_speculative_tokens=2, enforce_eager=True, enable_prefix_caching=False)
    work = Workload.from_json({"requests": [{"prompt_len": 2, "max_tokens": 3},
                                            {"prompt_len": 3, "arrival_step": 1}]})
    text = format_schedule(simulate(knobs, work), full=True)
    step1 = next(line for line in text.splitlines() if line.strip().startswith("step 1 "))
    assert "6 routed -> swap_in; 1 draft step(s) x 2 -> swap_in" in step1
