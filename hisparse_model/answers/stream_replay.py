"""A trace replayed as a stream: rows pulled as the engine's clock reaches them, to the first crash.

``traffic_risk.first_crash`` serves a workload held whole; a trace of millions of rows is
served here instead (``simulate --traffic`` on a trace over ``trace_stream.STREAM_BYTES`` or
with ``--from``/``--to``).  The engine loop (``scheduler._Sim.lazily``) asks its arrivals
(:class:`StreamArrivals`) for the requests joining before each engine step; they read the
trace (``inputs/trace_stream.py``) one row past the last that joined, so the loop stops at the
first crash having read the rows that arrived by then and one more.  Each row goes through
the server's door (``arrivals.refused_at_door``) and joins before engine step
floor(seconds / step), as ``traffic_risk.generate`` gives it; what a step schedules is routed
and the host pool followed as ``first_crash`` does, so the crash step, its error and kind are
the whole replay's (``tests/test_stream_replay.py`` pins it over several traces).

Held: the requests in flight.  A request is forgotten once its output is processed and its
host transfers are done (its prompt's host blocks too, where no other request can name them:
a prompt without ``hash_ids`` is its own), so a week of requests costs no more memory than
its busiest minute.  With ``--crash-workload`` the accepted rows are kept to write it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..boundary.files import InputError
from ..inputs.trace_stream import TraceStream
from ..inputs.traffic_file import TrafficError
from ..schedule.workload import PROMPT_IDS, Workload
from .arrivals import _arrivals, refused_at_door, too_many
from .seed_run import SeedRun, prompt_of, served_what
from .stream_progress import Ticks, progress_line, span


class StreamedTraffic:
    """A trace to replay as a stream, with what ``simulate --traffic`` says of a Traffic:
    its summary is of the rows read (the replay stops reading at its first crash)."""

    streamed = replayed = True
    blocks = ()

    def __init__(self, path: str, speed: float | None = None, start_s: float | None = None,
                 end_s: float | None = None, keep: bool = False, progress=None):
        self.stream = TraceStream(path, speed or 1.0, start_s, end_s)
        self.source, self.speed, self.trace_format = path, speed or 1.0, self.stream.format
        self.keep, self.progress = keep, progress
        self.past_minutes = False  # the replay met a row at or past --minutes (StreamArrivals)

    def serve(self, job: tuple):
        """``traffic_risk.serve_seed``'s run of this trace: :func:`serve_stream`."""
        return serve_stream(job)

    @property
    def rate_per_s(self) -> float:
        s = self.stream
        return s.count / s.last_s if s.last_s > 0 else float(s.count)

    @property
    def prompt_len(self):
        return _Read(self.stream.prompt, self.stream.count)

    @property
    def max_tokens(self):
        return _Read(self.stream.output, self.stream.count)

    def arrivals_words(self) -> str:
        pace = "" if self.speed == 1 else f" sped up x{self.speed:g}" if self.speed > 1 \
            else f" slowed x{1 / self.speed:g}"
        return f"the trace's own arrival times ({self.trace_format}){pace}, read as a stream"

    def window_words(self) -> str:
        s = self.stream
        if s.start_s is None and s.end_s is None:
            return ""
        return (f", the window --from {s.start_s or 0:g} s --to "
                + ("its end" if s.end_s is None else f"{s.end_s:g} s") + " of trace time")

    def served_words(self, minutes: float, crashed: bool) -> str:
        """What the replay read: its rows and trace time, and why it stopped."""
        s = self.stream
        why = ("up to the crash (the rest unread)" if crashed else
               f"to --minutes {minutes:g} (the rest unread)" if self.past_minutes else
               f"to the window's end (--to {s.end_s:g} s; the rest unread)" if s.past_window
               else "to the trace's end")
        sought = (f", the {s.seeked_bytes / 1e6:,.1f} MB before the window found by "
                  "bisection, not read") if s.seeked_bytes else ""
        counted = [f"to trace time {span(s.trace_s)}"]
        if s.skipped:
            counted.append(f"{s.skipped:,} before the window, skipped")
        if self.read_ahead:
            counted.append("the last read ahead of the clock, not served" if self.read_ahead == 1
                           else f"the last {self.read_ahead:,} read ahead of the clock, not "
                           "served")
        return (f"Served: the trace as a stream{self.window_words()}, {s.rows:,} rows read "
                f"({'; '.join(counted)}){sought}, {why}; one replay (the trace fixes every "
                "arrival and length: a seed has nothing to vary)")

    @property
    def read_ahead(self) -> int:
        """Rows read and not served: the one the replay stopped before (a crash, --minutes,
        the window's end), read to know when the next request comes."""
        s = self.stream
        return s.rows - s.skipped - s.count

    def as_json(self) -> dict:
        s = self.stream
        return {"source": self.source, "rate_per_s": self.rate_per_s,
                "arrivals": self.arrivals_words(), "speed": self.speed,
                "prompt_len": self.prompt_len.describe(),
                "max_tokens": self.max_tokens.describe(),
                "streamed": {"rows_read": s.rows, "rows_replayed": s.count,
                             "rows_skipped_before_window": s.skipped,
                             "rows_read_ahead": self.read_ahead,
                             "trace_s": s.trace_s,
                             "read_to_end": s.ended and not s.past_window,
                             "stopped_at": "the window's end" if s.past_window else
                             "--minutes" if self.past_minutes else
                             "the trace's end" if s.ended else "the crash",
                             "from_s": s.start_s, "to_s": s.end_s,
                             "bytes_not_read_before_window": s.seeked_bytes}}


