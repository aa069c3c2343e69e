"""Explain an error text from a log: ``python -m hisparse_model explain "…stop=3, capacity=2."``.

The text names two numbers.  ``capacity`` is C = min(B, S * q), the swap rows;
``stop`` is how many tokens one forward handed to ``swap_in``.  Only 0.31.0's
routing (on W = C + 1) sends more than C tokens there, and then exactly C + 1.
"""

from __future__ import annotations

import re

_PATTERN = re.compile(r"stop=(\d+),\s*capacity=(\d+)")


def parse(text: str) -> tuple[int, int]:
    m = _PATTERN.search(text)
    if not m:
        raise ValueError("error text: no 'stop=N, capacity=M' found (paste the HiSparse "
                         "ValueError line from the log)")
    return int(m.group(1)), int(m.group(2))


def ways_to_get(c: int, limit: int = 6) -> list[str]:
    """Knob combinations (S, K, B) with min(B, S * (1 + K)) = C, simplest first."""
    out = []
    for k in range(0, 4):
        q = 1 + k
        if c % q == 0:
            out.append(f"max_num_seqs={c // q}, num_speculative_tokens={k}, "
                       f"max_num_batched_tokens >= {c} (C = S * q = {c // q} * {q})")
    out.append(f"max_num_batched_tokens={c} with max_num_seqs * (1 + num_speculative_tokens) "
               f">= {c} (C = B)")
    return out[:limit]


def explain(text: str) -> list[str]:
    stop, c = parse(text)
    lines = [f"capacity={c}: the swap rows C = min(B, S * q) = {c}.",
             f"stop={stop}: one forward handed {stop} tokens to swap_in"
             + (f" = C + 1, the off-by-one of vLLM 0.31.0 (it routes on W = C + 1 = {c + 1} "
                "workspace rows)." if stop == c + 1 else ".")]
    if stop != c + 1:
        lines.append("This is not the off-by-one this package models (stop should be C + 1).")
    lines.append(f"Knobs that give C = {c}:")
    lines += [f"  {w}" for w in ways_to_get(c)]
    lines += [
        f"Where a batch of {stop} routed tokens comes from:",
        f"  - start-up: a PIECEWISE capture of {stop} tokens spread over fewer requests "
        f"than tokens (prefill-like), or the JIT warmup prefill of {stop} tokens;",
        f"  - serving: a prompt (or its last prefill chunk) of {stop} tokens, or several "
        f"requests' prefills scheduled in one step that add up to {stop} tokens.",
        "What to change: upgrade to vLLM 0.32.0 (the fix), or move C away: run "
        "`python -m hisparse_model predict --max-num-seqs S ...` for your knobs, which "
        "lists the smallest single-knob changes that avoid the crash.",
    ]
    return lines
