"""Serve a workload: vLLM's scheduler step by step, each step dispatched and routed.

:func:`simulate` is :func:`~hisparse_model.predict.predict` for real traffic:
start-up exactly as ``predict``, then every engine step of
:func:`hisparse_model.scheduler.schedule` (several requests per step, chunked
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

``Schedule.finished`` is what the caller received; at a crash the outputs of
the step before it never reach the caller, and ``Schedule.lost`` lists every
submitted request whose output is lost (``lost.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from .batches import Batch
from .dispatch import decode_graph_eligible, dispatch
from .draft_steps import DraftSteps, draft_steps
from .knobs import Knobs
from .kv_pool import serving_shortfall
from .lost import Lost, returned_and_lost
from .plan import Plan, plan
from .reproduction import ASSUMPTIONS, BLOCK_SIZE
from .routing import route_batch
from .scheduler import SchedulerConfig, acceptance, schedule
from .startup import startup_batches
from .workload import Workload

SIMULATE_ASSUMPTIONS = ASSUMPTIONS[:2] + (
    "simulate: requests arrive before the engine step numbered arrival_step; async "
    "scheduling on (vLLM's default here); the KV pools never run short (no preemption)",
    "simulate: the caller takes each engine step's outputs as they come; at a crash the "
    "previous step's outputs never reach it (lost: computed but never returned), and "
    "LLM.generate, which returns only at the end, would lose every output",
    "MTP: accepted drafts per verify step are an input (default 0: dummy weights); a "
    "recording supplies them for a live comparison",
)


class StepResult(NamedTuple):
    """One engine step as the routing sees it."""

    step: int  # engine step number
    scheduled: dict  # request index -> tokens computed this step
    num_tokens: int  # tokens in the step
    num_decode_tokens: int  # of which decode tokens (runner order, threshold q)
    dispatch: str  # FULL (replay), PIECEWISE or NONE (eager)
    padded: int  # tokens the forward runs, padding included
    resident: bool  # all context pages on the GPU (HiSparse)
    routed_tokens: int  # tokens handed to the routing (0: none, or a FULL replay)
    route: str | None  # swap_in / all_resident / None
    error: str | None  # the exact ValueError text, or None
    draft: DraftSteps | None = None  # the drafter's K - 1 draft steps after it (K >= 2)


@dataclass
class Schedule:
    knobs: Knobs
    plan: Plan
    workload: Workload
    startup: tuple[Batch, ...]
    steps: list[StepResult] = field(default_factory=list)
    finished: list[int] = field(default_factory=list)  # what the caller received
    accepted: object = None
    lost: list[Lost] = field(default_factory=list)  # outputs lost at the crash

    @property
    def startup_error(self) -> str | None:
        return next((b.error for b in self.startup if b.error), None)

    @property
    def crash(self) -> dict | None:
        """``{"step", "error"}`` of the first error (step None: at start-up), or None."""
        if self.startup_error:
            return {"step": None, "error": self.startup_error}
        bad = next((s for s in self.steps if s.error), None)
        return {"step": bad.step, "error": bad.error} if bad else None


def route_step(p: Plan, st) -> StepResult:
    """Dispatch and route one scheduler step (a :class:`hisparse_model.scheduler.Step`)."""
    qlens = st.runner_query_lens()
    n = sum(qlens)
    d = dispatch(p, n, len(qlens), max(qlens), decode_graph_eligible(st))
    dec, routed, path, error = route_batch(p, qlens, st.resident)
    if d.mode == "FULL":  # a replay: the routing of the capture is reused, nothing new
        routed, path, error = 0, None, None
    # the drafter runs after the target's forward, so not when it raised; 0.33.0 skips
    # the draft steps when no request of the step can use them (Step.drafts)
    draft = None if error or not st.drafts else draft_steps(p, len(qlens), st.resident)
    return StepResult(st.index, dict(st.scheduled), n, dec, d.mode, d.padded, st.resident,
                      routed, path, error, draft)


def scheduler_config(knobs: Knobs, p: Plan) -> SchedulerConfig:
    return SchedulerConfig(
        max_num_seqs=knobs.max_num_seqs, max_num_batched_tokens=p.max_num_batched_tokens,
        max_model_len=knobs.max_model_len, num_speculative_tokens=knobs.num_speculative_tokens,
        enable_prefix_caching=knobs.enable_prefix_caching, block_size=BLOCK_SIZE,
        vllm_version=knobs.vllm_version)


def checked_plan(knobs: Knobs, workload: Workload) -> Plan:
    """The plan of one rank serving ``workload``; ValueError (one line) where vLLM refuses the
    knobs (first) or the prompts, or where the model's KV-pool assumption may not hold."""
    p = plan(knobs)
    serving_refusal(knobs, workload)
    return p


def serving_refusal(knobs: Knobs, workload: Workload) -> None:
    """ValueError where vLLM refuses the prompts under ``max_model_len`` or the KV pool
    (``num_gpu_blocks_override``, K) may run short; reads no other knob."""
    workload.validate(knobs.max_model_len)
    short = serving_shortfall(knobs, [(r.prompt_len, r.max_tokens) for r in workload.requests],
                              sequential=False)
    if short:
        raise ValueError(short)


def simulate(knobs: Knobs, workload: Workload, accepted=None) -> Schedule:
    """Start-up, then every engine step of ``workload`` until it finishes or crashes
    (``data_parallel_size`` > 1: ``data_parallel.simulate_dp``, one scheduler per rank)."""
    if knobs.data_parallel_size > 1:
        from .data_parallel import simulate_dp

        return simulate_dp(knobs, workload, accepted)
    p = checked_plan(knobs, workload)
    out = Schedule(knobs, p, workload, startup_batches(p), accepted=accepted)
    if out.startup_error:
        return out  # the engine never serves
    steps = schedule(scheduler_config(knobs, p), workload, acceptance(accepted))
    crash = None
    for st in steps:
        res = route_step(p, st)
        out.steps.append(res)
        if res.error:
            crash = st.index  # the engine is dead
            break
    out.finished, out.lost = returned_and_lost(
        steps, crash, [r.arrival_step for r in workload.requests])
    return out
