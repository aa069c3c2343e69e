"""The engine step time from the operator's own server: its ``/metrics`` or its log.

``simulate --traffic`` turns arrival times into engine steps with one number, the time a
step takes.  A running vLLM reports it two ways:

* **/metrics** (Prometheus text format, :func:`from_metrics`): read twice, some seconds
  apart.  ``vllm:inter_token_latency_seconds`` is a histogram of the time between two
  output tokens of a request (vllm/v1/metrics/loggers.py:941@0.34.0 `name="vllm:inter_token_latency_seconds",`):
  one engine step per token for a running request (no speculative decoding), so the mean
  over the interval, Δsum / Δcount, is the time of a step while the engine works.
  ``vllm:iteration_tokens_total`` has one observation per engine step
  (vllm/v1/metrics/loggers.py:888@0.34.0 `name="vllm:iteration_tokens_total",`): the wall time
  over its Δcount is the time per step *including idle time* (an idle engine runs no
  step), an upper bound that equals the step time only under continuous load; it is given
  beside, and is the answer only when no token was generated between the reads.
* **the log** (:func:`from_log`): vLLM's periodic line (vllm/v1/metrics/loggers.py:283@0.34.0
  `"Avg prompt throughput: %.1f tokens/s",`) ``Avg prompt throughput: P tokens/s, Avg
  generation throughput: G tokens/s, Running: N reqs``.  With N requests running, a busy
  step gives each one token, so a line says N / G seconds per step, where G counts the
  whole interval since the line before (idle time and prefill-only steps included: an
  upper bound again).  Lines with N = 0 or G = 0 say nothing; the answer is the median of
  the others.

Each reader returns a :class:`StepTime`: the value in ms, where it came from, and the
numbers it was derived from, which the command line prints.
"""

from __future__ import annotations

import math
import re
import statistics
import time
from dataclasses import dataclass

from ..boundary import http
from ..boundary.files import InputError
from ..boundary.limits import METRICS
from ..boundary.numbers import Range
from .log_text import read_log
from .stall_stacks import compiled_note

ITL = "vllm:inter_token_latency_seconds"
ITERATIONS = "vllm:iteration_tokens_total"
# vLLM prints %.1f: one number, not "1.2.3"; ASCII digits (re's \d takes a full-width one)
_RATE = r"([0-9]+(?:\.[0-9]+)?)"
LOG_LINE = re.compile(rf"Avg prompt throughput: {_RATE} tokens/s, Avg generation throughput: "
                      rf"{_RATE} tokens/s, Running: ([0-9]+) reqs")
MAX_RUNNING = 10**7  # requests one server runs at once: vLLM's max_num_seqs is some thousands
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)(?:\s+\d+)?$")
METRICS_SECONDS = 10.0  # between the two reads of /metrics
METRICS_RANGE = Range(float, 0, 600, "ten minutes: the step time of a server under load is "
                      "read in seconds", low_open=True)


class StepTimeError(ValueError):
    """No step time can be read (one line naming the source and why)."""


@dataclass(frozen=True)
class StepTime:
    ms: float
    source: str  # "metrics URL" / "log FILE" / "--step-ms" / "assumed"
    how: str  # the derivation in words, with its numbers

    def line(self) -> str:
        return f"Step time: {self.ms:.3g} ms per engine step, from {self.source}: {self.how}"


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text: ``{metric name: value summed over its label sets}`` (comments and
    the ``_created`` timestamps skipped).  A sample that is not a finite number (``NaN``,
    ``+Inf``) makes its metric unreadable: it is kept as NaN, which
    :func:`step_from_metrics` names, rather than dropped (a dropped first read would count
    the whole counter since start-up as the interval)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        if m is None:
            raise StepTimeError(f"/metrics: not a Prometheus sample line: {line[:80]!r}")
        name = m.group(1)
        try:
            value = float(m.group(3))
        except ValueError:
            raise StepTimeError(f"/metrics: {name}: {m.group(3)[:40]!r} is not a number"
                                ) from None
        if not name.endswith("_created"):
            out[name] = out.get(name, 0.0) + (value if math.isfinite(value) else math.nan)
    return out


