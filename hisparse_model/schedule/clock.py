"""The engine's clock: what an engine step costs, and the time it puts on each step.

The scheduler (``scheduler.py``) counts engine steps; a served replay is measured in seconds.
This module is the one place that turns the first into the second:

* :class:`StepCost` is the wall time of one scheduled batch as a function of what it computes,
  ``base + prefill x prefill tokens + decode x decode tokens + context x context tokens``
  (decode: one-token and speculative-verify queries; context: the tokens each scheduled request
  attends to, its computed tokens plus the new ones). Its ``source`` says where the numbers
  came from: a fixed ``--step-ms`` (every batch costs the same, the other terms 0), or a fit
  (``answers/clock_fit.py``) to steps whose wall time was measured.
* :class:`TimedArrivals` feeds a trace's requests to the scheduler's engine loop by time, not
  by a precomputed step: a request joins the first engine step scheduled at or after its
  arrival. Batches run back to back (each starts when the one before it ends: the sum of
  their costs); with async scheduling (the scheduler's ``asyn``, vLLM's default) a batch is
  scheduled as the one before it starts, the engine core keeping two batches in its queue:
  it schedules and launches the next batch (vllm/v1/engine/core.py:689
  `Try to schedule a new batch`), then blocks on the older one's output
  (vllm/v1/engine/core.py:739 `Block until the next result is available`), so a request
  arriving while a batch runs joins the batch after the next. Without it, a batch is scheduled as it starts.
  An idle engine waits for the next arrival and schedules at once. It keeps each step's
  start and end and each request's finish (the end of the batch whose output finishes it).
* What the next batch costs before it starts.  With two batches in flight the period from one
  batch's output to the next holds the host's preparation of the batch after it, so the served
  engine's periods (``tests/recorded/serve/h100-timed-2026-12-06/``) follow the *next* batch's
  prompt tokens (5-7 us each, against 0.6-1.7 us in their own batch) and a batch before one
  that admits a request (schedules it for the first time) lasts about 40 ms where its own
  composition says 3-15.  So a batch costs ``next_prefill_ms`` more per prompt token of the
  batch after it, and at least ``admit_ms`` when that batch admits a request (both 0 unless
  measured: :attr:`StepCost.next_prefill_ms`, :attr:`StepCost.admit_ms`); a batch after an
  idle engine has no batch before it to stretch.

Assumed: the batches of the engine loop run one after another, each for its cost, with no
gap while work is queued (async scheduling hides the scheduler's own time behind the GPU's:
vllm/v1/engine/core.py:670 `def step_with_batch_queue`); output reaches the client when its
batch ends (HTTP and detokenisation not counted). No vLLM import.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass


@dataclass(frozen=True)
class StepCost:
    """Milliseconds for one scheduled batch (module docstring)."""

    base_ms: float
    prefill_ms: float = 0.0  # per prompt token computed
    decode_ms: float = 0.0  # per decode / verify token
    context_ms: float = 0.0  # per token attended to (computed before + new), all requests
    source: str = "fixed --step-ms"
    admit_ms: float = 0.0  # the least period of a batch before one that admits a request
    next_prefill_ms: float = 0.0  # per prompt token of the batch after it (its preparation)

    def ms(self, step) -> float:
        """The cost of ``step`` (a scheduler ``Step``)."""
        prefill, decode, context = features(step)
        return (self.base_ms + self.prefill_ms * prefill + self.decode_ms * decode
                + self.context_ms * context)

    def terms(self) -> str:
        """The formula: ``4.14 ms per batch + 9.13 us per prefill token + ...``."""
        out = [f"{self.base_ms:.3g} ms per batch"]
        for value, scale, unit, what in ((self.prefill_ms, 1e3, "us", "prefill token"),
                                         (self.decode_ms, 1e3, "us", "decode token"),
                                         (self.context_ms, 1e6, "ns", "context token")):
            if value:
                out.append(f"{value * scale:.3g} {unit} per {what}")
        if self.next_prefill_ms:
            out.append(f"{self.next_prefill_ms * 1e3:.3g} us per prefill token of the next batch")
        floor = (f", at least {self.admit_ms:.3g} ms for the batch before one that admits a "
                 "request") if self.admit_ms else ""
        return " + ".join(out) + floor

    def line(self) -> str:
        """One line for the command line: the formula and its source."""
        return f"step time {self.terms()} ({self.source})"

    def as_json(self) -> dict:
        return {"base_ms": self.base_ms, "prefill_ms_per_token": self.prefill_ms,
                "decode_ms_per_token": self.decode_ms, "context_ms_per_token": self.context_ms,
                "admit_ms": self.admit_ms, "next_prefill_ms_per_token": self.next_prefill_ms,
                "source": self.source}


def fixed(step_ms: float, source: str = "fixed --step-ms") -> StepCost:
    """Every batch costs ``step_ms``."""
    return StepCost(float(step_ms), source=source)


def features(step) -> tuple[int, int, int]:
    """``(prefill tokens, decode tokens, context tokens)`` of a scheduler ``Step``."""
    prefill = decode = context = 0
    for r, n in step.scheduled.items():
        if step.kinds.get(r) == "prefill":
            prefill += n
        else:
            decode += n
        context += step.num_computed_before.get(r, 0) + n
    return prefill, decode, context


class TimedArrivals:
    """The scheduler's ``arrivals`` (``.get(step)``, ``.next_after(step)``) decided by time:
    ``times_s[i]`` is request i's arrival (non-decreasing), ``cost`` a :class:`StepCost`.
    Drive it with :meth:`steps`, which advances the clock by each scheduled batch."""

    def __init__(self, times_s, cost: StepCost):
        self.times = list(times_s)
        self.cost = cost
        self.now_s = 0.0
        self.sched_s = 0.0  # when the engine schedules the next batch (module docstring)
        self.ahead = True  # async scheduling (set from the scheduler in steps)
        self.released = 0  # requests handed to the engine so far (a prefix of times)
        self.starts: dict[int, float] = {}  # engine step -> when its batch starts
        self.finish_s: dict[int, float] = {}  # request -> when the batch finishing it ends
        self._open: list = []  # (step, end_s) whose output is not processed yet
        self._admitted = 0  # requests scheduled so far: the scheduler admits in arrival order
        self._before = None  # the batch before the next one, (its start, its _open entry)

    def get(self, step, default=()):
        end = bisect.bisect_right(self.times, self.sched_s if self.ahead else self.now_s,
                                  lo=self.released)
        joined = range(self.released, end)
        self.released = end
        return joined or default

    def next_after(self, step: int) -> int | None:
        """The engine is idle: wait for the next arrival (None: none left)."""
        if self.released >= len(self.times):
            return None
        self._before = None  # nothing runs before the next batch: no floor to stretch
        self.now_s = max(self.now_s, self.times[self.released])
        self.sched_s = self.now_s
        return step + 1

    def steps(self, sim, workload):
        """``sim.lazily(workload)`` with the clock running: yields each step and its start."""
        self.ahead = sim.asyn
        for st in sim.lazily(workload, self):
            top = max(st.scheduled, default=-1) + 1
            admits = top > self._admitted  # the scheduler admits in arrival order
            self._admitted = max(top, self._admitted)
            self._stretch(st, admits)
            start = self.now_s
            self.sched_s = start  # the next batch is scheduled as this one starts (async)
            self.starts[st.index] = start
            self.now_s = start + self.cost.ms(st) / 1000.0
            self._open.append([st, self.now_s])
            self._before = (start, self._open[-1])
            self._harvest()
            yield st, start
        self._harvest(everything=True)

    def _stretch(self, st, admits: bool) -> None:
        """The batch before ``st`` pays for its preparation (module docstring)."""
        cost = self.cost
        if self._before is None or not (cost.admit_ms or cost.next_prefill_ms):
            return
        start, entry = self._before
        end = entry[1] + cost.next_prefill_ms * features(st)[0] / 1000.0
        if admits:
            end = max(end, start + cost.admit_ms / 1000.0)
        if end > entry[1]:
            entry[1] = self.now_s = end

    def _harvest(self, everything: bool = False) -> None:
        keep = []
        for entry in self._open:  # [step, end]: the same list _stretch may still move
            st, end = entry
            if st.returned_at is None and not everything:
                keep.append(entry)
                continue
            for r in st.finished:
                self.finish_s[r] = end
        self._open = keep
