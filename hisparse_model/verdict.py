"""Whether a scenario crashes under changed knobs: the advice's question, answered fast.

:func:`~hisparse_model.advice.advise` asks ``crashes(knobs)`` for thousands of
candidate configurations (every ``max_num_batched_tokens`` within +-2048 of the
current one, every ``max_num_seqs`` from 1 to 64, ...).  :func:`workload_crashes`
answers exactly what ``simulate(knobs, workload, accepted).crash is not None``
answers (``fast=False`` calls that, for the tests that compare), raising the same
``ValueError`` where it raises, and skips only work whose result cannot change
the verdict.  (``predict``'s advice needs none of this: a prediction takes
microseconds.)  Under data parallelism each candidate is simulated as is.

1. **Refusals first, in the model's order**: vLLM's refusal of the knobs
   (``plan``), then the workload's prompts and the KV pool
   (``simulate.serving_refusal``, memoised by the three knobs it reads).
2. **Start-up**: a start-up error is a crash; no serving step is needed.
3. **Routing that cannot raise**: the router raises only when ``swap_in`` gets
   more than C rows, and only 0.31.0's predicate (``swap_in`` up to W = C + 1
   rows, :attr:`VersionRules.crashes`) lets it; under 0.31.0 + fix, 0.32.0 and
   0.33.0 nothing served after start-up crashes, whatever the schedule.
4. **Stop at the first crash**: steps are scheduled lazily
   (``scheduler._Sim.lazily``); a crash verdict needs no later step.
5. **A step that cannot raise is not routed**: it routes at most its own token
   count (the hand-off passes the whole batch, its decode part or nothing), so a
   step of at most C tokens cannot exceed C rows.  Any other step's error is
   :func:`~hisparse_model.step_record.route_step`'s, memoised by everything
   ``route_step`` reads for it: the step's runner query lengths, its
   decode-graph eligibility and residency, and the plan's routing key (rules,
   backend, C, q, CUDA-graph mode and capture descriptors).
6. **One schedule, many configurations**: the scheduler reads only its
   ``SchedulerConfig``, never the routing rules, C, W or the capture sizes, so a
   schedule is computed once and re-routed under each plan.  Within it, B is read
   only as the token budget and S only in the admission check.  In a step where
   the budget forced nothing (the step took at most B - K - 1 tokens: truncating a
   request, stopping the running loop or refusing a waiting one, or leaving no
   room for a 1 + K padded request, each leaves at most K tokens of budget) any
   B' at least the step's tokens forces nothing either; in a step where S
   refused no waiting request, any S' at least the running count takes the same
   decisions.  So from the same state both take the same decisions, and the
   schedule under (S', B') is this schedule step by step, up to the first step
   where one of these stops holding (``_Run.usable``).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import replace

from .dispatch import decode_graph_eligible
from .knobs import Knobs
from .plan import Plan, plan
from .scheduler import _Sim
from .scheduler_config import SchedulerConfig, scheduler_config
from .simulate import serving_refusal, simulate
from .startup import startup_batches
from .step_record import route_step
from .workload import Workload

KEPT_RUNS = 16  # schedules kept per scheduler family for later configurations to reuse


def _route_key(p: Plan) -> tuple:
    """Everything of a plan that :func:`~hisparse_model.step_record.route_step` reads to decide
    a step's error (dispatch: mode, captures; split: q, backend; router: rules, C)."""
    return (p.rules.key, p.knobs.attention_backend, p.swap_capacity, p.max_decode_query_len,
            p.cudagraph_mode, bool(p.capture_sizes), p.piecewise, p.full)


