"""Serve a workload on the live engine, one engine step at a time, and record every step.

Runs inside the engine child (imports vLLM only inside functions).  The engine
is driven as vLLM's own offline loop drives it, but by hand: request ``i`` is
added through ``llm.llm_engine.add_request`` right before the engine step
numbered ``arrival_step`` (one ``llm_engine.step()`` is one ``EngineCore`` step,
the unit the model's scheduler simulation counts), then ``step()`` is called
until every request has finished or the engine raised.

What is recorded, per engine step that scheduled anything:

* ``scheduled``: ``{request index: tokens}`` exactly as the scheduler's
  ``SchedulerOutput.num_scheduled_tokens`` says (a wrapper on
  ``Scheduler.schedule`` reads it; speculative tokens included);
* the routing rows of that step's forward, labelled ``step:<k>`` (a wrapper
  on the model runner's ``execute_model`` sets the phase from the scheduler
  output it is given, so async scheduling cannot mislabel them).
"""

from __future__ import annotations

import functools

REQUEST_PREFIX = "req-"


def _request_index(req_id: str) -> int:
    return int(str(req_id)[len(REQUEST_PREFIX):].split("-")[0])


def install_step_recorder(log, steps: list[dict], counter: dict) -> None:
    """Wrap the scheduler and the model runner so each step's schedule and routing are logged."""
    from vllm.v1.core.sched import scheduler as sched_mod
    from vllm.v1.worker.gpu import model_runner as mr

    orig_schedule = sched_mod.Scheduler.schedule
    step_of_output: dict[int, int] = {}

    @functools.wraps(orig_schedule)
    def schedule(self, *a, **k):
        out = orig_schedule(self, *a, **k)
        tokens = dict(getattr(out, "num_scheduled_tokens", {}) or {})
        if tokens:
            steps.append({
                "step": counter["step"],
                "scheduled": {str(_request_index(r)): int(n) for r, n in tokens.items()},
                "num_tokens": int(sum(tokens.values())),
                "finished": sorted(_request_index(r) for r in
                                   (getattr(out, "finished_req_ids", None) or ())),
            })
            step_of_output[id(out)] = counter["step"]
        return out

    sched_mod.Scheduler.schedule = schedule

    orig_execute = mr.GPUModelRunner.execute_model

    @functools.wraps(orig_execute)
    def execute_model(self, scheduler_output, *a, **k):
        step = step_of_output.pop(id(scheduler_output), None)
        if step is None:
            return orig_execute(self, scheduler_output, *a, **k)
        with log.in_phase(f"step:{step}"):
            return orig_execute(self, scheduler_output, *a, **k)

    mr.GPUModelRunner.execute_model = execute_model


def serve(llm, log, workload: list[dict], *, max_steps: int = 200_000) -> dict:
    """Serve ``workload`` (dicts with prompt_token_ids, max_tokens, arrival_step); the record."""
    from vllm import SamplingParams

    engine = llm.llm_engine
    steps: list[dict] = []
    counter = {"step": 0}
    install_step_recorder(log, steps, counter)
    pending = sorted(range(len(workload)), key=lambda i: (workload[i]["arrival_step"], i))
    finished: list[int] = []
    crash = None
    while counter["step"] < max_steps:
        k = counter["step"]
        while pending and workload[pending[0]]["arrival_step"] <= k:
            i = pending.pop(0)
            req = workload[i]
            engine.add_request(f"{REQUEST_PREFIX}{i}",
                               {"prompt_token_ids": list(req["prompt_token_ids"])},
                               SamplingParams(max_tokens=req["max_tokens"], ignore_eos=True))
        if not pending and not engine.has_unfinished_requests():
            break
        try:
            outputs = engine.step()
        except BaseException as exc:  # noqa: BLE001 - the point is to record it
            from .instrument import format_exception

            crash = {"step": k, "error": log.first_error(f"step:{k}") or format_exception(exc)}
            break
        finished += [_request_index(o.request_id) for o in outputs if o.finished]
        counter["step"] += 1
    return {"steps": steps, "crash": crash, "finished": sorted(finished),
            "engine_steps": counter["step"]}
