"""Is a deployment exposed?  Every kind of engine step that can kill it, under *some* traffic.

:func:`exposure` answers for one :class:`~hisparse_model.model.knobs.Knobs` (any version,
routing, backend, CUDA-graph mode, K, B, S, TP, DP), in microseconds, from the
model's own declarations -- it restates no rule:

1. **Start-up** (``startup.startup_batches``): a start-up error kills the engine
   before any traffic, so every workload is exposed.
2. **The routing** (``versions.VersionRules.router``, bound by ``routing.router``):
   a step raises only when ``swap_in`` gets more than C rows.  A step hands the
   routing either its decode part or all its tokens (the hand-off rule), and its
   decode part is at most min(B, S q) = C tokens (at most S requests of at most q
   decode tokens, at most B tokens a step).  So the shapes asked are, for every
   step size n from C + 1 up to B (the predicate, ``swap_in_rule``, is a
   threshold ``n <= limit`` with limit C or W = C + 1, so sizes past
   C + :data:`SCAN` are asked only at B): a step with no decode, all pages
   resident or a staged cached prefix; a step mixing decodes (1 or C decode
   tokens) with prefill; and the MTP drafter's one-token draft steps of up to S
   requests (``draft_steps.py``).
3. **Dispatch** (``dispatch.dispatch``): a FULL replay routes nothing.
4. **Reachability** (the scheduler's bounds, ``scheduler.py``): B bounds a step;
   every prompt is shorter than max_model_len, so every piece of prompt a step
   computes (a whole prompt's uncached part, or a chunk) is too; a step holds at
   most S requests, and a step without decode has every piece longer than q
   (``routing.decode_tokens``).  A no-decode step of n tokens is reachable exactly
   when some m <= S pieces of q + 1 ... max_model_len - 1 tokens add up to n:
   m prompts arriving together at an idle server make it.

5. **Data parallelism** (N = ``data_parallel_size`` > 1, ``data_parallel.py``): each rank's
   scheduler is the single-GPU one, and after the DP sync a real batch routes its own
   unpadded count (nothing in a FULL replay), never more than it would alone, so the
   one-rank kinds stand, their examples pinned to rank 0.  What N > 1 adds is an idle
   rank's dummy batch: one request of the padded count (``sync_step``), a decode of at most
   q <= C tokens, else a batch without decode, so it raises only at a raising size n of
   step 2 (no decode; resident or, with its last real step's residency, staged), and only
   when the DP sync pads it to n.  For each such n the busy-rank step sizes t that
   ``dispatch.graph`` pads to n (t <= n) are each put through ``sync_step`` with one rank
   busy and one idle (both residencies; a uniform decode step too, where t = m q with
   m <= S).  A step of t tokens is reachable exactly when t <= min(B, S (max_model_len - 1))
   (at most S requests, each computing a piece of a prompt shorter than max_model_len or
   one decode token, q = 1): m prompts arriving together at rank 0 after the other ranks'
   placeholders are done, one of them a single token (a decode to the split, so that
   rank's own routing gets only its decode part).  More busy ranks bring the largest count
   and the lowest mode to the sync, which one busy rank of that count brings too.  MTP
   under DP is *undecided* (the drafter's forwards sync across ranks too, not modelled).

Each exposed step kind comes with a minimal example workload (the Workload JSON
shape) that :func:`verify` replays through ``simulate`` (the tests replay every one).
Where a raising shape has no construction here (a mixed or staged step, a draft step)
or the KV pool the model assumes may not hold the example, the answer is
*undecided* and says why: it never guesses.
"""

from __future__ import annotations

import functools

from ..schedule.data_parallel import DP_ASSUMPTION
from ..model.dispatch import dispatch
from .exposed_steps import ExposedStep, Exposure, example_request
from .exposure_dp import dummies
from ..model.knobs import Knobs
from ..model.plan import Plan, plan
from ..model.routing import SWAP_IN, router, swap_error
from ..model.startup import startup_batches

SCAN = 64  # step sizes asked past C + 1 before jumping to B (the predicate is a threshold)
SWAP_ERROR_HEAD = swap_error(2, 1).split(": stop=")[0]  # the HiSparse overflow, any sizes
EXPOSURE_ASSUMPTIONS = (
    "exposure: any traffic the scheduler model can produce (prompts shorter than "
    "max_model_len, arriving at any step, chunked prefill, prefix caching); the KV pools, "
    "the HiSparse host pool included, never run short (no preemption); start-up as predict "
    "models it",
)
# What the verdict assumes of N > 1 ranks, beside EXPOSURE_ASSUMPTIONS
EXPOSURE_DP_ASSUMPTION = (
    "exposure -dp N: any traffic on each rank (its scheduler the single-GPU one); an idle "
    "rank's dummy batch keeps the residency of its last real step; MTP under DP is not "
    "modelled (undecided); the examples are served as " + DP_ASSUMPTION)
