"""Serve a workload on N ranks: the one path from knobs to what the caller receives.

knobs -> plan -> (per rank) schedule -> sync -> dispatch -> route -> lost/returned;
one rank (``data_parallel_size`` = 1, the default) is the case N = 1, where the
DP sync is a no-op.  ``report.py`` formats what this returns.

:func:`simulate` is :func:`~hisparse_model.answers.predict.predict` for real traffic:
start-up exactly as ``predict``, then every engine step of
:func:`hisparse_model.schedule.scheduler.schedule` (several requests per step, chunked
prefill, prefix caching, async scheduling, MTP verify steps) is

1. put in the model runner's batch order and split into decode and prefill
   tokens (``routing.decode_tokens`` with threshold q);
2. dispatched (``dispatch.dispatch``): a FULL replay routes nothing anew, a
   PIECEWISE or eager step routes its real token count;
3. routed under the version's rules, with the step's residency (a cached
   prefix whose pages are not all on the GPU is staged, not routed);

until the first error, which kills the engine.  Under MTP with K >= 2 each
step is followed by the drafter's K - 1 one-token draft steps, routed when no
graph replays them (``draft_steps.py``).  What the model cannot know (how many
MTP drafts dummy weights accept) is an input, ``accepted``.

With N > 1 ranks (``data_parallel.py``) the workload is split, each rank's
scheduler serves its share, and before every forward the ranks agree on the
mode and padding; a rank that scheduled nothing runs a dummy batch.  Each
:class:`~hisparse_model.model.step_record.StepResult` holds every rank's forward.

``Schedule.finished`` is what the caller received; at a crash the outputs of
the step before it never reach the caller, and ``Schedule.lost`` lists every
submitted request whose output is lost (``lost.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..schedule import data_parallel as dp
from ..model.batches import Batch
from ..model.knobs import Knobs
from ..model.host_pool import HostPoolShort, HostUse
from ..model.kv_pool import serving_shortfall
from .lost import Lost, returned_and_lost
from ..model.plan import Plan, plan
from ..model.reproduction import ASSUMPTIONS
from ..schedule.scheduler import _Sim
from ..schedule.scheduler_config import acceptance, scheduler_config
from ..model.startup import startup_batches
from ..model.step_record import RankStep, StepResult, route_step  # noqa: F401 - the step record
from ..schedule.workload import Workload

SIMULATE_ASSUMPTIONS = ASSUMPTIONS[:2] + (
    "simulate: requests arrive before the engine step numbered arrival_step; async "
    "scheduling on (vLLM's default here); the KV pools never run short (no preemption): "
    "a workload whose requests may outgrow host_pool_gib (each one's allocated blocks, a "
    "whole prompt at admission, a copy-on-write tail) before its crash is declined",
    "simulate: the caller takes each engine step's outputs as they come; at a crash the "
    "previous step's outputs never reach it (lost: computed but never returned), and "
    "LLM.generate, which returns only at the end, would lose every output",
    "MTP: accepted drafts per verify step are an input (default 0: dummy weights); a "
    "recording supplies them for a live comparison",
)
DP_ASSUMPTIONS = SIMULATE_ASSUMPTIONS[:2] + (
    dp.DP_ASSUMPTION,
    *SIMULATE_ASSUMPTIONS[2:4],  # arrivals, async scheduling, the pools; what a crash loses
)


@dataclass
class Schedule:
    """A served workload on ``knobs.data_parallel_size`` ranks (one by default)."""

    knobs: Knobs
    plan: Plan
    workload: Workload  # as the ranks serve it (an idle rank's placeholder appended)
    startup: tuple[Batch, ...]
    assignment: list = field(default_factory=list)  # the rank of each request
    placeholders: tuple = ()  # indices of the requests added for idle ranks
    steps: list[StepResult] = field(default_factory=list)
    finished: list[int] = field(default_factory=list)  # what the callers received
    accepted: object = None
    lost: list[Lost] = field(default_factory=list)  # outputs lost at the crash
    # each rank's host pool: (cached blocks evicted, the engine step of the first or None)
    host_evicted: list = field(default_factory=list)

    @property
    def num_ranks(self) -> int:
        """N: the ranks serving the workload (``data_parallel_size``)."""
        return self.knobs.data_parallel_size

    @property
    def assumptions(self) -> tuple:
        """What the model assumes for this run, stated with its result (text and JSON)."""
        return SIMULATE_ASSUMPTIONS if self.num_ranks == 1 else DP_ASSUMPTIONS

    @property
    def startup_error(self) -> str | None:
        return next((b.error for b in self.startup if b.error), None)

    @property
    def crash(self) -> dict | None:
        """``{"step", "error"}`` of the first error (step None: at start-up), or None; with
        several ranks also ``rank`` (None at start-up: every rank) and ``scheduled`` (whether
        the rank had scheduled tokens, else it died on a dummy batch)."""
        many = self.num_ranks > 1
        if self.startup_error:
            where = {"rank": None, "scheduled": None} if many else {}
            return {"step": None, "error": self.startup_error, **where}
        for s in self.steps:
            for r in s.ranks:
                if r.error:
                    where = {"rank": r.rank, "scheduled": r.dummy is None} if many else {}
                    return {"step": s.step, "error": r.error, **where}
        return None


def serving_refusal(knobs: Knobs, workload: Workload, members=None) -> None:
    """ValueError where vLLM refuses the prompts under ``max_model_len`` or a rank's KV pool
    (``num_gpu_blocks_override``, K) may run short; reads no other knob.  ``members``:
    each rank's requests (default: one rank serving all)."""
    workload.validate(knobs.max_model_len)
    reqs = workload.requests
    groups = [reqs] if members is None else [[reqs[i] for i in idx] for idx in members]
    for rank, group in enumerate(groups):
        short = serving_shortfall(knobs, [(r.prompt_len, r.max_tokens) for r in group],
                                  sequential=False)
        if short:
            raise ValueError(short if members is None else f"DP rank {rank}: {short}")


