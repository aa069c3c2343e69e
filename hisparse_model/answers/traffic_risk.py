"""How likely, and how soon: traffic served seed by seed, until the first crash.

``hisparse simulate --traffic FILE --minutes N`` answers what an operator asks
after *exposed*: with my traffic, how long until it dies, and how often within N minutes?

1. **The traffic** (:func:`~hisparse_model.inputs.traffic_file.load_traffic`): a description with
   a rate and length histograms, JSON Lines of real requests, or a trace with its own arrival
   times, replayed (``traffic_file.py``, ``traces.py``).
2. **One seed** (:func:`generate`): requests arrive as a Poisson process of the rate
   (exponential gaps), each its own prompt (``prompt_id``: real users' prompts share no
   prefix), over N minutes; an engine step takes ``step_ms`` (an assumption: set it to your
   server's measured time per output token), so a request arriving at t seconds joins
   before engine step floor(1000 t / step_ms).  Requests the server refuses at its door
   (``arrivals.refused_at_door``: a prompt and its ``max_tokens`` together past max_model_len,
   HTTP 400) are refused one by one, as the server refuses them, and counted.
3. **Its first crash** (:func:`first_crash`): the one-rank serving path ``simulate`` takes
   (start-up, then the scheduler's steps, each dispatched and routed by ``route_step``),
   stopping at the first step that raises; a step of at most C tokens is not routed (it
   routes at most its own tokens, ``verdict.py`` rule 5).  The crash step of a seed is the
   crash step ``simulate --workload`` reports for the requests that arrived by then
   (:meth:`SeedRun.workload`; later arrivals join after it): the tests replay it.
4. **Many seeds** (:func:`estimate`): the share of seeds crashed by each time (the crash
   probability curve), the median time to the first crash, and the exposure kind of each
   crash step (``exposure.py``'s names: a lone prompt, the last chunk of a longer prompt,
   prompts arriving together).  Where the verdict for all traffic is *never*
   (``exposure``), no traffic can crash the server and no seed is served.
"""

from __future__ import annotations

import bisect
import json
import math
from dataclasses import dataclass, field

from ..model.host_pool import HostPoolShort, HostUse
from .arrivals import accepted_arrivals
from .exposed_steps import crash_kind
from ..model.knobs import Knobs
from ..inputs.traffic_file import (  # noqa: F401 - the traffic a seed serves; re-exported for callers
    STEP_MS, Lengths, Traffic, TrafficError, load_traffic)
from ..schedule.workload import PROMPT_IDS, Workload
from .seed_run import REPLAY, SeedRun, prompt_of, served_what  # noqa: F401 - REPLAY, prompt_of: re-exported

SEEDS = 8  # seeds per estimate (8 seed-hours at 10 requests/s: about 9 s on 2 cores)
CURVE_POINTS = 60  # times at which the crash probability curve is given
MAX_MINUTES = 7 * 24 * 60  # a week of traffic per seed
MAX_SEEDS = 1_000
MAX_REQUESTS_PER_SEED = 10_000_000  # rate x minutes x 60: a seed's arrivals are held in memory
# every seed's together, refused before any is served: ~10,000 requests/s are served here, so
# this is hours of CPU (1,000 seeds of 10,000,000 would be 280 hours)
MAX_REQUESTS_ALL_SEEDS = 100_000_000
TRAFFIC_ASSUMPTIONS = (
    "traffic: Poisson arrivals at the given rate, lengths drawn independently from the file "
    "(a trace with arrival times: its own times and lengths, replayed once), each request "
    "its own prompt (no shared prefix), except a trace's requests with hash_ids, whose "
    "equal 512-token blocks are equal content that prefix caching reuses; the host pool "
    "keeps cached prefix blocks until the blocks in use need their room, then evicts the "
    "least recently freed first, as vLLM does, but decides when from its bound on the "
    "blocks in use, so it may forget a prefix earlier than vLLM; every engine step "
    "takes step_ms (given, read from the server, the mean batch of a fitted clock's replay, "
    "or assumed; the engine's real step time varies with the batch: a burst of long prompts "
    "is served slower than a measured mean step says, so a server the model finds idle may "
    "still be busy); a request whose prompt and max_tokens together pass max_model_len is "
    "refused on its own, as vLLM's OpenAI server refuses it (HTTP 400); one engine (no data "
    "parallelism); the seeds' share is an estimate, each seed's crash is exact",
)


