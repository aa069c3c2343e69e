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
* What launching the next batch costs.  vLLM's engine core with two batches in flight
  schedules the next batch and hands it to the executor before it waits for the older one's
  output (vllm/v1/engine/core.py:689 `Try to schedule a new batch`), and a one-GPU executor
  runs the model runner's ``execute_model`` there and then, in the engine core's thread,
  even when asked not to block
  (vllm/v1/executor/uniproc_executor.py:108-109 `run_method(self.driver_worker`): the next
  batch's forward is launched from Python within this batch's period.  A PIECEWISE graph
  runs its attention eagerly and an eager batch (more tokens than any captured graph)
  launches every kernel from Python.  The served engine's periods
  (``tests/recorded/serve/h100-timed-2026-12-06/``) show it: a batch followed by a FULL
  replay lasts 3-5 ms, one followed by a PIECEWISE batch about 19 ms, one followed by an
  eager batch about 40 ms, whatever it computes; the hand-overs measured directly on the H100
  of 2026-12-07 (``h100-timed-2026-12-07/``: the executor's ``execute_model`` and ``sample_tokens``)
  are 2.6-3.3 ms for a FULL replay (input preparation, the replay, sampling: not
  microseconds; every period holds one, so ``base_ms`` takes it), 16-23 ms for a PIECEWISE
  batch and 41-53 ms for an eager one, and a batch followed by a FULL replay lasts that
  replay's hand-over and about 1 ms more: at these sizes the engine core's thread, not the
  GPU, sets the pace of decoding.  So a batch costs
  ``launch_eager_ms`` or ``launch_piecewise_ms`` more by how the batch after it runs
  (``mode_of``: ``model/dispatch.py``), and ``launch_prefill_ms`` more per prompt token of
  that batch when it is not a FULL replay; a batch after an idle engine has no batch before
  it to pay its launch, so it pays it itself (its start moves by it).  All 0 unless measured
  (:func:`~hisparse_model.answers.clock_fit.fit_served`); a prompt batch is never a FULL
  replay, so this is what the engine spends before each admission.

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
    launch_eager_ms: float = 0.0  # launching a batch that runs eagerly (module docstring)
    launch_piecewise_ms: float = 0.0  # launching a batch that runs a PIECEWISE graph
    launch_prefill_ms: float = 0.0  # per prompt token of a launched batch that is no replay
    measured: bool = False  # fitted to what an engine measured (answers/clock_fit.py)

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
        launch = [f"{ms:.3g} ms {what}" for ms, what in (
            (self.launch_eager_ms, "if it runs eagerly"),
            (self.launch_piecewise_ms, "if it runs a PIECEWISE graph")) if ms]
        if self.launch_prefill_ms:
            launch.append(f"{self.launch_prefill_ms * 1e3:.3g} us per prompt token of it")
        after = f", + launching the next batch: {', '.join(launch)}" if launch else ""
        return " + ".join(out) + after

    def launch_ms(self, mode: str, prefill: int) -> float:
        """Launching a batch that runs in ``mode`` (FULL, PIECEWISE or NONE: eager) with
        ``prefill`` prompt tokens (module docstring)."""
        if mode == "FULL":
            return 0.0
        return (self.launch_eager_ms if mode == "NONE" else self.launch_piecewise_ms) \
            + self.launch_prefill_ms * prefill

    @property
    def launches(self) -> bool:
        return bool(self.launch_eager_ms or self.launch_piecewise_ms or self.launch_prefill_ms)

    def line(self) -> str:
        """One line for the command line: the formula and its source."""
        return f"step time {self.terms()} ({self.source})"

    def as_json(self) -> dict:
        return {"base_ms": self.base_ms, "prefill_ms_per_token": self.prefill_ms,
                "decode_ms_per_token": self.decode_ms, "context_ms_per_token": self.context_ms,
                "launch_eager_ms": self.launch_eager_ms,
                "launch_piecewise_ms": self.launch_piecewise_ms,
                "launch_prefill_ms_per_token": self.launch_prefill_ms,
                "source": self.source, "measured": self.measured}


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
    ``times_s[i]`` is request i's arrival (non-decreasing), ``cost`` a :class:`StepCost`,
    ``mode_of`` how a scheduler step runs (FULL, PIECEWISE or NONE; None: every step a FULL
    replay, nothing to launch).  Drive it with :meth:`steps`, which advances the clock by each
    scheduled batch."""

    def __init__(self, times_s, cost: StepCost, mode_of=None):
        self.times = list(times_s)
        self.cost = cost
        self.mode_of = mode_of if cost.launches else None
        self.now_s = 0.0
        self.sched_s = 0.0  # when the engine schedules the next batch (module docstring)
        self.ahead = True  # async scheduling (set from the scheduler in steps)
        self.released = 0  # requests handed to the engine so far (a prefix of times)
        self.starts: dict[int, float] = {}  # engine step -> when its batch starts
        self.finish_s: dict[int, float] = {}  # request -> when the batch finishing it ends
        self._open: list = []  # (step, end_s) whose output is not processed yet
        self._before = None  # the batch before the next one: its _open entry
        self.busy_s = 0.0  # the batches' costs together, launches included

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
        self._before = None  # nothing runs before the next batch: it pays its own launch
        self.now_s = max(self.now_s, self.times[self.released])
        self.sched_s = self.now_s
        return step + 1

    def steps(self, sim, workload):
        """``sim.lazily(workload)`` with the clock running: yields each step and its start."""
        self.ahead = sim.asyn
        for st in sim.lazily(workload, self):
            if self.mode_of is not None:
                self._launch(st)
            start = self.now_s
            self.sched_s = start  # the next batch is scheduled as this one starts (async)
            self.starts[st.index] = start
            self.now_s = start + self.cost.ms(st) / 1000.0
            self.busy_s += self.now_s - start
            self._open.append([st, self.now_s])
            self._before = self._open[-1]
            self._harvest()
            yield st, start
        self._harvest(everything=True)

    def _launch(self, st) -> None:
        """Launching ``st`` lengthens the batch before it, or after an idle engine delays its
        own start (module docstring)."""
        ms = self.cost.launch_ms(self.mode_of(st), features(st)[0])
        if not ms:
            return
        self.busy_s += ms / 1000.0
        if self._before is None:
            self.now_s += ms / 1000.0
        else:
            self._before[1] += ms / 1000.0
            self.now_s = self._before[1]

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
