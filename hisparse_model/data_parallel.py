"""Data parallelism: one scheduler per rank, and the DP sync every engine step.

``simulate`` with ``data_parallel_size`` > 1 comes here.  Each rank is an
offline engine of its own (vLLM's offline data-parallel example: one ``LLM``
per process, ``VLLM_DP_RANK``) serving its share of the workload
(``dp_rank``, else :func:`~hisparse_model.parallel.split_requests`; a rank
given none serves a placeholder request, :func:`with_placeholders`) with the
scheduler of ``scheduler.py``.  The ranks step in lockstep: in the DP engine
core's busy loop each iteration runs one forward per rank, its scheduled batch
or, when it scheduled nothing, a dummy batch
(vllm/v1/engine/core.py:2276-2293 `self.execute_dummy_batch()`), one request of q
tokens (vllm/v1/worker/gpu_worker.py:1376-1382 `uniform_decode=True`).  Every forward
first agrees across ranks (vllm/v1/worker/gpu/dp_utils.py:44-210
`def sync_cudagraph_and_dp_padding`):

* each rank asks ``dispatch`` for its own batch; the agreed mode is the lowest
  (NONE < PIECEWISE < FULL, vllm/v1/worker/gpu/dp_utils.py:155 `cg_mode_across_dp.min()`);
* eager (NONE): nothing is padded, each rank runs its own count;
* otherwise every rank dispatches the largest rank's token count with its own
  request count and the agreed uniform-decode length (0 unless all ranks agree)
  (vllm/v1/worker/gpu/dp_utils.py:178 `num_tokens_across_dp.max()`).

A real batch routes its unpadded count (a FULL replay routes nothing), as on one
GPU.  A dummy batch is built from the agreed descriptor
(vllm/v1/worker/gpu/model_runner.py:1794 `dummy_num_reqs = batch_desc.num_reqs or num_reqs`):
in PIECEWISE (or padded eager) one request of the padded count, which the
split calls a prefill when it exceeds q, so FLASH_ATTN_MLA_SPARSE hands all of
it to the routing.  The HiSparse connector is off for dummy runs
(vllm/v1/worker/gpu/model_runner.py:844 `self.kv_connector.set_disabled(True)`),
so ``all_context_pages_resident`` keeps what the rank's last real step set
(vllm/distributed/kv_transfer/kv_connector/v1/hisparse/worker.py:419
`handle.all_context_pages_resident = metadata.all_context_pages_resident`), True
before any.  On 0.31.0 a dummy padded to C + 1 therefore dies on a rank that
scheduled nothing.

Each rank's scheduler is the single-GPU one: the DP engine core throttles prefills
only when ``prefill_schedule_interval`` > 1 (vllm/v1/engine/core.py:2244-2248
`self.step_counter % self.prefill_schedule_interval != 0`), default 1
(vllm/config/scheduler.py:204 `prefill_schedule_interval: int = Field(default=1, ge=1)`).

Listed: every iteration in which some rank runs a real batch.  Iterations where
every rank runs a dummy (all wait for outputs) route at most q <= C tokens each
and are left out.  Start-up is the same on every rank (same knobs, same
captures).  Not modelled (declined): MTP under DP (the drafter's own sync),
microbatching (off by default).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import NamedTuple

from .batches import spread
from .dispatch import decode_graph_eligible, graph, uniform_len
from .knobs import Knobs
from .kv_pool import serving_shortfall
from .lost import Lost, lost_line, returned_and_lost
from .parallel import error_surface, split_requests
from .plan import Plan, plan
from .reproduction import prompt_token_ids
from .routing import route_batch
from .scheduler import acceptance, schedule
from .simulate import SIMULATE_ASSUMPTIONS
from .startup import startup_batches
from .workload import Request, Workload, WorkloadError

PLACEHOLDER_PROMPT_LEN = 1  # tokens of an idle rank's placeholder request (with_placeholders)
MODE_ORDER = {"NONE": 0, "PIECEWISE": 1, "FULL": 2}  # CUDAGraphMode values (config/compilation.py)

DP_ASSUMPTIONS = SIMULATE_ASSUMPTIONS[:2] + (
    "simulate -dp N: N offline engines (vLLM's offline data-parallel example, default "
    "multiprocessing), each with max_num_seqs, B and a KV pool of its own; requests without "
    "dp_rank are split as the example splits prompts (contiguous, the first ranks one more); "
    "ranks step in lockstep, a rank that scheduled nothing runs vLLM's dummy batch; a rank "
    "given no request serves a one-token placeholder request from step 0 (the example gives "
    "an empty rank a placeholder prompt), in the model and in the live runner; a crash on "
    "one rank stops every rank in that step",
    *SIMULATE_ASSUMPTIONS[2:4],  # arrivals, async scheduling, the pools; what a crash loses
)


class RankStep(NamedTuple):
    """One rank's forward in one engine step, after the DP sync."""

    rank: int
    scheduled: dict  # request index -> tokens this step ({} for a dummy batch)
    num_tokens: int  # tokens the rank asked to run (a dummy: q)
    dispatch: str  # the mode it runs: FULL (replay), PIECEWISE or NONE (eager)
    padded: int  # tokens the forward runs after the DP sync
    dummy: tuple | None  # a dummy batch's query lengths, else None
    resident: bool  # all_context_pages_resident as the routing reads it
    routed_tokens: int  # tokens handed to the routing (0: none, or a FULL replay)
    route: str | None
    error: str | None

    def as_dict(self) -> dict:
        return {"rank": self.rank, "scheduled": {str(r): n for r, n in self.scheduled.items()},
                "num_tokens": self.num_tokens, "dispatch": self.dispatch, "padded": self.padded,
                "dummy": None if self.dummy is None else list(self.dummy),
                "resident": self.resident, "routed_tokens": self.routed_tokens,
                "route": self.route, "error": self.error}


