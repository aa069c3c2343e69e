"""The batches one prompt makes when it is served alone (the fix PR's loop).

``llm.generate`` with one prompt of n tokens and ``max_tokens=8``:

* chunked prefill (on by default in the V1 scheduler): chunks of
  min(remaining, B) tokens, one per step;
* then decode steps of q tokens (1, or 1 sampled + K drafts under MTP), until
  8 tokens are out or the sequence reaches max_model_len.  The last prefill
  chunk samples the first output token, so there are 7 decode steps.

The routing sees the real token count: PIECEWISE and eager batches build
unpadded attention metadata, and a FULL decode graph replays without running
Python, so nothing is routed anew.  With one request at a time the scheduler
never hands a live request's pages to another, so every page stays resident
(vllm/v1/hisparse/coordinator.py:654-670 `all_context_pages_resident`).
Several requests at once are the workload simulation's business (``simulate``).

With prefix caching on, an earlier prompt's full 64-token blocks shorten a
later prompt's prefill; :func:`cached_prefixes` asks the scheduler model
(``scheduler.py``) how many tokens hit, serving the prompts one after another
as ``llm.generate`` does.
"""

from __future__ import annotations

import functools

from ..model.batches import Batch, new_batch
from ..model.dispatch import graph
from ..model.plan import Plan
from ..model.reproduction import BLOCK_SIZE, MAX_TOKENS
from ..model.routing import router
from .scheduler import schedule
from .scheduler_config import SchedulerConfig, scheduler_config
from .workload import Workload