def step_from_metrics(before: dict[str, float], after: dict[str, float], seconds: float,
                      source: str) -> StepTime:
    """The step time from two reads ``seconds`` apart (module docstring)."""
    def delta(name: str) -> float:
        if name not in after:
            raise StepTimeError(f"{source}: no {name} (is it a vLLM server's /metrics?)")
        if name not in before:
            raise StepTimeError(f"{source}: {name} is in the second read only (a server "
                                "restarted between the reads?); read it again")
        for read, value in (("first", before[name]), ("second", after[name])):
            if not math.isfinite(value):
                raise StepTimeError(f"{source}: {name} is {value} in the {read} read (not a "
                                    "finite count); read it again, or give --step-ms")
        d = after[name] - before[name]
        if d < 0:
            raise StepTimeError(f"{source}: {name} went backwards between the reads "
                                f"({before[name]:g}, then {after[name]:g}): the server "
                                "restarted, or two servers answer this URL; read it again")
        return d

    tokens, latency = delta(ITL + "_count"), delta(ITL + "_sum")
    steps = delta(ITERATIONS + "_count")
    bound = (f"{1000 * seconds / steps:.3g} ms of wall time per step ({steps:.0f} steps in "
             f"{seconds:.3g} s, {ITERATIONS}; idle time included)") if steps > 0 else None
    if tokens > 0:
        return StepTime(1000 * latency / tokens, source,
                        f"mean inter-token latency {1000 * latency / tokens:.3g} ms over "
                        f"{tokens:.0f} tokens in {seconds:.3g} s ({ITL})"
                        + (f"; upper bound {bound}" if bound else ""))
    if steps > 0:
        return StepTime(1000 * seconds / steps, source, f"no token generated; {bound}")
    raise StepTimeError(f"{source}: the server ran no engine step in {seconds:.3g} s; read "
                        "it under load, or give --step-ms")


def from_metrics(url: str, seconds: float = METRICS_SECONDS, *, fetch=None,
                 clock=time.monotonic, sleep=time.sleep) -> StepTime:
    """Read ``url`` (a server's /metrics) twice ``seconds`` apart; the step time."""
    try:
        METRICS_RANGE.check(seconds, "--metrics-seconds")
    except ValueError as exc:
        raise StepTimeError(str(exc)) from None
    try:  # the URL before the first read, not after a sleep
        http.check_url(url, "--step-ms-from-metrics")
    except InputError as exc:
        raise StepTimeError(str(exc)) from None
    fetch = fetch or _fetch
    first, t0 = parse_metrics(fetch(url)), clock()
    sleep(seconds)
    second, t1 = parse_metrics(fetch(url)), clock()
    return step_from_metrics(first, second, t1 - t0, f"metrics {http.redacted(url)}")


def _fetch(url: str) -> str:
    """One read of /metrics through the input boundary's HTTP fetch (no redirect followed,
    one deadline, the body bounded)."""
    try:
        body = http.fetch(url, "--step-ms-from-metrics", METRICS)
    except InputError as exc:
        raise StepTimeError(str(exc)) from None
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StepTimeError(f"--step-ms-from-metrics {url}: not UTF-8 text (offset "
                            f"{exc.start}): is it a vLLM server's /metrics?") from None


def from_log(path: str) -> StepTime:
    """The median over vLLM's periodic throughput lines in ``path`` (module docstring)."""
    try:  # read as check --from-log reads a log: gzipped, coloured, CR-only, stdin (-)
        lines = read_log(path).splitlines()
    except InputError as exc:
        raise StepTimeError(f"--step-ms-from-log: {exc}") from None
    said = []
    for number, line in enumerate(lines, 1):
        m = LOG_LINE.search(line)
        if m is None:
            continue
        g, n = m.group(2), m.group(3)
        if len(n.lstrip("0")) > len(str(MAX_RUNNING)) or int(n) > MAX_RUNNING:
            raise StepTimeError(f"--step-ms-from-log {path} line {number}: Running: "
                                f"{n[:20]}{'...' if len(n) > 20 else ''} reqs ({len(n):,} "
                                f"digits): more than the {MAX_RUNNING:,} requests any server "
                                "runs at once")
        said.append((float(g), int(n)))  # float() of 5,000 digits is inf, never an error
    if not said:
        raise StepTimeError(f"--step-ms-from-log {path}: no 'Avg prompt throughput ... "
                            "Running: N reqs' line (vLLM logs one every few seconds while it "
                            "serves, unless --disable-log-stats)")
    busy = [1000 * n / g for g, n in said if n > 0 and g > 0]
    if not busy:
        raise StepTimeError(f"--step-ms-from-log {path}: {len(said)} throughput lines, none "
                            "with requests running and tokens generated")
    compiled = compiled_note("\n".join(lines))
    return StepTime(statistics.median(busy), f"log {path}",
                    f"median of Running / generation throughput over {len(busy)} of "
                    f"{len(said)} throughput lines (each an upper bound: idle time and "
                    "prefill-only steps included)" + (f"; {compiled}" if compiled else ""))
