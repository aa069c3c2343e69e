"""What the caller receives when the engine dies mid-workload, and what it loses.

Under async scheduling (the default here) the engine core runs
``step_with_batch_queue`` with two batches in flight.  One engine step (one
``step_fn`` call) first schedules step N + 1
(vllm/v1/engine/core.py:696-697 `scheduler_output = self.scheduler.schedule(`)
and launches its forward
(vllm/v1/engine/core.py:698-701 `exec_future = self.model_executor.execute_model(`),
and only then takes step N's output off the queue
(vllm/v1/engine/core.py:740 `batch_queue.pop()`), updates the scheduler with it
(vllm/v1/engine/core.py:755-757 `engine_core_outputs = self.scheduler.update_from_output(`)
and hands it back (vllm/v1/engine/core.py:783 `return engine_core_outputs, model_executed`).
In one process the executor runs the forward at once and re-raises its error
in-line (vllm/v1/executor/uniproc_executor.py:128-131 `if non_block and output.done():`),
so when step N + 1's forward raises, ``step_fn`` raises before step N's
output is popped: the caller's ``LLMEngine.step``
(vllm/v1/engine/llm_engine.py:306-321 `outputs = self.engine_core.get_output()`,
through vllm/v1/engine/core_client.py:375-378 `outputs, model_executed = self.engine_core.step_fn()`)
gets the exception, never that output.  (With the engine core in its own
process the same ``step_fn`` raises in the core's loop: the output is lost
the same way.)  The same code holds in 0.32.0 and 0.33.0
(vllm/v1/engine/core.py:768@0.32.0 `batch_queue.pop()`,
vllm/v1/engine/core.py:778@0.33.0 `batch_queue.pop()`).

So at a crash in engine step c, a request the workload had submitted (its
``arrival_step`` <= c) that the caller never saw finish is lost:

* **computed but never returned**: its last token was computed by a step
  before c whose output would have been handed back in step c or later;
* **still running**: its last token was not computed (scheduled in step c or
  later, or waiting).

The caller here is one that takes each ``LLMEngine.step``'s outputs as they
come (the live runner does).  ``LLM.generate`` returns only after every request
finished (vllm/entrypoints/offline_utils.py:602-607 `while self.llm_engine.has_unfinished_requests():`),
so there a crash loses every output, returned or not.  A crash at start-up
loses nothing here: the engine never accepted a request.
"""

from __future__ import annotations

from typing import NamedTuple

COMPUTED = "computed but never returned"
RUNNING = "still running"


class Lost(NamedTuple):
    request: int  # index in the workload
    why: str  # COMPUTED or RUNNING

    def as_dict(self) -> dict:
        return {"request": self.request, "why": self.why}


def returned_and_lost(steps, crash_step: int | None,
                      arrival_steps: list[int]) -> tuple[list[int], list[Lost]]:
    """(requests the caller saw finish, lost requests) of a served workload.

    ``steps``: the scheduler model's steps (:class:`hisparse_model.schedule.step.Step`,
    each with ``finished`` and ``returned_at``), at least up to the crash;
    ``crash_step``: the engine step whose forward raised (None: no crash);
    ``arrival_steps``: each request's ``arrival_step``.
    """
    if crash_step is None:
        return [r for st in steps for r in st.finished], []
    returned: list[int] = []
    computed: list[int] = []
    for st in steps:
        if st.index >= crash_step:
            break  # the crash step's forward never completed; nothing later ran
        handed_back = st.returned_at is not None and st.returned_at < crash_step
        (returned if handed_back else computed).extend(st.finished)
    seen = set(returned) | set(computed)
    running = [i for i, a in enumerate(arrival_steps) if a <= crash_step and i not in seen]
    lost = [Lost(i, COMPUTED) for i in computed] + [Lost(i, RUNNING) for i in running]
    return returned, sorted(lost)


def lost_line(lost: list[Lost], crash: dict | None, name) -> str:
    """The lost requests in one line, as the command line and notebooks 5 and 6 show them;
    ``name`` writes request i (vLLM's index) as that place numbers requests for people
    (``report.cli_request``: ``#1``; the notebooks' ``request_name``: ``r1``)."""
    if crash is None:
        return "lost: none (no crash)"
    if crash["step"] is None:
        return "lost: none (the engine died at start-up, before accepting a request)"
    if not lost:
        return "lost: none (the caller had received every submitted request)"
    parts = []
    for why in (COMPUTED, RUNNING):
        reqs = [name(x.request) for x in lost if x.why == why]
        if reqs:
            parts.append(f"{' '.join(reqs)} ({why})")
    many = "request" if len(lost) == 1 else "requests"
    return f"lost at the crash: {len(lost)} {many}: " + "; ".join(parts)