@dataclass(frozen=True)
class _Read:
    """The range of the lengths read so far (a stream's summary)."""

    range: tuple | None
    count: int

    lowest = property(lambda self: self.range[0] if self.range else 0)
    highest = property(lambda self: self.range[1] if self.range else 0)

    def describe(self) -> str:
        if self.range is None:
            return "none read"
        return (f"{self.count:,} rows' values read ({self.range[0]} to {self.range[1]}), each "
                "in the trace's order")


@dataclass
class StreamedRun(SeedRun):
    """A streamed replay's one run: counts, not the requests (kept only to write them)."""

    accepted: int = 0  # requests the door let in, read so far
    arrived_by_crash: int = 0  # of them, those that joined by the crash step

    @property
    def served(self) -> int:
        return self.accepted

    @property
    def arrived(self) -> int:
        return self.arrived_by_crash if self.crash_step is not None else self.accepted


class StreamArrivals:
    """The engine loop's arrivals (``.get(step)``, ``.next_after(step)``) pulled from a
    :class:`TraceStream`: each row through the door, at its engine step, one row read ahead."""

    def __init__(self, traffic: StreamedTraffic, minutes: float, step_ms: float,
                 max_model_len: int, apc: bool):
        from ..schedule.prefix_keys import LazyKeys, prompt_keys  # noqa: F401 - prompt_keys: eager
        from ..schedule.scheduler import _Req

        self.traffic = traffic
        self.rows, self.end, self.per_step = iter(traffic.stream), minutes * 60.0, step_ms / 1000
        self.limit, self.apc, self.keep = max_model_len, apc, [] if traffic.keep else None
        self.minutes, self.generated = minutes, getattr(traffic, "generated", False)
        self._req, self._keys = _Req, LazyKeys
        self.accepted = self.refused = 0
        self.fresh: dict = {}  # the scheduler's requests by index: those joining now
        self.prompts: dict = {}  # each live request's prompt (the host pool's admission)
        self.live: dict = {}  # request -> (its scheduler state, a prompt of its own)
        self.next = None
        # a trace's stream counts the rows served (not one read ahead); Poisson rows: nothing
        self._served = getattr(traffic.stream, "served", None) or (lambda t, n, m: None)
        self._pull()

    def _pull(self) -> None:
        """Read ahead to the next row the door accepts within the minutes (None: no more)."""
        self.next = None
        for t, n, m, b in self.rows:
            if t >= self.end:
                self.traffic.past_minutes = True
                return
            if refused_at_door(n, m, self.limit):
                self.refused += 1
                self._served(t, n, m)
                continue
            self.next, self.next_s = (int(t / self.per_step), n, m, b), t
            return

    def get(self, step, default=()):
        self.fresh.clear()  # the loop took the last ones into its waiting queue
        out = []
        while self.next is not None and self.next[0] <= step:
            a, n, m, b = self.next
            self._served(self.next_s, n, m)
            i = self.accepted
            self.accepted += 1
            prompt = prompt_of(i, n, b)
            r = self.fresh[i] = self._req(i, n, m, self._keys(prompt) if self.apc else ())
            self.prompts[i] = n
            self.live[i] = r, b is None
            if self.keep is not None:
                if self.accepted > PROMPT_IDS and self.generated:  # as generate() refuses
                    raise too_many(self.minutes, PROMPT_IDS, self.next_s)
                if self.accepted > PROMPT_IDS:
                    raise TrafficError(f"--crash-workload: more than {PROMPT_IDS:,} requests "
                                       "before the crash, more than the distinct prompts a "
                                       "workload can name; replay a window (--from/--to)")
                self.keep.append(((a, n, m), b))
            out.append(i)
            self._pull()
        return out or default

    def next_after(self, step: int) -> int | None:
        return None if self.next is None else self.next[0]


