"""One call that predicts everything: plan, start-up and each prompt served alone.

:func:`predict` is the model's front door; the notebooks, the command line,
the recordings check and the benchmarks all go through it.  Prompts are served
one at a time; once start-up or a prompt crashes, the engine is dead, so every
later prompt has :attr:`PromptOutcome.ran` False, as the live runs record
(``tests/recorded/v0.31.0-stock-s2.json``: the prompt after the crash is not run).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter

from ..model.batches import Batch, last_prefill_route
from ..model.knobs import Knobs
from ..model.kv_pool import serving_shortfall
from ..model.plan import Plan, plan
from ..model.reproduction import MAX_TOKENS
from ..schedule.serving import PromptWalk, _may_share_a_block, cached_prefixes, validate_prompt_lens
from ..model.startup import startup_batches


_ERROR = attrgetter("error")  # a Batch's error


@dataclass(frozen=True)
class Sizes:
    max_num_batched_tokens: int  # B, tokens per engine step
    max_decode_query_len: int  # q, tokens per decode request
    swap_capacity: int  # C = min(B, S * q), rows
    workspace_rows: int  # W = C + 1, rows


@dataclass
class PromptOutcome:
    n: int
    batches: list[Batch]
    ran: bool = True  # False: the engine died (at start-up or on an earlier prompt)
    died_at: str | None = None  # what killed the engine: "start-up", "prompt 2, of 3 tokens"

    @property
    def error(self) -> str | None:
        return next((b.error for b in self.batches if b.error), None)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def ran_batches(self) -> list[Batch]:
        """The batches that run: none when the engine died before the prompt, else up to and
        with the first that raises (the engine dies there, so no later batch runs)."""
        if not self.ran:
            return []
        bad = next((i for i, b in enumerate(self.batches) if b.error), len(self.batches) - 1)
        return list(self.batches[:bad + 1])

    @property
    def prefill_route(self) -> str | None:
        """The route of its last prefill chunk (:func:`last_prefill_route`)."""
        return last_prefill_route(self.batches)


@dataclass
class Prediction:
    knobs: Knobs
    plan: Plan
    startup: list[Batch]
    prompts: list[PromptOutcome] = field(default_factory=list)

    @property
    def sizes(self) -> Sizes:
        p = self.plan
        return Sizes(p.max_num_batched_tokens, p.max_decode_query_len, p.swap_capacity,
                     p.workspace_rows)

    @property
    def cudagraph_mode(self) -> str:
        return self.plan.cudagraph_mode

    @property
    def capture_sizes(self) -> list[int]:
        return list(self.plan.capture_sizes)

    @property
    def startup_crash_batch(self) -> Batch | None:
        return next((b for b in self.startup if b.error), None)

    @property
    def startup_error(self) -> str | None:
        bad = self.startup_crash_batch
        return bad.error if bad else None

    @property
    def startup_ok(self) -> bool:
        return self.startup_error is None

    @property
    def crashes(self) -> bool:
        """Whether the engine dies at start-up or on any of the prompts."""
        return not self.startup_ok or any(p.error for p in self.prompts)


def _checked(knobs: Knobs, prompt_lens) -> tuple[list[int], Plan]:
    """(prompt lengths, plan); ValueError where vLLM refuses the prompts or the knobs, or the
    KV pool may run short, in that order."""
    lens = validate_prompt_lens(prompt_lens, knobs.max_model_len)
    p = plan(knobs)
    short = serving_shortfall(knobs, [(n, MAX_TOKENS) for n in lens],
                              sequential=not knobs.enable_prefix_caching)
    if short:
        raise ValueError(short)
    return lens, p


def predict(knobs: Knobs, prompt_lens=()) -> Prediction:
    lens, p = _checked(knobs, prompt_lens)
    startup = list(startup_batches(p))
    alive = not any(map(_ERROR, startup))  # no start-up batch raised
    hits = cached_prefixes(p, lens)
    walk = PromptWalk(p)
    died_at = None if alive else "start-up"
    prompts = []
    for i, (n, hit) in enumerate(zip(lens, hits)):
        out = PromptOutcome(n, walk.batches(i, n, hit), died_at is None, died_at)
        prompts.append(out)
        if died_at is None and out.error:
            died_at = f"prompt {i + 1}, of {n} tokens"  # numbered for people, from 1
    return Prediction(knobs, p, startup, prompts)


def crashes(knobs: Knobs, prompt_lens=()) -> bool:
    """``predict(knobs, prompt_lens).crashes``, raising where it raises, with less work (the
    advice asks it of thousands of candidates): the same refusals in the same order, then
    start-up; nothing served can raise where the routing cannot
    (:attr:`~hisparse_model.model.versions.VersionRules.crashes`); the prompts are walked up to the
    first that raises, each (length, hit) once (a prompt's batches depend on nothing else), and
    the prefix-cache hits are worked out only once a prompt may share a block with an earlier
    one (until then every hit is 0, as :func:`cached_prefixes` says).
    ``tests/test_advice_speed.py`` compares it with ``predict`` on a table of cases."""
    lens, p = _checked(knobs, prompt_lens)
    if any(map(_ERROR, startup_batches(p))):
        return True
    if not p.rules.crashes:
        return False
    walk = PromptWalk(p)
    hits = None
    seen = set()  # (tokens, hit) of the prompts walked: a prompt's batches depend on nothing else
    for i, n in enumerate(lens):
        if hits is None and knobs.enable_prefix_caching and _may_share_a_block(lens[:i + 1]):
            hits = cached_prefixes(p, lens)
        shape = (n, hits[i] if hits else 0)
        if shape in seen:
            continue
        seen.add(shape)
        if any(map(_ERROR, walk.batches(i, *shape))):
            return True
    return False
