"""A served replay's recording (tests/recorded/serve/) against the model's estimate for it.

A run of :mod:`hisparse_model.engine.serve_run` leaves ``run.json``, ``client.jsonl``,
``server.log`` and ``metrics-<seconds>.txt`` snapshots of the server's ``/metrics``.  This
module reads the ones the comparison needs (run.json, the log, the snapshots) back and answers the question issue 40 asks of them: given the step time
the server itself reported before it died, when and how does the model say it dies, and
when and how did it?

* **measured step time**: ``--step-ms-from-metrics``' arithmetic
  (:func:`~hisparse_model.inputs.step_time.step_from_metrics`) over the warmed server's last
  warm-up pass, read before the replay (``metrics-warm.txt`` to ``metrics-0.txt``): what an
  operator reads from a running server before the traffic comes.  Without a warm-up, between
  the snapshot at the replay's start and the last one before its end (the crash, the stall,
  or the last), said so;
* **estimate**: the trace at the run's speed served by the model at that step time
  (``traffic_risk``'s replay, the path ``simulate --traffic`` takes): its first crash step,
  the time that step starts (step x step time), the requests it schedules and its kind;
* **observed**: when the server's log showed the HiSparse error (the runner's
  ``crash_logged_s``), the error's numbers, and the requests of the step that died from
  vLLM's input dump (``num_scheduled_tokens={cmpl-trace-<i>...: n}``; the runner names
  request ``i`` ``trace-<i>`` through ``X-Request-Id``), else where the replay stalled.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from ..answers.seed_run import served_what
from ..answers.traffic_risk import crash_kind, first_crash, generate
from ..boundary.files import InputError, read_bytes
from ..boundary.json_file import loads
from ..boundary.limits import JSON, LOG, METRICS, Bound
from ..boundary.numbers import Range
from ..inputs.step_time import StepTime, parse_metrics, step_from_metrics
from ..inputs.traffic_file import MAX_SPEED, load_traffic
from ..model.host_pool import HostPoolShort
from ..model.knobs import Knobs
from ..schedule.workload import short_repr

ERROR = re.compile(r"stop=(\d+), capacity=(\d+)")
# vLLM's input dump: found with str.find line by line (a log of 20,000 unclosed
# "num_scheduled_tokens={" is one pass, where a regex rescanned the rest of the log from each)
DUMP = "Dumping scheduler output for model execution: "
TOKENS = "num_scheduled_tokens={"
# a request id's tail is bounded (vLLM's ids are some 50 characters): a dump of 4 MiB of
# "req-1" without a colon is one pass, not a rescan from each of them
REQUEST = re.compile(r"(?:trace|req)-(\d+)\S{0,200}?:\s*(\d+)")
SNAPSHOT = re.compile(r"^metrics-(\d+(?:\.\d+)?)\.txt$")


@dataclass
class ServeRun:
    """One served replay as recorded."""

    folder: str
    run: dict
    knobs: Knobs
    trace: str  # the trace file (run.json names it; read_run finds it in a folder of traces)
    snapshots: dict = field(default_factory=dict)  # seconds -> /metrics text
    log: str = ""
    warm: str | None = None  # /metrics read before the last warm-up pass (metrics-warm.txt)

    @property
    def end_s(self) -> float | None:
        """When the replay ended badly: the logged crash, else the stall, else None."""
        for key in ("crash_logged_s", "stalled_at_s"):
            if self.run.get(key) is not None:
                return float(self.run[key])
        return None


class RunError(ValueError):
    """A served replay's folder that cannot be compared (one line naming it and why)."""


def _text(folder: str, name: str, bound: Bound) -> str | None:
    """A file of the run's folder through the input boundary (None: not there)."""
    path = os.path.join(folder, name)
    if not os.path.lexists(path):
        return None
    return read_bytes(path, bound, f"serve run {folder}: {name}").decode("utf-8", "replace")


# run.json's fields this module reads: name -> (Range, required)
_NUMBERS = {"speed": (Range(float, 0, MAX_SPEED, low_open=True), True),
            "replay_seconds": (Range(float, 0, 7 * 24 * 3600, "a week", low_open=True), True),
            "crash_logged_s": (Range(float, 0, 7 * 24 * 3600, "a week"), False),
            "stalled_at_s": (Range(float, 0, 7 * 24 * 3600, "a week"), False)}