def generate(traffic: Traffic, minutes: float, seed: int, step_ms: float,
             max_model_len: int) -> SeedRun:
    """One seed's requests over ``minutes`` (module docstring, 2)."""
    # stops at the request past PROMPT_IDS: what is not served is not generated
    rows, refused = accepted_arrivals(traffic, minutes, seed, max_model_len, most=PROMPT_IDS)
    per_step = step_ms / 1000.0
    out = [(int(t / per_step), n, m) for t, n, m, _ in rows]
    blocks = [b for _, _, _, b in rows]
    return SeedRun(seed, tuple(out), refused,
                   blocks=tuple(blocks) if traffic.blocks else ())




def first_crash(knobs: Knobs, workload: Workload, accepted=None, what="this workload",
                run: SeedRun | None = None):
    """``(engine step, error, scheduler Step, requests scheduled before it)`` of the first
    crash serving ``workload`` on one rank after a clean start-up (as ``simulate`` finds
    it), or None; ValueError where the host pool may run short first (``what``: the
    workload, as the refusal names it); ``run``: the seed whose evictions to note
    (``SeedRun.cached_from``)."""
    from ..model.plan import plan
    from ..schedule.scheduler import _Sim
    from ..schedule.scheduler_config import acceptance, scheduler_config
    from .simulate import serving_refusal
    from ..model.step_record import step_error

    p = plan(knobs)
    serving_refusal(knobs, workload)
    if not p.rules.crashes:
        return None  # only 0.31.0's routing sends more than C rows to swap_in (verdict.py 3)
    sim = _Sim(scheduler_config(knobs, p), workload, acceptance(accepted))
    seen: set[int] = set()  # requests some earlier step scheduled (their chunks)
    host = HostUse(knobs, [r.prompt_len for r in workload.requests], sim.evicting())
    found = None
    for st in sim.lazily(workload):
        del sim.steps[:]  # nothing reads the list: keep memory flat over an hour
        host.step(st)
        if error := step_error(p, st):
            found = st.index, error, st, seen
            break
        seen.update(st.scheduled)
    if run is not None:  # what the host pool evicted on the way
        run.cached_from(sim.cache)
    # short of host blocks before the crash, the schedule is not the model's to say; the
    # pool it suggests is the peak of the whole schedule, the least that lets it answer
    short = host.refusal(found[0] if found else None, what)
    if short:
        raise short
    return found


