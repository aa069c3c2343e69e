"""Route one batch: which of its tokens reach the HiSparse routing, and where they go.

Two questions per batch, both answered by the version's :class:`~hisparse_model.model.versions.VersionRules`:

1. *Split and hand-off*.  HiSparse pins the decode threshold to q
   (vllm/model_executor/layers/attention/sparse_mla_attention.py:253-265 `reorder_batch_threshold`),
   and the batch is reordered decodes first, so its decode tokens are those of
   the leading requests whose query length is <= q
   (vllm/v1/attention/backends/utils.py:799-870 `def split_decodes_and_prefills`).
   The backend then hands the decode part, or the whole batch, to
   ``convert_logical_to_physical_topk`` (:meth:`VersionRules.handoff_rule`).
2. *Route*.  The predicate sends the routed tokens to ``swap_in`` or to the
   all-resident path (:meth:`VersionRules.swap_in_rule`); ``swap_in`` starts at
   row 0 every forward and raises past C rows
   (vllm/v1/hisparse/runtime.py:897-907 `HiSparse swap rows exceed the configured speculative decode`),
   so the error's ``stop`` is the routed token count.

Dummy and warmup batches, and light serving load, keep every context page
resident (``all_resident=True``, the default here).

There is one routing rule, :meth:`VersionRules.router`; :func:`router` binds it
to a plan, and everything that routes a batch (the walks, simulate, the charts,
the vLLM cross-check) calls it.
"""

from __future__ import annotations

from .versions import ALL_RESIDENT, ERROR_TEMPLATE, SWAP_IN, swap_error

__all__ = ["ALL_RESIDENT", "ERROR_TEMPLATE", "SWAP_IN", "decode_tokens", "route_batch",
           "routed_path", "router", "swap_error", "UNIFORM_DECODE_BACKENDS"]


# FLASHMLA_SPARSE's builder wants uniform decodes:
# vllm/v1/attention/backends/mla/flashmla_sparse.py:319 `require_uniform_decodes: ClassVar[bool] = True`
UNIFORM_DECODE_BACKENDS = frozenset({"FLASHMLA_SPARSE"})


def decode_tokens(query_lens, threshold: int, uniform: bool = False) -> int:
    """Decode tokens of a batch (query lengths in the runner's order).

    vllm/v1/attention/backends/utils.py:799-870 `def split_decodes_and_prefills`:
    the leading requests of at most ``threshold`` tokens; with ``uniform`` the
    leading requests of the first request's length (all of them when the first
    is short enough and every request has that length).
    """
    if not query_lens:
        return 0
    first = query_lens[0]
    if max(query_lens) <= threshold and (not uniform or threshold <= 1):
        return sum(query_lens)
    if first > threshold:
        return 0
    total = 0
    for qlen in query_lens:
        if (qlen not in (first, 0)) if uniform else (qlen > threshold):
            break
        total += qlen
    return total


def router(plan, all_resident: bool = True):
    """The plan's batch router: ``(n, decode) -> (routed tokens, route, error)``.

    See :meth:`~hisparse_model.model.versions.VersionRules.router`.
    """
    return plan.rules.router(plan.knobs.attention_backend, plan.swap_capacity, all_resident)


def routed_path(plan, n: int, decode: int, all_resident: bool = True):
    """(routed tokens, route, error) of a batch of ``n`` tokens, ``decode`` of them decodes."""
    return router(plan, all_resident)(n, decode)


def route_batch(plan, query_lens, all_resident: bool = True) -> tuple:
    """(decode tokens, routed tokens, route, error) of one batch (query lengths in the
    runner's order): the decode split with threshold q (:func:`decode_tokens`), then
    :func:`routed_path`."""
    dec = decode_tokens(list(query_lens), plan.max_decode_query_len,
                        plan.knobs.attention_backend in UNIFORM_DECODE_BACKENDS)
    return (dec, *routed_path(plan, sum(query_lens), dec, all_resident))
