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

from .batches import Batch, make_batch, spread_decode_tokens
from .kv_pool import warmup_request_cap
from .plan import DECODE_FULL, Plan
from .routing import UNIFORM_DECODE_BACKENDS, decode_tokens, routed_path

PROFILE_FULL_SAMPLES = 2  # FULL graphs captured while profiling memory
# With MTP and B < q + 1 the JIT warmup has no request, yet its spec-decode step
# still takes request 0: vllm/v1/worker/gpu/warmup.py:441-442 `decode_steps.append(([0], [False]))`
# then vllm/v1/worker/gpu/warmup.py:382 `req_ids[i] for i in indices` (recorded on the H200).
WARMUP_NO_REQUEST_ERROR = "IndexError: list index out of range"


def _captures(plan: Plan, runner: str) -> tuple[list[tuple], list[tuple]]:
    """(PIECEWISE, FULL) capture batches of one model, largest first, as Batch fields after phase."""
    s, q = plan.knobs.max_num_seqs, plan.max_decode_query_len
    uniform_split = plan.knobs.attention_backend in UNIFORM_DECODE_BACKENDS
    suffix = " (MTP drafter)" if runner == "drafter" else ""
    out: tuple[list[tuple], list[tuple]] = ([], [])
    for kind, mode, descs in ((0, "PIECEWISE", plan.piecewise), (1, "FULL", plan.full)):
        label = f"{mode} capture{suffix}"
        for num_tokens, num_reqs, uniform in descs:
            reqs = num_reqs or min(num_tokens, s)  # PIECEWISE: spread over min(T, S)
            # a uniform decode graph is num_reqs requests of `uniform` <= q tokens: all decode
            dec = (num_tokens if uniform
                   else spread_decode_tokens(num_tokens, reqs, q, uniform_split))
            out[kind].append(_capture(plan, label, num_tokens, reqs, dec, mode, 2, runner))
    return out


def _capture(plan: Plan, label, n, reqs, dec, mode, forwards, runner) -> tuple:
    """A capture batch's fields after its phase; a capture whose eager pass raises stops there."""
    routed, route, error = routed_path(plan, n, dec)
    return (label, n, reqs, dec, mode, routed, route, error, 1 if error else forwards, None,
            runner)


def _draft_step_captures(plan: Plan) -> tuple[list[tuple], list[tuple]]:
    """The MTP drafter's FULL graphs for its K - 1 one-token draft steps (K >= 2).

    One graph per capture size T <= max_num_seqs, largest first: T requests of
    one token (vllm/v1/worker/gpu/spec_decode/autoregressive/speculator.py:137-141 `decode_query_len=1`,
    seen on the H200: tests/recorded/v0.31.0-stock-s2-mtp2.json).  Where the
    draft steps share one graph (0.32.0+ with FLASH_ATTN_MLA_SPARSE) each capture
    runs all K - 1 of them twice.
    """
    k = plan.knobs.num_speculative_tokens
    if k < 2 or plan.cudagraph_mode not in DECODE_FULL:
        return [], []
    fused = plan.rules.fused_draft_decode and plan.knobs.attention_backend not in UNIFORM_DECODE_BACKENDS
    forwards = 2 * (k - 1) if fused else 2  # eager pass + capture pass
    sizes = [t for t in reversed(plan.capture_sizes) if t <= plan.knobs.max_num_seqs]
    return [], [_capture(plan, "FULL capture (MTP draft step)", t, t, t, "FULL", forwards,
                         "drafter") for t in sizes]


def _capture_phase(captures, phase: str, full_limit: int | None) -> list[Batch]:
    """The target model's graphs, then the MTP drafter's (all of them, also while profiling)."""
    out = []
    for i, (piecewise, full) in enumerate(captures):
        limit = full_limit if i == 0 else None  # the drafter's graphs are profiled in full
        out += [Batch(phase, *fields) for fields in piecewise + full[:limit]]
    return out


def _jit_warmup(plan: Plan) -> list[Batch]:
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
    runner = "both" if spec else "target"
    uniform_split = plan.knobs.attention_backend in UNIFORM_DECODE_BACKENDS

    def forward(label: str, qlens: tuple[int, ...]) -> list[Batch]:
        """One warmup step (requests with drafts first), then the drafter's K - 1 draft steps."""
        n, reqs = sum(qlens), len(qlens)
        dec = decode_tokens(qlens, q, uniform_split)
        step = make_batch(plan, "jit_warmup", label, n, reqs, dec, "NONE", runner=runner)
        if step.error:  # the target raised: the drafter never ran
            return [step._replace(runner="target")]
        if k < 2:
            return [step]
        return [step, make_batch(plan, "jit_warmup", "MTP draft steps", reqs, reqs, reqs, "NONE",
                                 forwards=k - 1, runner="drafter")]

    out = forward("warmup prefill", (prompt_len,) * num_reqs)
    step = q if spec else 1  # tokens per request of a warmup decode
    steps: list[tuple[int, ...]] = [(step,) * num_reqs]
    if num_reqs >= 2:
        steps.append((step, 1))
        if spec:
            steps.append((1, 1))
    if num_reqs > 1:
        steps.append((step,))
    if spec:
        steps.append((1,))
    for qlens in steps:
        out += forward("warmup decode", qlens)
        if out[-1].error:
            break
    return out


@functools.lru_cache(maxsize=4096)
def startup_batches(plan: Plan) -> tuple[Batch, ...]:
    """All start-up batches, in engine order (see the module docstring)."""
    runners = ["target"] + (["drafter"] if plan.knobs.num_speculative_tokens else [])
    # nothing is captured, the drafter's graphs included, when the target has no graph
    graphs = plan.cudagraph_mode != "NONE" and (plan.piecewise or plan.full)
    captures = [_captures(plan, r) for r in runners] if graphs else []
    if captures and len(runners) > 1:
        captures.append(_draft_step_captures(plan))
    out = _capture_phase(captures, "cudagraph_memory_profile", PROFILE_FULL_SAMPLES)
    if not plan.knobs.enforce_eager:
        # under MTP 0.33.0 warms up twice, the second time with greedy sampling
        passes = plan.rules.spec_warmup_passes if plan.knobs.num_speculative_tokens else 1
        out += _jit_warmup(plan) * passes
    out += _capture_phase(captures, "capture", None)
    return tuple(out)
