"""The MTP drafter's K - 1 draft steps of a serving step: replayed from a graph, or routed.

After every serving step's target forward, Model Runner V2's ``sample_tokens``
runs the drafter (vllm/v1/worker/gpu/model_runner.py:2204-2218 `draft_tokens = self.speculator.propose(`):
first its prefill over the step's own batch (the same shape as the target's,
hence the runner ``both`` of a step's routing row), then, for K >= 2, K - 1
draft steps of **one token per request**, every request of the step
(vllm/v1/worker/gpu/spec_decode/autoregressive/speculator.py:351-360 `uniform_token_count=1`).

Where those draft steps run is decided by the drafter's own decode graph
manager, built with decode query length 1 and the target's mode reduced to
FULL_DECODE_ONLY when the target captures FULL decode graphs, else to NONE:
PIECEWISE graphs are never used for draft steps
(vllm/v1/worker/gpu/spec_decode/autoregressive/speculator.py:132-141 `PIECEWISE cudagraphs are not supported for draft decodes.`).
Its FULL graphs are one per capture size of at most ``max_num_seqs`` tokens
(vllm/v1/worker/gpu/cudagraph_utils.py:312-323 `rounded_num_reqs > self.max_num_reqs`),
and a step of ``n`` requests replays the smallest of at least ``n``
(vllm/v1/worker/gpu/cudagraph_utils.py:374-392 `self._candidates.setdefault(key, []).extend(matching)`)
or, with none that large, runs eagerly
(vllm/v1/worker/gpu/cudagraph_utils.py:499-529 `def dispatch`).  So the
draft steps of a serving step run uncaptured, and each of the K - 1 routes
``n`` one-token decodes, when

* ``enforce_eager`` or ``cudagraph_mode`` NONE (no graph at all),
* ``cudagraph_mode`` PIECEWISE (no FULL decode graph: draft steps never use PIECEWISE),
* FULL_AND_PIECEWISE / FULL_DECODE_ONLY with more requests in the step than the
  largest capture size of at most ``max_num_seqs`` (e.g. S = 5, K = 2: sizes
  1, 2, 3, 4, so a step of 5 requests drafts eagerly).

A replayed draft graph runs no Python, so nothing is routed anew.  Whether the
K - 1 steps are fused into one graph
(vllm/v1/worker/gpu/spec_decode/autoregressive/speculator.py:515 `for step in range(1, self.num_speculative_steps):`,
vllm/v1/worker/gpu/spec_decode/autoregressive/speculator.py:616 `for step in range(1, self.num_speculative_steps):`)
changes only what a capture runs; eagerly both loops run K - 1 forwards.
0.32.0 / 0.33.0 moved the drafter to ``target_dependent_ar/speculator.py``
with the same reduction and dispatch
(vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py:98-107@0.33.0 `PIECEWISE cudagraphs are not supported for draft decodes.`).

0.33.0 proposes with K = 0 after a step whose drafts are sure to go unused
(every request a partial prefill chunk or sampling its last output token): the
drafter's prefill still runs, its draft steps do not
(vllm/v1/worker/gpu/model_runner.py:2133-2135@0.33.0 `0 if skip_drafts else`,
vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py:297-300@0.33.0 `if num_speculative_tokens <= 1:`);
the scheduler model says which steps (``Step.drafts``).

One draft step of ``n`` requests never holds more than C rows (n <= S <= C),
so it cannot raise; it is routed like any all-decode batch, with the step's
residency.
"""

from __future__ import annotations

import bisect
from typing import NamedTuple

from .plan import Plan
from .routing import router


class DraftSteps(NamedTuple):
    """The K - 1 draft steps of one serving step."""

    mode: str  # "FULL" (a replay: nothing routed anew) or "NONE" (eager)
    num_tokens: int  # tokens each draft step runs: one per request (a FULL graph: padded)
    routed: int  # tokens handed to the routing per draft step (0: a replay)
    route: str | None  # the route of each eager draft step
    error: str | None  # never set (n <= S <= C); kept for the routing row
    forwards: int  # K - 1


def draft_graph_sizes(plan: Plan) -> tuple[int, ...]:
    """Token counts of the drafter's FULL draft-step graphs, ascending (empty: none captured)."""
    return plan.draft_sizes


def draft_steps(plan: Plan, num_reqs: int, resident: bool = True) -> DraftSteps | None:
    """The draft steps after a serving step of ``num_reqs`` requests (None: K < 2)."""
    k = plan.knobs.num_speculative_tokens
    if k < 2 or num_reqs < 1:
        return None
    sizes = draft_graph_sizes(plan)
    i = bisect.bisect_left(sizes, num_reqs)
    if i < len(sizes):  # the smallest graph of at least num_reqs tokens replays
        return DraftSteps("FULL", sizes[i], 0, None, None, k - 1)
    routed, path, error = router(plan, resident)(num_reqs, num_reqs)  # all one-token decodes
    return DraftSteps("NONE", num_reqs, routed, path, error, k - 1)