def _checked(run, where: str, traces: str) -> tuple[dict, str]:
    """run.json's object and its trace's path, or one line naming the field: every field
    this module reads is there and in range, and the trace is a file of ``traces`` by its
    bare name (a path elsewhere, ``../`` included, is not opened)."""
    if not isinstance(run, dict):
        raise RunError(f"{where}: run.json is not a JSON object")
    knobs = (run.get("provenance") or {}).get("knobs") if isinstance(
        run.get("provenance"), dict) else None
    if not isinstance(knobs, dict):
        raise RunError(f"{where}: run.json has no provenance.knobs object")
    for key, (rng, required) in _NUMBERS.items():
        if run.get(key) is None and not required:
            continue
        if key not in run:
            raise RunError(f"{where}: run.json has no {key!r}")
        try:
            rng.check(run[key], f"run.json {key}")
        except ValueError as exc:
            raise RunError(f"{where}: {exc}") from None
    warm = run.get("warm_pass_seconds")
    if warm is not None:
        if not isinstance(warm, list) or not warm:
            raise RunError(f"{where}: run.json warm_pass_seconds: a list of seconds")
        for value in warm:
            try:
                Range(float, 0, 24 * 3600, "a day", low_open=True).check(
                    value, "run.json warm_pass_seconds")
            except ValueError as exc:
                raise RunError(f"{where}: {exc}") from None
    name = run.get("trace")
    if not isinstance(name, str) or not name or os.path.basename(name) != name or \
            name.startswith("."):
        raise RunError(f"{where}: run.json trace {short_repr(name)}: the name of a trace "
                       f"file in {traces} (no path: a recording opens nothing outside it)")
    path = os.path.join(traces, name)
    if not os.path.isfile(path):
        raise RunError(f"{where}: run.json trace {name!r}: no such file in {traces}")
    return run, path


def read_run(folder: str, traces: str) -> ServeRun:
    """The recording in ``folder``; its trace is looked up by name in ``traces``.  A folder
    that is no run (no run.json, a run.json without the fields read, a file too large) is
    one :class:`RunError` line."""
    folder = os.path.normpath(folder)
    if not os.path.isdir(folder):
        raise RunError(f"serve run {folder}: not a folder")
    where = f"serve run {folder}"
    if not os.path.isfile(os.path.join(folder, "run.json")):
        raise RunError(f"{where}: no run.json (a folder scripts/gpu_serve.sh wrote)")
    try:
        run = loads(read_bytes(os.path.join(folder, "run.json"), JSON, f"{where}: run.json"),
                    f"{where}: run.json")
        run, trace = _checked(run, where, traces)
        knobs = Knobs.from_dict(run["provenance"]["knobs"])
        snapshots = {float(m.group(1)): _text(folder, m.group(0), METRICS)
                     for m in map(SNAPSHOT.match, sorted(os.listdir(folder))) if m}
        log = _text(folder, "server.log", LOG) or ""
        warm = _text(folder, "metrics-warm.txt", METRICS)
    except RunError:
        raise
    except (InputError, TypeError, ValueError) as exc:  # a knob out of range, a file too big
        text = str(exc)
        raise RunError(text if text.startswith(where) else f"{where}: {text}") from None
    return ServeRun(folder, run, knobs, trace, snapshots, log, warm)


def _snapshot_times(run: ServeRun, until_s: float | None) -> list[float]:
    """The snapshots' times, in order, up to ``until_s`` (all of them for None)."""
    return sorted(t for t in run.snapshots if until_s is None or t <= until_s)


def measured_step(run: ServeRun, until_s: float | None = None) -> StepTime:
    """The step time the server's /metrics said between the replay's start and the last
    snapshot at or before ``until_s`` (the run's bad end by default; all of it without)."""
    until_s = run.end_s if until_s is None else until_s
    times = _snapshot_times(run, until_s)
    if len(times) < 2 or times[0] != 0:
        raise ValueError(f"{run.folder}: fewer than two /metrics snapshots from 0 s to "
                         f"{until_s} s")
    first, last = times[0], times[-1]
    return step_from_metrics(parse_metrics(run.snapshots[first]),
                             parse_metrics(run.snapshots[last]), last - first,
                             f"{os.path.basename(run.folder)} metrics-{first:g}..{last:g}")


