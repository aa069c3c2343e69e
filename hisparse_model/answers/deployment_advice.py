"""Advice for a deployment, whatever its traffic: changes the exposure analysis says are safe.

:func:`deployment_advice` offers, for an exposed configuration, each change below
that :func:`~hisparse_model.answers.exposure.exposure` answers *not exposed* for (every one is
checked; nothing is inferred), with its cost as :func:`hisparse_model.answers.advice.cost`
gives it, the fix first, then by cost (``advice.py``'s ranks):

* the fix: upgrade 0.31.0 to 0.32.0, or patch 0.31.0 with the upstream fix;
* B <= S q: ``max_num_batched_tokens`` = C, so no step holds C + 1 tokens;
* the FLASHMLA_SPARSE backend (it hands the routing only a step's decode part);
* ``max_num_seqs`` = ceil(B / q), or ``num_speculative_tokens`` = ceil(B / S) - 1:
  S q >= B makes C = B, again no room for C + 1.

A ``max_num_seqs`` change that only moves C (C + 1 still fits in B) leaves the server
exposed, so the analysis never offers it.
"""

from __future__ import annotations

from .advice import FIX, _rank, cost
from .exposure import exposure
from ..model.knobs import Knobs
from ..model.plan import plan

MAX_DRAFTS = 8  # the most MTP drafts a change may ask for


def _candidates(knobs: Knobs, b: int, q: int) -> list[tuple[dict, dict, int | None]]:
    """(change, other knobs it needs, forced rank) for every change worth asking about."""
    s, out = knobs.max_num_seqs, []
    if knobs.vllm_version == "0.31.0":
        out.append(({"vllm_version": "0.32.0"}, {"routing": "stock"}, FIX))
        if knobs.routing != "fix":
            out.append(({"routing": "fix"}, {}, FIX))
    out.append(({"max_num_batched_tokens": s * q}, {}, None))
    if knobs.attention_backend != "FLASHMLA_SPARSE":
        out.append(({"attention_backend": "FLASHMLA_SPARSE"}, {}, None))
    # B is named with S and K: left unset, vLLM would derive it again from the new S
    out.append(({"max_num_seqs": -(-b // q), "max_num_batched_tokens": b}, {}, None))
    drafts = -(-b // s) - 1
    if knobs.num_speculative_tokens < drafts <= MAX_DRAFTS:
        out.append(({"num_speculative_tokens": drafts, "max_num_batched_tokens": b}, {}, None))
    return out


def deployment_advice(knobs: Knobs, longest_prompt: int | None = None) -> list[dict]:
    """``[{"change", "why", "cost"}]``: each change after which no traffic kills the server
    (empty when it is not exposed); ``why`` is the exposure analysis's reason."""
    if exposure(knobs).exposed is False:
        return []
    before = plan(knobs)
    found = []
    for change, also, rank in _candidates(knobs, before.max_num_batched_tokens,
                                          before.max_decode_query_len):
        try:
            after = knobs.replace(**{**also, **change})
            verdict = exposure(after)
        except ValueError:  # vLLM would refuse it: not advice
            continue
        if verdict.exposed is not False:
            continue
        c = cost(before, plan(after), longest_prompt)
        found.append((_rank(next(iter(change)), c) if rank is None else rank, len(found),
                      {"change": change, "why": "no traffic can kill it: "
                       + verdict.never_because, "cost": c}))
    return [a for _, _, a in sorted(found, key=lambda t: t[:2])]


def deployment_advice_lines(advice: list[dict], name_change=None) -> list[str]:
    """The "make it safe for all traffic" block."""
    name_change = name_change or (lambda change: ", ".join(f"{n}={v}"
                                                             for n, v in change.items()))
    if not advice:
        return ["  (no change the exposure analysis checks makes it safe)"]
    lines = ["  To make it safe for all traffic (each change checked by the exposure analysis):"]
    for i, a in enumerate(advice, 1):
        lines += [f"  {i}. {name_change(a['change'])}: {a['why']}",
                  f"     cost: {a['cost']['text']}"]
    return lines
