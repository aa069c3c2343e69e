"""The traffic ``simulate --traffic`` serves, read from a file: rate, lengths, arrival times.

A traffic file is a description, a file that is one JSON object
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

Every error is a :class:`TrafficError`, one line naming the file and the value (a trace's
row and column: ``traces.py``).
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
import random
from dataclasses import dataclass

from ..boundary.files import InputError
from ..boundary.json_file import too_many_digits
from ..model.knobs import MODEL_MAX_LEN
from ..schedule.workload import WorkloadError, short_repr

STEP_MS = 25.0  # ms per engine step, assumed (a DeepSeek-V3.2 decode step: tens of ms)
LINE_KEYS = ("max_tokens", "output_len")  # a JSONL line's output length, either name
DESCRIPTION_KEYS = ("rate_per_s", "prompt_len", "max_tokens")
# What no server could see, refused with its bound rather than run (each a one-line refusal)
MAX_RATE_PER_S = 10_000  # requests/s: 250 new requests in every 25-ms engine step
MAX_OUTPUT_LEN = MODEL_MAX_LEN  # no request generates more tokens than the model's context
MAX_SPEED = 1e6  # a trace replayed a million times as fast: a day in under a tenth of a second


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
        else:  # the first bin whose cumulative weight passes u: a bisection, O(log bins)
            u = rng.random() * self.bins[-1][2]
            at = bisect.bisect_right(self.bins, u, key=lambda b: b[2])
            lo, hi, _ = self.bins[min(at, len(self.bins) - 1)]  # u rounded up to the total
        return lo if lo == hi else rng.randint(lo, hi)

    def share_at_most(self, x: int) -> float:
        """The probability that a draw is at most ``x`` (a bin's lengths are equally likely)."""
        if self.samples:
            return sum(1 for n in self.samples if n <= x) / len(self.samples)
        below, before = 0.0, 0.0
        for lo, hi, cumulative in self.bins:
            weight, before = cumulative - before, cumulative
            below += weight * min(1.0, max(0.0, (x - lo + 1) / (hi - lo + 1)))
        return below / self.bins[-1][2]

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
        w = _finite(b["weight"])
        if w is None or not w > 0:
            raise TrafficError(f"{here} weight: must be a number > 0, got "
                               f"{short_repr(b['weight'])}")
        if hi < lo:
            raise TrafficError(f"{here}: max {hi} is below min {lo}")
        total += w
        if not math.isfinite(total):  # 1e308 + 1e308: no bin could be drawn
            raise TrafficError(f"{here} weight: the weights add up past a float's range "
                               "(a weight is a share: 3 and 5, not 1e308 and 1e308)")
        bins.append((lo, hi, total))
    return Lengths(tuple(bins))


def _finite(value) -> float | None:
    """``value`` as a float when it is a finite number (JSON's true is none), else None; an
    integer past a float's range (10^400) is none either, never an OverflowError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        x = float(value)
    except OverflowError:
        return None
    return x if math.isfinite(x) else None


def _rate(value, where: str) -> float:
    if _finite(value) is None or not value > 0:
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
    from .traces import read_rows, text_lines, trace_format

    name = f"traffic {path}"
    trace, text = None, ""
    try:  # read once, through the input boundary: a trace row by row, other files whole
        numbered = text_lines(path, name)
        head = []
        for number, line in numbered:
            head.append(line)
            if line.strip():
                fmt = trace_format(line)
                if fmt is not None:
                    trace = read_rows(path, fmt, line, numbered)
                break
        if trace is None:
            text = "\n".join(itertools.chain(head, (line for _, line in numbered)))
    except InputError as exc:  # a trace's row (TraceError) or the file itself
        raise TrafficError(str(exc)) from None
    rate = None if rate_per_s is None else _rate(rate_per_s, "--rate")
    if speed is not None:
        if trace is None:
            raise TrafficError(f"--speed {speed:g}: only a trace with arrival times (Azure "
                               "CSV, Mooncake, JSON Lines with arrival_s) has times to speed up")
        if rate is not None:
            raise TrafficError(f"--speed {speed:g} and --rate {rate:g}: give one (--speed "
                               "keeps the trace's times, --rate draws new ones)")
        if not (isinstance(speed, (int, float)) and math.isfinite(speed)
                and 0 < speed <= MAX_SPEED):
            raise TrafficError(f"--speed {speed:g}: must be a number > 0 and <= {MAX_SPEED:g}")
    if trace is not None:
        return _trace_traffic(trace, rate, speed or 1.0)
    try:
        whole = json.loads(text)
    except RecursionError:
        raise TrafficError(f"{name}: nested too deeply to read (JSON arrays or objects "
                           "nested hundreds of levels)") from None
    except json.JSONDecodeError:
        whole = None  # JSON Lines, read line by line below
    except ValueError:  # an integer past Python's digits, no line of JSON Lines either
        raise TrafficError(f"{name}: {too_many_digits(text) or 'unreadable JSON'}") from None
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
        except (ValueError, RecursionError) as exc:
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