class _Generated:
    """Poisson traffic as a stream of rows (``arrivals._arrivals`` of one seed's generator):
    each request made as the engine's clock reaches it and forgotten once served, kept only as
    its ``(step, prompt_len, max_tokens)`` for ``--crash-workload`` (``SeedRun.requests``)."""

    generated, keep, progress = True, True, None

    def __init__(self, traffic, seed: int):
        import random

        self.stream = _arrivals(traffic, random.Random(seed))
        self.what = f"seed {seed}'s traffic"  # as a host-pool refusal names it


def serve_generated(job: tuple, seed: int) -> StreamedRun:
    """``traffic_risk.serve_seed`` for Poisson traffic on a server that starts and that some
    traffic can crash: one seed's requests generated as they are served (bounded memory: the
    requests in flight, not the minutes' requests and their prefix keys)."""
    knobs, traffic, *rest = job
    run = serve_stream((knobs, _Generated(traffic, seed), *rest))
    run.seed = seed
    return run


class _Stand:
    """The workload the scheduler is built with: none held (the arrivals bring them)."""

    requests = ()


def serve_stream(job: tuple) -> StreamedRun:
    """``traffic_risk.serve_seed`` for a :class:`StreamedTraffic` (module docstring)."""
    from ..model.host_pool import HostPoolShort, HostUse
    from ..model.plan import plan
    from ..model.step_record import step_error
    from ..schedule.scheduler import _Sim
    from ..schedule.scheduler_config import acceptance, scheduler_config
    from .exposed_steps import crash_kind

    knobs, traffic, minutes, step_ms, accepted, startup, never = job
    run = StreamedRun(0, (), 0)
    if startup:  # no request is served by a server that never starts: nothing read
        run.startup, run.error, run.kind = True, startup, "startup"
        return run
    if never:  # no traffic crashes it: nothing to serve, nothing read
        return run
    p = plan(knobs)
    sim = _Sim(scheduler_config(knobs, p), _Stand, acceptance(accepted))
    arrivals = StreamArrivals(traffic, minutes, step_ms, knobs.max_model_len, sim.apc)
    sim.reqs = arrivals.fresh
    host = HostUse(knobs, (), sim.evicting())
    host.prompts = arrivals.prompts
    seen, found, ticks = set(), None, Ticks(traffic.progress)
    forget = _Forget(sim, seen, arrivals)
    try:
        for st in sim.lazily(_Stand, arrivals):
            del sim.steps[:]  # nothing reads the list: keep memory flat
            host.step(st)
            if error := step_error(p, st):
                found = st.index, error, st, seen
                break
            seen.update(st.scheduled)
            forget.step(st)
            ticks.tick(st.index)
    finally:
        ticks.done()
    stream = traffic.stream  # a trace's rows, or Poisson arrivals made as they come
    if isinstance(stream, TraceStream) and stream.handed == 0 and (
            stream.start_s is not None or stream.end_s is not None):
        # as the same (no) rows cut into their own file: "no requests", not "no crash"
        raise TrafficError(f"--from/--to: no row of traffic {traffic.source} in the window "
                           f"(the rows read end at trace time {stream.trace_s:g} s); a window "
                           "is trace seconds after the trace's first row")
    run.refused, run.accepted = arrivals.refused, arrivals.accepted
    run.cached_from(sim.cache)
    short = host.refusal(found[0] if found else None, served_what(traffic, minutes, run.seed))
    if short:
        run.short = HostPoolShort(str(short), short.step, short.need, short.lay)
        return run
    if found is not None:
        run.crash_step, run.error, st, seen = found
        run.kind, run.tokens = crash_kind(st, None, seen), st.num_tokens
        run.arrived_by_crash = arrivals.accepted
    if arrivals.keep is not None:
        run.requests = tuple(r for r, _ in arrivals.keep)
        run.blocks = tuple(b for _, b in arrivals.keep) if any(
            b is not None for _, b in arrivals.keep) else ()
    return run


