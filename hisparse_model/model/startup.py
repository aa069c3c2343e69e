"""Every batch that runs while the engine starts, in the order the V2 worker runs them.

HiSparse forces the V2 model runner, whose start-up is:

1. ``determine_available_memory`` (vllm/v1/worker/gpu_worker.py:571-660 `def determine_available_memory`):
   ``profile_run`` skips attention, so nothing reaches the routing; then
   ``profile_cudagraph_memory`` captures every PIECEWISE descriptor and the 2
   largest FULL ones (vllm/v1/worker/gpu/cudagraph_utils.py:848 `_FULL_GRAPH_PROFILING_SAMPLES`),
   unless there are no CUDA graphs.
2. ``compile_or_warm_up_model`` (vllm/v1/worker/gpu_worker.py:829-890 `def compile_or_warm_up_model`):
   no extra compile sizes (DeepSeek-V3.2 is not torch-compiled); kernel
   warmups that do not reach the sparse-MLA routing on SM90; then
   ``warmup_kernels`` (vllm/v1/worker/gpu/warmup.py:243-450 `def _warmup_kernels`): one
   prefill of R = min(S, B // (q + 1)) requests of q + 1 tokens, then decode
   steps, skipped under enforce_eager (vllm/config/vllm.py:1694-1712 `enforce_eager`);
   then ``capture_model``: PIECEWISE descriptors, largest first, then FULL
   decode descriptors, each run twice (an eager warmup forward and the capture
   forward); with MTP the drafter then captures the same descriptors
   (vllm/v1/worker/gpu/model_runner.py:1064-1066 `self.speculator.capture()`).

Dummy and warmup runs disable the HiSparse connector, so every context page
counts as resident: a prefill-only dummy batch is handed to the routing whole.
"""

from __future__ import annotations

import functools

from .batches import Batch, new_batch, spread_decode_tokens
from .draft_steps import draft_graph_sizes
from .kv_pool import warmup_request_cap
from .plan import Plan
from .routing import UNIFORM_DECODE_BACKENDS, decode_tokens, router
from .sizing_warmup import extensible_kv_cache, sampler_warmup, sizing_warmup, warmup_step

PROFILE_FULL_SAMPLES = 2  # FULL graphs captured while profiling memory
# With MTP and B < q + 1 the JIT warmup has no request, yet its spec-decode step
# still takes request 0: vllm/v1/worker/gpu/warmup.py:441-442 `decode_steps.append(([0], [False]))`
# then vllm/v1/worker/gpu/warmup.py:382 `req_ids[i] for i in indices` (recorded on the H200).
WARMUP_NO_REQUEST_ERROR = "IndexError: list index out of range"

# A shape is one routed dummy batch: (tokens, requests, decode tokens, outcome),
# the outcome being the router's (routed tokens, route, error).  Routing depends
# only on the plan and the shape, so each shape is routed once and reused by the
# target and the drafter, in the memory profile and in the capture; a row is a
# capture batch's fields after its phase.


def _capture_shapes(plan: Plan, route) -> tuple[list[tuple], list[tuple]]:
    """(PIECEWISE, FULL) capture shapes, largest first, each routed once.

    A PIECEWISE dummy batch of T tokens is spread over min(T, S) requests; with
    T <= S each request has one token, so, like a uniform decode graph, the
    batch is all decodes.  An all-decode batch routes the same whatever its
    request count, so each such token count is routed once for both kinds.
    """
    s, q = plan.knobs.max_num_seqs, plan.max_decode_query_len
    uniform_split = plan.knobs.attention_backend in UNIFORM_DECODE_BACKENDS
    all_decode = {}  # tokens -> routing outcome of an all-decode batch of that many tokens
    piecewise = []
    for n, _, _ in plan.piecewise:
        if n <= s:
            outcome = all_decode[n] = route(n, n)
            piecewise.append((n, n, n, outcome))
        else:
            dec = spread_decode_tokens(n, s, q, uniform_split)
            piecewise.append((n, s, dec, route(n, dec)))
    # a FULL graph: num_reqs uniform decode requests of q tokens
    full = [(n, num_reqs, n, all_decode.get(n) or route(n, n)) for n, num_reqs, _ in plan.full]
    return piecewise, full


def _draft_step_shapes(plan: Plan, route) -> tuple[list[tuple], int]:
    """The MTP drafter's FULL graphs for its K - 1 one-token draft steps (K >= 2); their forwards.

    One graph per capture size T <= max_num_seqs, largest first: T requests of
    one token (vllm/v1/worker/gpu/spec_decode/autoregressive/speculator.py:137-141 `decode_query_len=1`,
    seen on the H200: tests/recorded/v0.31.0-stock-s2-mtp2.json).  Where the
    draft steps share one graph (0.32.0+ with FLASH_ATTN_MLA_SPARSE) each capture
    runs all K - 1 of them twice.
    """
    k = plan.knobs.num_speculative_tokens
    sizes = draft_graph_sizes(plan)  # none below K = 2 or without FULL decode graphs
    if not sizes:
        return [], 2
    fused = plan.rules.fused_draft_decode and plan.knobs.attention_backend not in UNIFORM_DECODE_BACKENDS
    forwards = 2 * (k - 1) if fused else 2  # eager pass + capture pass
    return [(t, t, t, route(t, t)) for t in reversed(sizes)], forwards


