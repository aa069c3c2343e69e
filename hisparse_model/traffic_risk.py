"""How likely, and how soon: traffic served seed by seed, until the first crash.

``hisparse simulate --traffic FILE --minutes N`` answers what an operator asks
after *exposed*: with my traffic, how long until it dies, and how often within N minutes?

1. **The traffic** (:func:`load_traffic`): a description, a file that is one JSON object
   ``{"rate_per_s": 10,
   "prompt_len": ..., "max_tokens": ...}`` where each length is a number or a histogram
   ``[{"min": 1, "max": 512, "weight": 3}, ...]`` (a bin is chosen by weight, then a length
   uniformly within it); or JSON Lines of real requests, one object per line with
   ``prompt_len`` and optionally ``max_tokens`` (or ``output_len``), sampled with
   replacement (a ShareGPT-shaped file; other keys on a line are ignored).  Output lengths
   default to 8 tokens, as in workloads.  Or a **trace with arrival times** (``traces.py``:
   Azure's CSV, Mooncake's JSON Lines, JSON Lines with ``arrival_s``): replayed at its own
   times (``--speed X`` divides them), every request once in its order, so every seed is the
   same and one replay is served; with ``--rate R`` its lengths are served at Poisson
   arrivals of R instead.
2. **One seed** (:func:`generate`): requests arrive as a Poisson process of the rate
   (exponential gaps), each its own prompt (``prompt_id``: real users' prompts share no
   prefix), over N minutes; an engine step takes ``step_ms`` (an assumption: set it to your
   server's measured time per output token), so a request arriving at t seconds joins
   before engine step floor(1000 t / step_ms).  Prompts vLLM refuses (not shorter than
   max_model_len) are refused one by one, as the server refuses them, and counted.
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

import contextlib
import json
import math
import os
import random
from dataclasses import dataclass, field

from .knobs import MODEL_MAX_LEN, Knobs
from .shared_prompts import BlockPrompt
from .workload import DistinctPrompt, PROMPT_IDS, Request, Workload, WorkloadError, short_repr

STEP_MS = 25.0  # ms per engine step, assumed (a DeepSeek-V3.2 decode step: tens of ms)
SEEDS = 8  # seeds per estimate (8 seed-hours at 10 requests/s: about 9 s on 2 cores)
CURVE_POINTS = 60  # times at which the crash probability curve is given
LINE_KEYS = ("max_tokens", "output_len")  # a JSONL line's output length, either name
DESCRIPTION_KEYS = ("rate_per_s", "prompt_len", "max_tokens")
# What no server could see, refused with its bound rather than run (each a one-line refusal)
MAX_RATE_PER_S = 10_000  # requests/s: 250 new requests in every 25-ms engine step
MAX_MINUTES = 7 * 24 * 60  # a week of traffic per seed
MAX_SEEDS = 1_000
MAX_REQUESTS_PER_SEED = 10_000_000  # rate x minutes x 60: a seed's arrivals are held in memory
MAX_OUTPUT_LEN = MODEL_MAX_LEN  # no request generates more tokens than the model's context
TRAFFIC_ASSUMPTIONS = (
    "traffic: Poisson arrivals at the given rate, lengths drawn independently from the file "
    "(a trace with arrival times: its own times and lengths, replayed once), each request "
    "its own prompt (no shared prefix), except a trace's requests with hash_ids, whose "
    "equal 512-token blocks are equal content that prefix caching reuses; every engine step "
    "takes step_ms "
    "(assumed; the engine's real step time varies with the batch); a prompt not shorter "
    "than max_model_len is refused on its own, as vLLM refuses it; one engine (no data "
    "parallelism); the seeds' share is an estimate, each seed's crash is exact",
)


class TrafficError(WorkloadError):
    """A traffic file or option the estimate cannot use (one line naming it)."""


@dataclass(frozen=True)
class Lengths:
    """A length distribution: fixed, a histogram of bins, or real requests' values."""

    bins: tuple  # (lo, hi, cumulative weight) per bin; lo == hi for a single value
    samples: tuple = ()  # real values, sampled uniformly with replacement
    in_order: bool = False  # the samples are a replayed trace's, each once in its order

    def draw(self, rng: random.Random) -> int:
        if self.samples:
            return self.samples[rng.randrange(len(self.samples))]
        if len(self.bins) == 1:
            lo, hi, _ = self.bins[0]
        else:
            u = rng.random() * self.bins[-1][2]
            lo, hi, _ = next(b for b in self.bins if u < b[2])
        return lo if lo == hi else rng.randint(lo, hi)

    @property
    def lowest(self) -> int:
        """The shortest length this distribution can give."""
        return min(self.samples) if self.samples else min(lo for lo, _, _ in self.bins)

    @property
    def highest(self) -> int:
        """The longest length this distribution can give."""
        return max(self.samples) if self.samples else max(hi for _, hi, _ in self.bins)

    def describe(self) -> str:
        if self.samples:
            return (f"{len(self.samples):,} requests' values ({min(self.samples)} to "
                    f"{max(self.samples)}), " + ("each in the trace's order" if self.in_order
                                                 else "sampled with replacement"))
        if len(self.bins) == 1 and self.bins[0][0] == self.bins[0][1]:
            return str(self.bins[0][0])
        return "histogram " + ", ".join(f"{lo}-{hi}" if lo != hi else str(lo)
                                       for lo, hi, _ in self.bins)