def step_before(run: ServeRun) -> StepTime | None:
    """The step time the warmed server's /metrics said over its last warm-up pass, before
    the replay began (None without a warm-up)."""
    if run.warm is None or 0.0 not in run.snapshots:
        return None
    return step_from_metrics(parse_metrics(run.warm), parse_metrics(run.snapshots[0.0]),
                             float(run.run["warm_pass_seconds"][-1]),
                             f"{os.path.basename(run.folder)} metrics-warm..0 (the last "
                             "warm-up pass, before the replay)")


@dataclass(frozen=True)
class Estimate:
    step_ms: float
    crash_s: float | None  # when the crash step starts (step x step time), None: no crash
    scheduled: dict  # request -> tokens of the crash step
    kind: str | None
    error: str | None
    declined: str | None = None  # why the model does not answer (its host pool may run short)
    declined_s: float | None = None  # from when (that engine step x step time)


def estimate(run: ServeRun, step_ms: float) -> Estimate:
    """The model's first crash for the run's replay at ``step_ms`` per engine step (or why
    it declines: a host pool that may run short first)."""
    traffic = load_traffic(run.trace, speed=float(run.run["speed"]))
    minutes = float(run.run["replay_seconds"]) / 60  # the requests the replay sent
    seed = generate(traffic, minutes, 0, step_ms, run.knobs.max_model_len)
    work = seed.workload()
    try:
        found = first_crash(run.knobs, work, what=served_what(traffic, minutes, 0))
    except HostPoolShort as exc:  # the host pool may run short first: no answer
        return Estimate(step_ms, None, {}, None, None, declined=str(exc),
                        declined_s=exc.step * step_ms / 1000)
    if found is None:
        return Estimate(step_ms, None, {}, None, None)
    step, error, st, seen = found
    return Estimate(step_ms, step * step_ms / 1000, dict(st.scheduled),
                    crash_kind(st, work, seen), error)


@dataclass(frozen=True)
class Observed:
    crash_s: float | None  # when the log showed the HiSparse error
    stop_capacity: tuple | None  # (stop, capacity) of the error
    scheduled: dict  # request -> tokens of the step that died (vLLM's input dump)
    stalled_s: float | None


def dump_of(log: str) -> str | None:
    """The ``{...}`` of the first dump line whose ``num_scheduled_tokens={`` closes on that
    line (its text inside the braces), None when none does.  Each line is scanned once."""
    at = log.find(DUMP)
    while at >= 0:
        end = log.find("\n", at)
        end = len(log) if end < 0 else end
        opened = log.find(TOKENS, at, end)
        if opened >= 0:
            closed = log.find("}", opened + len(TOKENS), end)
            if closed >= 0:
                return log[opened + len(TOKENS):closed]
        at = log.find(DUMP, end)
    return None


def observed(run: ServeRun) -> Observed:
    """What the server did: its HiSparse error and the dump of the step that raised it."""
    error = ERROR.search(run.log) if "HiSparse swap rows exceed" in run.log else None
    dump = dump_of(run.log) if error else None
    scheduled = {int(i): int(n) for i, n in REQUEST.findall(dump)} if dump else {}
    return Observed(run.run.get("crash_logged_s"),
                    (int(error.group(1)), int(error.group(2))) if error else None, scheduled,
                    run.run.get("stalled_at_s"))


def compare(run: ServeRun) -> dict:
    """The estimate from the step time the server reported before the replay (during it,
    without a warm-up) beside what the server did."""
    before = step_before(run)
    times = _snapshot_times(run, run.end_s)
    # a snapshot that is no /metrics text is refused here, not taken for a missing one
    during = measured_step(run) if len(times) >= 2 and times[0] == 0 else None
    step = before or during
    if step is None:
        raise ValueError(f"{run.folder}: no step time: no warm-up and fewer than two /metrics "
                         "snapshots before the replay ended")
    est, obs = estimate(run, step.ms), observed(run)
    out = {"run": os.path.basename(run.folder), "step_ms": round(step.ms, 1),
           "step_from": step.source, "step_how": step.how,
           "step_ms_before": before and round(before.ms, 1),
           "step_ms_during": during and round(during.ms, 1),
           "estimate": est.__dict__, "observed": obs.__dict__}
    if est.crash_s is not None and obs.crash_s is not None:
        out["crash_s_off_by"] = round(obs.crash_s - est.crash_s, 3)
        out["same_step"] = est.scheduled == obs.scheduled
    return out
