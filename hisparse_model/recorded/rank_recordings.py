"""Two-GPU recordings against the model, rank by rank.

A tensor-parallel recording (``live -tp 2``) is one engine whose
routing ran in every worker: its ``routing_log`` rows carry ``tp_rank`` (and
``dp_rank``), ``engine.ranks`` holds each worker's reported sizes.  A
data-parallel recording (``live -dp 2``) holds one entry per
engine in ``ranks``: its status (``finished``, ``crashed``, ``hung``, ``timeout``,
``died``), the steps it scheduled, the steps it ran a dummy batch
(``dummy_steps``), its routing rows (serving rows labelled ``step:<k>`` or
``dummy:<k>``) and its crash.

* :func:`compare_tp_recording`: every rank, seen alone (:func:`tp_rank_view`),
  must agree with the model as a one-GPU recording does (:func:`compare_recording`
  / :func:`compare_workload_recording`): C, W, captures and routing do not depend
  on the TP rank, so each worker logs what one GPU logs; the view's knobs carry
  ``tensor_parallel_size`` and the model is asked for that size.  What the
  caller saw (``caller_error``) must be the model's in-process text
  (:func:`compare_caller_errors`).
* :func:`compare_dp_recording`: the model of data parallelism (``simulate`` with
  ``data_parallel_size`` > 1, whose steps list every rank's forward:
  ``steps[].ranks[r]`` with ``scheduled``, ``dummy``, ``dispatch``,
  ``routed_tokens``, ``route``, ``error``) against each rank: the same start-up
  rows as one GPU, the same steps scheduled with the same tokens, dummy batches
  in the same steps (steps where every rank ran one are left out, as the model
  leaves them out), one routing row per routed forward (tokens, route, mode,
  error), the same crash (step, rank, error, whether the rank had scheduled
  anything), the same finished requests; after a crash the other ranks must not
  have finished (the model stops there: they wait in a collective).  The crashing
  rank is compared up to its crash step, the others up to the step before and, when
  the runner killed them, by the step they were in (:func:`compared_until`).
"""

from __future__ import annotations

from ..model.parallel import caller_error
from ..answers.predict import Prediction
from .recordings import (LAYERS, ROW_KEYS, compare_engine, compare_recording, expected_log,
                         fmt_row, recording_knobs)
from ..schedule.workload import Workload
from .workload_recordings import compare_workload_recording

RANK_KEYS = ("tp_rank", "dp_rank")
# What the DP model says of each forward's routing row (the attention metadata's
# decode and actual counts of a padded dummy batch are not modelled per rank).
DP_ROW_KEYS = ("phase", "num_tokens", "route", "cudagraph_mode", "error")
SERVING_PREFIXES = ("step:", "dummy:")


def tp_ranks(rec: dict) -> list[int]:
    """The TP ranks a recording holds rows or sizes of."""
    ranks = {r["tp_rank"] for r in rec.get("routing_log", []) if "tp_rank" in r}
    ranks |= {e.get("tp_rank", 0) for e in (rec.get("engine") or {}).get("ranks", [])}
    return sorted(ranks)


def tp_rank_view(rec: dict, tp_rank: int) -> dict:
    """Rank ``tp_rank`` of a TP recording as a one-GPU recording: its rows, its sizes."""
    eng = dict(rec.get("engine") or {})
    per_rank = {e.get("tp_rank", 0): e for e in eng.pop("ranks", [])}
    if tp_rank in per_rank:
        eng = {k: v for k, v in per_rank[tp_rank].items() if k not in RANK_KEYS}
    rows = [{k: v for k, v in r.items() if k not in RANK_KEYS}
            for r in rec.get("routing_log", []) if r.get("tp_rank", 0) == tp_rank]
    return {**rec, "engine": eng, "routing_log": rows}