@dataclass
class Estimate:
    """Seeds served under one deployment; what ``simulate --traffic`` prints."""

    knobs: Knobs
    traffic: Traffic
    minutes: float
    step_ms: float
    runs: list[SeedRun] = field(default_factory=list)
    never_because: str | None = None  # the verdict for all traffic is never: nothing served
    accepted: object = None
    step_said: str | None = None  # where step_ms came from (step_time.StepTime.line())

    @property
    def crashed(self) -> list[SeedRun]:
        return [r for r in self.runs if r.crashed]

    @property
    def share(self) -> float:
        """Share of seeds that crashed within the minutes."""
        return len(self.crashed) / len(self.runs)

    def by(self, minute: float) -> float:
        """Share of seeds crashed by ``minute``."""
        return sum(1 for r in self.crashed if r.minute(self.step_ms) <= minute) / len(self.runs)

    @property
    def median_minutes(self) -> float | None:
        """Median time to the first crash over all seeds (None: half or more survived)."""
        times = sorted(r.minute(self.step_ms) for r in self.crashed)
        half = (len(self.runs) + 1) // 2  # the median seed, surviving seeds counted last
        return times[half - 1] if len(times) >= half else None

    def curve(self, points: int = CURVE_POINTS) -> list[dict]:
        """The crash probability at ``points`` evenly spaced times, and by kind."""
        out = []
        for j in range(1, points + 1):
            t = self.minutes * j / points
            kinds: dict[str, float] = {}
            for r in self.crashed:
                if r.minute(self.step_ms) <= t:
                    kinds[r.kind] = kinds.get(r.kind, 0) + 1 / len(self.runs)
            out.append({"minute": t, "share": sum(kinds.values()), "kinds": kinds})
        return out

    @property
    def served(self) -> int:
        """Requests the seeds served (every accepted arrival, up to each seed's crash)."""
        return sum(r.served for r in self.runs)

    @property
    def refused(self) -> int:
        """Requests the server refuses over all seeds (:func:`refused_at_door`)."""
        return sum(r.refused for r in self.runs)

    @property
    def kinds(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.crashed:
            out[r.kind] = out.get(r.kind, 0) + 1
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    def as_json(self) -> dict:
        from ..model.plan import plan

        k = self.knobs
        return {"knobs": {"vllm_version": k.vllm_version, "max_num_seqs": k.max_num_seqs,
                          "max_num_batched_tokens": plan(k).max_num_batched_tokens,
                          "max_model_len": k.max_model_len},
                "refused": self.refused, "requests": self.served,
                "traffic": self.traffic.as_json(), "minutes": self.minutes,
                "step_ms": self.step_ms, "step_said": self.step_said, "seeds": [r.as_json(self.step_ms) for r in self.runs],
                "crashed_share": self.share, "median_minutes": self.median_minutes,
                "kinds": self.kinds, "curve": self.curve(), "never_because": self.never_because}


def check_traffic_knobs(knobs: Knobs, minutes: float, step_ms: float, seeds: int,
                        traffic: Traffic | None = None) -> None:
    """ValueError (one line naming the option) where the estimate cannot answer."""
    if not (isinstance(minutes, (int, float)) and math.isfinite(minutes) and minutes > 0):
        raise TrafficError(f"--minutes {minutes}: must be a number > 0")
    if minutes > MAX_MINUTES:
        raise TrafficError(f"--minutes {minutes:g}: at most {MAX_MINUTES:,} (a week) per seed")
    if not (math.isfinite(step_ms) and step_ms > 0):
        raise TrafficError(f"--step-ms {step_ms}: must be a number > 0")
    if seeds < 1:
        raise TrafficError(f"--seeds {seeds}: must be >= 1")
    if seeds > MAX_SEEDS:
        raise TrafficError(f"--seeds {seeds}: at most {MAX_SEEDS:,} (the share of seeds "
                           "crashed is then known to a tenth of a percent)")
    if traffic is not None and not getattr(traffic, "streamed", False):
        # (a streamed replay holds no rows to count: stream_replay.py, bounded by its bytes)
        # a replay serves the trace's own rows up to --minutes of its (sped-up) time: bounded
        # by the rows it holds (traces.TRACE_ROWS), not by its mean rate x --minutes, which
        # for a 1-s burst replayed within an hour would count 3,600 times its rows
        arrivals = (bisect.bisect_left(traffic.arrivals_s, minutes * 60) if traffic.replayed
                    else traffic.rate_per_s * minutes * 60)
        if arrivals > MAX_REQUESTS_PER_SEED:
            raise TrafficError(f"--minutes {minutes:g} at {traffic.rate_per_s:g} requests/s: "
                               f"{arrivals:,.0f} requests per seed, more than "
                               f"{MAX_REQUESTS_PER_SEED:,}; serve fewer minutes")
        served = arrivals * (1 if traffic.replayed else seeds)  # a replay is served once
        if served > MAX_REQUESTS_ALL_SEEDS:
            raise TrafficError(f"--seeds {seeds} x {arrivals:,.0f} requests per seed: "
                               f"{served:,.0f} requests in all, more than "
                               f"{MAX_REQUESTS_ALL_SEEDS:,} (hours of work); serve fewer "
                               "seeds or minutes")
        # Poisson arrivals: the door lets in at least the share whose prompt fits beside the
        # longest output (refused_at_door), so a seed's accepted count is Poisson with a mean
        # of at least R x 60 x minutes x that share (standard deviation: its root); past
        # PROMPT_IDS + 10 of those every seed would be refused (odds below 1e-23 otherwise):
        # refused now, before any is generated (a seed that passes it is cut at PROMPT_IDS)
        if not traffic.replayed:
            fits = min(knobs.max_model_len - traffic.max_tokens.highest, knobs.max_model_len - 1)
            accepted = arrivals * traffic.prompt_len.share_at_most(fits)
            if accepted > PROMPT_IDS + 10 * math.sqrt(PROMPT_IDS):
                raise TrafficError(
                    f"--minutes {minutes:g} at {traffic.rate_per_s:g} requests/s: "
                    f"{arrivals:,.0f} requests per seed, {accepted:,.0f} or more of them "
                    f"accepted, more than the {PROMPT_IDS:,} distinct prompts a workload can "
                    "name; serve fewer minutes")
        if traffic.prompt_len.lowest >= knobs.max_model_len:
            raise TrafficError(f"traffic {traffic.source}: every prompt is "
                               f"{traffic.prompt_len.lowest:,} tokens or longer, not shorter "
                               f"than max_model_len {knobs.max_model_len:,}: vLLM refuses "
                               "them all, nothing is served")
    if knobs.data_parallel_size > 1:
        raise TrafficError("data_parallel_size: --traffic serves one engine; under data "
                           "parallelism give a workload with dp_rank (simulate -dp N "
                           "--workload FILE)")
    if knobs.num_gpu_blocks_override is not None:
        raise TrafficError("num_gpu_blocks_override: --traffic assumes the KV pool never runs "
                           "short, which a set pool under an hour of traffic may; leave it "
                           "unset")


def estimate(knobs: Knobs, traffic: Traffic, minutes: float, *, seeds: int = SEEDS,
             first_seed: int = 0, step_ms: float = STEP_MS, accepted=None,
             jobs: int = 1, step_said: str | None = None) -> Estimate:
    """Serve ``seeds`` seeds of ``traffic`` for ``minutes`` each (module docstring), ``jobs``
    seeds at a time in forked processes (the same answer for any ``jobs``)."""
    from .exposure import exposure
    from ..model.plan import plan
    from ..model.startup import startup_batches

    check_traffic_knobs(knobs, minutes, step_ms, seeds, traffic)
    if jobs < 1:
        raise TrafficError(f"--jobs {jobs}: must be >= 1")
    out = Estimate(knobs, traffic, minutes, step_ms, accepted=accepted, step_said=step_said)
    p = plan(knobs)  # vLLM's refusals of the knobs first, as simulate
    startup = next((b.error for b in startup_batches(p) if b.error), None)
    never = exposure(knobs).exposed is False and not startup
    if never:
        out.never_because = exposure(knobs).never_because
    job = (knobs, traffic, minutes, step_ms, accepted, startup, never)
    if traffic.replayed:  # the trace fixes every arrival and length: one replay
        seeds = 1
    order = range(first_seed, first_seed + seeds)
    if jobs == 1 or seeds == 1:
        out.runs = [serve_seed(job, seed) for seed in order]
        return _declined(out)
    from functools import partial

    from .forked import map_forked

    out.runs = map_forked(partial(serve_seed, job), order, jobs)
    return _declined(out)


def _declined(out: Estimate) -> Estimate:
    """The estimate, or the host pool's refusal if any seed may find it short: the first
    such seed's, suggesting the pool that holds every seed (the same for any --jobs)."""
    short = [r.short for r in out.runs if r.short is not None]
    if not short:
        return out
    if len(out.runs) == 1:
        raise short[0]
    need = max(s.need for s in short)
    raise short[0].needing(need, f"the most any of the {len(out.runs)} seeds needs; "
                                 f"{len(short)} may run short")


def serve_seed(job: tuple, seed: int) -> SeedRun:
    """One seed of :func:`estimate`: its requests, served to their first crash."""
    knobs, traffic, minutes, step_ms, accepted, startup, never = job
    if getattr(traffic, "streamed", False):  # a trace read as it is served (stream_replay.py)
        return traffic.serve(job)
    if not traffic.replayed and not startup and not never:  # Poisson: made as it is served
        from .stream_replay import serve_generated

        return serve_generated(job, seed)
    run = generate(traffic, minutes, seed, step_ms, knobs.max_model_len)
    if startup:
        run.startup, run.error, run.kind = True, startup, "startup"
    elif not never and run.requests:  # never: no traffic crashes it, nothing to serve
        work = run.workload()
        try:
            found = first_crash(knobs, work, accepted, what=served_what(traffic, minutes, seed),
                                run=run)
        except HostPoolShort as short:  # every seed is served: the pool for all is named
            run.short = short
            return run
        if found is not None:
            run.crash_step, run.error, st, seen = found
            run.kind, run.tokens = crash_kind(st, work, seen), st.num_tokens
    return run


def workload_text(run: SeedRun) -> str:
    """``run``'s requests up to its crash as a workload file's text (``simulate --workload``
    replays it to the same step); ``boundary/outputs.py`` writes it."""
    return json.dumps(run.workload().as_json()) + "\n"