def host_refusal(knobs: Knobs, per_rank: list[list], served: list, crash) -> None:
    """ValueError where a rank's host pool (each engine has its own) may run short before
    the crash, or anywhere without one (``host_pool.HostUse``)."""
    for rank, (steps, work) in enumerate(zip(per_rank, served)):
        use = HostUse(knobs, [r.prompt_len for r in work.requests])
        for st in steps:
            if crash is not None and st.index > crash:
                break
            use.step(st)
        short = use.refusal(crash)
        if short:
            raise short if len(served) == 1 else HostPoolShort(f"DP rank {rank}: {short}",
                                                               short.step, short.need,
                                                               short.lay)


def _rank_schedule(knobs: Knobs, cfg, work: Workload, accepted) -> tuple:
    """One rank's every step, its host pool's cached prefixes evicted as vLLM evicts them
    (``schedule/host_cache.py``; the pool's refusal is :func:`host_refusal`'s), and that
    cache (None without prefix caching)."""
    sim = _Sim(cfg, work, acceptance(accepted))
    host = HostUse(knobs, [r.prompt_len for r in work.requests], sim.evicting())
    if sim.cache is not None:
        sim.cache.trail = []
    for st in sim.lazily(work):
        host.step(st)
    return sim.steps, sim.cache


def _lockstep(per_rank: list[list]):
    """(engine step, each rank's scheduler step or None) of every step some rank scheduled."""
    if len(per_rank) == 1:
        for st in per_rank[0]:
            yield st.index, (st,)
        return
    by_index = [{st.index: st for st in steps} for steps in per_rank]
    for i in sorted(set().union(*by_index)):
        yield i, [steps.get(i) for steps in by_index]


def simulate(knobs: Knobs, workload: Workload, accepted=None) -> Schedule:
    """Start-up, then every engine step of ``workload`` on ``data_parallel_size`` ranks
    until it finishes or a rank crashes."""
    n = knobs.data_parallel_size
    if n > 1:
        dp.refuse_mtp(knobs)
    p = plan(knobs)
    given = len(workload)
    if n > 1:  # the split: each request's rank, an idle rank's placeholder
        workload.validate(knobs.max_model_len)
        workload = dp.with_placeholders(workload, n)
        assignment = dp.assign_ranks(workload, n)
        members = [[i for i, r in enumerate(assignment) if r == rank] for rank in range(n)]
        serving_refusal(knobs, workload, members)
        served = [Workload(tuple(workload.requests[i] for i in idx)) for idx in members]
    else:
        serving_refusal(knobs, workload)
        assignment, members, served = [0] * given, [range(given)], [workload]
    out = Schedule(knobs, p, workload, tuple(startup_batches(p)), assignment,
                   tuple(range(given, len(workload))), accepted=accepted)
    if out.startup_error:
        return out  # no rank ever serves
    cfg = scheduler_config(knobs, p)
    ranked = [_rank_schedule(knobs, cfg, w, accepted) for w in served]
    per_rank = [steps for steps, _ in ranked]
    resident = [True] * n  # all_context_pages_resident before any real step
    crash = None
    for i, sts in _lockstep(per_rank):
        if n == 1:  # one rank: the sync is a no-op, the rank runs its own dispatch
            r = route_step(p, sts[0])
            res = StepResult(i, r.dispatch, (r,))
            failed = r.error
        else:
            res = StepResult(i, *dp.synced_step(p, sts, resident, members))
            failed = res.error
        out.steps.append(res)
        if failed:
            crash = i  # that rank is dead; what the others do next is not modelled
            break
    host_refusal(knobs, per_rank, served, crash)
    out.host_evicted = [(0, None) if cache is None else cache.by_step(crash)
                        for _, cache in ranked]  # up to the crash: nothing runs after it
    # What each rank's caller receives (lost.py); at a crash every rank stops in that step
    # (the survivors wait in its collectives), so no rank hands back the step before it.
    for rank, local in enumerate(members):
        got, lost = returned_and_lost(per_rank[rank], crash,
                                      [r.arrival_step for r in served[rank].requests])
        if n == 1:
            out.finished, out.lost = got, lost
            break
        out.finished += [local[r] for r in got]
        out.lost += [Lost(local[x.request], x.why) for x in lost]
    out.lost.sort()
    return out
