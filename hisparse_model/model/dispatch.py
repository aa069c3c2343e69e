"""How a step runs: a FULL decode-graph replay, a PIECEWISE graph, or eager.

The V2 runner asks ``CudaGraphManager.dispatch``
(vllm/v1/worker/gpu/cudagraph_utils.py:499-529 `def dispatch`) for the first
compatible candidate of the step's token count: the smallest FULL graph of at
least that many tokens, then the smallest PIECEWISE one
(vllm/v1/worker/gpu/cudagraph_utils.py:374-392 `self._candidates.setdefault(key, []).extend(matching)`).
A FULL decode graph fits only a uniform decode batch of q tokens per request
with no more requests than it was captured for
(vllm/v1/worker/gpu/cudagraph_utils.py:103-130 `def _is_compatible`); a
batch is uniform when every request decodes (or extends its prompt by one
token over existing context) and all have the same query length
(vllm/v1/worker/gpu/model_runner.py:1284-1316 `decode_graph_eligible`).
A PIECEWISE graph fits any batch.  Otherwise the step runs eagerly.

Inside a FULL replay no Python runs, so the routing decided at capture time
is replayed and nothing is routed anew; PIECEWISE and eager steps route the
real (unpadded) token count.
"""

from __future__ import annotations

from typing import NamedTuple

from .plan import Plan


class Dispatch(NamedTuple):
    mode: str  # "FULL", "PIECEWISE" or "NONE" (eager)
    padded: int  # tokens the forward runs, padding included


def decode_graph_eligible(step) -> bool:
    """Whether a scheduler step may replay a FULL decode graph: every request decodes, or
    extends its prompt by one token over existing context (drafts aside)."""
    return all(kind != "prefill" or (step.scheduled[r] - step.spec.get(r, 0) == 1
                                     and step.num_computed_before[r] > 0)
               for r, kind in step.kinds.items())


def dispatch(plan: Plan, num_tokens: int, num_reqs: int, max_query_len: int,
             decode_graph_eligible: bool) -> Dispatch:
    """The descriptor a step of ``num_tokens`` over ``num_reqs`` requests replays."""
    uniform = uniform_len(num_tokens, num_reqs, max_query_len, decode_graph_eligible)
    return Dispatch(*graph(plan, num_tokens, num_reqs, uniform))


def step_dispatch(plan: Plan, st) -> Dispatch:
    """How a scheduler step (a :class:`~hisparse_model.schedule.step.Step`) runs on one rank:
    its query lengths in the runner's order (Step.runner_query_lens)."""
    qlens = st.runner_query_lens()
    return dispatch(plan, sum(qlens), len(qlens), max(qlens), decode_graph_eligible(st))


def uniform_len(num_tokens: int, num_reqs: int, max_query_len: int,
                decode_graph_eligible: bool) -> int | None:
    """Tokens per request of a uniform decode batch (every request decodes, all of the same
    length), else None."""
    return (max_query_len if decode_graph_eligible and num_tokens == num_reqs * max_query_len
            else None)


def graph(plan: Plan, num_tokens: int, num_reqs: int, uniform: int | None) -> tuple[str, int]:
    """(mode, padded tokens) of a step; ``uniform``: its tokens per request when it is a
    uniform decode batch, else None."""
    if plan.cudagraph_mode == "NONE" or not plan.capture_sizes:
        return "NONE", num_tokens
    # Descriptors are stored largest first: when the largest holds the step,
    # walk them smallest first to the first that does, the smallest that does.
    if plan.full and plan.full[0][0] >= num_tokens:
        for tokens, reqs, q in reversed(plan.full):
            if tokens >= num_tokens:
                if uniform == q and reqs >= num_reqs:
                    return "FULL", tokens
                break  # a larger FULL graph is never tried
    if plan.piecewise and plan.piecewise[0][0] >= num_tokens:
        for tokens, _, _ in reversed(plan.piecewise):
            if tokens >= num_tokens:
                return "PIECEWISE", tokens
    return "NONE", num_tokens
