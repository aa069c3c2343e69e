"""Which top-k tokens reach the HiSparse routing, and where the routing sends them.

Two questions per batch, both decided by vLLM's source:

1. *Hand-off* — which of the batch's tokens an attention backend hands to
   ``HiSparseMLAIndexGroup.convert_logical_to_physical_topk``:

   * 0.31.0 / 0.32.0, FLASH_ATTN_MLA_SPARSE
     (``v1/attention/backends/mla/flashattn_mla_sparse.py:204-260`` in 0.31.0): the
     decode tokens, if any; a batch with no decode token whose context pages
     are all resident hands *all* its tokens over; a mixed batch's prefill
     part is staged (``stage_prefill_rows``) and never routed.
   * 0.31.0 / 0.32.0, FLASHMLA_SPARSE (``flashmla_sparse.py:815-850``): decode
     tokens only; prefill tokens are always staged, so it can never crash.
   * 0.33.0, every backend (``model_executor/layers/attention/
     sparse_mla_attention.py:805-812``, ``flashmla_sparse.py:855-870``): the
     whole batch when it is decode-only or all its pages are resident,
     otherwise the decode part.

2. *Route* — ``convert_logical_to_physical_topk``'s predicate:

   * 0.31.0: swap_in when n <= W = C + 1 (``index_group.py:236``), where
     ``_step_rows`` (``v1/hisparse/runtime.py:897-907``) raises for n > C;
   * 0.32.0 and 0.31.0 + fix: swap_in when n <= C (``index_group.py:236``,
     ``cache.runtime.max_swap_rows``);
   * 0.33.0: swap_in when n <= C and the batch is decode-only or not all
     resident (``index_group.py:239-242``).

``_step_rows`` starts at row 0 every forward (``begin_forward`` resets the step,
runtime.py:894-895, called from ``prepare_group_for_batch``), so the error's
``stop`` is the batch's routed token count.

Decode/prefill split: HiSparse pins the reorder threshold to 1, raised to q
under speculative decoding (``sparse_mla_attention.py:253-265`` and
``v1/attention/backend.py:666-691``); a request whose query length is <= q is a
decode (``v1/attention/backends/utils.py:799-860``).
"""

from __future__ import annotations

from dataclasses import dataclass

ALL_RESIDENT = "all_resident"
SWAP_IN = "swap_in"

ERROR_TEMPLATE = (
    "ValueError: HiSparse swap rows exceed the configured speculative decode "
    "capacity: stop={stop}, capacity={capacity}."
)


def swap_error(stop: int, capacity: int) -> str:
    """The exact text ``_step_rows`` raises (runtime.py:900-905 in 0.31.0)."""
    return ERROR_TEMPLATE.format(stop=stop, capacity=capacity)


def routed_tokens(
    version: str,
    backend: str,
    num_tokens: int,
    num_decode_tokens: int,
    all_resident: bool = True,
) -> int:
    """Tokens of one batch that reach the routing (0: the routing is not called)."""
    has_prefill = num_decode_tokens < num_tokens
    if version == "0.33.0":
        if not has_prefill or all_resident:
            return num_tokens
        return num_decode_tokens
    if backend == "FLASHMLA_SPARSE":
        return num_decode_tokens
    if num_decode_tokens == 0 and all_resident:
        return num_tokens  # pure prefill over resident pages: the whole batch
    return num_decode_tokens  # the decode part; a mixed batch's prefill is staged


@dataclass(frozen=True)
class Route:
    path: str  # ALL_RESIDENT or SWAP_IN
    error: str | None  # exact ValueError text, or None


def route(
    version: str,
    routing: str,
    n: int,
    capacity: int,
    *,
    has_prefill: bool,
    all_resident: bool = True,
) -> Route:
    """Where ``convert_logical_to_physical_topk`` sends ``n`` routed tokens."""
    workspace = capacity + 1  # rows, index_group.py:367 (0.31.0)
    if version == "0.31.0" and routing == "stock":
        go_swap = n <= workspace
    elif version == "0.33.0":
        go_swap = n <= capacity and not (all_resident and has_prefill)
    else:  # 0.32.0, or 0.31.0 with the upstream fix applied
        go_swap = n <= capacity
    if not go_swap:
        return Route(ALL_RESIDENT, None)
    if n > capacity:  # _step_rows: stop = 0 * n + n > capacity
        return Route(SWAP_IN, swap_error(n, capacity))
    return Route(SWAP_IN, None)
