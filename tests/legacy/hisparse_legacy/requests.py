"""The batches one prompt makes when it is served alone (the fix PR's loop).

``llm.generate`` with one prompt of n tokens and ``max_tokens=8``:

* chunked prefill (on by default in the V1 scheduler, ``v1/core/sched/scheduler.py``):
  chunks of min(remaining, B) tokens, one per step;
* then decode steps of one token (q tokens under MTP: 1 sampled + the
  drafts), until 8 tokens are out or the sequence reaches max_model_len.  The
  last prefill chunk samples the first output token, so there are 7 decode steps.

The routing sees the real token count: PIECEWISE and eager batches build
unpadded attention metadata, and a FULL decode graph's dummy rows are padding.
Under light load (one request at a time, a pool far larger than
max_model_len) the scheduler never hands a live request's pages to another
request, so ``all_context_pages_resident`` stays True
(``v1/hisparse/coordinator.py:654-670``): a prefill chunk of more than q
tokens is handed to the routing whole by FLASH_ATTN_MLA_SPARSE and
FLASHINFER_MLA_SPARSE.  A chunk of at most q tokens is a decode
(``treat_short_extends_as_decodes``, ``v1/attention/backends/utils.py:834-839``).
"""

from __future__ import annotations

from .batches import Batch, make_batch

MAX_TOKENS = 8  # SamplingParams(max_tokens=8) in the fix PR's reproduction


def prompt_batches(ctx, index: int, n: int) -> list[Batch]:
    b = ctx.sizes.max_num_batched_tokens  # tokens per step
    q = ctx.sizes.max_decode_query_len  # tokens per decode step
    chunks = []
    remaining = n
    while remaining > 0:
        chunks.append(min(remaining, b))
        remaining -= chunks[-1]
    runner = "both" if ctx.knobs.num_speculative_tokens else "target"
    out = []
    for i, c in enumerate(chunks):
        label = f"prefill chunk {i + 1}/{len(chunks)}" if len(chunks) > 1 else "prefill"
        # A one-token chunk over existing context computes like a decode and may
        # replay the decode graph (v1/worker/gpu/input_batch.py:121-124).
        mode = dispatch_mode(ctx, c, decode_like=(c == 1 and i > 0))
        out.append(make_batch(ctx, "prompt", label, (c,), mode, prompt_index=index, runner=runner))
    steps = min(MAX_TOKENS - 1, ctx.knobs.max_model_len - n - 1)  # decode forwards
    if steps > 0:
        # Under MTP the number of verify steps depends on how many drafts the
        # (dummy-weight) target accepts, so it is not a fixed number.
        forwards = None if ctx.knobs.num_speculative_tokens else steps
        mode = dispatch_mode(ctx, q, decode_like=True)
        out.append(
            make_batch(
                ctx, "prompt", "decode", (q,), mode, forwards=forwards,
                prompt_index=index, runner=runner,
            )
        )
    return out


def dispatch_mode(ctx, num_tokens: int, *, decode_like: bool) -> str:
    """How a one-request step runs: a FULL decode-graph replay, PIECEWISE or eager.

    ``CudaGraphManager.dispatch`` (``v1/worker/gpu/cudagraph_utils.py:499-530``,
    0.31.0) picks the smallest captured descriptor that fits: a FULL uniform
    decode graph for a decode-like step, else a PIECEWISE graph when the step
    fits the largest capture size, else eager.  Inside a FULL replay no Python
    runs, so the routing decided at capture time is reused and nothing is logged.
    """
    mode = ctx.cudagraph_mode
    caps = ctx.capture_sizes
    if mode == "NONE" or not caps:
        return "NONE"
    if decode_like and mode in ("FULL_AND_PIECEWISE", "FULL_DECODE_ONLY"):
        return "FULL"
    if mode in ("FULL_AND_PIECEWISE", "PIECEWISE") and num_tokens <= max(caps):
        return "PIECEWISE"
    return "NONE"


def validate_prompt_lens(prompt_lens, max_model_len: int) -> list[int]:
    lens = []
    for n in prompt_lens:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"prompt_lens must be integers >= 1, got {n!r}")
        if n >= max_model_len:
            raise ValueError(
                f"prompt_lens: a prompt of {n} tokens leaves no room to generate "
                f"under max_model_len={max_model_len}"
            )
        lens.append(n)
    return lens
