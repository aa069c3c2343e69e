"""A batch as the routing sees it, and the shape vLLM gives dummy batches.

Every engine step (dummy or real) is reduced to what the routing needs: its
query lengths in the runner's order, how many of its tokens are decodes, what
is routed, where, and the error.  The dummy batches of CUDA-graph captures
(vllm/v1/worker/gpu/input_batch.py:127-153 `num_tokens // num_reqs`) give
``num_reqs`` requests ``num_tokens // num_reqs`` tokens each and the *last*
``num_tokens % num_reqs`` requests one more, so a dummy batch is ordered
decode-like first, prefill-like last; :func:`spread_decode_tokens` counts its
decode tokens.
"""

from __future__ import annotations

import functools
from typing import NamedTuple


def spread(num_tokens: int, num_reqs: int) -> tuple[int, ...]:
    """Query length of each dummy request: ``num_tokens`` over ``num_reqs``, the last
    ``num_tokens % num_reqs`` requests one token longer (the data-parallel dummy batch)."""
    if not 0 < num_reqs <= num_tokens:
        raise ValueError(f"num_reqs must be in 1..num_tokens, got {num_reqs} for {num_tokens}")
    base = num_tokens // num_reqs  # tokens per request before the remainder
    extra = num_tokens % num_reqs  # requests that get one more token (the last ones)
    return (base,) * (num_reqs - extra) + (base + 1,) * extra


def spread_decode_tokens(num_tokens: int, num_reqs: int, threshold: int,
                         uniform: bool = False) -> int:
    """Decode tokens of the dummy batch of ``num_tokens`` over ``num_reqs`` requests
    (``routing.decode_tokens`` of its query lengths, in closed form)."""
    base, extra = divmod(num_tokens, num_reqs)
    if base > threshold:
        return 0
    short = (num_reqs - extra) * base  # the leading requests of `base` tokens
    if base + 1 > threshold or (uniform and extra and threshold > 1 and num_reqs > extra):
        return short  # the longer tail is a prefill, or breaks the uniform run
    return short + extra * (base + 1)


class Batch(NamedTuple):
    """One engine step and what the routing does with it."""

    phase: str  # cudagraph_memory_profile, jit_warmup, capture, prompt, ...
    label: str  # human-readable: "PIECEWISE capture", "prefill chunk 1/2", ...
    num_tokens: int  # tokens in the step
    num_reqs: int  # requests in the step
    num_decode_tokens: int  # tokens of the decode requests
    cudagraph_mode: str  # NONE, PIECEWISE or FULL for this forward
    routed: int  # tokens handed to the routing (0: not called)
    route: str | None  # SWAP_IN / ALL_RESIDENT / None
    error: str | None  # exact ValueError text, or None
    forwards: int | None = 1  # forwards of this step (None: varies, e.g. MTP decodes)
    prompt_index: int | None = None
    runner: str = "target"  # whose layers route: "target", "drafter" (MTP) or "both"


def last_prefill_route(batches) -> str | None:
    """Where a prompt's last prefill chunk goes (``swap_in``, ``all_resident``, or None: not
    routed): the route of the chunk that ends its prefill, not of its first chunk, which at
    n = B + 2 is a B-token chunk going elsewhere.  Decode steps are left out."""
    chunks = [b for b in batches if b.label != "decode"]
    return chunks[-1].route if chunks else None


# A Batch from a tuple of its twelve fields in order: what Batch(*fields) builds,
# without the keyword handling of the generated __new__ (the walks build ~40 a prediction).
new_batch = functools.partial(tuple.__new__, Batch)


def routed_batch(route, phase: str, label: str, num_tokens: int, num_reqs: int, decode: int,
                 cudagraph_mode: str, forwards: int | None = 1, prompt_index: int | None = None,
                 runner: str = "target") -> Batch:
    """A :class:`Batch` of ``num_tokens`` over ``num_reqs`` requests, routed by ``route``
    (a plan's :func:`~hisparse_model.model.routing.router`)."""
    routed, path, error = route(num_tokens, decode)
    return new_batch((phase, label, num_tokens, num_reqs, decode, cudagraph_mode, routed, path,
                      error, forwards, prompt_index, runner))
