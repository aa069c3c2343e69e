"""Notebook 5's numbers: a served workload step by step, what every max_num_seqs does to it,
and the nearest single-knob changes that avoid its crash; nothing here draws.

Each from :func:`~hisparse_model.answers.simulate.simulate`; re-exported by ``chart_data``.
"""

from __future__ import annotations

import functools

from ..answers import server_verdict as sv
from ..answers.advice import SearchCapped, advise
from .chart_keys import (CRASH, INVALID, NEVER_STARTS, NOT_ROUTED, NOT_RUN, RUNTIME_CRASH, SAFE,
                         STARTUP_CRASH)
from ..model.knobs import Knobs
from ..model.plan import Plan
from ..answers.simulate import Schedule, simulate
from ..schedule.workload import Workload

TRAFFIC_SEQS = 64  # the strip covers max_num_seqs 1 ... 64
# Work is a simulation's estimated time in µs (deterministic, unlike a clock): about 20
# per engine step the scheduler runs and 5 per request in a step (:func:`work_estimate`).
STEP_US, REQUEST_STEP_US, RUN_US = 20, 5, 300
STRIP_WORK_CAP = 600_000  # the strip's simulations: about 0.6 s
ADVICE_CALLS = 48  # simulations per knob the advice may run (the nearest +-24 values)
ADVICE_WORK_CAP = 300_000  # per knob: about 0.3 s
TIMELINE_WINDOW = 160  # engine steps drawn in the timeline (the table lists every step)


def step_key(step) -> str:
    """Colour key of one served step: crash, swap_in, all_resident, or not routed (a replay)."""
    return CRASH if step.error else (step.route or NOT_ROUTED)