def compare_caller_errors(rec: dict) -> list[str]:
    """What the runner's caller saw (``caller_error``, recorded at start-up and for each
    prompt that failed) against the model's in-process text for that error
    (:func:`~hisparse_model.model.parallel.caller_error`: the runner keeps the engine core
    in-process).  A workload run's crash is recorded without it."""
    knobs = recording_knobs(rec)
    places = [("startup", rec["startup"], True)]
    places += [(f"prompt {i}", p, False)  # numbered from 1, as predict numbers prompts
               for i, p in enumerate(rec.get("prompts", []), 1)]
    diffs = []
    for where, got, startup in places:
        if not got.get("error"):
            continue
        want = caller_error(knobs, got["error"], startup=startup, in_process=True)
        if got.get("caller_error") != want:
            diffs.append(f"{where}: caller saw {got.get('caller_error')!r}, model {want!r}")
    return diffs


def compare_tp_recording(rec: dict) -> list[str]:
    """Differences between every TP rank of a recording and the model (empty: all agree)."""
    ranks = tp_ranks(rec)
    size = rec["knobs"]["tensor_parallel_size"]
    diffs = [] if len(ranks) == size else [f"ranks: recording holds {ranks}, "
                                           f"tensor_parallel_size is {size}"]
    compare = compare_workload_recording if "workload" in rec else compare_recording
    for r in ranks:
        diffs += [f"tp rank {r}: {d}" for d in compare(tp_rank_view(rec, r))]
    return diffs + compare_caller_errors(rec)


def dp_model(rec: dict):
    """The model's schedule for a DP recording: ``simulate`` on its knobs and workload (the
    workload as the ranks served it, an idle rank's placeholder included)."""
    from ..answers.simulate import simulate

    knobs = recording_knobs(rec)
    if knobs.data_parallel_size < 2:
        raise ValueError("compare_dp_recording: the recording's data_parallel_size is 1")
    return simulate(knobs, Workload.from_json(rec["workload"]))


def compared_until(sched, rank: int) -> int | None:
    """The last step of rank ``rank`` the comparison covers (None: every step).

    The model stops at the crash.  The crashing rank is compared up to its crash step;
    every other rank up to the step before: its forward of the crash step waits on the
    dead rank in a collective somewhere inside the forward, and how far it got is not
    modelled."""
    crash = sched.crash
    if crash is None or crash["step"] is None:
        return None
    return crash["step"] if crash["rank"] == rank else crash["step"] - 1


def expected_dp_rows(sched, rank: int) -> list[dict]:
    """The folded routing rows DP rank ``rank`` should log: start-up, then each routed forward
    (up to :func:`compared_until`)."""
    rows = expected_log(Prediction(sched.knobs, sched.plan, list(sched.startup)))
    until = compared_until(sched, rank)
    for s in sched.steps:
        r = s.ranks[rank]
        if not r.routed_tokens or (until is not None and s.step > until):
            continue  # a FULL replay runs no Python
        phase = f"{'dummy' if r.dummy is not None else 'step'}:{s.step}"
        calls = 1 if r.error else LAYERS["target"]  # the first routing layer raises
        row = {"phase": phase, "num_tokens": r.routed_tokens, "route": r.route,
               "cudagraph_mode": r.dispatch, "error": r.error, "calls": calls}
        if rows and all(rows[-1].get(k) == row[k] for k in DP_ROW_KEYS):
            rows[-1]["calls"] += calls
        else:
            rows.append(row)
    return rows


def _first_row_diff(got: list[dict], want: list[dict]) -> list[str]:
    for i in range(max(len(got), len(want))):
        g = got[i] if i < len(got) else None
        w = want[i] if i < len(want) else None
        serving = (w or g)["phase"].startswith(SERVING_PREFIXES)
        keys = DP_ROW_KEYS if serving else ROW_KEYS
        same = (g is not None and w is not None and all(g.get(k) == w.get(k) for k in keys)
                and (w.get("calls") is None or g.get("calls") == w["calls"]))
        if not same:
            return [f"routing row {i}: engine {fmt_row(g) if g else '(none)'} != "
                    f"model {fmt_row(w) if w else '(none)'}"]
    return []


def all_dummy_steps(rec: dict) -> set:
    """Steps in which every rank ran a dummy batch (all waiting for outputs): the model
    leaves them out (each routes at most q <= C tokens), so the comparison does too."""
    sets = [set(r.get("dummy_steps", [])) for r in rec["ranks"]]
    return set.intersection(*sets) if sets else set()


