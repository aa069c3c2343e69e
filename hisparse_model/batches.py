"""A batch as the routing sees it, and how vLLM shapes dummy batches.

Every engine step (dummy or real) is reduced to the numbers the routing needs:
its token count, how those tokens split over requests, and which leading
requests count as decodes.  :func:`spread` is the dummy-batch shape vLLM uses for
CUDA-graph captures and compile-warmup runs
(``v1/worker/gpu/input_batch.py:127-153`` in 0.31.0, ``135-161`` in 0.33.0;
``v1/worker/gpu/model_runner.py:785-830`` builds the same split for
``_dummy_run``): ``num_reqs`` requests get ``num_tokens // num_reqs`` tokens
each and the *last* ``num_tokens % num_reqs`` requests one more, so a dummy
batch is ordered decode-like first, prefill-like last.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from . import routing


def spread(num_tokens: int, num_reqs: int) -> tuple[int, ...]:
    """Query length of each dummy request (input_batch.py:148-153, 0.31.0)."""
    if not 0 < num_reqs <= num_tokens:
        raise ValueError(f"num_reqs must be in 1..num_tokens, got {num_reqs} for {num_tokens}")
    base = num_tokens // num_reqs  # tokens per request before the remainder
    extra = num_tokens % num_reqs  # requests that get one more token (the last ones)
    return (base,) * (num_reqs - extra) + (base + 1,) * extra


def decode_tokens(query_lens: tuple[int, ...], decode_threshold: int) -> int:
    """Tokens of the leading requests whose query length is <= the threshold.

    ``split_decodes_and_prefills`` (``v1/attention/backends/utils.py:799-870``,
    0.31.0) treats the batch as reordered decodes-first and counts a request
    as a decode when its query length is <= the threshold (q under HiSparse).
    """
    total = 0
    for qlen in query_lens:
        if qlen > decode_threshold:
            break
        total += qlen
    return total


@dataclass(frozen=True)
class Batch:
    """One engine step and what the routing does with it."""

    phase: str  # memory profile, capture, jit_warmup, prompt, ...
    label: str  # human-readable: "PIECEWISE capture", "prefill chunk 1/2", ...
    num_tokens: int  # tokens in the step
    num_reqs: int  # requests in the step
    num_decode_tokens: int  # tokens of the decode requests
    cudagraph_mode: str  # NONE, PIECEWISE or FULL for this forward
    routed: int  # tokens handed to the routing (0: not called)
    route: str | None  # routing.SWAP_IN / routing.ALL_RESIDENT / None
    error: str | None  # exact ValueError text, or None
    forwards: int | None = 1  # forwards of this step (None: varies, e.g. MTP decodes)
    prompt_index: int | None = None
    runner: str = "target"  # whose layers route: "target", "drafter" (MTP) or "both"

    @property
    def has_prefill(self) -> bool:
        return self.num_decode_tokens < self.num_tokens

    def as_dict(self) -> dict:
        return asdict(self)


def make_batch(
    ctx,
    phase: str,
    label: str,
    query_lens: tuple[int, ...],
    cudagraph_mode: str,
    forwards: int | None = 1,
    prompt_index: int | None = None,
    runner: str = "target",
) -> Batch:
    """Build a :class:`Batch` and route it under the context's version and backend."""
    n = sum(query_lens)
    dec = decode_tokens(query_lens, ctx.sizes.max_decode_query_len)
    routed = routing.routed_tokens(ctx.knobs.vllm_version, ctx.knobs.attention_backend, n, dec)
    if routed:
        r = routing.route(
            ctx.knobs.vllm_version,
            ctx.knobs.routing,
            routed,
            ctx.sizes.swap_capacity,
            has_prefill=dec < n,
        )
        path, err = r.path, r.error
    else:
        path, err = None, None
    return Batch(
        phase=phase,
        label=label,
        num_tokens=n,
        num_reqs=len(query_lens),
        num_decode_tokens=dec,
        cudagraph_mode=cudagraph_mode,
        routed=routed,
        route=path,
        error=err,
        forwards=forwards,
        prompt_index=prompt_index,
        runner=runner,
    )
