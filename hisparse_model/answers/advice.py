"""What to change, in the order an engineer would take it, each change with its cost.

For a configuration the model says crashes, :func:`advise` looks for changes
under which the same scenario (start-up and the same prompts, or the same
workload) predicts no crash at all, each verified by running the model again
(nothing is inferred from formulas):

1. the fix: upgrade 0.31.0 to 0.32.0, or patch 0.31.0 with the upstream fix
   (``routing=fix``); the knobs stay as they are;
2. one knob at a time, the nearest safe value above and below the current one
   of ``max_num_seqs``, ``max_num_batched_tokens`` and ``num_speculative_tokens``,
   ordered by what they cost.

A change's cost is said in the model's own terms (:func:`cost`): requests per
engine step (S), tokens per step (B), decode tokens per request (q = 1 + K) and
the prefill chunks of the longest prompt (ceil(n / B)).  A change that shrinks
none of them keeps throughput and comes first; one that shrinks some comes
after; one that cripples the engine (halves, or worse, the requests or tokens
of a step) comes last and says so.

With ``seqs_map`` the advice also names every safe range of ``max_num_seqs``
from 1 to ``seqs_map`` (there can be several: the 3 + 2 workload is safe at
2-3 and 5-64), not only the nearest values; :func:`ranges` writes them as the
dashboards' max_num_seqs maps do.
"""

from __future__ import annotations

from collections.abc import Callable

from ..model.knobs import Knobs


class SearchCapped(Exception):
    """Raised by a ``crashes`` check whose budget for this knob is spent: its search ends there.

    Not a ``ValueError`` (a value vLLM refuses, skipped): once the budget is spent no
    later value can be checked, so the search stops with what it has found.
    """


SEARCH = {  # knob -> how far to look, in each direction
    "max_num_seqs": 512,
    "max_num_batched_tokens": 2048,
    "num_speculative_tokens": 4,
}
SEQS_MAP = 64  # the command line names every safe max_num_seqs from 1 to this (the nb5 map's)

# Ranks: the order of advice (smaller first).
FIX, KEEPS, DRAFTS, LOSES, CRIPPLES = range(5)


def _nearest(knobs: Knobs, name: str, start: int, crashes) -> dict[int, int]:
    """{+1: the nearest safe value above ``start``, -1: below}, for the directions found."""
    found: dict[int, int] = {}
    for delta in range(1, SEARCH[name] + 1):
        for sign in (+1, -1):
            if sign in found:
                continue
            try:
                if not crashes(knobs.replace(**{name: start + sign * delta})):
                    found[sign] = start + sign * delta
            except ValueError:  # vLLM would refuse this value: not advice
                continue
            except SearchCapped:  # no budget left for this knob: keep what was found
                return found
        if len(found) == 2:
            break
    return found