def _pieces(n: int, s: int, q: int, max_len: int) -> int | None:
    """The fewest m <= S pieces of q + 1 ... max_len - 1 tokens that add up to n, or None."""
    top = max_len - 1  # the longest prompt vLLM accepts
    if top <= q:
        return None  # every prompt is computed as a decode
    m = -(-n // top)  # fewest pieces of at most `top` tokens
    return m if m <= s and m * (q + 1) <= n else None


def _forms(p: Plan, n: int, m: int) -> list[ExposedStep]:
    """The traffic that makes a no-decode step of ``n`` tokens (``m``: fewest pieces)."""
    k = p.knobs
    b, q, c, s, top = (p.max_num_batched_tokens, p.max_decode_query_len, p.swap_capacity,
                       k.max_num_seqs, k.max_model_len - 1)
    dp = k.data_parallel_size
    error = swap_error(n, c)
    head = f"a step with no decode running that computes exactly {n} tokens"
    out = []
    if m == 1:
        cached = (" (or a longer prompt whose uncached part is that long, its cached prefix "
                  "on the GPU)" if k.enable_prefix_caching else "")
        out.append(ExposedStep("lone_prompt", f"{head}: a {n}-token prompt{cached} reaching an "
                               "idle server", n, {"requests": [example_request(n, dp)]}, error))
        if b + n <= top:
            out.append(ExposedStep(
                "last_chunk", f"{head}: the last {n}-token chunk of a {b + n}-token prompt "
                f"(chunked prefill: {b} tokens, then {n}) with no decode running", n,
                {"requests": [example_request(b + n, dp)]}, error))
    parts = max(m, 2)
    if parts <= s and parts * (q + 1) <= n:
        lens = [n // parts + (i < n % parts) for i in range(parts)]
        out.append(ExposedStep(
            "burst", f"{head}: {parts} prompts arriving together at an idle server that add up "
            f"to {n} ({' + '.join(map(str, lens))}; any mix of prompts longer than "
            f"q = {q} tokens)", n, {"requests": [example_request(x, dp) for x in lens]}, error))
    return out


def _never(p: Plan, route) -> str:
    """Why no step reaches swap_in with more than C rows, from the first gate that holds."""
    k, c, b, q = p.knobs, p.swap_capacity, p.max_num_batched_tokens, p.max_decode_query_len
    routed, path, error = route(c + 1, 0)  # the step that would: C + 1 tokens, no decode
    key = p.rules.key
    if routed == 0:
        return (f"{k.attention_backend} on {key} hands only a step's decode part to the "
                f"routing, and the decode part of a step is at most min(B, S*q) = C = {c}")
    if path != SWAP_IN:
        return (f"vLLM {key} routes on C ({p.rules.predicate_text}): swap_in never gets more "
                f"than C = {c} rows")
    if b <= c:
        return (f"B = {b} <= C = {c} leaves no room for C + 1 = {c + 1} tokens in a step, and "
                f"the decode part of a step is at most S*q = C")
    return (f"no step without decode can compute exactly C + 1 = {c + 1} tokens: every piece "
            f"of prompt is longer than q = {q} and shorter than max_model_len = "
            f"{k.max_model_len}, at most S = {k.max_num_seqs} a step")


@functools.lru_cache(maxsize=4096)
def exposure(knobs: Knobs) -> Exposure:
    """The verdict for all traffic (see the module docstring); ValueError where vLLM refuses
    the knobs (``plan``)."""
    p = plan(knobs)
    if knobs.data_parallel_size > 1 and knobs.num_speculative_tokens:
        return Exposure(knobs, None, (), None, "MTP under data parallelism is not modelled "
                        "(the drafter's forwards sync across ranks too)")
    bad = next((x for x in startup_batches(p) if x.error), None)
    if bad is not None and not bad.error.startswith(SWAP_ERROR_HEAD):
        return Exposure(knobs, None, (), None, never_starts=(
            f"{bad.error} at start-up ({bad.phase}: {bad.label}, {bad.num_tokens} tokens)"))
    if bad is not None:
        what = (f"start-up ({bad.phase}: {bad.label}, {bad.num_tokens} tokens routed to "
                f"swap_in, C = {p.swap_capacity}): before any traffic")
        return Exposure(knobs, True, (ExposedStep(
            "startup", what, None, {"requests": [example_request(1, knobs.data_parallel_size)]},
            bad.error),), None)
    c, b, q, s = p.swap_capacity, p.max_num_batched_tokens, p.max_decode_query_len, \
        knobs.max_num_seqs
    resident, staged = router(p, True), router(p, False)
    sizes = sorted({*range(c + 1, min(b, c + SCAN) + 1), b} - set(range(c + 1)))
    undecided = []
    exposed: list[ExposedStep] = []
    blocked_by_graph = False
    for n in sizes:
        for d in (1, c):  # a step mixing decodes with prefill: the decode part is at most C
            if d < n and (resident(n, d)[2] or staged(n, d)[2]):
                undecided.append(f"a step of {n} tokens mixing {d} decode tokens with prefill "
                                 "raises, and the model has no traffic built for it")
        if staged(n, 0)[2]:
            undecided.append(f"a step of {n} tokens with a staged cached prefix raises, and "
                             "whether traffic stages it depends on host-tier timing")
        if not resident(n, 0)[2]:
            continue
        m = _pieces(n, s, q, knobs.max_model_len)
        if m is None:
            continue
        # m prompts, none a decode nor a one-token extension: not decode-graph eligible
        if dispatch(p, n, m, -(-n // m), False).mode == "FULL":
            blocked_by_graph = True  # a FULL replay routes nothing
            continue
        exposed += _forms(p, n, m)
    # the drafter's draft steps (K >= 2): up to S requests of one token each
    if knobs.num_speculative_tokens >= 2 and (resident(s, s)[2] or staged(s, s)[2]):
        undecided.append(f"an MTP draft step of {s} requests raises")
    dp_why = None
    if knobs.data_parallel_size > 1:  # an idle rank's dummy batch (K = 0 here)
        found, dp_why, notes = dummies(p, [n for n in sizes
                                            if resident(n, 0)[2] or staged(n, 0)[2]])
        exposed += found
        undecided += notes
    exposed = _fits_pool(knobs, exposed, undecided)
    if exposed:
        return Exposure(knobs, True, tuple(exposed), None)
    if undecided:
        return Exposure(knobs, None, (), None, "; ".join(dict.fromkeys(undecided)))
    why = (f"the only step that would raise ({c + 1} tokens) replays a FULL CUDA graph, which "
           "routes nothing") if blocked_by_graph else _never(p, resident)
    return Exposure(knobs, False, (), why if dp_why is None else f"{why}; under data "
                    f"parallelism (N = {knobs.data_parallel_size}) {dp_why}")


def _fits_pool(knobs: Knobs, steps: list[ExposedStep], undecided: list[str]) -> list:
    """Drop the examples a set KV pool may not hold (``num_gpu_blocks_override``).  Under DP
    every example request is pinned to rank 0, so one pool holding them all is rank 0's (an
    idle rank's one-token placeholder fits any pool ``plan`` accepts)."""
    if knobs.num_gpu_blocks_override is None or not steps:
        return steps
    from .simulate import serving_refusal
    from ..schedule.workload import Workload

    kept = []
    for st in steps:
        try:
            serving_refusal(knobs, Workload.from_json(st.example))
            kept.append(st)
        except ValueError as exc:
            undecided.append(f"{st.what}: {exc}")
    return kept


def verify(knobs: Knobs, step: ExposedStep) -> bool:
    """Whether ``simulate`` on the step's example crashes with the step's exact error."""
    from .simulate import simulate
    from ..schedule.workload import Workload

    crash = simulate(knobs, Workload.from_json(step.example)).crash
    return crash is not None and crash["error"] == step.error


def exposure_lines(exp: Exposure) -> list[str]:
    """The verdict for all traffic, for people: the headline, each step with its example."""
    lines = ["Is this server exposed? (all traffic, not only the prompts below)",
             "  " + exp.headline]
    for st in exp.steps:
        lines.append(f"  - {st.what}")
        lines.append(f"    example traffic: {_example_text(st.example)}")
        lines.append(f"    -> {st.error}")
    lines.append("  assumes: " + EXPOSURE_ASSUMPTIONS[0].split(": ", 1)[1])
    if exp.knobs.data_parallel_size > 1:
        lines.append(f"  assumes (-dp {exp.knobs.data_parallel_size}): "
                     + EXPOSURE_DP_ASSUMPTION.split(": ", 1)[1])
    return lines + [""]


def _example_text(example: dict) -> str:
    import json

    return json.dumps(example)