@dataclass(frozen=True)
class Traffic:
    """Where requests come from: their rate and their lengths; for a replayed trace, the
    arrival time of each (``arrivals_s``, in the order of the lengths' samples)."""

    rate_per_s: float
    prompt_len: Lengths
    max_tokens: Lengths
    source: str  # the file, as given
    arrivals_s: tuple = ()  # a trace's own arrival times (already divided by speed)
    speed: float = 1.0  # the trace's times are divided by it (2: twice as fast)
    trace_format: str | None = None  # traces.py's name for the file's format
    blocks: tuple = ()  # a replayed trace's hash_ids per request (None: none given)

    @property
    def replayed(self) -> bool:
        """The trace's own arrival times, not Poisson arrivals: every seed is the same."""
        return bool(self.arrivals_s)

    def arrivals_words(self) -> str:
        if self.replayed:
            pace = "" if self.speed == 1 else f" sped up x{self.speed:g}" if self.speed > 1 \
                else f" slowed x{1 / self.speed:g}"
            return f"the trace's own arrival times ({self.trace_format}){pace}"
        return "Poisson" + (f", resampled from a {self.trace_format} trace"
                            if self.trace_format else "")

    def as_json(self) -> dict:
        return {"source": self.source, "rate_per_s": self.rate_per_s,
                "arrivals": self.arrivals_words(), "speed": self.speed,
                "prompt_len": self.prompt_len.describe(),
                "max_tokens": self.max_tokens.describe()}


