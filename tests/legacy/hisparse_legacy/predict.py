"""One call that predicts everything: sizes, capture sizes, start-up and each prompt.

:func:`predict` is the model's front door; the notebooks, the command line,
the recordings check and the benchmarks all go through it.  Each prompt is
predicted as if served by a healthy engine (the engine would be dead after a
start-up crash; the model still says what each prompt would do).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .batches import Batch
from .capture_sizes import default_cudagraph_capture_sizes, resolved_cudagraph_mode
from .knobs import Knobs
from .requests import prompt_batches, validate_prompt_lens
from .sizes import Sizes, sizes
from .startup import startup_batches


@dataclass(frozen=True)
class Context:
    """What every stage of the model needs: the knobs and what they resolve to."""

    knobs: Knobs
    sizes: Sizes
    cudagraph_mode: str  # resolved mode, "NONE" under enforce_eager
    capture_sizes: tuple[int, ...]


@dataclass
class PromptOutcome:
    n: int
    batches: list[Batch]

    @property
    def error(self) -> str | None:
        return next((b.error for b in self.batches if b.error), None)

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class Prediction:
    knobs: Knobs
    sizes: Sizes
    cudagraph_mode: str
    capture_sizes: list[int]
    startup: list[Batch]
    prompts: list[PromptOutcome] = field(default_factory=list)

    @property
    def startup_error(self) -> str | None:
        return next((b.error for b in self.startup if b.error), None)

    @property
    def startup_ok(self) -> bool:
        return self.startup_error is None

    @property
    def startup_crash_batch(self) -> Batch | None:
        return next((b for b in self.startup if b.error), None)


def context(knobs: Knobs) -> Context:
    sz = sizes(knobs)
    mode = resolved_cudagraph_mode(
        knobs.vllm_version,
        knobs.attention_backend,
        enforce_eager=knobs.enforce_eager,
        requested=knobs.cudagraph_mode,
    )
    caps = default_cudagraph_capture_sizes(
        knobs.vllm_version,
        max_num_seqs=knobs.max_num_seqs,
        max_num_batched_tokens=sz.max_num_batched_tokens,
        num_speculative_tokens=knobs.num_speculative_tokens,
        enforce_eager=knobs.enforce_eager,
        cudagraph_mode=mode,
    )
    return Context(knobs, sz, mode, tuple(caps))


def predict(knobs: Knobs, prompt_lens=()) -> Prediction:
    lens = validate_prompt_lens(prompt_lens, knobs.max_model_len)
    ctx = context(knobs)
    return Prediction(
        knobs=knobs,
        sizes=ctx.sizes,
        cudagraph_mode=ctx.cudagraph_mode,
        capture_sizes=list(ctx.capture_sizes),
        startup=list(startup_batches(ctx)),
        prompts=[PromptOutcome(n, prompt_batches(ctx, i, n)) for i, n in enumerate(lens)],
    )
