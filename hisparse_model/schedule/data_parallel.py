"""What data parallelism adds to one rank: the split, the DP sync, the dummy batch.

``simulate`` runs N = ``data_parallel_size`` ranks through one loop; for N > 1 it
takes from here what one rank does not have.  Each rank is an
offline engine of its own (vLLM's offline data-parallel example: one ``LLM``
per process, ``VLLM_DP_RANK``) serving its share of the workload
(``dp_rank``, else :func:`~hisparse_model.model.parallel.split_requests`; a rank
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

from dataclasses import replace
from typing import NamedTuple

from ..model.batches import spread
from ..model.dispatch import decode_graph_eligible, graph, uniform_len
from ..model.knobs import Knobs
from ..model.parallel import split_requests
from ..model.plan import Plan
from ..model.reproduction import prompt_token_ids
from ..model.routing import UNIFORM_DECODE_BACKENDS, decode_tokens, route_batch
from ..model.step_record import RankStep
from .workload import Request, Workload, WorkloadError

PLACEHOLDER_PROMPT_LEN = 1  # tokens of an idle rank's placeholder request (with_placeholders)
MODE_ORDER = {"NONE": 0, "PIECEWISE": 1, "FULL": 2}  # CUDAGraphMode values (config/compilation.py)

# What simulate assumes of N > 1 ranks, beside what it assumes of one (simulate.ASSUMPTIONS)
DP_ASSUMPTION = (
    "simulate -dp N: N offline engines (vLLM's offline data-parallel example, default "
    "multiprocessing), each with max_num_seqs, B and a KV pool of its own; requests without "
    "dp_rank are split as the example splits prompts (contiguous, the first ranks one more); "
    "ranks step in lockstep, a rank that scheduled nothing runs vLLM's dummy batch; a rank "
    "given no request serves a one-token placeholder request from step 0 (the example gives "
    "an empty rank a placeholder prompt), in the model and in the live runner; a crash on "
    "one rank stops every rank in that step")


def refuse_mtp(knobs: Knobs) -> None:
    """ValueError: MTP under data parallelism is not modelled (the drafter's sync)."""
    if knobs.num_speculative_tokens:
        raise ValueError("num_speculative_tokens: MTP under data parallelism is not modelled "
                         "(the drafter's forwards sync across ranks too); use "
                         "data_parallel_size=1")


def assign_ranks(workload: Workload, dp: int) -> list[int]:
    """Each request's rank: its ``dp_rank``, else the offline example's split
    (:func:`~hisparse_model.model.parallel.split_requests`)."""
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


def _decodes(p: Plan, query_lens) -> int:
    """Decode tokens of a dummy batch the routing does not see (a FULL replay of the graph's
    own shape, whose longer requests may exceed q): the routing's split."""
    return decode_tokens(list(query_lens), p.max_decode_query_len,
                         p.knobs.attention_backend in UNIFORM_DECODE_BACKENDS)


def sync_step(p: Plan, batches: list, resident: list[bool]) -> tuple[str, list[tuple]]:
    """The DP sync of one engine step: ``batches[r]`` is rank r's :class:`RankBatch` or None
    (a dummy; ``resident[r]`` its residency); returns (agreed mode, per rank (mode, padded,
    dummy query lengths or None, routed, route, error, decode tokens))."""
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
                shape = spread(padded, padded // q)
                out.append((mode, padded, shape, 0, None, None, _decodes(p, shape)))
                continue
            shape = (padded,)  # one request of the agreed count
            dec, routed, path, error = route_batch(p, shape, flag)
            out.append((mode, padded, shape, routed, path, error, dec))
            continue
        if mode == "FULL":  # a replay routes nothing anew; FULL needs the agreed uniform
            # length q, so every request of this batch decodes q tokens: all n are decodes
            out.append((mode, padded, None, 0, None, None, n))
            continue
        dec, routed, path, error = route_batch(p, st.query_lens, st.resident)
        out.append((mode, padded, None, routed, path, error, dec))
    return agreed, out


def synced_step(p: Plan, steps: list, resident: list[bool],
                members: list[list[int]]) -> tuple[str, tuple]:
    """One engine step of N > 1 ranks: ``steps[r]`` is rank r's scheduler step or None (it
    runs a dummy batch); after the sync, (agreed mode, a :class:`RankStep` per rank, its
    requests numbered as in the whole workload, ``members[r]``).  ``resident`` is each
    rank's ``all_context_pages_resident``, updated by its real batches."""
    agreed, results = sync_step(p, [st and rank_batch(st) for st in steps], resident)
    row = []
    for rank, (st, res) in enumerate(zip(steps, results)):
        mode, padded, shape, routed, route, error, dec = res
        local = members[rank]
        if st is None:
            row.append(RankStep(rank, {}, p.max_decode_query_len, dec, mode, padded, shape,
                                resident[rank], routed, route, error))
            continue
        resident[rank] = st.resident  # the connector is off for dummy runs: only real ones set it
        row.append(RankStep(rank, {local[r]: n for r, n in st.scheduled.items()},
                            st.num_tokens, dec, mode, padded, None, st.resident, routed,
                            route, error))
    return agreed, tuple(row)
