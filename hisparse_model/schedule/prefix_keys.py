"""Prefix-cache keys of a request's prompt: what the scheduler model looks a prompt up by.

vLLM's prefix cache keys each full KV block (64 tokens here) by a hash that chains over every
block before it, so two prompts share keys exactly as far as they share tokens from the
start.  :func:`block_keys` computes them from the tokens; a lazy prompt (``DistinctPrompt``,
``BlockPrompt``) has them computed without building its tokens, the same values;
:func:`request_keys` gives every request's, each distinct prompt computed once.
"""

from __future__ import annotations

import functools

from .shared_prompts import BlockPrompt
from .workload import DistinctPrompt


def block_keys(ids) -> tuple:
    """Chained keys of the full 64-token blocks (a block's key covers all before it): a
    function of the tokens alone, so equal prompts and equal prefixes have equal keys."""
    keys, prev = [], None
    for j in range(len(ids) // 64):
        prev = hash((prev, hash(ids[64 * j:64 * j + 64])))
        keys.append(prev)
    return tuple(keys)


def _distinct_keys(ids: DistinctPrompt) -> tuple:
    """:func:`block_keys` of a :class:`~hisparse_model.schedule.workload.DistinctPrompt`, the same
    values, without building the prompt: its blocks after the first are every such prompt's
    (their hashes computed once, :func:`_tail_hash`)."""
    n = len(ids) // 64
    if not n:
        return ()
    prev = hash((None, hash(ids.block(0))))
    keys = [prev]
    for j in range(1, n):
        prev = hash((prev, _tail_hash(j)))
        keys.append(prev)
    return tuple(keys)


@functools.lru_cache(maxsize=8192)
def _tail_hash(j: int) -> int:
    return hash(DistinctPrompt.tail_block(j))


def prompt_keys(ids) -> tuple:
    """:func:`block_keys` of one lazy prompt (``DistinctPrompt``, ``BlockPrompt``), computed
    without its tokens: a streamed replay's requests, keyed one by one as they arrive."""
    return _distinct_keys(ids) if isinstance(ids, DistinctPrompt) else ids.keys()


class LazyKeys:
    """:func:`prompt_keys` of one lazy prompt, computed when the scheduler first reads them
    (its admission): a request still waiting holds its prompt, not its keys, so an overloaded
    server's queue costs a few objects a request, not one key per 64 tokens."""

    __slots__ = ("_prompt", "_keys")

    def __init__(self, prompt):
        self._prompt, self._keys = prompt, None

    def _get(self) -> tuple:
        if self._keys is None:
            self._keys, self._prompt = prompt_keys(self._prompt), None
        return self._keys

    def __len__(self) -> int:
        return len(self._get())

    def __getitem__(self, index):
        return self._get()[index]

    def __iter__(self):
        return iter(self._get())

    def __bool__(self) -> bool:
        return bool(self._get())


def request_keys(workload) -> list[tuple]:
    """Each request's block keys (:func:`block_keys`), computed once per distinct prompt."""
    memo: dict[tuple, tuple] = {}
    out = []
    for r in workload.requests:
        ids = r.prompt_token_ids
        if isinstance(ids, DistinctPrompt):
            out.append(_distinct_keys(ids))
            continue
        if isinstance(ids, BlockPrompt):  # a trace's shared blocks: keys from piece hashes
            out.append(ids.keys())
            continue
        ids = tuple(ids)
        if ids not in memo:
            memo[ids] = block_keys(ids)
        out.append(memo[ids])
    return out
