"""Start engine children with timeouts and collect their recordings.

``hisparse live ...`` lands here.  Each configuration runs in a
fresh child process (:mod:`.child`) with its own timeout, so a crash or a hang
in one configuration loses nothing else; the recording file appears only when
the child finished writing it (atomic rename).  Every child's console output
(stdout and stderr) is kept next to its recording as ``<name>.log``; a child
that leaves no recording leaves ``<name>.failed.json`` with the log's tail.

Several children may share one GPU (``run_sweep(..., jobs=2)``, or two sweeps
at once).  vLLM sizes its KV cache from the free memory it measures at start-up
and refuses to start ("Error in memory profiling") when another process frees
GPU memory while it profiles.  So every change of GPU memory that a child
cannot keep to itself is serialised by one file lock (:data:`LOCK_ENV`, default
``<tmp>/hisparse-live-gpu.lock``):

* a child holds it from just before building ``LLM`` until its KV cache is
  allocated (memory profiling done; :func:`.instrument.install`'s
  ``on_kv_cache_ready``);
* a child that is done does not exit on its own: it asks, and this process
  takes the lock, lets it exit, waits until it is gone (its GPU memory freed)
  and only then releases the lock; a child killed at its timeout is killed
  the same way.

A run that still dies of that error (or of "less than desired GPU memory") is
run once more, and its recording says so: ``provenance["retried"] =
"memory profiling"``.  The timeout counts from when the child holds the lock,
so waiting for a neighbour's start-up does not use it up.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

from ..boundary.json_file import load as load_json
from ..model.knobs import Knobs
from ..recorded.recordings import write_json_atomic
from ..schedule.workload import Workload
from . import parallel, replay
from .dp_live import run_dp
from .processes import (  # noqa: F401 - re-exported: the runner's public names
    CHILD_ARGV, CONTROL_ENV, DEFAULT_LOCK, ENGINE_ENV, LOCK_ENV, LiveUnavailable,
    kill_children_on_termination, log_tail, side_path, spawn_and_watch)

# Start-up failures caused by a neighbour process, not by the configuration -> retry label.
RETRYABLE = {
    "Error in memory profiling": "memory profiling",
    "less than desired GPU memory": "GPU memory in use",
}
def check_available(gpus: int = 1) -> str:
    """Return the vLLM version, or raise :class:`LiveUnavailable` with the reason
    (also when fewer than ``gpus`` CUDA GPUs are visible: a TP / DP run needs them)."""
    if replay.paths():  # HISPARSE_LIVE_REPLAY: committed recordings stand in (engine/replay.py)
        return replay.version(gpus)
    probe = (
        "import torch, vllm, sys;"
        "ok = torch.cuda.is_available();"
        "print(torch.cuda.device_count() if ok else 0);"
        "print(vllm.__version__ if ok else 'NO_GPU')"
    )
    try:
        out = subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, timeout=300
        )
    except subprocess.TimeoutExpired as exc:  # pragma: no cover
        raise LiveUnavailable("probing torch/vllm timed out") from exc
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["?"])[-1]
        raise LiveUnavailable(f"vLLM is not importable here ({last})")
    count, version = out.stdout.strip().splitlines()[-2:]
    if version == "NO_GPU":
        raise LiveUnavailable("no CUDA GPU is visible (torch.cuda.is_available() is False)")
    if int(count) < gpus:
        raise LiveUnavailable(f"{gpus} CUDA GPUs needed (tensor_parallel_size x "
                              f"data_parallel_size), {count} visible")
    return version


# --------------------------------------------------------------------------
# sweeps: validated before anything runs
# --------------------------------------------------------------------------


ENGINES = ("llm", "async")  # the LLM class, or AsyncLLM as vllm serve runs it (serve_engine.py)


def validate_sweep(path: str) -> list[dict]:
    """Read a sweep file and validate every entry; raise ``ValueError`` naming the first bad one.

    A sweep is a JSON list of ``{"name", "knobs", "prompt_lens"}`` (optionally
    ``"timeout"``, ``"engine"``: ``"llm"`` or ``"async"``, ``"gpu_memory_utilization"``),
    or with ``"workload"`` (:mod:`hisparse_model.schedule.workload`'s
    JSON) instead of ``"prompt_lens"``.  Returns the entries with ``"knobs"``
    turned into :class:`~hisparse_model.model.knobs.Knobs` (so every knob is checked
    as the command line checks it), ready for :func:`run_sweep`.  Needs no GPU.
    """
    raw = load_json(path, f"--sweep {path}")
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"sweep: {path} must hold a non-empty JSON list of configurations")
    entries, names = [], set()
    for i, entry in enumerate(raw):
        where = f"sweep entry {i + 1}"  # numbered for people, from 1
        if not isinstance(entry, dict):
            raise ValueError(f"{where}: must be an object with name, knobs, prompt_lens")
        name = entry.get("name")
        if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
            raise ValueError(f"{where}: name must be a file name, got {name!r}")
        where = f"sweep entry {name!r}"
        if name in names:
            raise ValueError(f"{where}: name used twice")
        names.add(name)
        if not isinstance(entry.get("knobs"), dict):
            raise ValueError(f"{where}: knobs must be an object")
        try:
            knobs = Knobs(**entry["knobs"])
        except TypeError as exc:  # an unknown knob name
            raise ValueError(f"{where}: {exc}") from exc
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from exc
        if ("workload" in entry) == ("prompt_lens" in entry):
            raise ValueError(f"{where}: give either prompt_lens or workload")
        if "workload" in entry:
            try:
                workload = Workload.from_json(entry["workload"])
                workload.validate(knobs.max_model_len)
            except ValueError as exc:
                raise ValueError(f"{where}: {exc}") from exc
            lens = []
        else:
            lens = entry.get("prompt_lens")
            if (not isinstance(lens, list) or not lens
                    or any(isinstance(n, bool) or not isinstance(n, int) or n < 1
                           for n in lens)):
                raise ValueError(f"{where}: prompt_lens must be a list of positive integers")
        try:
            parallel.check_live(knobs, "workload" in entry)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from exc
        if entry.get("engine", "llm") not in ENGINES:
            raise ValueError(f"{where}: engine must be one of {', '.join(ENGINES)}")
        memory = entry.get("gpu_memory_utilization")
        if memory is not None and (isinstance(memory, bool) or not isinstance(memory, float)
                                   or not 0 < memory <= 1):
            raise ValueError(f"{where}: gpu_memory_utilization must be a fraction in (0, 1]")
        timeout = entry.get("timeout")
        if timeout is not None and (isinstance(timeout, bool)
                                    or not isinstance(timeout, (int, float)) or timeout <= 0):
            raise ValueError(f"{where}: timeout must be a positive number of seconds")
        entries.append({**entry, "knobs": knobs, "prompt_lens": list(lens)})
    return entries


def _retry_reason(rec: dict, log_path: str) -> str | None:
    """The neighbour-caused start-up failure this run died of, if any."""
    if "startup" in rec:
        if rec["startup"].get("ok"):
            return None
        text = rec["startup"].get("error") or ""
    else:
        text = rec.get("log_tail") or log_tail(log_path)
    for needle, label in RETRYABLE.items():
        if needle in text:
            return label
    return None


def _attempt(knobs: Knobs, prompt_lens: list[int], log_path: str, *, timeout: float,
             command: str, lock_path: str, lock_wait_limit: float,
             child_argv: list[str], workload=None, engine: str = "llm",
             gpu_memory_utilization: float | None = None) -> dict:
    spec = {"knobs": knobs.as_dict(), "prompt_lens": prompt_lens, "command": command}
    if workload is not None:
        spec["workload"] = workload
    if engine != "llm":
        spec["engine"] = engine
    if gpu_memory_utilization is not None:
        spec["gpu_memory_utilization"] = gpu_memory_utilization
    with tempfile.TemporaryDirectory(prefix="hisparse-live-") as tmp:
        spec_path = os.path.join(tmp, "spec.json")
        child_out = os.path.join(tmp, "recording.json")
        control = os.path.join(tmp, "control")
        os.makedirs(control)
        with open(spec_path, "w") as f:
            json.dump(spec, f)
        env = {**os.environ, **ENGINE_ENV, LOCK_ENV: lock_path, CONTROL_ENV: control,
               # TP: NVLink multicast off in the child and its workers
               **(parallel.MULTICAST_OFF_ENV if parallel.is_parallel(knobs) else {})}
        status, timings = spawn_and_watch(
            [*child_argv, spec_path, child_out], env, log_path, control,
            timeout=timeout, lock_path=lock_path, lock_wait_limit=lock_wait_limit)
        if os.path.exists(child_out):
            with open(child_out) as f:
                rec = json.load(f)
            rec.setdefault("provenance", {}).update(timings)
            return rec
    return {"knobs": knobs.as_dict(), "prompt_lens": prompt_lens, "child": status,
            **timings, "log_tail": log_tail(log_path)}


def run_one(
    knobs: Knobs, prompt_lens: list[int], out: str, *, timeout: float, command: str,
    lock_path: str | None = None, lock_wait_limit: float | None = None,
    child_argv: list[str] | None = None, workload=None, engine: str = "llm",
    gpu_memory_utilization: float | None = None,
) -> dict:
    """Run one configuration in a child process; always leaves a recording or a failure stub.

    ``knobs`` must already be valid (constructing :class:`Knobs` validates).  The
    recording goes to ``out`` (atomically), the child's console log to
    ``<out minus .json>.log``; without a recording, ``<out minus .json>.failed.json``
    holds the exit status and the log's tail, and the same dict is returned (it
    has no ``"startup"`` key).  A run that died of a neighbour's memory change
    during profiling is run once more (``provenance["retried"]``).
    ``knobs.tensor_parallel_size`` > 1 runs one child whose workers record per
    rank; ``knobs.data_parallel_size`` > 1 runs one child per rank
    (:func:`.dp_live.run_dp`).  ``engine``: ``"llm"`` (the offline ``LLM`` class) or
    ``"async"`` (AsyncLLM, as ``vllm serve`` runs it: :mod:`.serve_engine`);
    ``gpu_memory_utilization`` replaces the runner's share of the GPU (one engine alone).
    """
    if replay.paths():  # HISPARSE_LIVE_REPLAY: a committed recording, played back, no engine
        return replay.run(knobs, prompt_lens, out, command=command, workload=workload)
    if knobs.data_parallel_size > 1:
        parallel.check_live(knobs, workload is not None)
        return run_dp(knobs, workload, out, timeout=timeout, command=command,
                      lock_path=lock_path, child_argv=child_argv)
    lock_path = lock_path or os.environ.get(LOCK_ENV) or DEFAULT_LOCK
    lock_wait_limit = 4 * timeout if lock_wait_limit is None else lock_wait_limit
    child_argv = list(child_argv or CHILD_ARGV)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    log_path = side_path(out, ".log")
    kw = dict(timeout=timeout, command=command, lock_path=lock_path,
              lock_wait_limit=lock_wait_limit, child_argv=child_argv, workload=workload,
              engine=engine, gpu_memory_utilization=gpu_memory_utilization)
    rec = _attempt(knobs, prompt_lens, log_path, **kw)
    reason = _retry_reason(rec, log_path)
    if reason is not None:
        first_log = side_path(out, ".attempt1.log")
        os.replace(log_path, first_log)
        print(f"{out}: start-up died of {reason} (a neighbour changed GPU memory); "
              "running it once more", file=sys.stderr)
        rec = _attempt(knobs, prompt_lens, log_path, **kw)
        where = rec["provenance"] if "startup" in rec else rec
        where["retried"] = reason
        where["first_attempt_log"] = os.path.basename(first_log)
    if "startup" in rec:
        rec["provenance"]["log"] = os.path.basename(log_path)
        write_json_atomic(out, rec)
        stale = side_path(out, ".failed.json")
        if os.path.exists(stale):
            os.remove(stale)
        return rec
    rec["log"] = os.path.basename(log_path)
    write_json_atomic(side_path(out, ".failed.json"), rec)
    print(f"no recording for {out}: child {rec['child']} (log: {log_path})", file=sys.stderr)
    return rec


def run_sweep(
    sweep: str | list[dict], out_dir: str, *, timeout: float, command: str, jobs: int = 1,
    lock_path: str | None = None, child_argv: list[str] | None = None,
) -> list[dict]:
    """Run every configuration of a sweep, one child each, ``jobs`` at a time on one GPU.

    ``sweep``: what :func:`validate_sweep` returned, or a sweep file's path.  Children
    share the GPU (0.3 of its memory each) under this module's lock protocol."""
    entries = validate_sweep(sweep) if isinstance(sweep, str) else sweep
    jobs = max(1, jobs)
    os.makedirs(out_dir, exist_ok=True)

    def one(entry: dict) -> dict:
        t = entry.get("timeout", timeout)
        return run_one(entry["knobs"], list(entry["prompt_lens"]),
                       os.path.join(out_dir, f"{entry['name']}.json"), timeout=t,
                       command=command, lock_path=lock_path,
                       lock_wait_limit=jobs * t + 120, child_argv=child_argv,
                       workload=entry.get("workload"), engine=entry.get("engine", "llm"),
                       gpu_memory_utilization=entry.get("gpu_memory_utilization"))

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(one, entries))