class _Run:
    """One schedule, scheduled lazily, with what its reuse for another (S, B) needs."""

    def __init__(self, cfg: SchedulerConfig, workload: Workload, accepted):
        self.cfg = cfg
        self.sim = _Sim(cfg, workload, accepted)
        self.steps_iter = self.sim.lazily(workload)
        self.done = False
        self.steps: list = []
        self.tokens: list[int] = []  # tokens of each step
        self.top: list[int] = []  # the most tokens of any step so far (ascending)
        self.peak: list[int] = []  # the most requests running so far (ascending)
        self.index: list[int] = []  # engine step number of each step
        # first step (index in steps) whose budget may have forced a decision
        self.budget_bound: int | None = None
        self.crash_scan: dict[tuple, list] = {}  # route key -> [steps scanned, first crash]

    def extend(self) -> bool:
        """Schedule one more step; False when the workload is done."""
        st = next(self.steps_iter, None)
        if st is None:
            self.done = True
            return False
        n = st.num_tokens
        i = len(self.steps)
        self.steps.append(st)
        self.tokens.append(n)
        self.top.append(max(n, self.top[-1]) if i else n)
        self.peak.append(self.sim.peak)
        self.index.append(st.index)
        if self.budget_bound is None and n > self.cfg.max_num_batched_tokens - \
                self.cfg.num_speculative_tokens - 1:
            self.budget_bound = i
        del self.sim.steps[:]  # the run keeps its own list; the simulator's is not read
        return True

    def usable(self, s: int, b: int) -> int:
        """How many of the steps scheduled so far the schedule under (s, b) shares."""
        n = len(self.steps)
        if b != self.cfg.max_num_batched_tokens:
            n = min(n, bisect.bisect_right(self.top, b),
                    n if self.budget_bound is None else self.budget_bound)
        if s != self.cfg.max_num_seqs:
            n = min(n, bisect.bisect_right(self.peak, s))
            bound = self.sim.seqs_bound_at
            if bound is not None:  # S refused a waiting request in engine step `bound`
                n = min(n, bisect.bisect_left(self.index, bound))
        return n

    def complete_for(self, s: int, b: int) -> bool:
        """Whether the whole schedule is the one under (s, b) (every engine step shared)."""
        return (self.done and self.usable(s, b) == len(self.steps)
                and (s == self.cfg.max_num_seqs or self.sim.seqs_bound_at is None))

    def first_crash(self, p: Plan, key: tuple, errors: dict, upto: int) -> int | None:
        """Index of the first of the first ``upto`` steps that raises under plan ``p``."""
        scan = self.crash_scan.setdefault(key, [0, None])
        if scan[1] is not None:
            return scan[1] if scan[1] < upto else None
        c = p.swap_capacity
        for i in range(scan[0], upto):
            if self.tokens[i] <= c:
                continue  # routes at most its tokens: cannot exceed C rows
            st = self.steps[i]
            shape = (tuple(st.runner_query_lens()), decode_graph_eligible(st), st.resident)
            if shape not in errors:
                errors[shape] = route_step(p, st).error
            if errors[shape]:
                scan[:] = [i, i]
                return i
        scan[0] = max(scan[0], upto)
        return None


class _Verdicts:
    """``crashes(knobs)`` for one workload: the shortcuts of the module docstring."""

    def __init__(self, workload: Workload, accepted=None):
        self.workload, self.accepted = workload, accepted
        self.families: dict[SchedulerConfig, list[_Run]] = {}
        self.errors: dict[tuple, dict] = {}  # route key -> step shape -> error
        self.refusals: dict[tuple, ValueError | None] = {}  # serving_refusal's, by what it reads

    def __call__(self, knobs: Knobs) -> bool:
        if knobs.data_parallel_size > 1:  # one scheduler per rank: simulated as is
            return simulate(knobs, self.workload, self.accepted).crash is not None
        p = plan(knobs)  # raises where simulate raises, in its order (plan, then serving)
        refusal = (knobs.max_model_len, knobs.num_gpu_blocks_override,
                   knobs.num_speculative_tokens)  # all that serving_refusal reads
        if refusal not in self.refusals:
            try:
                serving_refusal(knobs, self.workload)
                self.refusals[refusal] = None
            except ValueError as exc:
                self.refusals[refusal] = exc
        if self.refusals[refusal] is not None:
            raise self.refusals[refusal]
        if any(b.error for b in startup_batches(p)):
            return True
        if not p.rules.crashes:
            return False  # nothing but start-up can raise under this routing
        return self._serving_crashes(p, scheduler_config(knobs, p))

    def _serving_crashes(self, p: Plan, cfg: SchedulerConfig) -> bool:
        key = _route_key(p)
        errors = self.errors.setdefault(key, {})
        s, b = cfg.max_num_seqs, cfg.max_num_batched_tokens
        family = self.families.setdefault(replace(cfg, max_num_seqs=1, max_num_batched_tokens=1),
                                          [])
        for run in family:  # a schedule already (partly) computed that this one shares
            upto = run.usable(s, b)
            while upto == len(run.steps) and not run.done and run.extend():
                upto = run.usable(s, b)
            if run.first_crash(p, key, errors, upto) is not None:
                return True
            if run.complete_for(s, b):
                return False
        run = _Run(cfg, self.workload, self.accepted)
        while run.extend():
            if run.first_crash(p, key, errors, len(run.steps)) is not None:
                break
        # keep it for later configurations when it can stand for another (S, B)
        if run.budget_bound is None or run.sim.seqs_bound_at is None:
            family.insert(0, run)
            del family[KEPT_RUNS:]
        return not run.done


def workload_crashes(workload: Workload, accepted=None, *,
                     fast: bool = True) -> Callable[[Knobs], bool]:
    """The crash test of ``simulate``'s scenario: start-up, then ``workload`` served."""
    if fast:
        return _Verdicts(workload, accepted)
    return lambda knobs: simulate(knobs, workload, accepted).crash is not None