def _rows(shapes, mode: str, label: str, runner: str, forwards: int = 2) -> list[tuple]:
    """Capture rows of routed shapes; a capture whose eager pass raises stops there (1 forward)."""
    return [(label, n, reqs, dec, mode, routed, path, error, 1 if error else forwards, None, runner)
            for n, reqs, dec, (routed, path, error) in shapes]


def _captures(plan: Plan, route) -> list[tuple[list[tuple], list[tuple]]]:
    """Per model, its (PIECEWISE, FULL) capture rows, largest first: the target, then
    under MTP the drafter (the same descriptors) and its draft-step graphs."""
    piecewise, full = _capture_shapes(plan, route)
    models = [(_rows(piecewise, "PIECEWISE", "PIECEWISE capture", "target"),
               _rows(full, "FULL", "FULL capture", "target"))]
    if plan.knobs.num_speculative_tokens:
        suffix = " (MTP drafter)"
        models.append((_rows(piecewise, "PIECEWISE", "PIECEWISE capture" + suffix, "drafter"),
                       _rows(full, "FULL", "FULL capture" + suffix, "drafter")))
        steps, forwards = _draft_step_shapes(plan, route)
        models.append(([], _rows(steps, "FULL", "FULL capture (MTP draft step)", "drafter",
                                 forwards)))
    return models


def _capture_phase(captures, phase: str, full_limit: int | None) -> list[Batch]:
    """The target model's graphs, then the MTP drafter's (all of them, also while profiling)."""
    head = (phase,)
    out = []
    for i, (piecewise, full) in enumerate(captures):
        limit = full_limit if i == 0 else None  # the drafter's graphs are profiled in full
        out += [new_batch(head + row) for row in piecewise + full[:limit]]
    return out


def _jit_warmup(plan: Plan, route=None) -> list[Batch]:
    s, q, b = plan.knobs.max_num_seqs, plan.max_decode_query_len, plan.max_num_batched_tokens
    prompt_len = q + 1  # one token more than a decode request
    k = plan.knobs.num_speculative_tokens
    num_reqs = min(s, b // prompt_len)
    cap = warmup_request_cap(plan.knobs)  # a small KV pool (num_gpu_blocks_override)
    if cap is not None:
        num_reqs = min(num_reqs, cap)
    if num_reqs < 1:
        if k:  # the spec-decode warmup step still indexes request 0 of none
            return [Batch("jit_warmup", "warmup decode of no request", 0, 0, 0, "NONE", 0, None,
                          WARMUP_NO_REQUEST_ERROR, 0)]
        return []
    spec = k > 0
    uniform_split = plan.knobs.attention_backend in UNIFORM_DECODE_BACKENDS
    route = route or router(plan)

    def forward(label: str, n: int, reqs: int, dec: int) -> list[Batch]:
        """One warmup step (requests with drafts first), then the drafter's draft steps."""
        return warmup_step(plan, route, "jit_warmup", label, n, reqs, dec)

    def mixed(qlens: tuple[int, ...]) -> tuple[int, int, int]:
        """(tokens, requests, decode tokens) of a step of these query lengths."""
        return sum(qlens), len(qlens), decode_tokens(qlens, q, uniform_split)

    # num_reqs prompts of q + 1 tokens, each one more than a decode: no decode tokens
    out = forward("warmup prefill", num_reqs * prompt_len, num_reqs, 0)
    step = q if spec else 1  # tokens per request of a warmup decode (<= q: all decode)
    steps = [(step * num_reqs, num_reqs, step * num_reqs)]
    if num_reqs >= 2:
        steps.append(mixed((step, 1)))
        if spec:
            steps.append(mixed((1, 1)))
    if num_reqs > 1:
        steps.append((step, 1, step))
    if spec:
        steps.append((1, 1, 1))
    for n, reqs, dec in steps:
        out += forward("warmup decode", n, reqs, dec)
        if out[-1].error:
            break
    return out


@functools.lru_cache(maxsize=4096)
def startup_batches(plan: Plan) -> tuple[Batch, ...]:
    """All start-up batches, in engine order (see the module docstring)."""
    route = router(plan)  # every start-up batch is all-resident
    # nothing is captured, the drafter's graphs included, when the target has no graph
    graphs = plan.cudagraph_mode != "NONE" and (plan.piecewise or plan.full)
    captures = _captures(plan, route) if graphs else []
    extensible = extensible_kv_cache(plan)  # 0.34.0 (sizing_warmup.py)
    out = [] if extensible else _capture_phase(captures, "cudagraph_memory_profile",
                                               PROFILE_FULL_SAMPLES)
    if not plan.knobs.enforce_eager or extensible:
        # under MTP 0.33.0 warms up twice, the second time with greedy sampling
        passes = plan.rules.spec_warmup_passes if plan.knobs.num_speculative_tokens else 1
        out += _jit_warmup(plan, route) * passes
    if extensible and not any(b.error for b in out):
        out += sizing_warmup(plan, route)
    out += _capture_phase(captures, "capture", None)
    if plan.rules.sampler_warmup and not any(b.error for b in out):
        out += sampler_warmup(plan, route)
    return tuple(out)