def cost(before, after, longest_prompt: int | None = None) -> dict:
    """What a change costs, from the two plans: each quantity ``[before, after]``, and a verdict.

    ``{"requests_per_step", "tokens_per_step", "decode_tokens_per_request",
    "prefill_chunks_longest_prompt" (with a prompt), "shrinks": [names], "cripples",
    "text"}``.
    """
    out = {"requests_per_step": [before.knobs.max_num_seqs, after.knobs.max_num_seqs],
           "tokens_per_step": [before.max_num_batched_tokens, after.max_num_batched_tokens],
           "decode_tokens_per_request": [before.max_decode_query_len,
                                         after.max_decode_query_len]}
    worse = {name: old > new for name, (old, new) in out.items()}
    if longest_prompt:
        chunks = [-(-longest_prompt // p.max_num_batched_tokens) for p in (before, after)]
        out["prefill_chunks_longest_prompt"] = chunks
        worse["prefill_chunks_longest_prompt"] = chunks[1] > chunks[0]
    shrinks = [name for name, bad in worse.items() if bad]
    cripples = any(2 * new <= old for old, new in (out["requests_per_step"],
                                                   out["tokens_per_step"]))
    words = {"requests_per_step": "requests/step", "tokens_per_step": "tokens/step",
             "decode_tokens_per_request": "decode tokens/request (1 + drafts)",
             "prefill_chunks_longest_prompt": f"prefill chunks of the {longest_prompt}-token "
                                              "prompt"}
    moved = [f"{words[n]} {old} -> {new}" for n, (old, new) in out.items() if old != new]
    q_old, q_new = out["decode_tokens_per_request"]
    verdict = ("CRIPPLES the engine (halves or worse what a step takes)" if cripples
               else "loses " + ", ".join(words[n].split(" (")[0] for n in shrinks) if shrinks
               else "keeps throughput; more MTP drafts per step (the drafter's own time is "
                    "not modelled)" if q_new > q_old
               else "keeps throughput")
    out.update(shrinks=shrinks, cripples=cripples,
               text=f"{verdict}: " + ("; ".join(moved) if moved else "the same knobs"))
    return out


def _rank(name: str, c: dict) -> int:
    if c["cripples"]:
        return CRIPPLES
    if c["shrinks"]:
        return LOSES
    return DRAFTS if name == "num_speculative_tokens" else KEEPS


def safe_seqs(knobs: Knobs, crashes, upto: int) -> tuple[list[int], int]:
    """The values of ``max_num_seqs`` in 1 ... ``upto`` under which nothing crashes, and the
    last value checked (less than ``upto`` when the search budget ran out)."""
    safe, checked = [], 0
    for s in range(1, upto + 1):
        try:
            ok = not crashes(knobs.replace(max_num_seqs=s))
        except ValueError:  # vLLM refuses it: not safe
            ok = False
        except SearchCapped:
            break
        checked = s
        if ok:
            safe.append(s)
    return safe, checked


def ranges(values: list[int]) -> str:
    """``[1, 2, 3, 7]`` -> ``"1-3,7"``; empty -> ``"none"``."""
    parts: list[str] = []
    for v in values:
        if parts and int(parts[-1].split("-")[-1]) == v - 1:
            parts[-1] = f"{parts[-1].split('-')[0]}-{v}"
        else:
            parts.append(str(v))
    return ",".join(parts) or "none"


def advise(knobs: Knobs, crashes: Callable[[Knobs], bool], plan_b: int | None = None, *,
           longest_prompt: int | None = None, seqs_map: int | None = None) -> list[dict]:
    """``[{"change": {knob: value}, "why": "...", "cost": cost()}]`` for a scenario that
    ``crashes(knobs)``, the fix first, then by cost (see the module docstring).

    ``plan_b`` is unused (B comes from the plans); kept for callers that pass it.
    """
    from ..model.plan import plan

    memo: dict[Knobs, bool] = {}

    def check(k: Knobs) -> bool:
        if k not in memo:
            memo[k] = crashes(k)
        return memo[k]

    before = plan(knobs)
    out: list[tuple[int, int, dict]] = []  # (rank, order found, advice)

    def add(change: dict, why: str, after: Knobs, rank: int | None = None) -> None:
        c = cost(before, plan(after), longest_prompt)
        out.append((_rank(next(iter(change)), c) if rank is None else rank, len(out),
                    {"change": change, "why": why, "cost": c}))

    fixes = (({"vllm_version": "0.32.0"}, {"routing": "stock"},
              "the fix: 0.32.0 routes on C, so swap_in never gets C + 1 tokens"),
             ({"routing": "fix"}, {},
              "the upstream fix's predicate patched into 0.31.0: route on C, not W"))
    for change, also, why in fixes if knobs.vllm_version == "0.31.0" else ():
        if knobs.routing == change.get("routing"):
            continue  # already patched
        try:
            after = knobs.replace(**change, **also)
            if not check(after):
                add(change, why, after, FIX)
        except (ValueError, SearchCapped):
            pass
    starts = {"max_num_seqs": knobs.max_num_seqs,
              "max_num_batched_tokens": before.max_num_batched_tokens,
              "num_speculative_tokens": knobs.num_speculative_tokens}
    safe = None
    for name, start in starts.items():
        found = _nearest(knobs, name, start, check)
        if name == "max_num_seqs" and seqs_map:  # up to the map's end, or the value above
            safe, checked = safe_seqs(knobs, check, max(seqs_map, found.get(+1, 0)))
        for value in (found[sign] for sign in (+1, -1) if sign in found):  # above first
            after = knobs.replace(**{name: value})
            p = plan(after)
            why = (f"{name} {start} -> {value}: C = {p.swap_capacity}, "
                   f"W = {p.workspace_rows}; re-run of the model: no batch of this "
                   "scenario crashes")
            if name == "max_num_seqs" and safe is not None:
                why += f"; every safe max_num_seqs in 1-{checked}: {ranges(safe)}"
            add({name: value}, why, after)
    return [a for _, _, a in sorted(out, key=lambda t: (t[0], t[1]))]


def prediction_crashes(prompt_lens, fast: bool = True) -> Callable[[Knobs], bool]:
    """The crash test of ``predict``'s scenario: start-up, then each prompt served alone
    (``predict.crashes``; ``fast=False``: ``predict(...).crashes``, for the tests that compare)."""
    from .predict import crashes, predict

    if fast:
        return lambda knobs: crashes(knobs, prompt_lens)
    return lambda knobs: predict(knobs, prompt_lens).crashes
