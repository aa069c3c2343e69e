"""Run a data-parallel configuration: one engine child per DP rank, one recording for all.

:func:`run_dp` starts ``data_parallel_size`` engine children at once (each
:mod:`.child` with ``dp_rank`` in its spec and vLLM's DP environment,
:func:`.parallel.dp_env`), watches them, and writes one recording holding every
rank (``ranks[r]``).  The ranks start together (their start-ups meet in
collectives), so they do not take the per-child GPU start-up lock of
:mod:`.live`; this process holds that lock for the whole run instead, so no other
child of a sweep changes GPU memory meanwhile.

A rank ends as one of (``ranks[r].status``):

* ``finished``: served its share, no error; ``crashed``: its engine raised (the
  error and the step are in its record); both come with the rank's own recording;
* ``hung``: still running :data:`HANG_GRACE_S` seconds after another rank ended
  (or at the timeout, after another rank ended): the survivor of a crash waiting
  in a collective.  Killed, and recorded from its stream (:mod:`.rank_log`): its
  routing rows, its last step (``last_step``), the steps it scheduled and its dummy
  batches (``steps``, ``dummy_steps``), whether start-up had finished;
* ``timeout``: still running at the timeout while no rank had ended;
* ``died``: exited without a recording (its exit status and log tail).

Each rank's console log is ``<out>.rank<r>.log``.  The recording's ``startup`` is
ok when every rank's was; ``crash`` is the first crash by step (a hung rank is not
a crash).  A configuration where no rank left anything leaves
``<out>.failed.json`` as :func:`.live.run_one` does.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time

from ..schedule.data_parallel import with_placeholders
from ..recorded.recordings import SCHEMA_VERSION, write_json_atomic
from ..schedule.workload import Workload
from . import parallel, processes, rank_log

HANG_GRACE_S = 120.0  # a rank still running this long after another ended is hung


def _rank_record(rank: int, rec: dict | None, stream: dict, exit_status: str | None,
                 killed: str | None, log_name: str, log_tail: str) -> dict:
    """One rank's entry of the recording."""
    base = {"dp_rank": rank, "log": log_name, "exit": exit_status}
    if rec is not None:  # the rank wrote its recording: finished or crashed
        body = {k: v for k, v in rec.items() if k not in ("schema", "knobs", "workload")}
        crashed = (not rec["startup"]["ok"]) or rec.get("crash") is not None
        return {**base, "status": "crashed" if crashed else "finished", **body}
    # hung or timed out (killed), or died: what its stream holds
    return {**base, "status": killed or "died", "last_step": stream["last_step"],
            "startup": stream["startup"], "engine": stream["engine"],
            "steps": stream["steps"], "dummy_steps": stream["dummy_steps"],
            "routing_log": stream["rows"], "log_tail": log_tail}


def _watch(procs: list[subprocess.Popen], timeout: float, hang_grace: float) -> list[str | None]:
    """Wait for every rank; kill the ones that hang.  Per rank: None, "hung" or "timeout"."""
    t0 = time.monotonic()
    first_end = None
    killed: list[str | None] = [None] * len(procs)
    while True:
        alive = [i for i, p in enumerate(procs) if p.poll() is None]
        if not alive:
            return killed
        now = time.monotonic()
        if first_end is None and len(alive) < len(procs):
            first_end = now
        over_time = now - t0 > timeout
        hung = first_end is not None and (now - first_end > hang_grace or over_time)
        if hung or over_time:
            for i in alive:
                killed[i] = "hung" if first_end is not None else "timeout"
                processes.kill_group(procs[i])
            return killed
        time.sleep(processes.POLL_S)