class _Forget:
    """Drops what no later step reads of a request whose output is processed: the host pool's
    prompt, the crash kind's ``seen``, its state, and, for a prompt of its own (no
    ``hash_ids``: no other request names its blocks), its published host blocks' keys once its
    transfers are done (``_Sim._complete`` publishes a finished request's last pages): they
    stay in the host pool's cache as a count (``HostCache.forget``)."""

    def __init__(self, sim, seen: set, arrivals: StreamArrivals):
        self.sim, self.seen, self.arrivals = sim, seen, arrivals
        self.waiting: list = []  # steps whose output is not processed yet
        self.closing: list = []  # finished requests of their own prompt, transfers pending

    def step(self, st) -> None:
        self.waiting.append(st)
        keep, a = [], self.arrivals
        for s in self.waiting:
            if s.returned_at is None:
                keep.append(s)
                continue
            for i in s.finished:
                self.seen.discard(i)
                a.prompts.pop(i, None)
                r, own = a.live.pop(i)
                if own and r.keys:
                    self.closing.append(r)
        self.waiting = keep
        if self.closing:  # their blocks stay cached in the pool, counted, not keyed
            cache, still = self.sim.cache, []
            for r in self.closing:
                if r.pending or r.pub:
                    still.append(r)
                    continue
                cache.forget(r.keys)
            self.closing = still


def open_traffic(path: str, rate: float | None = None, speed: float | None = None,
                 start_s: float | None = None, end_s: float | None = None, *,
                 whole: bool = False, keep: bool = False, progress: bool = False):
    """``simulate --traffic``'s traffic: a :class:`StreamedTraffic` for a trace replayed at its
    own times that ``trace_stream.streams`` (over 1 MiB, or a window), else
    ``traffic_file.load_traffic``'s (``whole``: an option needs every row held).  ``keep``:
    the rows are kept for ``--crash-workload``; ``progress``: a line on standard error."""
    from ..inputs.trace_stream import streams
    from ..inputs.traffic_file import MAX_SPEED, load_traffic

    window = start_s is not None or end_s is not None
    if window and rate is not None:
        raise TrafficError("--from/--to: a window of a trace replayed at its own times; --rate "
                           "draws new times (give one)")
    if window and whole:
        raise TrafficError("--from/--to: the clock fitted by --step-cost-from-log or "
                           "--step-cost-from-calibration serves a trace held whole; cut the "
                           "window into its own file")
    if start_s is not None and end_s is not None and end_s <= start_s:
        raise TrafficError(f"--from {start_s:g} --to {end_s:g}: an empty window (--to must "
                           "be after --from)")
    if rate is None and not whole and streams(path, window):
        if speed is not None and not 0 < speed <= MAX_SPEED:
            raise TrafficError(f"--speed {speed:g}: must be a number > 0 and <= {MAX_SPEED:g}")
        try:
            traffic = StreamedTraffic(path, speed, start_s, end_s, keep)
        except InputError as exc:
            raise TrafficError(str(exc)) from None
        if traffic.trace_format is not None:
            traffic.progress = progress_line(traffic) if progress else None
            return traffic
        if window:
            raise TrafficError(f"--from/--to: traffic {path} is no trace with arrival times "
                               "(Azure CSV, Mooncake, JSON Lines with arrival_s)")
    return load_traffic(path, rate, speed)
