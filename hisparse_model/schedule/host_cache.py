"""The host pool's cached prefix blocks and their eviction, least recently freed first.

A published host block (``_Sim.published``: a prefix key a later request can hit) stays in
vLLM's host pool after its request is done: the pool frees it to the *end* of its free
queue, where cached blocks wait in the order they were freed, while a freed block that was
never cached goes to the front (vllm/v1/core/block_pool.py:800 `FIFO reuse of cached blocks
for LRU eviction behavior`); a request's blocks are freed tail page first
(vllm/v1/core/single_type_kv_cache_manager.py:589 `free_blocks(reversed(`, and the
publication of a finished request's last pages, vllm/v1/hisparse/coordinator.py:788
`free_blocks(reversed(blocks))`).  A hit takes its blocks out of the queue
(vllm/v1/core/block_pool.py:755 `def touch`) until the hitting request frees them again.
A new block comes from the front (vllm/v1/core/block_pool.py:684 `popleft_n`), and a cached
block handed out is forgotten (vllm/v1/core/block_pool.py:692 `_maybe_evict_cached_block`):
so cached blocks are evicted only once every other block is in use, least recently freed
first.

:class:`HostCache` keeps that queue for the published keys: which live requests hold each
key (a hit, or a page the request computed and published), and the keys no live request
holds, in the order they were freed.  :meth:`HostCache.evict` forgets the oldest of them
while they and the blocks the requests hold fill more than the pool
(``host_pool.HostUse`` calls it after each step with the room its bound leaves).

Where it differs from vLLM, and why the answer says so: the blocks in use are the model's
bound (``HostUse``: a tail block per request, a finished request's blocks two steps longer),
never fewer than vLLM's, so the model evicts at the step vLLM does or earlier; and two
requests that computed the same prefix at once hold two blocks of one key in vLLM, one
entry here.  A prefix hit near the eviction edge may therefore be forgotten a little
earlier than on the server.  Without eviction (the pool holds every prefix ever published)
the model is exact as before; :attr:`HostCache.evicted` and :attr:`HostCache.first_step` say
whether and from when it evicted.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict


class HostCache:
    """Published prefix keys held by live requests, and the cached blocks no live request
    holds, in the order freed: a key each, and runs of blocks no later request can name
    (:meth:`forget`), counted, not keyed."""

    def __init__(self, published: dict):
        self.published = published  # the scheduler's key -> GPU copy recorded
        self.holders: dict = {}  # key -> live requests holding its block
        self.free: OrderedDict = OrderedDict()  # key no live request holds -> its place
        self.runs: list = []  # [first place, blocks]: nameless cached blocks, by place
        self.cached = 0  # blocks cached: the keys of ``free`` and the runs' blocks
        self.place = 0  # the free queue's next place (one a block freed)
        self.evicted = 0  # blocks evicted so far
        self.first_step: int | None = None  # the engine step of the first eviction
        self.trail: list | None = None  # [(engine step, evicted by then)] where kept (a list)

    def hold(self, keys) -> None:
        """A request holds these keys' blocks (hit or published by it)."""
        holders, free = self.holders, self.free
        for key in keys:
            holders[key] = holders.get(key, 0) + 1
            if key in free:
                del free[key]
                self.cached -= 1

    def release(self, keys) -> None:
        """A request frees the blocks of ``keys`` (those it held), tail first."""
        holders, free, published = self.holders, self.free, self.published
        for key in reversed(keys):
            left = holders.get(key, 0) - 1
            if left > 0:
                holders[key] = left
                continue
            holders.pop(key, None)
            if key in published:
                if key in free:
                    del free[key]
                    self.cached -= 1
                free[key] = self.place
                self.place += 1
                self.cached += 1

    def forget(self, keys) -> None:
        """``keys`` (a finished request's, freed) can never be named again (a prompt of its
        own): their cached blocks stay in the queue, where they were, as a count."""
        free, published = self.free, self.published
        places = []
        for key in keys:
            published.pop(key, None)
            place = free.pop(key, None)
            if place is not None:
                places.append(place)
        places.sort()
        first = 0
        for k in range(1, len(places) + 1):  # each stretch of consecutive places: one run
            if k == len(places) or places[k] != places[k - 1] + 1:
                self._run(places[first], k - first)
                first = k

    def _run(self, place: int, blocks: int) -> None:
        """Put a run of ``blocks`` nameless blocks from ``place`` among the others, merged
        with a neighbour it touches."""
        runs = self.runs
        i = bisect.bisect_left(runs, [place, 0])
        if i and runs[i - 1][0] + runs[i - 1][1] == place:
            runs[i - 1][1] += blocks
            i -= 1
        else:
            runs.insert(i, [place, blocks])
        if i + 1 < len(runs) and runs[i][0] + runs[i][1] == runs[i + 1][0]:
            runs[i][1] += runs.pop(i + 1)[1]

    def evict(self, room: int, step: int) -> None:
        """Evict the least recently freed cached blocks until at most ``room`` remain."""
        free, runs, published = self.free, self.runs, self.published
        over = self.cached - max(room, 0)
        if over <= 0:
            return
        if self.first_step is None:
            self.first_step = step
        self.cached -= over
        self.evicted += over
        if self.trail is not None:
            self.trail.append((step, self.evicted))
        while over:
            key = next(iter(free), None)
            if runs and (key is None or runs[0][0] < free[key]):
                take = min(over, runs[0][1])
                runs[0][0] += take
                runs[0][1] -= take
                if not runs[0][1]:
                    runs.pop(0)
                over -= take
                continue
            del free[key]
            published.pop(key, None)
            over -= 1

    def by_step(self, step: int | None) -> tuple:
        """``(blocks evicted, first step)`` up to engine step ``step`` (None: all), from the
        trail (kept by a caller that asks this: ``answers/simulate.py``)."""
        if step is None or self.trail is None:
            return self.evicted, self.first_step
        done = [n for s, n in self.trail if s <= step]
        return (done[-1], self.first_step) if done else (0, None)

    def state(self) -> tuple:
        """What later steps read (``verdict._state`` compares runs)."""
        return (tuple(self.free.items()), tuple(map(tuple, self.runs)),
                tuple(sorted(self.holders.items())), self.evicted)