def run_dp(knobs, workload: list[dict], out: str, *, timeout: float,
           command: str, lock_path: str | None = None, child_argv: list[str] | None = None,
           hang_grace: float = HANG_GRACE_S) -> dict:
    """Run ``knobs`` with ``data_parallel_size`` ranks on ``workload``; the recording.

    The ranks serve ``workload`` with a placeholder request for a rank given none, as the
    model does (:func:`hisparse_model.schedule.data_parallel.with_placeholders`); the recording's
    ``workload`` is that one."""
    size = knobs.data_parallel_size
    workload = with_placeholders(Workload.from_json(workload), size).as_json()["requests"]
    child_argv = list(child_argv or processes.CHILD_ARGV)
    lock_path = lock_path or os.environ.get(processes.LOCK_ENV) or processes.DEFAULT_LOCK
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    port = parallel.free_port()
    base_env = {k: v for k, v in os.environ.items()
                if k not in (processes.LOCK_ENV, processes.CONTROL_ENV, rank_log.STREAM_ENV)}
    lock = processes.Lock(lock_path)
    t0 = time.monotonic()
    while not lock.try_acquire():  # neighbours' start-ups and exits (processes.py)
        time.sleep(processes.POLL_S)
    lock_wait = round(time.monotonic() - t0, 1)
    procs, logs, names = [], [], []
    with tempfile.TemporaryDirectory(prefix="hisparse-dp-") as tmp:
        try:
            for r in range(size):
                spec = {"knobs": knobs.as_dict(), "prompt_lens": [], "command": command,
                        "workload": workload, "dp_rank": r}
                spec_path = os.path.join(tmp, f"spec{r}.json")
                with open(spec_path, "w") as f:
                    json.dump(spec, f)
                env = {**base_env, **processes.ENGINE_ENV, **parallel.MULTICAST_OFF_ENV,
                       **parallel.dp_env(r, size, port),
                       rank_log.STREAM_ENV: os.path.join(tmp, f"rank{r}.jsonl")}
                name = processes.side_path(out, f".rank{r}.log")
                names.append(os.path.basename(name))
                logs.append(open(name, "wb"))
                proc = subprocess.Popen(
                    [*child_argv, spec_path, os.path.join(tmp, f"rec{r}.json")],
                    stdout=logs[-1], stderr=subprocess.STDOUT, env=env,
                    stdin=subprocess.DEVNULL, start_new_session=True)
                processes.RUNNING.add(proc)
                procs.append(proc)
            killed = _watch(procs, timeout, hang_grace)
            for p in procs:
                processes.reap_group(p)  # what each rank left behind (compile workers)
        finally:
            for p in procs:
                if p.poll() is None:  # pragma: no cover - interrupted
                    processes.kill_group(p)
                processes.RUNNING.discard(p)
            for f in logs:
                f.close()
            lock.release()
        ranks = []
        for r, p in enumerate(procs):
            path = os.path.join(tmp, f"rec{r}.json")
            rec = None
            if os.path.exists(path):
                with open(path) as f:
                    rec = json.load(f)
            stream = rank_log.read_stream(os.path.join(tmp, f"rank{r}.jsonl"))
            status = None if killed[r] else f"exit {p.returncode}"
            tail = processes.log_tail(processes.side_path(out, f".rank{r}.log"))
            ranks.append(_rank_record(r, rec, stream, status, killed[r], names[r], tail))
    wall = round(time.monotonic() - t0, 1)
    return _write(knobs, workload, out, ranks, command, wall, lock_wait)


def _first_crash(ranks: list[dict]) -> dict | None:
    crashes = [{"dp_rank": r["dp_rank"], **r["crash"]} for r in ranks
               if r.get("crash")]
    return min(crashes, key=lambda c: (c["step"] is not None, c["step"] or 0), default=None)


def _write(knobs, workload, out, ranks, command, wall, lock_wait) -> dict:
    recorded = [r for r in ranks if r["status"] in ("finished", "crashed")]
    if not recorded and not any(r.get("routing_log") or r.get("startup") for r in ranks):
        stub = {"knobs": knobs.as_dict(), "workload": workload,
                "child": "; ".join(f"rank {r['dp_rank']}: {r['status']} ({r['exit']})"
                                   for r in ranks),
                "wall_seconds": wall, "ranks": ranks}
        write_json_atomic(processes.side_path(out, ".failed.json"), stub)
        return stub
    first = recorded[0] if recorded else {}
    # A rank's start-up: its recording's, or what its stream says (None: never finished).
    startups = [r.get("startup") or {"ok": False, "error": f"rank {r['dp_rank']} {r['status']} "
                                                          "before its engine was built"}
                for r in ranks]
    startup_errors = [s["error"] for s in startups if not s["ok"]]
    prov = dict(first.get("provenance", {}))
    prov.update({"command": command, "wall_seconds": wall, "lock_wait_seconds": lock_wait,
                 "parallel": parallel.provenance(knobs),
                 "logs": [r["log"] for r in ranks]})
    rec = {
        "schema": SCHEMA_VERSION,
        "knobs": knobs.as_dict(),
        "prompt_lens": [],
        "workload": workload,
        "provenance": prov,
        "startup": {"ok": not startup_errors,
                    "error": startup_errors[0] if startup_errors else None},
        "crash": _first_crash(ranks),
        "ranks": ranks,
    }
    write_json_atomic(out, rec)
    stale = processes.side_path(out, ".failed.json")
    if os.path.exists(stale):
        os.remove(stale)
    return rec