def _positive_int(value, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise TrafficError(f"{where}: must be an integer >= 1, got {short_repr(value)}")
    return value


def _lengths(value, where: str) -> Lengths:
    """A number, or a histogram: a list of {"min", "max", "weight"} bins."""
    if isinstance(value, int) and not isinstance(value, bool):
        n = _positive_int(value, where)
        return Lengths(((n, n, 1.0),))
    if not isinstance(value, list) or not value:
        raise TrafficError(f"{where}: give a number or a histogram, a list of "
                           f"{{\"min\": n, \"max\": m, \"weight\": w}} bins; got "
                           f"{short_repr(value)}")
    bins, total = [], 0.0
    for i, b in enumerate(value):
        here = f"{where} bin {i + 1}"
        if not isinstance(b, dict) or set(b) - {"min", "max", "weight"}:
            raise TrafficError(f"{here}: expected {{\"min\": n, \"max\": m, \"weight\": w}}, "
                               f"got {short_repr(b)}")
        missing = [key for key in ("min", "max", "weight") if key not in b]
        if missing:  # a bin without "max" is no length 1, one without a weight no weight 1
            raise TrafficError(f"{here}: gives no {' and no '.join(map(repr, missing))} (a bin "
                               f"is {{\"min\": n, \"max\": m, \"weight\": w}})")
        lo = _positive_int(b["min"], f"{here} min")
        hi = _positive_int(b["max"], f"{here} max")
        w = b["weight"]
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not w > 0 \
                or not math.isfinite(w):
            raise TrafficError(f"{here} weight: must be a number > 0, got {short_repr(w)}")
        if hi < lo:
            raise TrafficError(f"{here}: max {hi} is below min {lo}")
        total += w
        bins.append((lo, hi, total))
    return Lengths(tuple(bins))


def _rate(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 \
            or not math.isfinite(value):
        raise TrafficError(f"{where}: requests per second must be a number > 0, got "
                           f"{short_repr(value)}")
    if value > MAX_RATE_PER_S:
        raise TrafficError(f"{where}: {short_repr(value)} requests per second is more than "
                           f"{MAX_RATE_PER_S:,} ({MAX_RATE_PER_S * STEP_MS / 1000:g} new requests "
                           "in every engine step): no server sees that")
    return float(value)


def _output_len(n: int, where: str) -> int:
    """An output length no longer than any request can generate."""
    if n > MAX_OUTPUT_LEN:
        raise TrafficError(f"{where}: {n:,} tokens out is more than the model's context of "
                           f"{MAX_OUTPUT_LEN:,} tokens: no request generates that")
    return n


def load_traffic(path: str, rate_per_s: float | None = None,
                 speed: float | None = None) -> Traffic:
    """Read a traffic file (the module docstring's forms); ``rate_per_s`` overrides the
    file's (and is needed for untimed JSON Lines, which carry no rate).  A trace with
    arrival times (``traces.py``) is replayed at its own times divided by ``speed``, or,
    given ``rate_per_s``, its lengths are served at Poisson arrivals of that rate."""
    from .traces import TraceError, read_trace

    name = f"traffic {path}"
    try:
        trace = read_trace(path)
        with open(path, encoding="utf-8-sig") as f:
            text = f.read() if trace is None else ""
    except UnicodeDecodeError as exc:
        raise TrafficError(f"{name}: not UTF-8 text (offset {exc.start})") from None
    except OSError as exc:  # gzip's BadGzipFile and EOFError are OSError / EOFError
        raise TrafficError(f"{name}: {exc.strerror or exc}") from None
    except EOFError:
        raise TrafficError(f"{name}: a gzip file cut short") from None
    except TraceError as exc:
        raise TrafficError(str(exc)) from None
    rate = None if rate_per_s is None else _rate(rate_per_s, "--rate")
    if speed is not None:
        if trace is None:
            raise TrafficError(f"--speed {speed:g}: only a trace with arrival times (Azure "
                               "CSV, Mooncake, JSON Lines with arrival_s) has times to speed up")
        if rate is not None:
            raise TrafficError(f"--speed {speed:g} and --rate {rate:g}: give one (--speed "
                               "keeps the trace's times, --rate draws new ones)")
        if not (isinstance(speed, (int, float)) and math.isfinite(speed) and speed > 0):
            raise TrafficError(f"--speed {speed:g}: must be a number > 0")
    if trace is not None:
        return _trace_traffic(trace, rate, speed or 1.0)
    try:
        whole = json.loads(text)
    except ValueError:
        whole = None
    if isinstance(whole, dict) and "output_len" in whole and set(whole) <= {"prompt_len",
                                                                            *LINE_KEYS}:
        whole = None  # one request's line (output_len is no description key): JSON Lines
    if isinstance(whole, dict):  # the whole file is one object: a description
        unknown = sorted(set(whole) - set(DESCRIPTION_KEYS))
        if unknown:
            raise TrafficError(f"{name}: unknown key(s) {', '.join(map(repr, unknown))}; a "
                               f"description has {', '.join(DESCRIPTION_KEYS)}")
        if "prompt_len" not in whole:
            raise TrafficError(f"{name}: give \"prompt_len\" (a number or a histogram)")
        if rate is None:
            if "rate_per_s" not in whole:
                raise TrafficError(f"{name}: give \"rate_per_s\" or --rate R (requests "
                                   "per second)")
            rate = _rate(whole["rate_per_s"], f"{name} rate_per_s")
        prompt_len = _lengths(whole["prompt_len"], f"{name} prompt_len")
        max_tokens = _lengths(whole.get("max_tokens", 8), f"{name} max_tokens")
        _output_len(max_tokens.highest, f"{name} max_tokens")
        return Traffic(rate, prompt_len, max_tokens, path)
    prompts, outputs = [], []
    for i, line in enumerate(text.splitlines()):
        if not line.strip():
            continue
        where = f"{name} line {i + 1}"
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise TrafficError(f"{where}: not a JSON object ({exc}); a traffic file is a "
                               "JSON description or JSON Lines of requests") from None
        if not isinstance(obj, dict) or "prompt_len" not in obj:
            raise TrafficError(f"{where}: expected an object with \"prompt_len\", got "
                               f"{short_repr(obj)}")
        prompts.append(_positive_int(obj["prompt_len"], f"{where} prompt_len"))
        given = [k for k in LINE_KEYS if k in obj]
        outputs.append(_output_len(_positive_int(obj[given[0]], f"{where} {given[0]}"),
                                   f"{where} {given[0]}") if given else 8)
    if not prompts:
        raise TrafficError(f"{name}: no requests (an empty file)")
    if rate is None:
        raise TrafficError(f"{name}: JSON Lines carry no arrival rate; give --rate R "
                           "(requests per second)")
    return Traffic(rate, Lengths((), tuple(prompts)), Lengths((), tuple(outputs)), path)


def _trace_traffic(trace, rate: float | None, speed: float) -> Traffic:
    """A trace as traffic: replayed at its own times / ``speed``, or resampled at ``rate``."""
    if not trace.requests:
        raise TrafficError(f"traffic {trace.source}: no requests (an empty trace)")
    replay = rate is None
    prompts = Lengths((), tuple(r.prompt_len for r in trace.requests), replay)
    outputs = Lengths((), tuple(_output_len(r.output_len, f"traffic {trace.source}")
                                for r in trace.requests), replay)
    if not replay:
        return Traffic(rate, prompts, outputs, trace.source, trace_format=trace.format)
    arrivals = tuple(r.arrival_s / speed for r in trace.requests)
    # the trace's mean rate (what the limits and the chart's title state)
    mean = len(arrivals) / arrivals[-1] if arrivals[-1] > 0 else float(len(arrivals))
    blocks = tuple(r.hash_ids for r in trace.requests)
    return Traffic(mean, prompts, outputs, trace.source, arrivals, speed, trace.format,
                   blocks if any(b is not None for b in blocks) else ())


@dataclass
class SeedRun:
    """One seed's traffic, served until its first crash or its end."""

    seed: int
    requests: tuple  # (arrival_step, prompt_len, max_tokens) of every accepted request
    refused: int  # prompts vLLM refuses (not shorter than max_model_len)
    crash_step: int | None = None  # engine step of the first crash (None: no serving crash)
    error: str | None = None
    kind: str | None = None  # exposure kind of the crash step
    tokens: int | None = None  # tokens the crash step computed
    startup: bool = False  # the engine died at start-up, before any traffic
    blocks: tuple = ()  # each accepted request's shared prompt blocks (a trace's hash_ids)

    @property
    def crashed(self) -> bool:
        return self.startup or self.crash_step is not None

    def minute(self, step_ms: float) -> float | None:
        """When it crashed, in minutes from the first request (0 at start-up)."""
        if self.startup:
            return 0.0
        return None if self.crash_step is None else self.crash_step * step_ms / 60000

    def workload(self) -> Workload:
        """The requests that arrived by the crash step (all of them without a crash), as a
        workload ``simulate --workload`` serves to the same crash."""
        cut = self.crash_step if self.crash_step is not None else math.inf
        blocks = self.blocks or (None,) * len(self.requests)
        return Workload(tuple(
            Request(DistinctPrompt(i, n) if b is None else BlockPrompt(b, n), m, a)
            for i, ((a, n, m), b) in enumerate(zip(self.requests, blocks)) if a <= cut))

    def as_json(self, step_ms: float) -> dict:
        return {"seed": self.seed, "crashed": self.crashed, "minute": self.minute(step_ms),
                "crash_step": self.crash_step, "kind": self.kind, "tokens": self.tokens,
                "error": self.error, "requests": len(self.requests), "refused": self.refused}


def generate(traffic: Traffic, minutes: float, seed: int, step_ms: float,
             max_model_len: int) -> SeedRun:
    """One seed's requests over ``minutes`` (module docstring, 2)."""
    rng = random.Random(seed)
    end = minutes * 60.0
    out, refused, blocks = [], 0, []
    per_step = step_ms / 1000.0
    for t, n, m, b in _arrivals(traffic, rng):
        if t >= end:
            break
        if n >= max_model_len:
            refused += 1  # vLLM refuses it at the door (workload.py validate)
            continue
        out.append((int(t / per_step), n, m))
        blocks.append(b)
    if len(out) > PROMPT_IDS:
        raise TrafficError(f"--minutes {minutes}: {len(out):,} requests, more than the "
                           f"{PROMPT_IDS:,} distinct prompts a workload can name")
    return SeedRun(seed, tuple(out), refused,
                   blocks=tuple(blocks) if traffic.blocks else ())


def _arrivals(traffic: Traffic, rng: random.Random):
    """(seconds, prompt_len, max_tokens) of each arrival in time order: a trace's own, or
    Poisson arrivals at the rate with lengths drawn by ``rng``."""
    if traffic.replayed:
        yield from zip(traffic.arrivals_s, traffic.prompt_len.samples,
                       traffic.max_tokens.samples, traffic.blocks or
                       (None,) * len(traffic.arrivals_s))
        return
    t = 0.0
    while True:
        t += rng.expovariate(traffic.rate_per_s)
        yield t, traffic.prompt_len.draw(rng), traffic.max_tokens.draw(rng), None


def first_crash(knobs: Knobs, workload: Workload, accepted=None):
    """``(engine step, error, scheduler Step, requests scheduled before it)`` of the first
    crash serving ``workload`` on one rank after a clean start-up (as ``simulate`` finds
    it), or None."""
    from .plan import plan
    from .scheduler import _Sim
    from .scheduler_config import acceptance, scheduler_config
    from .simulate import serving_refusal
    from .step_record import route_step

    p = plan(knobs)
    serving_refusal(knobs, workload)
    if not p.rules.crashes:
        return None  # only 0.31.0's routing sends more than C rows to swap_in (verdict.py 3)
    sim = _Sim(scheduler_config(knobs, p), workload, acceptance(accepted))
    c = p.swap_capacity
    seen: set[int] = set()  # requests some earlier step scheduled (their chunks)
    for st in sim.lazily(workload):
        del sim.steps[:]  # nothing reads the list: keep memory flat over an hour
        if st.num_tokens > c:
            error = route_step(p, st).error
            if error:
                return st.index, error, st, seen
        seen.update(st.scheduled)
    return None


def crash_kind(st, workload: Workload, seen=frozenset()) -> str:
    """The exposure kind of a crash step (``exposure.ExposedStep.kind``): ``lone_prompt``
    (one prompt computed whole), ``last_chunk`` (the rest of a prompt chunked before: a
    request in ``seen``, those earlier steps scheduled), ``cached_prefix`` (the rest of a
    prompt whose first blocks were a prefix-cache hit), ``burst`` (several prompts or
    pieces, no decode), ``mixed`` (with decodes)."""
    if any(k != "prefill" for k in st.kinds.values()):
        return "mixed"
    if len(st.scheduled) > 1:
        return "burst"
    (i,) = st.scheduled
    if not st.num_computed_before[i]:
        return "lone_prompt"
    return "last_chunk" if i in seen else "cached_prefix"


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
        return sum(len(r.requests) for r in self.runs)

    @property
    def refused(self) -> int:
        """Requests vLLM refuses over all seeds (prompts not shorter than max_model_len)."""
        return sum(r.refused for r in self.runs)

    @property
    def kinds(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.crashed:
            out[r.kind] = out.get(r.kind, 0) + 1
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    def as_json(self) -> dict:
        from .plan import plan

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
    if traffic is not None:
        arrivals = traffic.rate_per_s * minutes * 60
        if arrivals > MAX_REQUESTS_PER_SEED:
            raise TrafficError(f"--minutes {minutes:g} at {traffic.rate_per_s:g} requests/s: "
                               f"{arrivals:,.0f} requests per seed, more than "
                               f"{MAX_REQUESTS_PER_SEED:,}; serve fewer minutes")
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
    from .plan import plan
    from .startup import startup_batches

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
        return out
    from functools import partial

    from .forked import map_forked

    out.runs = map_forked(partial(serve_seed, job), order, jobs)
    return out


def serve_seed(job: tuple, seed: int) -> SeedRun:
    """One seed of :func:`estimate`: its requests, served to their first crash."""
    knobs, traffic, minutes, step_ms, accepted, startup, never = job
    run = generate(traffic, minutes, seed, step_ms, knobs.max_model_len)
    if startup:
        run.startup, run.error, run.kind = True, startup, "startup"
    elif not never and run.requests:  # never: no traffic crashes it, nothing to serve
        work = run.workload()
        found = first_crash(knobs, work, accepted)
        if found is not None:
            run.crash_step, run.error, st, seen = found
            run.kind, run.tokens = crash_kind(st, work, seen), st.num_tokens
    return run


def write_workload(run: SeedRun, path: str) -> None:
    """Write ``run``'s requests up to its crash as a workload file, all or nothing."""
    write_text(path, json.dumps(run.workload().as_json()) + "\n")


def write_text(path: str, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all (a temporary file, then a rename)."""
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise TrafficError(f"{path}: {exc.strerror or exc}") from None
