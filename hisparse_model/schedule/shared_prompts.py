"""Prompts that share content block by block, as a trace's ``hash_ids`` say, without storing them.

Mooncake's traces give each request ``hash_ids``: one id per 512-token block of its prompt,
equal ids meaning equal content (a shared system prompt, the conversation so far), which
vLLM's prefix caching reuses.  A :class:`BlockPrompt` is such a prompt: ``n`` tokens whose
512-token block ``b`` is content ``blocks[b]``: tokens ``(3000 + h // 1000, 4000 + h %
1000)`` then the fix PR's pattern (``100 + j`` at position j of the block).  Two blocks of
different ids differ in their first 64-token piece, so the engine's 64-token block keys
(which chain: a key covers every token before it) are equal exactly where two prompts'
``hash_ids`` agree from the start; a prompt's later pieces are every block's, which the
chaining keeps apart.  The head tokens (3000-4999) are none of the fix PR's (100 …) or of a
``DistinctPrompt``'s (1000-2999), so these prompts share nothing with those.

A workload names one as ``{"prompt_len": n, "prompt_blocks": [h0, h1, ...]}``.
"""

from __future__ import annotations

import functools
from abc import abstractmethod
from collections.abc import Sequence

from ..model.reproduction import PROMPT_FIRST_TOKEN_ID

TRACE_BLOCK = 512  # tokens per hash_ids block (Mooncake's)
BLOCK_IDS = 10**6  # content ids 0 .. 999,999 (two head tokens encode one, base 1000)
_HEAD = (3000, 4000)
PIECE = 64  # the engine's KV block, the unit of its prefix-cache keys


class LazyPrompt(Sequence):
    """A prompt's token ids computed from a few numbers, never stored (an hour of traffic is
    tens of thousands of prompts: as tuples they would take hundreds of MB).  A subclass
    gives ``n``, ``_token(i)`` and ``_ident()`` (what two equal prompts of it share); it
    compares and hashes as the tuple of its tokens."""

    __slots__ = ()
    n: int

    @abstractmethod
    def _token(self, i: int) -> int:
        """Token ``i`` (0 <= i < n)."""

    @abstractmethod
    def _ident(self) -> tuple:
        """What two equal prompts of this kind share (and unequal ones do not)."""

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return tuple(self[j] for j in range(*i.indices(self.n)))
        if i < 0:
            i += self.n
        if not 0 <= i < self.n:
            raise IndexError(i)
        return self._token(i)

    def __iter__(self):
        for i in range(self.n):
            yield self._token(i)

    def __eq__(self, other) -> bool:
        if type(other) is type(self):
            return self._ident() == other._ident()
        try:
            return len(other) == self.n and tuple(other) == tuple(self)
        except TypeError:
            return NotImplemented

    def __hash__(self) -> int:  # equal to the tuple of the same tokens, as __eq__ says
        return hash(tuple(self))


class BlockPrompt(LazyPrompt):
    """The token ids of an ``n``-token prompt made of content blocks ``blocks``."""

    __slots__ = ("blocks", "n")

    def __init__(self, blocks: tuple[int, ...], n: int):
        self.blocks, self.n = tuple(blocks), n

    def _token(self, i: int) -> int:
        b, j = divmod(i, TRACE_BLOCK)
        return head(self.blocks[b])[j] if j < 2 else PROMPT_FIRST_TOKEN_ID + j

    def _ident(self) -> tuple:
        return self.blocks, self.n

    def __repr__(self) -> str:
        return f"BlockPrompt(blocks={list(self.blocks)}, n={self.n})"

    def keys(self) -> tuple:
        """The chained keys of its full 64-token pieces, the values
        ``prefix_keys.block_keys`` gives for its tokens, from cached piece hashes."""
        keys, prev = [], None
        for p in range(self.n // PIECE):
            b, k = divmod(p * PIECE, TRACE_BLOCK)
            prev = hash((prev, _piece_hash(self.blocks[b] if k == 0 else None, k // PIECE)))
            keys.append(prev)
        return tuple(keys)


def head(h: int) -> tuple[int, int]:
    return (_HEAD[0] + h // 1000, _HEAD[1] + h % 1000)


@functools.lru_cache(maxsize=65536)
def _piece_hash(h: int | None, k: int) -> int:
    """hash() of piece k (64 tokens) of a block: the first names its content id ``h``."""
    start = PROMPT_FIRST_TOKEN_ID + PIECE * k
    tokens = tuple(range(start, start + PIECE))
    return hash(head(h) + tokens[2:] if k == 0 else tokens)


def check_blocks(blocks, n: int, where: str) -> tuple[int, ...]:
    """``blocks`` as a prompt of ``n`` tokens holds them, else ValueError naming ``where``."""
    if not isinstance(blocks, list) or not all(
            isinstance(h, int) and not isinstance(h, bool) and 0 <= h < BLOCK_IDS
            for h in blocks):
        raise ValueError(f"{where}: prompt_blocks must be a list of block ids 0 .. "
                         f"{BLOCK_IDS - 1:,}")
    need = -(-n // TRACE_BLOCK)
    if len(blocks) != need:
        raise ValueError(f"{where}: {len(blocks)} prompt_blocks, but prompt_len {n} fills "
                         f"{need} blocks of {TRACE_BLOCK} tokens")
    return tuple(blocks)
