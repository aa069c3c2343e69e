"""A lone prompt's outcome read from its distinct steps is the one its whole list of steps gives.

Notebooks 2 and 3 colour every prompt length 1 .. max_model_len - 1 (``chart_data._prompt_lane``):
listing each length's prefill chunks would build (max_model_len)^2 / B steps (two million for
L = 4,096, B = 8).  ``PromptWalk.ends(n)`` reads the same answer from the at most three distinct
chunks of a prompt (its first B-token chunk, the B-token chunks after it, the rest) and its
decode steps.  Invariant: for every length, ``ends(n)`` is ``(any step errs, the last prefill
chunk's route)`` of ``PromptWalk.batches(0, n)``.
"""

from __future__ import annotations

import pytest

from hisparse_model.model.batches import last_prefill_route
from hisparse_model.model.knobs import Knobs
from hisparse_model.model.plan import plan
from hisparse_model.schedule.serving import PromptWalk

# (vLLM, routing, S, K, B, L, enforce_eager): where chunks, C and C + 1, one-token chunks that
# extend (B = 1) and the capture sizes meet
KNOB_SETS = [
    ("0.31.0", "stock", 143, 0, 8192, 1024, False),  # C = min(8192, 143 * 1) = 143
    ("0.31.0", "stock", 4, 0, 8, 300, False),        # C = min(8, 4) = 4; 8-token chunks
    ("0.31.0", "stock", 4, 0, 5, 300, False),        # C = min(5, 4) = 4; chunks of C + 1
    ("0.31.0", "stock", 2, 1, 6, 300, False),        # MTP: q = 2, C = min(6, 2 * 2) = 4
    ("0.31.0", "stock", 3, 0, 3, 200, True),         # eager: no graph; C = B = 3
    ("0.31.0", "fix", 4, 0, 5, 300, False),          # the fix PR's predicate
    ("0.32.0", "stock", 4, 0, 5, 300, False),
    ("0.33.0", "stock", 8, 2, 64, 600, False),       # q = 3, C = min(64, 24) = 24
    ("0.34.0", "stock", 16, 0, 16, 400, False),      # C = B = 16
    ("0.31.0", "stock", 1, 0, 1, 40, False),         # B = 1: every chunk after the first extends
]


def _walk(version, routing, s, k, b, length, eager) -> PromptWalk:
    return PromptWalk(plan(Knobs(vllm_version=version, routing=routing, max_num_seqs=s,
                                 num_speculative_tokens=k, max_num_batched_tokens=b,
                                 max_model_len=length, enforce_eager=eager)))


@pytest.mark.parametrize("knobs", KNOB_SETS, ids=lambda k: "-".join(map(str, k)))
def test_ends_is_what_the_whole_list_of_steps_says(knobs):
    """Every prompt length's (errs, last route) from ``ends`` equals its listed steps'."""
    walk, listing = _walk(*knobs), _walk(*knobs)  # separate walks: no shared memo
    for n in range(1, knobs[5]):
        steps = listing.batches(0, n)
        assert walk.ends(n) == (any(b.error for b in steps), last_prefill_route(steps)), n


# (knob set, prompt length, errs): the fix PR's crash, hand-worked.  0.31.0 sends a batch of at
# most max_decode_rows + 1 = S + 1 = 144 tokens to swap_in, whose rows hold C = 143: a 144-token
# prompt (one chunk, B = 8192) stops at 144 > 143; 143 tokens fit; 145 go all resident.
CRASHES = [
    (KNOB_SETS[0], 143, False),
    (KNOB_SETS[0], 144, True),
    (KNOB_SETS[0], 145, False),
    (KNOB_SETS[6], 5, False),  # 0.32.0 routes on C: a 5-token chunk goes all resident
]


@pytest.mark.parametrize("knobs,n,errs", CRASHES)
def test_the_fix_prs_crash_is_where_it_was_reported(knobs, n, errs):
    """A lone prompt of C + 1 tokens crashes 0.31.0 and no neighbour of it does."""
    assert _walk(*knobs).ends(n)[0] is errs
