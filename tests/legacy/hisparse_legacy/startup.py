"""Every batch that runs while the engine starts, in the order the V2 worker runs them.

HiSparse forces the V2 model runner, whose start-up is (``v1/worker/gpu_worker.py``,
0.31.0 lines; 0.32.0 / 0.33.0 differ only in line numbers):

1. ``determine_available_memory`` (571-660): ``profile_run`` is a
   ``_dummy_run(B, skip_attn=True)`` (``v1/worker/gpu/model_runner.py:961-990``):
   attention is skipped, so nothing reaches the routing.  Then
   ``profile_cudagraph_memory`` (``v1/worker/gpu/cudagraph_utils.py:854-957``)
   captures every PIECEWISE descriptor and the 2 largest FULL ones
   (``_FULL_GRAPH_PROFILING_SAMPLES``, line 848) on a minimal KV cache,
   unless cudagraph_mode is NONE (enforce_eager).
2. ``compile_or_warm_up_model`` (829-890):
   a. ``_dummy_run(size)`` for compile sizes outside the capture sizes
      (861-866), spread over min(size, max_num_seqs) requests;
   b. ``kernel_warmup`` (871): kernel JIT and GEMM warmups; none reaches the
      sparse-MLA routing on SM90 (the mixed prefill+decode warmup of
      ``model_executor/warmup/flashinfer_sparse_mla_warmup.py`` is SM120-only);
   c. ``warmup_kernels`` (876, ``v1/worker/gpu/warmup.py:243-450``): one prefill of
      R = min(max_num_seqs, B // (q + 1)) requests of q + 1 tokens, then decode
      steps; skipped under enforce_eager, which clears ``enable_jit_warmup``
      (``config/vllm.py:1694-1712``);
   d. ``capture_model`` (883): PIECEWISE descriptors, largest first, then FULL
      decode descriptors (``cudagraph_utils.py:399-491``), each run twice: an
      eager warmup forward and the capture forward; with MTP the drafter then
      captures the same descriptors (``model_runner.py:1064-1066``).

Dummy and warmup runs disable the HiSparse connector (``model_runner.py:842``,
``warmup.py:343``), so the cache handles keep ``all_context_pages_resident``
at its initial True (``v1/hisparse/runtime.py:1118``): a prefill-only dummy
batch is handed to the routing whole.
"""

from __future__ import annotations

import functools

from .batches import Batch, make_batch, spread
from .graphs import capture_descriptors, compile_warmup_sizes

PROFILE_FULL_SAMPLES = 2  # FULL graphs captured while profiling (cudagraph_utils.py:848)


def _captures(ctx, phase: str, full_limit: int | None, runner: str) -> list[Batch]:
    out: list[Batch] = []
    s = ctx.knobs.max_num_seqs
    piecewise, full = capture_descriptors(ctx)
    for mode, descs in (("PIECEWISE", piecewise), ("FULL", full)):
        if mode == "FULL" and full_limit is not None:
            descs = descs[:full_limit]
        for num_tokens, num_reqs, uniform in descs:
            if uniform:  # uniform decode graph: num_reqs requests of `uniform` tokens
                qlens = (uniform,) * num_reqs
            else:  # cudagraph_utils.py:650: num_reqs or min(num_tokens, max_num_seqs)
                qlens = spread(num_tokens, num_reqs or min(num_tokens, s))
            label = f"{mode} capture" + (" (MTP drafter)" if runner == "drafter" else "")
            out.append(
                make_batch(ctx, phase, label, qlens, mode, forwards=2, runner=runner)
            )
    return out


def _capture_phase(ctx, phase: str, full_limit: int | None) -> list[Batch]:
    """The target model's graphs, then the MTP drafter's (``model_runner.py:1064-1066``).

    The drafter captures the same descriptors with its single layer; while
    profiling, its graphs are measured in full (``cudagraph_utils.py:864``).
    """
    out = _captures(ctx, phase, full_limit, "target")
    if ctx.knobs.num_speculative_tokens:
        out += _captures(ctx, phase, None, "drafter")
    return out


def _jit_warmup(ctx) -> list[Batch]:
    s = ctx.knobs.max_num_seqs
    q = ctx.sizes.max_decode_query_len
    b = ctx.sizes.max_num_batched_tokens
    prompt_len = q + 1  # warmup.py:256: one token more than a decode request
    num_reqs = min(s, b // max(prompt_len, q))  # warmup.py:292-295
    if num_reqs < 1:
        return []
    runner = "both" if ctx.knobs.num_speculative_tokens else "target"
    out = [
        make_batch(
            ctx, "jit_warmup", "warmup prefill", (prompt_len,) * num_reqs, "NONE", runner=runner
        )
    ]
    spec = ctx.knobs.num_speculative_tokens > 0
    steps: list[tuple[int, ...]] = [(q if spec else 1,) * num_reqs]  # warmup.py:426-428
    if num_reqs >= 2:  # warmup.py:429-436
        steps.append((q if spec else 1, 1))
        if spec:
            steps.append((1, 1))
    if num_reqs > 1:  # warmup.py:437-442
        steps.append((q if spec else 1,))
        if spec:
            steps.append((1,))
    elif spec:
        steps.append((1,))
    for qlens in steps:
        # decodes first: the batch is reordered decodes-first before attention
        out.append(
            make_batch(
                ctx, "jit_warmup", "warmup decode", tuple(sorted(qlens)), "NONE", runner=runner
            )
        )
    return out


@functools.lru_cache(maxsize=4096)
def startup_batches(ctx) -> tuple[Batch, ...]:
    """All start-up batches, in engine order (see the module docstring); memoised per context."""
    s = ctx.knobs.max_num_seqs
    graphs = ctx.cudagraph_mode != "NONE"
    out: list[Batch] = []
    if graphs:
        out += _capture_phase(ctx, "cudagraph_memory_profile", PROFILE_FULL_SAMPLES)
    for size in compile_warmup_sizes(ctx):
        qlens = spread(size, min(size, s))
        out.append(make_batch(ctx, "compile_warmup", "compile warmup", qlens, "NONE"))
    if not ctx.knobs.enforce_eager:
        # enforce_eager also switches JIT warmup off (config/vllm.py:1694-1712,
        # 0.31.0; 1766-... in 0.32.0): an eager engine routes nothing at start.
        out += _jit_warmup(ctx)
    if graphs:
        out += _capture_phase(ctx, "capture", None)
    return tuple(out)