def work_estimate(p: Plan, workload: Workload) -> int:
    """Estimated µs to simulate ``workload`` under plan ``p`` (the strip's and advice's unit).

    The scheduler runs until every request is done, crash or not: request i
    needs about ``min(max_tokens, max_model_len - prompt) + ceil(prompt / B)``
    steps from its arrival, and at most max_num_seqs run at once, so the steps
    are about the larger of the last request's finish and the total over
    max_num_seqs.
    """
    b, seqs, room = p.max_num_batched_tokens, p.knobs.max_num_seqs, p.knobs.max_model_len
    need = [min(r.max_tokens, room - r.prompt_len) + -(-r.prompt_len // b)
            for r in workload.requests]
    steps = max(max(r.arrival_step + n for r, n in zip(workload.requests, need)),
                -(-sum(need) // seqs))
    return RUN_US + STEP_US * steps + REQUEST_STEP_US * sum(need)


@functools.lru_cache(maxsize=4096)
def traffic_outcome(knobs: Knobs, workload: Workload) -> tuple[str, int | None, int]:
    """(``never_starts`` / ``startup_crash`` / ``runtime_crash`` / ``safe`` / ``invalid``,
    crash step, work): a run dead at start-up is the one verdict's kind for the server
    (``answers/server_verdict.py``: never starts, or the swap-row overflow at start-up)."""
    try:
        sched = simulate(knobs, workload)
    except ValueError:  # vLLM refuses the knobs (or the workload under them)
        return INVALID, None, RUN_US
    crash = sched.crash
    if crash is not None and crash["step"] is None:  # dead before the scheduler runs
        never = sv.server_verdict(knobs).kind == sv.NEVER_STARTS
        return NEVER_STARTS if never else STARTUP_CRASH, None, RUN_US
    kind = SAFE if crash is None else RUNTIME_CRASH
    return kind, None if crash is None else crash["step"], work_estimate(sched.plan, workload)


def traffic_seqs_strip(knobs: Knobs, workload: Workload, max_seqs: int = TRAFFIC_SEQS,
                       work_cap: int = STRIP_WORK_CAP) -> dict:
    """What ``workload`` does under every max_num_seqs 1 ... ``max_seqs``, the rest as set.

    Values are simulated nearest the current max_num_seqs first; once the
    simulations' estimated time (:func:`work_estimate`) reaches ``work_cap`` µs the rest are
    ``not_run`` (not computed), so a control update stays responsive.  Each
    value's outcome is cached per knobs and workload (:func:`traffic_outcome`).
    """
    current = knobs.max_num_seqs
    seqs = list(range(1, max_seqs + 1))
    out = {"max_num_seqs": seqs, "outcome": [NOT_RUN] * max_seqs,
           "crash_step": [None] * max_seqs, "current": current, "work": 0}
    for s in sorted(seqs, key=lambda s: (abs(s - current), s)):
        if out["work"] >= work_cap:
            break
        kind, step, work = traffic_outcome(knobs.replace(max_num_seqs=s), workload)
        out["outcome"][s - 1], out["crash_step"][s - 1] = kind, step
        out["work"] += work
    return out


def traffic_advice(knobs: Knobs, workload: Workload, plan_b: int, *,
                   calls: int = ADVICE_CALLS, work_cap: int = ADVICE_WORK_CAP) -> dict:
    """``advise`` for a crashing workload, with at most ``calls`` simulations per knob.

    ``{"advice": advise's list (each change re-simulated: no crash), "capped":
    knobs whose search stopped at the cap before a fix was found}``.  The command
    line's ``simulate`` searches without a cap.
    """
    spent: dict[str, list[int]] = {}

    def crashes(changed: Knobs) -> bool:
        name = next((n for n in ("max_num_seqs", "max_num_batched_tokens",
                                 "num_speculative_tokens") if getattr(changed, n) !=
                     getattr(knobs, n)), "vllm_version")
        used = spent.setdefault(name, [0, 0])
        if name != "vllm_version" and (used[0] >= calls or used[1] >= work_cap):
            raise SearchCapped(f"{name}: search capped")
        kind, _, work = traffic_outcome(changed, workload)
        used[0], used[1] = used[0] + 1, used[1] + work
        if kind == INVALID:
            raise ValueError("vLLM refuses these knobs")
        return kind != SAFE

    advice = advise(knobs, crashes, plan_b,
                    longest_prompt=max(r.prompt_len for r in workload.requests))
    found = {n for a in advice for n in a["change"]}
    capped = [n for n, (c, w) in spent.items() if n not in found and n != "vllm_version"
              and (c >= calls or w >= work_cap)]
    return {"advice": advice, "capped": capped}


def timeline_data(sched: Schedule, window: int = TIMELINE_WINDOW,
                  around: int | None = None) -> dict:
    """The steps the timeline draws: at most ``window`` engine steps, ending at the crash.

    ``{"steps": [{"step", "tokens": [(request, tokens)], "num_tokens", "routed",
    "key"}], "first", "last", "total_steps", "C", "W", "crash_step", "requests",
    "hidden_before", "hidden_after"}``; without a crash the window starts at step 0, and
    with ``around`` (a step the schedule ran) it is centred there as far as the steps allow.
    ``hidden_before`` / ``hidden_after`` count the steps with work the window leaves out.
    """
    steps = sched.steps
    crash = sched.crash
    crash_step = None if crash is None else crash["step"]
    last = steps[-1].step if steps else 0
    first = max(0, last - window + 1) if crash_step is not None else 0
    if around is not None and any(s.step == around for s in steps):
        first = max(0, min(around - window // 2, last - window + 1))
    shown = [s for s in steps if first <= s.step < first + window]
    return {
        "steps": [{"step": s.step, "tokens": sorted(s.scheduled.items()),
                   "num_tokens": s.num_tokens, "routed": s.routed_tokens, "key": step_key(s)}
                  for s in shown],
        "first": first, "last": min(last, first + window - 1), "total_steps": len(steps),
        "C": sched.plan.swap_capacity, "W": sched.plan.workspace_rows,
        "crash_step": crash_step, "requests": len(sched.workload),
        "startup_error": sched.startup_error,
        "hidden_before": sum(s.step < first for s in steps),
        "hidden_after": sum(s.step >= first + window for s in steps),
    }


def recording_step_pairs(rec: dict, sched: Schedule) -> list[dict]:
    """A workload recording's steps next to the simulation's, in order.

    Each pair: ``engine`` / ``model`` step numbers and ``{request: tokens}`` (None
    where one side has no more steps), the tokens each side routed and where
    (the engine's from its ``step:<k>`` routing rows), and ``same`` (step number and
    scheduled tokens equal, the test :func:`compare_workload_recording` applies).
    """
    logged: dict[int, dict] = {}
    for row in rec.get("routing_log") or []:
        if str(row.get("phase", "")).startswith("step:"):
            logged.setdefault(int(row["phase"][5:]), row)
    out = []
    for i in range(max(len(rec["steps"]), len(sched.steps))):
        e = rec["steps"][i] if i < len(rec["steps"]) else None
        m = sched.steps[i] if i < len(sched.steps) else None
        row = logged.get(e["step"]) if e else None
        pair = {"engine_step": e and e["step"], "model_step": m and m.step,
                "engine": e and {int(r): n for r, n in e["scheduled"].items()},
                "model": m and m.scheduled,
                "engine_routed": row and (row["num_tokens"], row["route"]),
                "model_routed": (m.routed_tokens, m.route) if m and m.routed_tokens else None,
                "error": bool(m and m.error)}
        pair["same"] = (e is not None and m is not None
                        and (pair["engine_step"], pair["engine"]) == (m.step, m.scheduled))
        out.append(pair)
    return out
