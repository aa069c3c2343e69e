"""The GPU KV pool in blocks: what vLLM admits, what caps the JIT warmup, what serving needs.

Only ``num_gpu_blocks_override`` (vLLM's knob) sets the pool; without it the pool
is what memory profiling leaves, which the model does not compute (it does not model
GPU memory): for the fix PR's tiny model about 590,000 blocks on the H200 at 30 %, far
more than anything below needs; for DeepSeek-V3.2 itself it depends on the weights'
share of the GPUs, so the answers say what binds at which pool size instead
(:func:`requests_held`).

HiSparse lays the model out as KV-cache groups that share one pool of blocks
(``kv_layout.py``; vllm/v1/hisparse/layout.py:124 `def _lay_out_hisparse_groups`): the
host source group (its blocks live in the host pool), the indexer group, and hot groups
(each packing as many layers as fit the indexer's page: one for the tiny model, 6 for
DeepSeek-V3.2's 61 in bf16) each with a resident group beside it.  Each group claims its
own blocks of the shared pool for every request:

* indexer and resident groups: ``cdiv(tokens, 64)`` blocks (at start vLLM reserves
  for a resident group only what can be in flight, see :func:`admission_blocks`);
* hot groups: a fixed ``cdiv(device_buffer_size, 64)`` blocks
  (vllm/v1/hisparse/layout.py:153 `hot_blocks_per_request`,
  vllm/v1/kv_cache_interface.py:439-440 `self.blocks_per_request * self.page_size`),
  where ``device_buffer_size = (q + 1) * index_topk``
  (vllm/v1/hisparse/runtime.py:122 `device_buffer_size = (max_query_len + 1) * model_top_k`).

Admission (vllm/v1/core/kv_cache_utils.py:2474 `def _max_memory_usage_bytes_from_groups`,
summing the groups' blocks for one ``max_model_len`` request; the null block is held
back, vllm/v1/core/kv_cache_utils.py:2780-2784 `check_memory`): the pool must hold
one request of ``max_model_len`` tokens besides the null block, else vLLM refuses to
start.  The JIT warmup (vllm/v1/worker/gpu/warmup.py:287-302 `max_blocks_per_req`)
sizes each of its requests for the worst case, ``q + 1`` prompt tokens plus 5 decode
steps of ``q`` (3 without speculation) plus the drafter's K lookahead slots, in every
group of the worker's KV-cache config, the host source group included, and runs at
most ``(pool - 1) // that`` requests (at least one).
"""

from __future__ import annotations

from .kv_layout import Layout, layout
from .reproduction import BLOCK_SIZE


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def request_blocks(tokens: int, lay: Layout) -> int:
    """Pool blocks a request holding ``tokens`` tokens of KV claims at most (all its groups)."""
    groups = lay.hot_groups
    return (1 + groups) * _cdiv(tokens, BLOCK_SIZE) + groups * lay.hot_blocks


def admission_blocks(max_model_len: int, b: int, lay: Layout) -> int:
    """Blocks vLLM reserves for one request when it checks the pool at start.

    The indexer group reserves ``max_model_len`` tokens; a resident group only what
    can be in flight, ``min(2 * B, max_model_len)`` (vllm/v1/kv_cache_interface.py:468-472
    `num_tokens = min(max_in_flight_tokens, max_model_len)`: two batches of B under
    async scheduling, vllm/config/vllm.py:592-602 `def max_concurrent_batches`); a
    hot group its fixed blocks.
    """
    resident = _cdiv(min(2 * b, max_model_len), BLOCK_SIZE)
    return _cdiv(max_model_len, BLOCK_SIZE) + lay.hot_groups * (resident + lay.hot_blocks)


def requests_held(blocks: int, tokens: int, lay: Layout) -> int:
    """Requests of ``tokens`` tokens a pool of ``blocks`` holds at once (the null block aside),
    each claiming every group's blocks (:func:`request_blocks`)."""
    return max(0, blocks - 1) // request_blocks(tokens, lay)


def pool_line(knobs, b: int, blocks: int | None = None) -> str:
    """The GPU KV pool in words: where it is known (``blocks``: num_gpu_blocks_override, or a
    start-up log's count), how many max_model_len requests it holds; else what it must hold
    to start and what one request claims, for the pool vLLM sizes from GPU memory."""
    lay, length = layout(knobs), knobs.max_model_len
    start = admission_blocks(length, b, lay) + 1
    per = request_blocks(length, lay)
    if blocks is None:
        return (f"sized by vLLM from the GPU's free memory (not modelled): it must hold "
                f"{start} blocks to start; a request of max_model_len ({length} tokens) "
                f"claims up to {per} blocks ({lay.hot_groups} hot groups of {lay.hot_blocks}, "
                f"{1 + lay.hot_groups} groups of cdiv(tokens, 64))")
    return (f"{blocks} blocks: {requests_held(blocks, length, lay)} requests of max_model_len "
            f"({length} tokens, up to {per} blocks each) at once; {start} to start")


def admission_refusal(knobs, b: int) -> str | None:
    """vLLM's refusal of a pool too small for one ``max_model_len`` request, or None."""
    n = knobs.num_gpu_blocks_override
    if n is None:
        return None
    lay = layout(knobs)
    need = admission_blocks(knobs.max_model_len, b, lay)
    if n - 1 >= need:
        return None
    return (f"num_gpu_blocks_override: {n} blocks cannot hold one request of max_model_len "
            f"({knobs.max_model_len}): it needs {need} blocks plus the null block "
            f"({lay.describe()}: {lay.hot_groups} hot groups), so vLLM "
            f"refuses to start (\"To serve at least one request with the model's max seq "
            f"len ...\"); set at least {need + 1}, or lower max_model_len")


def warmup_request_cap(knobs) -> int | None:
    """The most JIT-warmup requests the pool allows, or None when no pool is set."""
    n = knobs.num_gpu_blocks_override
    if n is None:
        return None
    k = knobs.num_speculative_tokens
    q = 1 + k
    steps = 5 if k else 3  # decode steps the warmup sizes its blocks for
    tokens = min((q + 1) + steps * q + k, knobs.max_model_len)  # + K lookahead slots
    per_request = layout(knobs).worker_groups * _cdiv(tokens, BLOCK_SIZE)
    return max(1, (n - 1) // per_request)


def serving_shortfall(knobs, requests, sequential: bool) -> str | None:
    """Why the pool might run short serving ``requests`` ((prompt, max_tokens) pairs), or None.

    The model assumes the pool never runs short (no eviction of cached blocks, no
    preemption).  That holds for sure when the pool, less the null block, covers the
    blocks of every request at once, or of the largest one when they run one after
    another and each frees its blocks (``sequential``: predict() without prefix
    caching); otherwise the model declines rather than guess.
    """
    n = knobs.num_gpu_blocks_override
    if n is None:
        return None
    k, lay = knobs.num_speculative_tokens, layout(knobs)
    need = [request_blocks(p + m + k, lay) for p, m in requests]  # + K lookahead slots
    total = max(need, default=0) if sequential else sum(need)
    if total <= n - 1:
        return None
    return (f"num_gpu_blocks_override: {n} blocks may run short serving these requests "
            f"(they can hold {total} blocks besides the null block); the model assumes "
            "the KV pool never runs short (no eviction, no preemption): raise it or leave "
            "it unset")
