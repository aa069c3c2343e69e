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
  output it is given, so async scheduling cannot mislabel them);
* under MTP, how many drafts each verify step accepted (sampled tokens - 1, read
  in ``Scheduler.update_from_output``): the acceptance the model takes as input;
* ``finished``: the requests whose final output the caller received from
  ``llm_engine.step()``, and at a crash ``lost``: every submitted request the
  caller never saw finish, labelled from the engine's own state
  (:func:`lost_at_crash`).
"""

from __future__ import annotations

import functools

from .rank_log import PHASE_ATTR

REQUEST_PREFIX = "req-"


def _request_index(req_id: str) -> int:
    return int(str(req_id)[len(REQUEST_PREFIX):].split("-")[0])


def _vllm_classes():
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.worker.gpu.model_runner import GPUModelRunner

    return Scheduler, GPUModelRunner


def install_step_recorder(log, steps: list[dict], counter: dict, classes=None) -> None:
    """Wrap the scheduler and the model runner so each step's schedule and routing are logged.

    ``classes``: (scheduler class, model runner class); vLLM's own by default.
    """
    scheduler_cls, runner_cls = classes or _vllm_classes()
    orig_schedule = scheduler_cls.schedule
    step_of_output: dict[int, int] = {}
    step_of_update: dict[int, int] = {}
    last_step: dict = {"k": None}
    accepted = counter.setdefault("accepted", {})
    counter["step_of_update"] = step_of_update  # outputs not yet processed, at a crash

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
            step_of_update[id(out)] = counter["step"]
            setattr(out, PHASE_ATTR, f"step:{counter['step']}")  # TP workers' label
        return out

    scheduler_cls.schedule = schedule

    orig_update = scheduler_cls.update_from_output

    @functools.wraps(orig_update)
    def update_from_output(self, scheduler_output, model_runner_output, *a, **k):
        step = step_of_update.pop(id(scheduler_output), None)
        if step is not None:
            _accepted_from(step, scheduler_output, model_runner_output, accepted)
        return orig_update(self, scheduler_output, model_runner_output, *a, **k)

    scheduler_cls.update_from_output = update_from_output

    orig_execute = runner_cls.execute_model

    @functools.wraps(orig_execute)
    def execute_model(self, scheduler_output, *a, **k):
        step = step_of_output.pop(id(scheduler_output), None)
        if step is None:
            return orig_execute(self, scheduler_output, *a, **k)
        last_step["k"] = step
        with log.in_phase(f"step:{step}"):
            return orig_execute(self, scheduler_output, *a, **k)

    runner_cls.execute_model = execute_model

    # The MTP drafter runs in sample_tokens, after execute_model returned: label it
    # with the step whose forward it drafts for.
    orig_sample = getattr(runner_cls, "sample_tokens", None)
    if orig_sample is not None:
        @functools.wraps(orig_sample)
        def sample_tokens(self, *a, **k):
            if last_step["k"] is None:
                return orig_sample(self, *a, **k)
            with log.in_phase(f"step:{last_step['k']}"):
                return orig_sample(self, *a, **k)

        runner_cls.sample_tokens = sample_tokens


def _crash(log, k: int, exc: BaseException) -> dict:
    """The step whose forward raised (async scheduling may surface it a step later)."""
    from .instrument import format_exception

    row = next((r for r in log.rows if r["phase"].startswith("step:") and r.get("error")), None)
    if row is not None:
        return {"step": int(row["phase"].split(":", 1)[1]), "error": row["error"]}
    return {"step": k, "error": format_exception(exc)}


def _sampling_params(max_tokens: int):
    from vllm import SamplingParams

    return SamplingParams(max_tokens=max_tokens, ignore_eos=True)


def _accepted_from(step: int, scheduler_output, model_runner_output, accepted: dict) -> None:
    """Record the drafts each request of a step accepted (sampled tokens - 1)."""
    drafts = getattr(scheduler_output, "scheduled_spec_decode_tokens", None) or {}
    if not drafts:
        return
    sampled = dict(zip(getattr(model_runner_output, "req_ids", []) or [],
                       getattr(model_runner_output, "sampled_token_ids", []) or []))
    for req_id, ids in sampled.items():
        if req_id in drafts and len(ids):
            accepted[f"{step}:{_request_index(req_id)}"] = len(ids) - 1


def unreturned_outputs(engine, counter: dict) -> dict[int, int] | None:
    """Tokens each request sampled in steps whose output the caller never received.

    After ``step_fn`` raised, the engine core's batch queue still holds the
    previous step's (future, scheduler output): its forward completed, its
    output was never popped (vllm/v1/engine/core.py:740 `batch_queue.pop()`).
    Reading the future copies that output off the GPU without handing it to the
    scheduler.  None: no in-process engine core (nothing to read).
    """
    core = getattr(getattr(engine, "engine_core", None), "engine_core", None)
    queue = getattr(core, "batch_queue", None)
    if queue is None:
        return None
    tokens: dict[int, int] = {}
    for future, scheduler_output, _ in list(queue):
        step = counter["step_of_update"].get(id(scheduler_output))
        out = future.result()
        if out is None or step is None:
            continue
        for req_id, ids in zip(out.req_ids, out.sampled_token_ids):
            i = _request_index(req_id)
            tokens[i] = tokens.get(i, 0) + len(ids)
        _accepted_from(step, scheduler_output, out, counter["accepted"])
    return tokens


def lost_at_crash(workload: list[dict], submitted: list[int], finished: list[int],
                  received: dict[int, int], unreturned: dict[int, int] | None,
                  max_model_len: int | None) -> list[dict]:
    """Each submitted request the caller never saw finish, as ``{"request", "why", ...}``.

    ``why`` is ``"computed but never returned"`` when the tokens it received plus
    those its unreturned step sampled reach ``max_tokens`` (or ``max_model_len``),
    else ``"still running"``; ``"unknown"`` when the unreturned output could not
    be read.
    """
    from ..answers.lost import COMPUTED, RUNNING

    out = []
    for i in sorted(submitted):
        if i in finished:
            continue
        got = received.get(i, 0)
        row = {"request": i, "tokens_returned": got}
        if unreturned is None:
            row["why"] = "unknown"
        else:
            more = unreturned.get(i, 0)
            total = got + more
            req = workload[i]
            done = total >= req["max_tokens"] or (
                max_model_len is not None and len(req["prompt_token_ids"]) + total >= max_model_len)
            row.update(why=COMPUTED if done else RUNNING, tokens_unreturned=more)
        out.append(row)
    return out


def serve(llm, log, workload: list[dict], *, max_steps: int = 200_000, classes=None) -> dict:
    """Serve ``workload`` (dicts with prompt_token_ids, max_tokens, arrival_step); the record."""
    engine = llm.llm_engine
    params = getattr(llm, "sampling_params", None) or _sampling_params
    steps: list[dict] = []
    counter = {"step": 0}
    install_step_recorder(log, steps, counter, classes)
    pending = sorted(range(len(workload)), key=lambda i: (workload[i]["arrival_step"], i))
    finished: list[int] = []
    received: dict[int, int] = {}  # output tokens the caller holds, per request
    submitted: list[int] = []  # requests added to the engine
    crash = lost = None
    while counter["step"] < max_steps:
        k = counter["step"]
        while pending and workload[pending[0]]["arrival_step"] <= k:
            i = pending.pop(0)
            req = workload[i]
            engine.add_request(f"{REQUEST_PREFIX}{i}",
                               {"prompt_token_ids": list(req["prompt_token_ids"])},
                               params(req["max_tokens"]))
            submitted.append(i)
        if not pending and not engine.has_unfinished_requests():
            break
        try:
            outputs = engine.step() or []
        except BaseException as exc:  # noqa: BLE001 - the point is to record it
            crash = _crash(log, k, exc)
            try:
                unreturned = unreturned_outputs(engine, counter)
            except Exception:  # noqa: BLE001 - recorded as unknown
                unreturned = None
            max_len = getattr(getattr(engine, "model_config", None), "max_model_len", None)
            lost = lost_at_crash(workload, submitted, finished, received, unreturned, max_len)
            break
        for o in outputs:
            i = _request_index(o.request_id)
            outs = getattr(o, "outputs", None)
            received[i] = max(received.get(i, 0), len(outs[0].token_ids) if outs else 0)
            if o.finished:
                finished.append(i)
        counter["step"] += 1
    return {"steps": steps, "crash": crash, "finished": sorted(finished), "lost": lost or [],
            "engine_steps": counter["step"],
            "accepted": {"table": counter["accepted"]} if counter["accepted"] else None}