class DPStep(NamedTuple):
    step: int  # engine step (iteration of the ranks' lockstep loop)
    mode: str  # the mode the ranks agreed on (the lowest they asked for)
    ranks: tuple  # RankStep per rank

    @property
    def error(self) -> str | None:
        return next((r.error for r in self.ranks if r.error), None)


@dataclass
class DPSchedule:
    knobs: Knobs
    plan: Plan
    workload: Workload
    startup: tuple
    assignment: list  # the rank of each request
    placeholders: tuple = ()  # indices of the requests added for idle ranks (with_placeholders)
    steps: list = field(default_factory=list)
    finished: list = field(default_factory=list)  # what each rank's caller received
    lost: list = field(default_factory=list)  # Lost (global request index) at a crash
    accepted: object = None

    @property
    def startup_error(self) -> str | None:
        return next((b.error for b in self.startup if b.error), None)

    @property
    def crash(self) -> dict | None:
        """``{"step", "rank", "error", "scheduled"}`` of the first error (start-up: every
        rank, step None), or None; ``scheduled``: whether the rank had scheduled tokens."""
        if self.startup_error:
            return {"step": None, "rank": None, "error": self.startup_error, "scheduled": None}
        for s in self.steps:
            for r in s.ranks:
                if r.error:
                    return {"step": s.step, "rank": r.rank, "error": r.error,
                            "scheduled": r.dummy is None}
        return None


def assign_ranks(workload: Workload, dp: int) -> list[int]:
    """Each request's rank: its ``dp_rank``, else the offline example's split
    (:func:`~hisparse_model.parallel.split_requests`)."""
    split = split_requests(len(workload), dp)
    ranks = []
    for i, r in enumerate(workload.requests):
        if r.dp_rank is not None and r.dp_rank >= dp:
            raise WorkloadError(f"request {i + 1}: dp_rank must be < data_parallel_size={dp}, "
                                f"got {r.dp_rank}")
        ranks.append(split[i] if r.dp_rank is None else r.dp_rank)
    return ranks


def with_placeholders(workload: Workload, dp: int) -> Workload:
    """``workload`` as the ranks serve it: a rank given no request gets a placeholder.

    vLLM's offline example gives a rank whose slice is empty the one prompt
    ``"Placeholder"``, so that its engine steps (and joins the other ranks'
    collectives) like any other; here that is a request of
    :data:`PLACEHOLDER_PROMPT_LEN` token (the example's text is tokenizer-dependent)
    arriving at step 0, appended after the given requests.  Every request is then
    pinned to the rank it was assigned (``dp_rank``), so the split of the longer
    list moves nothing.  The model and the live runner both serve this workload."""
    ranks = assign_ranks(workload, dp)
    idle = sorted(set(range(dp)) - set(ranks))
    if not idle:
        return workload
    pinned = tuple(replace(r, dp_rank=rank) for r, rank in zip(workload.requests, ranks))
    extra = tuple(Request(tuple(prompt_token_ids(PLACEHOLDER_PROMPT_LEN)), dp_rank=rank)
                  for rank in idle)
    return Workload(pinned + extra)


class RankBatch(NamedTuple):
    """What the DP sync needs of a rank's scheduled batch."""

    query_lens: tuple  # in the runner's order
    decode_graph_eligible: bool  # every request decodes (or extends its prompt by one token)
    resident: bool  # all_context_pages_resident


def rank_batch(st) -> RankBatch:
    """A scheduler step as the DP sync sees it."""
    return RankBatch(tuple(st.runner_query_lens()), decode_graph_eligible(st), st.resident)


