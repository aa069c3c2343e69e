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

import functools
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


@functools.lru_cache(maxsize=1 << 16)
def _route_core(version, backend, mode, q, capacity, query_lens):
    """(tokens, decode tokens, routed tokens, route, error) for one batch shape (memoised)."""
    n = sum(query_lens)
    dec = decode_tokens(query_lens, q)
    routed = routing.routed_tokens(version, backend, n, dec)
    if not routed:
        return n, dec, 0, None, None
    r = routing.route(version, mode, routed, capacity, has_prefill=dec < n)
    return n, dec, routed, r.path, r.error


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
    k = ctx.knobs
    n, dec, routed, path, err = _route_core(
        k.vllm_version, k.attention_backend, k.routing,
        ctx.sizes.max_decode_query_len, ctx.sizes.swap_capacity, query_lens,
    )
    return Batch(phase, label, n, len(query_lens), dec, cudagraph_mode, routed, path, err,
                 forwards, prompt_index, runner)