class PromptWalk:
    """The steps of prompts served alone under one plan; what they share is worked out once."""

    def __init__(self, plan: Plan):
        q = plan.max_decode_query_len
        self.plan = plan
        self.route = router(plan)  # one prompt alone: every page stays resident
        self.runner = "both" if plan.knobs.num_speculative_tokens else "target"
        # every decode step is one request of q tokens, a uniform decode batch:
        # its dispatch and routing are the same for every prompt
        self.decode_mode = graph(plan, q, 1, q)[0]
        self.decode_outcome = self.route(q, q)
        self._chunks: dict[tuple[int, bool], tuple] = {}

    def chunk(self, c: int, extends: bool) -> tuple:
        """(mode, decode tokens, routed, path, error) of a prefill chunk of ``c`` tokens;
        ``extends``: it is one token over existing context, which may replay a decode graph.
        The same for every prompt that has such a chunk: worked out once per walk."""
        hit = self._chunks.get((c, extends))
        if hit is None:
            mode = graph(self.plan, c, 1, c if extends else None)[0]
            dec = c if c <= self.plan.max_decode_query_len else 0  # computes like a decode
            hit = self._chunks[(c, extends)] = (mode, dec, *self.route(c, dec))
        return hit

    def decodes(self, n: int) -> int:
        """Decode forwards after a prompt of ``n`` tokens: 7, fewer near max_model_len."""
        return min(MAX_TOKENS - 1, self.plan.knobs.max_model_len - n - 1)

    def batches(self, index: int, n: int, cached: int = 0) -> list[Batch]:
        """The steps of prompt ``index``: ``n`` tokens, the first ``cached`` a prefix-cache hit."""
        b, q = self.plan.max_num_batched_tokens, self.plan.max_decode_query_len
        runner = self.runner
        num_chunks = -(-(n - cached) // b)  # prefill steps of at most B tokens
        out = []
        for i, start in enumerate(range(cached, n, b)):
            c = n - start if n - start < b else b  # tokens of this step: the rest, at most B
            label = f"prefill chunk {i + 1}/{num_chunks}" if num_chunks > 1 else "prefill"
            mode, dec, routed, path, error = self.chunk(c, c == 1 and (i > 0 or cached > 0))
            out.append(new_batch(("prompt", label, c, 1, dec, mode, routed, path, error, 1, index,
                                  runner)))
        steps = self.decodes(n)
        if steps > 0:
            # Under MTP the number of verify steps depends on how many drafts the
            # (dummy-weight) target accepts, so it is not a fixed number.
            forwards = None if self.plan.knobs.num_speculative_tokens else steps
            routed, path, error = self.decode_outcome
            out.append(new_batch(("prompt", "decode", q, 1, q, self.decode_mode, routed, path,
                                  error, forwards, index, runner)))
        return out

    def ends(self, n: int) -> tuple[bool, str | None]:
        """(whether a step of a lone ``n``-token prompt errs, the route of its last prefill
        chunk): what :meth:`batches` says of it, read from its distinct steps only.  Its
        chunks are ``(n - 1) // B`` of B tokens (a one-token one after the first extends)
        and then the rest; the decode steps share one outcome."""
        b = self.plan.max_num_batched_tokens
        full = (n - 1) // b  # chunks of B tokens before the last
        last = self.chunk(n - full * b, n - full * b == 1 and full > 0)
        steps = [last]
        if full:
            steps.append(self.chunk(b, False))  # the first chunk
        if full > 1:
            steps.append(self.chunk(b, b == 1))  # the chunks after it
        if self.decodes(n) > 0:
            steps.append((None, None, *self.decode_outcome))
        return any(step[4] for step in steps), last[3]


def cached_prefixes(plan: Plan, lens: list[int]) -> list[int]:
    """Prefix-cache hit, in tokens, of each prompt when they are served one after another."""
    knobs = plan.knobs
    if not knobs.enable_prefix_caching or not _may_share_a_block(lens):
        return [0] * len(lens)
    return list(served_one_after_another(scheduler_config(knobs, plan), tuple(lens)))


@functools.lru_cache(maxsize=1024)
def served_one_after_another(config: SchedulerConfig, lens: tuple[int, ...]) -> tuple[int, ...]:
    """The scheduler model's hits for ``lens`` served one after another under ``config``.

    Memoised: the hits depend on the scheduler's configuration and the prompts only, and
    a dashboard asks again for every version and for every move of an unrelated control.
    One run of the engine loop (:class:`_OneAfterAnother` lets each prompt in when the one
    before it is done); :func:`served_one_after_another_exhaustive` schedules each prefix of
    the prompts anew (the tests compare the two).
    """
    from dataclasses import replace

    s, b, k = config.max_num_seqs, config.max_num_batched_tokens, config.num_speculative_tokens
    family = REUSABLE.setdefault((replace(config, max_num_seqs=1, max_num_batched_tokens=1),
                                  lens), [])
    for s0, b0, top, peak, free_s, free_b, hits in family:
        # the run under (s0, b0) is the run under (s, b) when neither bound forced a decision
        # and the other bounds hold what it took (the argument of verdict.py's docstring, 6)
        if (s == s0 or (free_s and peak <= s)) and (b == b0 or (free_b and top <= b - k - 1)):
            return hits
    if len(REUSABLE) > 256:
        REUSABLE.clear()
    run = _served_in_one_run(config, lens)
    if run is None:
        return served_one_after_another_exhaustive(config, lens)
    hits, top, peak, free_s = run
    family.append((s, b, top, peak, free_s, top <= b - k - 1, hits))
    return hits


# (config with S = B = 1, prompts) -> runs that may stand for other (S, B):
# (S, B, most tokens of a step, most requests running, S never refused a waiting request,
#  B never forced a decision, hits)
REUSABLE: dict[tuple, list] = {}


def _served_in_one_run(config: SchedulerConfig, lens: tuple[int, ...]):
    """(hits, most tokens of a step, most requests running, S never refused a waiting request)
    from one engine loop, or None where a prompt's predecessor was seen done too late."""
    from .scheduler import _Sim
    from .workload import Workload

    far = _OneAfterAnother.NEVER
    work = Workload.from_json([{"prompt_len": n, "arrival_step": far} for n in lens])
    sim = _Sim(config, work, None)
    arrivals = _OneAfterAnother(sim, len(lens))
    hits: dict[int, int] = {}
    top = 0
    try:
        for st in sim.lazily(work, arrivals):
            top = max(top, st.num_tokens)
            for i, before in st.num_computed_before.items():
                hits.setdefault(i, before)  # the first step that schedules prompt i
            if len(hits) == len(lens):
                return (tuple(hits[i] for i in range(len(lens))), top, sim.peak,
                        sim.seqs_bound_at is None)
    except _Late:
        pass
    return None


class _Late(Exception):
    """A prompt's predecessor was seen done only after the step it was due to join."""


class _OneAfterAnother:
    """Arrivals of prompts served one after another, decided as the engine loop runs: prompt
    i + 1 joins two engine steps after the step whose output finishes prompt i (what
    :func:`served_one_after_another_exhaustive` gives each prefix).  The loop looks up every
    engine step (``get``) and, when idle, asks for the next arrival (``next_after``)."""

    NEVER = 1 << 62  # an engine step never reached (the workload's own arrival steps)

    def __init__(self, sim, count: int):
        self.sim, self.count, self.next, self.seen = sim, count, 0, 0

    def get(self, step, default=()):
        if self.next >= self.count:
            return default
        due = 0 if self.next == 0 else self._done(self.next - 1)
        if due is None or due > step:
            return default
        if due < step:
            raise _Late
        self.next += 1
        return [self.next - 1]

    def next_after(self, step: int) -> int | None:
        """The step the next prompt joins at, once its predecessor is seen done (the engine
        loop asks when it is idle); None: none is due, and the loop ends."""
        if self.next >= self.count:
            return None
        due = 0 if self.next == 0 else self._done(self.next - 1)
        return due if due is not None and due > step else None

    def _done(self, i: int) -> int | None:
        """Two engine steps after the step whose output finishes prompt ``i``, if seen yet."""
        steps = self.sim.steps
        for j in range(self.seen, len(steps)):
            if i in steps[j].finished:
                self.seen = j
                return steps[j].index + 2
        return None


def served_one_after_another_exhaustive(config: SchedulerConfig,
                                        lens: tuple[int, ...]) -> tuple[int, ...]:
    """:func:`served_one_after_another`, each prefix of the prompts scheduled anew."""
    from .scheduler import schedule
    from .workload import Workload

    requests: list[dict] = []
    hits = []
    arrival = 0
    for i, n in enumerate(lens):
        requests.append({"prompt_len": n, "arrival_step": arrival})
        steps = schedule(config, Workload.from_json(requests))
        hits.append(next(s.num_computed_before[i] for s in steps if i in s.scheduled))
        done = next(s.index for s in steps if i in s.finished)
        arrival = done + 2  # its output lands one step later; generate() then returns
    return tuple(hits)


def _may_share_a_block(lens: list[int]) -> bool:
    """Whether some prompt can share a full block with an earlier one: its first n - 1
    tokens (the last is always computed) and a longer earlier prompt both span a block."""
    spans = False  # whether an earlier prompt spans a full block
    for n in lens:
        if spans and n - 1 >= BLOCK_SIZE:
            return True
        spans = spans or n >= BLOCK_SIZE
    return False


def validate_prompt_lens(prompt_lens, max_model_len: int) -> list[int]:
    lens = []
    for i, n in enumerate(prompt_lens):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"prompt_lens: prompt {i + 1} must be an integer >= 1, got {n!r}")
        if n >= max_model_len:
            raise ValueError(
                f"prompt_lens: a prompt of {n} tokens leaves no room to generate "
                f"under max_model_len={max_model_len}"
            )
        lens.append(n)
    return lens
