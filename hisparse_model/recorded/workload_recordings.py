"""Live workload recordings against :func:`~hisparse_model.answers.simulate.simulate`, step by step.

A workload recording (``tests/recorded/w-*.json``, written by the engine child
with ``live --workload``) holds, next to the usual ``provenance``, ``knobs``,
``engine`` and ``startup``: the ``workload`` it served, every engine step's
``scheduled`` tokens per request, the ``crash`` (step and exact error) or
none, the ``finished`` requests (those whose final output the caller
received), at a crash the ``lost`` requests (labelled from the engine's state,
``engine/traffic.py``), the MTP ``accepted`` drafts the engine reported (the
model's input), and the folded ``routing_log`` whose serving rows are labelled
``step:<k>``.

:func:`compare_workload_recording` simulates the same knobs and workload (with
the recorded acceptance) and reports every difference: sizes, start-up, each
step's scheduled tokens, the crash, the finished requests, the lost requests
and the routing rows.  Recordings made before the runner recorded ``lost``
(no such key) are compared on ``finished`` only: their engine log holds no
evidence of which unfinished request's last token had been computed.
"""

from __future__ import annotations

from ..answers.predict import Prediction
from .recordings import (LAYERS, ROW_KEYS, add_row, compare_engine, compare_rows,
                         expected_log, recording_knobs)
from ..answers.simulate import Schedule, simulate
from ..schedule.workload import Workload


def expected_workload_log(sched: Schedule) -> list[dict]:
    """The folded routing rows the engine should log: start-up, then each routed step."""
    rows = expected_log(Prediction(sched.knobs, sched.plan, list(sched.startup)))
    if sched.startup_error:
        return rows
    layers = LAYERS["both" if sched.knobs.num_speculative_tokens else "target"]
    for s in sched.steps:
        phase = f"step:{s.step}"
        if s.routed_tokens:  # a FULL replay runs no Python; nothing else is routed
            calls = 1 if s.error else layers  # the first routing layer raises
            add_row(rows, phase, s.routed_tokens, s.num_decode_tokens, s.num_tokens,
                    s.route, s.dispatch, s.error, calls)
        d = s.draft
        if d is not None and d.routed:  # the drafter's K - 1 uncaptured draft steps
            add_row(rows, phase, d.routed, d.routed, d.num_tokens, d.route, d.mode, d.error,
                    d.forwards * LAYERS["drafter"])
    return rows


def attribute_drafter_rows(rows: list[dict]) -> list[dict]:
    """Give the MTP drafter's rows the step they belong to, as the runner now labels them.

    The drafter runs in the model runner's ``sample_tokens``, after
    ``execute_model`` returned; the runner first labelled only ``execute_model``,
    so recordings made then log the drafter's row under ``init``, right after
    its step's rows.  Token counts, route, mode and error are untouched.
    """
    out: list[dict] = []
    for row in rows:
        if row["phase"] == "init" and out and out[-1]["phase"].startswith("step:"):
            row = {**row, "phase": out[-1]["phase"]}
            if all(out[-1].get(k) == row.get(k) for k in ROW_KEYS):
                out[-1] = {**out[-1], "calls": out[-1]["calls"] + row["calls"]}
                continue
        out.append(row)
    return out


def compare_workload_recording(rec: dict) -> list[str]:
    """Readable differences between a workload recording and the simulation (empty: agree)."""
    knobs = recording_knobs(rec)
    sched = simulate(knobs, Workload.from_json(rec["workload"]), rec.get("accepted"))
    diffs = compare_engine(rec.get("engine") or {}, sched.plan)
    startup = rec["startup"]
    if startup["error"] != sched.startup_error:
        diffs.append(f"startup: engine {startup['error']!r} != model {sched.startup_error!r}")
    got = [(s["step"], {int(r): n for r, n in s["scheduled"].items()}) for s in rec["steps"]]
    want = [(s.step, s.scheduled) for s in sched.steps]
    for i, (g, w) in enumerate(zip(got, want)):
        if g != w:
            diffs.append(f"step #{i}: engine step {g[0]} {g[1]} != model step {w[0]} {w[1]}")
            break
    if len(got) != len(want):
        diffs.append(f"steps: engine scheduled {len(got)}, model {len(want)}")
    if rec.get("crash") != sched.crash:
        diffs.append(f"crash: engine {rec.get('crash')} != model {sched.crash}")
    if sorted(rec.get("finished", [])) != sorted(sched.finished):
        diffs.append(f"finished: engine {sorted(rec.get('finished', []))} != "
                     f"model {sorted(sched.finished)}")
    if "lost" in rec:  # recorded since the runner reads the unreturned output
        got_lost = sorted((x["request"], x["why"]) for x in rec["lost"])
        want_lost = sorted((x.request, x.why) for x in sched.lost)
        if got_lost != want_lost:
            diffs.append(f"lost: engine {got_lost} != model {want_lost}")
    return diffs + compare_rows(attribute_drafter_rows(rec.get("routing_log", [])),
                                expected_workload_log(sched), sched.plan)