def compare_dp_rank(rec: dict, sched, rank: int) -> list[str]:
    """Differences between DP rank ``rank`` of a recording and the model's schedule: sizes,
    the steps it scheduled (tokens per request), its dummy steps, its routing rows, and for
    a rank the runner killed (recorded from its stream) the step it was in."""
    got = rec["ranks"][rank]
    skip = all_dummy_steps(rec)
    diffs = compare_engine(got.get("engine") or {}, sched.plan)
    until = compared_until(sched, rank)

    def kept(k: int) -> bool:
        return until is None or k <= until

    steps = [s for s in sched.steps if kept(s.step)]
    want_real = [(s.step, s.ranks[rank].scheduled) for s in steps if s.ranks[rank].dummy is None]
    want_dummy = [s.step for s in steps if s.ranks[rank].dummy is not None]
    got_real = [(s["step"], {int(i): n for i, n in s["scheduled"].items()})
                for s in got.get("steps", []) if kept(s["step"])]
    got_dummy = [k for k in got.get("dummy_steps", []) if kept(k) and k not in skip]
    if got_real != want_real:
        diffs.append(f"scheduled: engine {got_real} != model {want_real}")
    if got_dummy != want_dummy:
        diffs.append(f"dummy steps: engine {got_dummy} != model {want_dummy}")
    crash = sched.crash
    if got["status"] in ("hung", "timeout", "died") and crash and crash["step"] is not None:
        if got.get("last_step") != crash["step"]:  # it began the crash step, then waited
            diffs.append(f"last step: engine {got.get('last_step')} != model {crash['step']}")
    dummies = {f"dummy:{k}" for k in skip}
    rows = [r for r in got.get("routing_log", [])
            if not r["phase"].startswith(SERVING_PREFIXES)
            or (kept(int(r["phase"].split(":")[1])) and r["phase"] not in dummies)]
    return diffs + _first_row_diff(rows, expected_dp_rows(sched, rank))


def compare_dp_recording(rec: dict) -> list[str]:
    """Differences between a DP recording and the model of data parallelism (empty: agree)."""
    sched = dp_model(rec)
    diffs = []
    ranks = rec["ranks"]
    if len(ranks) != rec["knobs"]["data_parallel_size"]:
        diffs.append(f"ranks: {len(ranks)} recorded, data_parallel_size "
                     f"{rec['knobs']['data_parallel_size']}")
    if rec["startup"]["error"] != sched.startup_error:
        diffs.append(f"startup: engine {rec['startup']['error']!r} != "
                     f"model {sched.startup_error!r}")
    want = sched.crash
    got = rec.get("crash")
    if want is None:
        if got is not None:
            diffs.append(f"crash: engine {got} != model none")
        not_done = [r["dp_rank"] for r in ranks if r["status"] != "finished"]
        if not_done:
            diffs.append(f"ranks {not_done} did not finish; the model crashes none")
        done = sorted(i for r in ranks for i in r.get("finished", []))
        if done != sorted(sched.finished):
            diffs.append(f"finished: engine {done} != model {sorted(sched.finished)}")
    else:
        scheduled = None if got is None or got.get("step") is None else not got.get("dummy")
        got_key = None if got is None else (got.get("step"), got.get("dp_rank"),
                                            got.get("error"), scheduled)
        if want["step"] is None:  # start-up: every rank dies the same way
            got_key = None if got is None else (got.get("step"), None, got.get("error"), None)
        want_key = (want["step"], want["rank"], want["error"], want["scheduled"])
        if got_key != want_key:
            diffs.append(f"crash: engine {got_key} != model {want_key} "
                         "(step, rank, error, scheduled)")
        finished = [r["dp_rank"] for r in ranks if r["status"] == "finished"]
        if finished:
            diffs.append(f"ranks {finished} finished; the model stops all at the crash")
    for r in range(len(ranks)):
        diffs += [f"dp rank {r}: {d}" for d in compare_dp_rank(rec, sched, r)]
    return diffs
