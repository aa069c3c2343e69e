"""Whether a scenario crashes under changed knobs: the advice's question, answered fast.

:func:`~hisparse_model.answers.advice.advise` asks ``crashes(knobs)`` for thousands of
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
   :func:`~hisparse_model.model.step_record.route_step`'s, memoised by everything
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
7. **Schedules that meet again**: the engine loop's future reads only its state
   after a step: the engine step number, the batches in flight, the waiting queue
   (the arrivals not yet admitted: a FIFO of the same arrivals, so its length and
   head say which), the running list, every request a batch in flight, a transfer
   or the running list still reaches (each field of it), the finished flag, the
   transfers and the published host blocks (``_state``).  A request no longer
   reached is never read again; everything else is the configuration (and the MTP
   acceptance, a function of step, request and drafts alone).  So when a
   new schedule's state after engine step e equals a kept schedule's after the same
   step (same scheduler family and S), the new schedule from e on is the kept one's,
   step by step, up to the first later step of the kept one that the budget forced
   or that took more than the new B (rule 6, from an equal state): the new
   schedule's verdict is its own steps', then the kept one's from e on, when that
   stretch runs to the kept schedule's end (or its crash).  States are compared only
   in the first ``STATE_STEPS`` steps, where runs under neighbouring B part and meet.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import replace
from operator import attrgetter

from .advice import SearchCapped
from ..model.dispatch import decode_graph_eligible
from ..model.knobs import Knobs
from ..model.plan import Plan, plan
from ..schedule.prefix_keys import request_keys
from ..schedule.scheduler import _Req, _Sim
from ..schedule.scheduler_config import SchedulerConfig, scheduler_config
from .simulate import serving_refusal, simulate
from ..model.startup import startup_batches
from ..model.step_record import route_step
from ..schedule.workload import Arrivals, Workload

KEPT_RUNS = 16  # schedules kept per scheduler family for later configurations to reuse
KEPT_STATES = 8  # schedules per family whose states a new one is compared with (rule 7)
STATE_STEPS = 64  # steps from the start of a schedule at which its state is recorded

# _Sim's attributes: read from the configuration (the same within a family but S and B),
# bookkeeping that decides nothing, and the loop state that _state compares
SIM_CONFIG = {"acc", "S", "B", "L", "K", "asyn", "apc", "plan_on_cache", "hit_cap_full",
              "cache_on_update", "can_skip_drafts", "reqs"}
SIM_BOOKKEEPING = {"steps", "peak", "seqs_bound_at"}
SIM_STATE = {"waiting", "running", "queue", "finished_ids", "published", "to_send",
             "prev_sent", "inflight", "cache"}
_REQ_STATE = attrgetter(*(f for f in _Req.__slots__ if f not in ("P", "M", "keys")))


def _state(sim: _Sim, index: int) -> tuple:
    """The engine loop's state after it scheduled engine step ``index`` (rule 7): all that
    its future reads (``reqs`` is the workload's, the same in every run)."""
    reached = {r.i: r for r in sim.running}
    queue = []
    for st, sent, rows in sim.queue:
        queue.append((None if st is None else st.index, tuple(r.i for r in sent),
                      tuple((r.i, n, b, d) for r, n, b, d in rows)))
        reached.update((r.i, r) for r in sent)
        reached.update((r.i, r) for r, _, _, _ in rows)
    reached.update((r.i, r) for r in sim.to_send)
    reached.update((r.i, r) for r in sim.prev_sent)
    w = sim.waiting
    if w:
        reached[w[0].i] = w[0]
    return (index, len(w), w[0].i if w else -1, tuple(r.i for r in sim.running), tuple(queue),
            sim.finished_ids, sim.inflight, tuple(r.i for r in sim.to_send),
            tuple(r.i for r in sim.prev_sent), len(sim.published),
            tuple(_REQ_STATE(reached[i]) for i in sorted(reached)), dict(sim.published),
            None if sim.cache is None else sim.cache.state())


def _route_key(p: Plan) -> tuple:
    """Everything of a plan that :func:`~hisparse_model.model.step_record.route_step` reads to decide
    a step's error (dispatch: mode, captures; split: q, backend; router: rules, C)."""
    return (p.rules.key, p.knobs.attention_backend, p.swap_capacity, p.max_decode_query_len,
            p.cudagraph_mode, bool(p.capture_sizes), p.piecewise, p.full)


# A long workload's advice is bounded: past this many engine steps in the crash replay
# itself, the advice's re-simulations together may schedule at most FACTOR times as many.
ADVICE_LONG_STEPS = 2_000
ADVICE_STEP_FACTOR = 2


class StepBudget:
    """Engine steps the advice's re-simulations may still schedule; once spent, every check
    that would schedule another raises SearchCapped (its search stops with what it found)."""

    def __init__(self, steps: int):
        self.steps, self.left, self.capped = steps, steps, False

    def spend(self) -> None:
        if self.left <= 0:
            self.capped = True
            raise SearchCapped(f"the advice's budget of {self.steps:,} engine steps is spent")
        self.left -= 1


def advice_budget(replayed_steps: int) -> StepBudget | None:
    """The budget for the advice on a workload whose replay took ``replayed_steps`` engine
    steps: none for a short one, else ADVICE_STEP_FACTOR times the replay."""
    if replayed_steps <= ADVICE_LONG_STEPS:
        return None
    return StepBudget(ADVICE_STEP_FACTOR * replayed_steps)


class _Run:
    """One schedule, scheduled lazily, with what its reuse for another (S, B) needs."""

    def __init__(self, cfg: SchedulerConfig, workload: Workload, accepted, keys, arrivals,
                 budget: StepBudget | None = None):
        self.cfg, self.budget = cfg, budget
        self.sim = _Sim(cfg, workload, accepted, keys)
        self.steps_iter = self.sim.lazily(workload, arrivals)
        self.done = False
        self.steps: list = []
        self.tokens: list[int] = []  # tokens of each step
        self.top: list[int] = []  # the most tokens of any step so far (ascending)
        self.peak: list[int] = []  # the most requests running so far (ascending)
        self.index: list[int] = []  # engine step number of each step
        # first step (index in steps) whose budget may have forced a decision, and all of them
        self.budget_bound: int | None = None
        self.bounds: list[int] = []
        self.states: dict[int, tuple] = {}  # engine step -> (index in steps, _state after it)
        self.crash_scan: dict[tuple, list] = {}  # route key -> [steps scanned, crashes found]
        self.over: dict[int, list] = {}  # B -> [steps of more tokens than B, steps scanned]

    def extend(self) -> bool:
        """Schedule one more step; False when the workload is done."""
        if self.budget is not None and not self.done:
            self.budget.spend()
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
        if n > self.cfg.max_num_batched_tokens - self.cfg.num_speculative_tokens - 1:
            self.bounds.append(i)
            if self.budget_bound is None:
                self.budget_bound = i
        if i < STATE_STEPS:
            self.states[st.index] = (i, _state(self.sim, st.index))
        del self.sim.steps[:]  # the run keeps its own list; the simulator's is not read
        return True

    def shared_after(self, m: int, b: int) -> int:
        """Rule 7: how far (exclusive index) the steps after step ``m`` stand for a schedule
        under B = ``b`` (same S) whose state after step ``m`` is this one's: the first later
        step of more tokens than ``b`` or whose budget may have decided it (``bounds``), else
        the schedule's end (it schedules on).  The steps over each B are listed once, so a
        query is a bisection, not a walk."""
        if b == self.cfg.max_num_batched_tokens:  # every later step stands for it
            while not self.done and self.extend():
                pass
            return len(self.steps)
        over = self.over.setdefault(b, [[], 0])
        steps_over, tokens = over[0], self.tokens
        steps_over.extend(i for i in range(over[1], len(tokens)) if tokens[i] > b)
        over[1] = len(tokens)
        k, j = bisect.bisect_right(steps_over, m), bisect.bisect_right(self.bounds, m)
        ends = [x[y] for x, y in ((steps_over, k), (self.bounds, j)) if y < len(x)]
        if ends:
            return min(ends)
        while True:  # no such step yet: schedule on to the first
            i = len(self.steps)
            if self.done or not self.extend():
                return i
            over[1] = i + 1
            if tokens[i] > b:
                steps_over.append(i)
                return i
            if self.bounds and self.bounds[-1] == i:
                return i

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

    def first_crash(self, p: Plan, key: tuple, errors: dict, upto: int,
                    start: int = 0) -> int | None:
        """Index of the first of the steps ``start`` ... ``upto`` - 1 that raises under plan
        ``p``."""
        scan = self.crash_scan.setdefault(key, [0, []])
        found = scan[1]
        j = bisect.bisect_left(found, start)
        if j < len(found):
            return found[j] if found[j] < upto else None
        c = p.swap_capacity
        for i in range(scan[0], upto):
            if self.tokens[i] <= c:
                continue  # routes at most its tokens: cannot exceed C rows
            st = self.steps[i]
            shape = (tuple(st.runner_query_lens()), decode_graph_eligible(st), st.resident)
            if shape not in errors:
                errors[shape] = route_step(p, st).error
            if errors[shape]:
                found.append(i)
                scan[0] = i + 1
                if i >= start:
                    return i
        scan[0] = max(scan[0], upto)
        return None


class _Verdicts:
    """``crashes(knobs)`` for one workload: the shortcuts of the module docstring."""

    def __init__(self, workload: Workload, accepted=None, budget: StepBudget | None = None):
        self.workload, self.accepted, self.budget = workload, accepted, budget
        # what every schedule of the workload reads alike: its prompts' block keys, its arrivals
        self.keys, self.arrivals = request_keys(workload), Arrivals.of(workload)
        self.families: dict[SchedulerConfig, list[_Run]] = {}
        self.states: dict[SchedulerConfig, list[_Run]] = {}  # rule 7's kept schedules
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
        family_key = replace(cfg, max_num_seqs=1, max_num_batched_tokens=1)
        family = self.families.setdefault(family_key, [])
        for run in family:  # a schedule already (partly) computed that this one shares
            upto = run.usable(s, b)
            while upto == len(run.steps) and not run.done and run.extend():
                upto = run.usable(s, b)
            if run.first_crash(p, key, errors, upto) is not None:
                return True
            if run.complete_for(s, b):
                return False
        kept = self.states.setdefault(family_key, [])
        met = [x for x in kept if x.cfg.max_num_seqs == s]
        run = _Run(cfg, self.workload, self.accepted, self.keys, self.arrivals, self.budget)
        merged = None  # rule 7's verdict, once this schedule met a kept one
        c = p.swap_capacity
        while run.extend():
            if run.tokens[-1] > c and run.first_crash(p, key, errors, len(run.steps)) is not None:
                break  # (a step of at most C tokens cannot raise: rule 5)
            if met and len(run.steps) <= STATE_STEPS:
                merged = _met(run, met, p, key, errors, b)
                if merged is not None:
                    break
        if merged is None:  # its own schedule to its crash or end: kept for later ones to meet
            kept.insert(0, run)
            del kept[KEPT_STATES:]
        # keep it for later configurations when it can stand for another (S, B)
        if run.budget_bound is None or run.sim.seqs_bound_at is None:
            family.insert(0, run)
            del family[KEPT_RUNS:]
        return not run.done if merged is None else merged


def _met(run: _Run, kept: list[_Run], p: Plan, key: tuple, errors: dict,
         b: int) -> bool | None:
    """Rule 7 after ``run``'s last step: the verdict from a kept schedule whose state there is
    the same and whose later steps all stand for ``run``'s (None: no such schedule)."""
    e, last = run.index[-1], run.steps[-1].scheduled
    state = None
    for x in kept:
        m, other = x.states.get(e, (None, None))
        if other is None or x.steps[m].scheduled != last:
            continue  # a cheap first test: under async the step in flight is in the state
        state = state or run.states[e][1]
        if other != state:
            continue
        upto = x.shared_after(m, b)
        if x.first_crash(p, key, errors, upto, m + 1) is not None:
            return True
        if upto == len(x.steps) and x.done:
            return False
    return None


def workload_crashes(workload: Workload, accepted=None, *, fast: bool = True,
                     budget: StepBudget | None = None) -> Callable[[Knobs], bool]:
    """The crash test of ``simulate``'s scenario: start-up, then ``workload`` served
    (``budget``: at most that many engine steps scheduled over all its calls)."""
    if fast:
        return _Verdicts(workload, accepted, budget)
    return lambda knobs: simulate(knobs, workload, accepted).crash is not None
