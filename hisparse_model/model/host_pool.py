"""The HiSparse host pool (``host_pool_gib``): how many blocks it holds, and vLLM's refusal
of one too small for ``max_model_len``.

vLLM reads the pool's size from the HiSparseConnector's ``host_pool_gib`` (there is no
default: without the connector, or without the key, the engine core refuses to size
the KV cache; vllm/v1/hisparse/layout.py:85-88 `HiSparse requires HiSparseConnector
with host_pool_gib`, vllm/config/kv_transfer.py:41-43 `HiSparseConnector requires
host_pool_gib`) and turns it into bytes, ``int(host_pool_gib * 2**30)``
(vllm/v1/hisparse/layout.py:88 `return int(host_pool_gib * 2**30)`).  One host block
holds a 64-token page of the host source group: every sparse-attention layer's row
(``kv_layout.py``: the served model's layers, its row format, the stride a shared
tensor-parallel pool rounds to the OS page); the pool holds ``bytes // stride`` blocks
(vllm/v1/hisparse/layout.py:243 `host_num_blocks = host_budget // host_block_stride`).
The fix PR's tiny model: 8 target layers of 576 bf16 values a token, 589,824 bytes
(663,552 with the MTP layer); the H200 logged ``HiSparse HMA: 1.0 GiB host source (1820
blocks)`` without MTP and 1618 blocks with it (``tests/test_host_pool.py`` reads every
recorded log).  DeepSeek-V3.2's 61 layers: 4,497,408 bytes in bf16, 2,561,024 in
``fp8_ds_mla`` (``tests/test_layout_recordings.py``: the H100 start-ups that logged them).

Every computed page needs a host block, so vLLM refuses a pool that cannot hold one
``max_model_len`` request besides the null block and a copy-on-write tail:
``cdiv(max_model_len, 64) + 2`` blocks (vllm/v1/hisparse/layout.py:249-254
`min_host_blocks = cdiv(vllm_config.model_config.max_model_len, gpu_block_size) + 2`),
after the GPU pool's admission check, when the engine core sizes the KV cache.  The same
in 0.32.0, 0.33.0 and 0.34.0 (vllm/v1/hisparse/layout.py:255-259@0.34.0 `increase host_pool_gib.`).

Serving: every computed page takes a host block of the request
(vllm/v1/core/single_type_kv_cache_manager.py:2242-2243 `Every page gets a host block`),
and a request is admitted only when the host pool's free blocks cover its whole prompt
(vllm/v1/core/kv_cache_manager.py:519-535 `if full_sequence_must_fit:`), the host group
answering with an impossible count when they do not
(vllm/v1/core/single_type_kv_cache_manager.py:2303-2306 `return self.coordinator.gpu_pool.num_gpu_blocks + 1`):
short of host blocks, vLLM holds requests back or preempts, which the model does not
model.  :class:`HostUse` bounds what the requests of a schedule can hold and says where
the pool might run short; the model then declines to answer rather than guess.

What the model does not cover: whether the machine's RAM can pin the pool (vLLM refuses
one above 95 % of the available memory, vllm/v1/hisparse/runtime.py:190-199
`def check_hisparse_host_memory`).
"""

from __future__ import annotations

from .kv_layout import Layout, layout
from .reproduction import BLOCK_SIZE

GIB = 2**30
SPARE_BLOCKS = 2  # the null block and a copy-on-write tail


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def host_block_bytes(lay: Layout) -> int:
    """Bytes of one host block: a 64-token page of every sparse-attention layer's rows."""
    return lay.host_block_bytes


def host_blocks(gib: float, lay: Layout) -> int:
    """Blocks a ``gib``-GiB host pool holds with this layout."""
    return int(gib * GIB) // lay.host_block_bytes


def blocks_needed(max_model_len: int) -> int:
    """The fewest host blocks vLLM starts with: one max_model_len request, null block, tail."""
    return _cdiv(max_model_len, BLOCK_SIZE) + SPARE_BLOCKS


def gib_for_blocks(need: int, lay: Layout) -> float:
    """The smallest ``host_pool_gib`` (to the hundredth of a GiB) holding ``need`` blocks."""
    gib = _cdiv(need * lay.host_block_bytes * 100, GIB) / 100
    while host_blocks(gib, lay) < need:  # the float's rounding, at most a step
        gib = round(gib + 0.01, 2)
    return gib


def smallest_pool_gib(max_model_len: int, lay: Layout) -> float:
    """The smallest ``host_pool_gib`` (to the hundredth of a GiB) vLLM starts with."""
    return gib_for_blocks(blocks_needed(max_model_len), lay)


def host_refusal(knobs) -> str | None:
    """vLLM's refusal of a host pool too small for one ``max_model_len`` request, or None."""
    lay, length = layout(knobs), knobs.max_model_len
    have, need = host_blocks(knobs.host_pool_gib, lay), blocks_needed(length)
    if have >= need:
        return None
    longest = max(have - SPARE_BLOCKS, 0) * BLOCK_SIZE
    shorter = f", or max_model_len at most {longest}" if longest else ""
    return (f"host_pool_gib: {knobs.host_pool_gib:g} GiB holds {have} host blocks of "
            f"{lay.host_block_bytes:,} bytes ({lay.describe()}), but max_model_len ({length}) "
            f"needs {need} (cdiv({length}, {BLOCK_SIZE}) + {SPARE_BLOCKS}), so vLLM refuses to "
            f"start (\"HiSparse host pool has {have} blocks but max_model_len needs {need}; "
            f"increase host_pool_gib.\"); set host_pool_gib to at least "
            f"{smallest_pool_gib(length, lay):g}{shorter}")


