"""What to change: the smallest single-knob changes that avoid every predicted crash.

For a configuration the model says crashes, :func:`advise` tries, one knob at
a time, the nearest values of ``max_num_seqs``, ``max_num_batched_tokens`` and
``num_speculative_tokens``, and the upgrade to 0.32.0, and keeps each change
under which the same scenario (start-up and the same prompts, or the same
workload) predicts no crash at all.  Every piece of advice is verified by
running the model again with the change; nothing is inferred from formulas.
"""

from __future__ import annotations

from collections.abc import Callable

from .knobs import Knobs


class SearchCapped(Exception):
    """Raised by a ``crashes`` check whose budget for this knob is spent: its search ends there.

    Not a ``ValueError`` (a value vLLM refuses, skipped): once the budget is spent no
    later value can be checked, so the search stops instead of building the rest.
    """


SEARCH = {  # knob -> how far to look, in each direction
    "max_num_seqs": 512,
    "max_num_batched_tokens": 2048,
    "num_speculative_tokens": 4,
}


def _nearest(knobs: Knobs, name: str, start: int, crashes: Callable[[Knobs], bool]):
    """The value of ``name`` closest to ``start`` (ties: the larger) under which nothing crashes."""
    for delta in range(1, SEARCH[name] + 1):
        for value in (start + delta, start - delta):
            try:
                changed = knobs.replace(**{name: value})
                if not crashes(changed):
                    return value
            except ValueError:  # vLLM would refuse this value: not advice
                continue
            except SearchCapped:  # no budget left for this knob: no advice for it
                return None
    return None


def _why(name: str, old, new, knobs: Knobs) -> str:
    if name == "vllm_version":
        return "0.32.0 routes on C (the fix), so swap_in never gets C + 1 tokens"
    from .plan import plan

    p = plan(knobs)
    return (f"{name} {old} -> {new}: C = {p.swap_capacity}, W = {p.workspace_rows}; "
            "re-run of the model: no batch of this scenario crashes")


def advise(knobs: Knobs, crashes: Callable[[Knobs], bool], plan_b: int) -> list[dict]:
    """``[{"change": {knob: value}, "why": "..."}]`` for a scenario that ``crashes(knobs)``."""
    out = []
    starts = {"max_num_seqs": knobs.max_num_seqs,
              "max_num_batched_tokens": knobs.max_num_batched_tokens or plan_b,
              "num_speculative_tokens": knobs.num_speculative_tokens}
    for name, start in starts.items():
        value = _nearest(knobs, name, start, crashes)
        if value is not None:
            why = _why(name, start, value, knobs.replace(**{name: value}))
            out.append({"change": {name: value}, "why": why})
    if knobs.vllm_version == "0.31.0":
        upgraded = knobs.replace(vllm_version="0.32.0", routing="stock")
        try:
            if not crashes(upgraded):
                out.append({"change": {"vllm_version": "0.32.0"},
                            "why": _why("vllm_version", "0.31.0", "0.32.0", upgraded)})
        except ValueError:
            pass
    return out


def prediction_crashes(prompt_lens) -> Callable[[Knobs], bool]:
    """The crash test of ``predict``'s scenario: start-up, then each prompt served alone."""
    from .predict import predict

    return lambda knobs: predict(knobs, prompt_lens).crashes