def _wants(p: Plan, b: RankBatch | None, q: int) -> tuple:
    """(tokens, requests, uniform length or None, dispatch) a rank brings to the sync."""
    if b is None:  # a dummy batch: one request of q tokens, uniform by construction
        return q, 1, q, graph(p, q, 1, q)
    qlens = b.query_lens
    n = sum(qlens)
    uniform = uniform_len(n, len(qlens), max(qlens), b.decode_graph_eligible)
    return n, len(qlens), uniform, graph(p, n, len(qlens), uniform)


def sync_step(p: Plan, batches: list, resident: list[bool]) -> tuple[str, list[tuple]]:
    """The DP sync of one engine step: ``batches[r]`` is rank r's :class:`RankBatch` or None
    (a dummy; ``resident[r]`` its residency); returns (agreed mode, per rank (mode, padded,
    dummy query lengths or None, routed, route, error))."""
    q = p.max_decode_query_len
    wants = [_wants(p, st, q) for st in batches]
    agreed = min((w[3][0] for w in wants), key=MODE_ORDER.__getitem__)
    uniforms = {w[2] for w in wants}
    uniform = uniforms.pop() if len(uniforms) == 1 else None  # all ranks agree, else None
    top = max(w[0] for w in wants)
    out = []
    for st, (n, reqs, _, _), flag in zip(batches, wants, resident):
        mode, padded = ("NONE", n) if agreed == "NONE" else graph(p, top, reqs, uniform)
        if st is None:
            if mode == "FULL":  # the graph's own shape, replayed: nothing routed
                out.append((mode, padded, spread(padded, padded // q), 0, None, None))
                continue
            shape = (padded,)  # one request of the agreed count
            out.append((mode, padded, shape, *route_batch(p, shape, flag)[1:]))
            continue
        if mode == "FULL":  # a replay routes nothing anew
            out.append((mode, padded, None, 0, None, None))
            continue
        out.append((mode, padded, None, *route_batch(p, st.query_lens, st.resident)[1:]))
    return agreed, out


def simulate_dp(knobs: Knobs, workload: Workload, accepted=None) -> DPSchedule:
    """Start-up, then every engine step of ``workload`` over ``data_parallel_size`` ranks."""
    from .simulate import scheduler_config

    dp = knobs.data_parallel_size
    if knobs.num_speculative_tokens:
        raise ValueError("num_speculative_tokens: MTP under data parallelism is not modelled "
                         "(the drafter's forwards sync across ranks too); use "
                         "data_parallel_size=1")
    p = plan(knobs)
    workload.validate(knobs.max_model_len)
    given = len(workload)
    workload = with_placeholders(workload, dp)
    ranks = assign_ranks(workload, dp)
    members = [[i for i, r in enumerate(ranks) if r == rank] for rank in range(dp)]
    for rank, idx in enumerate(members):
        short = serving_shortfall(knobs, [(workload.requests[i].prompt_len,
                                           workload.requests[i].max_tokens) for i in idx],
                                  sequential=False)
        if short:
            raise ValueError(f"DP rank {rank}: {short}")
    out = DPSchedule(knobs, p, workload, tuple(startup_batches(p)), ranks,
                     tuple(range(given, len(workload))), accepted=accepted)
    if out.startup_error:
        return out  # every rank dies at start-up
    cfg = scheduler_config(knobs, p)
    per_rank = []
    for idx in members:
        steps = schedule(cfg, Workload(tuple(workload.requests[i] for i in idx)),
                         acceptance(accepted))
        per_rank.append({st.index: st for st in steps})
    resident = [True] * dp  # all_context_pages_resident before any real step
    for i in sorted(set().union(*per_rank)):
        batches = [steps.get(i) for steps in per_rank]
        agreed, results = sync_step(p, [st and rank_batch(st) for st in batches], resident)
        row = []
        for rank, (st, res) in enumerate(zip(batches, results)):
            mode, padded, shape, routed, route, error = res
            local = members[rank]
            if st is None:
                row.append(RankStep(rank, {}, p.max_decode_query_len, mode, padded, shape,
                                    resident[rank], routed, route, error))
                continue
            resident[rank] = st.resident
            row.append(RankStep(rank, {local[r]: n for r, n in st.scheduled.items()},
                                st.num_tokens, mode, padded, None, st.resident, routed, route,
                                error))
        out.steps.append(DPStep(i, agreed, tuple(row)))
        if any(r.error for r in row):
            crash = i
            break  # that rank is dead; what the others do next is not modelled
    else:
        crash = None
    # What each rank's caller receives: the same hand-back rule as one engine (lost.py);
    # at a crash every rank stops in that step (the survivors wait in its collectives),
    # so no rank hands back the step before it.
    for rank, local in enumerate(members):
        got, lost = returned_and_lost([per_rank[rank][j] for j in sorted(per_rank[rank])],
                                      crash, [workload.requests[g].arrival_step for g in local])
        out.finished += [local[r] for r in got]
        out.lost += [Lost(local[x.request], x.why) for x in lost]
    out.lost.sort()
    return out


def dp_schedule_json(sched: DPSchedule, advice: list[dict] | None = None) -> dict:
    """The JSON object ``simulate -dp N --json`` prints."""
    from .report import sizes_json

    crash = sched.crash
    return {
        **sizes_json(sched),
        "dp_rank_of_request": list(sched.assignment),
        "placeholder_requests": list(sched.placeholders),
        "startup": {"ok": sched.startup_error is None, "error": sched.startup_error},
        "steps": [{"step": s.step, "mode": s.mode, "ranks": [r.as_dict() for r in s.ranks]}
                  for s in sched.steps],
        "crash": crash,
        "error_surface": error_surface(sched.knobs, crash and crash["error"],
                                       startup=sched.startup_error is not None,
                                       dp_rank=crash["rank"] or 0 if crash else 0),
        "finished": sorted(sched.finished),
        "lost": [x.as_dict() for x in sched.lost],
        "advice": advice or [],
        "assumptions": list(DP_ASSUMPTIONS),
    }


def crash_where(crash: dict | None) -> str:
    """Where a DP run died, in words: ``none``, ``start-up (every rank)``, or the step and rank
    and whether it was the rank's own batch or a dummy batch (it scheduled nothing)."""
    if crash is None:
        return "none"
    if crash["step"] is None:
        return "start-up (every rank)"
    how = ("its own batch" if crash["scheduled"] else
           "a dummy batch: it scheduled nothing this step")
    return f"step {crash['step']} on DP rank {crash['rank']} ({how})"


def _rank_cell(r: RankStep, full: bool = False) -> str:
    from .report import requests_column

    what = (f"dummy {list(r.dummy)}" if r.dummy is not None
            else requests_column(r.scheduled, full))
    routed = (f"{r.routed_tokens}->{r.route}" if r.routed_tokens
              else "replay" if r.dispatch == "FULL" else "-")
    tail = " !!" if r.error else ""
    return f"{what} pad {r.padded} {routed}{tail}"


def format_dp_schedule(sched: DPSchedule, *, full: bool = False,
                       advice: list[dict] | None = None) -> str:
    """The text ``simulate -dp N`` prints: one line per engine step, one cell per rank."""
    from .report import cli_request, closing_lines

    k, p = sched.knobs, sched.plan
    lines = [
        f"vLLM {k.vllm_version}{' + upstream fix' if k.routing == 'fix' else ''}  "
        f"DP={k.data_parallel_size} TP={k.tensor_parallel_size}  S={k.max_num_seqs} per rank "
        f"B={p.max_num_batched_tokens} q={p.max_decode_query_len}  C={p.swap_capacity} "
        f"W={p.workspace_rows}  {len(sched.workload)} requests"
        + "".join(f" ({cli_request(i)}: rank {sched.assignment[i]}'s placeholder, it was "
                  "given none)" for i in sched.placeholders),
        f"start-up: {'ok' if sched.startup_error is None else sched.startup_error}",
    ]
    prev = None
    folded = 0
    for s in sched.steps:
        key = (s.mode, tuple((r.dummy, r.padded, r.routed_tokens, r.route) for r in s.ranks))
        if not full and key == prev and not s.error:
            folded += 1
            continue
        if folded:
            lines.append(f"  ... {folded} more like it")
            folded = 0
        prev = key
        cells = " | ".join(f"rank {r.rank}: {_rank_cell(r, full)}" for r in s.ranks)
        lines.append(f"  step {s.step:<5} [{s.mode:<9}] {cells}")
    if folded:
        lines.append(f"  ... {folded} more like it")
    crash = sched.crash
    lines.append("crash: none" if crash is None else
                 f"crash at {crash_where(crash)}: {crash['error']}")
    if crash is not None and crash["step"] is not None:
        surface = error_surface(k, crash["error"], dp_rank=crash["rank"])
        lines.append(f"  the caller sees: {surface['caller']}")
        lines.append(f"  (in process, VLLM_ENABLE_V1_MULTIPROCESSING=0: "
                     f"{surface['in_process_caller']})")
        lines += [f"  the log holds:   {line}" for line in surface["log"]]
    lines.append(f"finished: {len(sched.finished)} of {len(sched.workload)} requests "
                 "(what the callers received)")
    lines.append(lost_line(sched.lost, crash, cli_request))
    return "\n".join(lines + closing_lines(advice, DP_ASSUMPTIONS))
