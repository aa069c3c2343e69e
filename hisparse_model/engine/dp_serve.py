"""One data-parallel rank serving its share of a workload, in step with the other ranks.

Runs inside a DP rank's engine child (:mod:`.child`, started by :mod:`.dp_live`).
Rank r serves the requests :func:`.parallel.rank_requests` gives it, each added
before the global engine step numbered ``arrival_step``, recorded as
:mod:`.traffic` records a single engine (the same step recorder).

Every rank must make the same collective calls in the same order, so the loop is
the same on every rank and decided only by what every rank knows:

* ``llm_engine.has_unfinished_requests()`` every iteration: with an in-process
  engine core it all-reduces "unfinished" over the DP group
  (vllm/v1/engine/llm_engine.py:203-209 `has_unfinished_requests_dp`) and, on a
  rank that has nothing while another has work, asks for a dummy batch in the next
  ``step()`` (vllm/v1/engine/llm_engine.py:306-309 `execute_dummy_batch`); the
  routing rows of that pass are labelled ``dummy:<k>``;
* a rank that has work (its own, or another rank's: "unfinished" is global) but
  whose ``step()`` ran no forward (its scheduler scheduled nothing, e.g. every request
  waiting for the previous step's output under async scheduling) runs a dummy batch
  itself, as the DP engine core's busy loop does
  (vllm/v1/engine/core.py:2273-2286 `self.execute_dummy_batch()`): ``LLMEngine`` asks for
  one only when the rank has no request at all, and a rank without a forward in an
  iteration would pair the other rank's forward sync with its next one;
* the loop ends when no rank has work and no request of the whole workload is
  still to arrive (each rank knows the whole workload).

A rank given no request of its own serves the placeholder request the runner
added for it (:func:`hisparse_model.schedule.data_parallel.with_placeholders`, as vLLM's
example gives an empty rank a placeholder prompt).
A rank whose engine raises stops; the other rank may then wait in its next
collective until the runner kills it (:mod:`.dp_live` records it as ``hung``).
Every step's start is written to the rank's stream (:mod:`.rank_log`) first, and
what it scheduled and its dummy batches as they happen, so a killed rank's last
step, steps and dummies are known.
"""

from __future__ import annotations

from . import parallel, traffic


def _dummy_crash(log, k: int) -> dict | None:
    """The routing error of dummy step ``k`` (a batch this rank did not schedule), if any."""
    error = log.first_error(f"dummy:{k}")
    return None if error is None else {"step": k, "error": error, "dummy": True}


def serve(llm, log, workload: list[dict], rank: int, size: int, *,
          max_steps: int = 200_000, classes=None) -> dict:
    """Serve rank ``rank``'s share of ``workload`` (the whole workload, global indices)."""
    engine = llm.llm_engine
    params = getattr(llm, "sampling_params", None) or traffic._sampling_params
    write = getattr(log, "write", None) or (lambda *a, **k: None)
    mine = parallel.rank_requests(workload, rank, size)
    last_arrival = max((r["arrival_step"] for r in workload), default=0)
    steps: list[dict] = []
    counter = {"step": 0}
    traffic.install_step_recorder(log, steps, counter, classes)
    pending = sorted(mine, key=lambda i: (workload[i]["arrival_step"], i))
    finished: list[int] = []
    dummy: list[int] = []
    crash = None
    while counter["step"] < max_steps:
        k = counter["step"]
        while pending and workload[pending[0]]["arrival_step"] <= k:
            i = pending.pop(0)
            engine.add_request(f"{traffic.REQUEST_PREFIX}{i}",
                               {"prompt_token_ids": list(workload[i]["prompt_token_ids"])},
                               params(workload[i]["max_tokens"]))
        try:
            unfinished = engine.has_unfinished_requests()  # a collective on every rank
        except BaseException as exc:  # noqa: BLE001 - a peer that died: recorded
            crash = traffic._crash(log, k, exc)
            break
        if not unfinished and k >= last_arrival:
            break
        is_dummy = bool(getattr(engine, "should_execute_dummy_batch", False))
        write("step", step=k, dummy=is_dummy)
        scheduled_before = len(steps)
        try:
            if is_dummy:
                dummy.append(k)
                write("dummy", step=k)
                with log.in_phase(f"dummy:{k}"):
                    outputs = engine.step() or []
            else:
                outputs = engine.step() or []
                if unfinished and len(steps) == scheduled_before:  # no forward ran here
                    is_dummy = True
                    dummy.append(k)
                    write("dummy", step=k)
                    with log.in_phase(f"dummy:{k}"):
                        engine.engine_core.execute_dummy_batch()
        except BaseException as exc:  # noqa: BLE001 - the point is to record it
            crash = _dummy_crash(log, k) if is_dummy else None
            crash = crash or traffic._crash(log, k, exc)
            break
        finally:  # what it scheduled, streamed: a rank killed later keeps it
            for s in steps[scheduled_before:]:
                write("scheduled", step=s["step"], scheduled=s["scheduled"])
        finished += [traffic._request_index(o.request_id) for o in outputs if o.finished]
        counter["step"] += 1
    write("served")
    return {"dp_rank": rank, "requests": mine, "steps": steps, "dummy_steps": dummy,
            "crash": crash, "finished": sorted(finished), "engine_steps": counter["step"],
            "accepted": {"table": counter["accepted"]} if counter.get("accepted") else None}