class HostPoolShort(ValueError):
    """The model declines: the host pool may run short by engine step ``step``; ``need``
    host blocks (the null block included) would hold the schedule, ``k`` the drafts."""

    def __init__(self, text: str, step: int, need: int = 0, lay: Layout | None = None):
        super().__init__(text)
        self.step, self.need, self.lay = step, need, lay

    def __reduce__(self):  # raised again in the parent of a forked seed (answers/forked.py)
        return HostPoolShort, (str(self), self.step, self.need, self.lay)

    def needing(self, need: int, why: str) -> "HostPoolShort":
        """The same refusal suggesting the pool for ``need`` blocks (what ``why`` needs)."""
        head = str(self).rpartition(": set host_pool_gib to at least ")[0]
        return HostPoolShort(f"{head}: set host_pool_gib to at least "
                             f"{gib_for_blocks(need, self.lay):g} ({why})", self.step, need,
                             self.lay)


class HostUse:
    """The host blocks a schedule's requests can hold, engine step by engine step: a bound.

    A request admitted at a step needs the host pool to cover its whole prompt
    (``cdiv(prompt, 64)`` blocks, prefix hits included); once scheduled it holds the
    blocks of every token allocated so far, ``cdiv(computed + scheduled + K, 64)``
    (the drafter's K lookahead slots), and the model adds a copy-on-write tail of one
    block.  It holds them until two steps after the step whose output finishes it (the
    output is processed after the next step is scheduled, and a block an in-flight step
    may still write is freed a step later: vllm/v1/core/sched/scheduler.py:2701-2710
    `def _free_request_blocks`).  While the sum stays within the pool, less the null
    block, no admission and no allocation can find the host pool short, so the schedule
    is the model's; :attr:`short` is the first step where it does not hold.
    """

    def __init__(self, knobs, prompt_lens, cache=None):
        """``prompt_lens``: each request's prompt length, by its index; ``cache``: the
        scheduler's cached prefix blocks (``schedule/host_cache.py``), evicted after each
        step to the room the requests leave in the pool (None: never evicted)."""
        self.k, self.gib, self.limit = knobs.num_speculative_tokens, knobs.host_pool_gib, \
            knobs.max_model_len
        self.lay = layout(knobs)
        self.blocks = host_blocks(knobs.host_pool_gib, self.lay)
        self.prompts = list(prompt_lens)
        self.holds: dict = {}  # live request -> blocks it holds (tail included)
        self.until: dict = {}  # finished request -> the last engine step it holds them
        self.open: list = []  # steps whose output is not processed yet (finished unfilled)
        self.held = 0
        self.peak = 0
        self.short: tuple | None = None  # (engine step, blocks held) where the bound fails
        self.cache = cache

    def step(self, st) -> None:
        """Account for one scheduled step (``index``, ``scheduled``, ``num_computed_before``,
        ``finished``, ``returned_at``)."""
        # a step's ``finished`` is filled when its output is processed (Step.returned_at),
        # under async scheduling after the step is handed over: read it then
        for p in [p for p in self.open if p.returned_at is not None]:
            for i in p.finished:
                self.until[i] = p.index + 2
        self.open = [p for p in self.open if p.returned_at is None]
        for i in [i for i, last in self.until.items() if last < st.index]:
            del self.until[i]
            self.held -= self.holds.pop(i)
        # the hottest loop of a long replay (every running request, every step): locals only
        holds, before, k, limit, held = self.holds, st.num_computed_before, self.k, \
            self.limit, self.held
        for i, n in st.scheduled.items():
            tokens = before[i] + n + k
            blocks = _cdiv(tokens if tokens < limit else limit, BLOCK_SIZE) + 1  # + the tail
            had = holds.get(i)
            if had is None:  # admitted now: the whole prompt must fit
                prompt = _cdiv(self.prompts[i], BLOCK_SIZE) + 1
                holds[i] = now = blocks if blocks > prompt else prompt
                held += now
            elif blocks > had:  # a request never gives blocks back while it runs
                holds[i] = blocks
                held += blocks - had
        self.held = held
        if getattr(st, "returned_at", 0) is None:  # processed later: read finished then
            self.open.append(st)
        for i in st.finished:
            self.until[i] = st.index + 2
        self.peak = max(self.peak, self.held)
        if self.short is None and self.held > self.blocks - 1:
            self.short = (st.index, self.held)
        if self.cache is not None:  # the null block, the blocks held, then cached prefixes
            self.cache.evict(self.blocks - 1 - self.held, st.index)

    def refusal(self, before: int | None = None, what: str = "this workload"
                ) -> HostPoolShort | None:
        """Why the model declines (the pool may run short at or before engine step
        ``before``, the crash; None: anywhere), or None."""
        if self.short is None or (before is not None and self.short[0] > before):
            return None
        step, held = self.short
        return HostPoolShort(f"host_pool_gib: {self.gib:g} GiB ({self.blocks} host blocks, "
                f"{self.lay.describe()}) may run short "
                f"serving {what}: by engine step {step} its requests can hold {held} blocks "
                "(the blocks of every token allocated, a whole prompt at admission, and a "
                "copy-on-write tail each, until two steps after a request finishes), more "
                f"than the {self.blocks - 1} besides the null block; the model assumes the host "
                "pool never runs short (vLLM would hold requests back or preempt them): set "
                f"host_pool_gib to at least {gib_for_blocks(self.peak + 1, self.lay):g}", step,
                self.peak + 1, self.lay)
