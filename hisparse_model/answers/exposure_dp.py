"""The verdict for all traffic under data parallelism: an idle rank's dummy batch that raises.

A rank with nothing scheduled runs vLLM's dummy batch padded to the CUDA graph the busy
ranks agreed on (``data_parallel.sync_step``); where that padded count reaches the routing
as a batch 0.31.0 sends to ``swap_in`` past C rows, the idle rank dies on a batch it never
scheduled.  :func:`dummies` finds, for each raising size with no decode, the busy step that
pads an idle rank to it and a minimal example workload (``exposure.py``'s module
docstring, 5.), or says why none does.
"""

from __future__ import annotations

from ..schedule.data_parallel import RankBatch, sync_step
from ..model.dispatch import graph
from .exposed_steps import IDLE_FROM, ExposedStep, example_request
from ..model.plan import Plan

def _split(total: int, parts: int) -> list[int]:
    """``total`` tokens in ``parts`` prompts as even as can be (the longer ones first)."""
    return [total // parts + (i < total % parts) for i in range(parts)]


def _busy_lens(t: int, s: int, top: int) -> list[int] | None:
    """Prompts arriving together at one rank that make a step of ``t`` tokens: a one-token
    prompt (a decode to the split) and the rest in the fewest pieces of at most ``top``
    tokens, else the fewest pieces alone; None where more than S would be needed."""
    if top < 1:
        return None  # no prompt is shorter than max_model_len
    for lens in (([1] + _split(t - 1, -(-(t - 1) // top))) if t > 1 else None,
                 _split(t, -(-t // top))):
        if lens and len(lens) <= s:
            return lens
    return None


def _dummy_sync(p: Plan, query_lens, eligible: bool, idle_resident: bool) -> tuple:
    """``data_parallel.sync_step`` of rank 0's batch (query lengths in the runner's order)
    beside an idle rank 1 whose last real step left ``idle_resident``: (rank 0's result,
    the dummy's), each (mode, padded, dummy shape, routed, route, error, decode tokens)."""
    _, (busy, dummy) = sync_step(p, [RankBatch(tuple(query_lens), eligible, True), None],
                                 [True, idle_resident])
    return busy, dummy


def dummies(p: Plan, raising: list[int]) -> tuple[list[ExposedStep], str, list[str]]:
    """N > 1: the steps after which an idle rank's dummy batch raises (module docstring,
    5.), for the raising sizes without decode; (kinds, why no dummy raises where none
    does, undecided notes)."""
    k = p.knobs
    b, q, s = p.max_num_batched_tokens, p.max_decode_query_len, k.max_num_seqs
    top = k.max_model_len - 1  # the longest prompt vLLM accepts
    reach = min(b, s * top)  # the most tokens a step computes (K = 0: a decode is 1 token)
    if not raising:
        return [], ("an idle rank's dummy batch (one request of the padded count, at most "
                    f"B = {b} tokens: a decode of at most q = {q} tokens, else a batch "
                    "without decode) is routed by the same rules, so it cannot raise "
                    "either"), []
    kinds: list[ExposedStep] = []
    notes: list[str] = []
    whys = []
    for n in raising:
        steps = []  # the busy-rank step sizes the DP sync pads an idle rank's dummy to n
        t = n
        while t >= 1 and graph(p, t, 1, None)[1] == n:
            steps.insert(0, t)
            t -= 1
        hit, modes = None, set()
        for t in steps:
            lens = _busy_lens(t, s, top) if t <= reach else None  # None: t > reach
            if lens is None:
                continue
            busy, dummy = _dummy_sync(p, sorted(lens), False, True)
            if dummy[5]:
                hit = hit or (t, lens, busy, dummy)
                continue
            modes.add(dummy[0])
            if _dummy_sync(p, sorted(lens), False, False)[1][5]:
                notes.append(f"a step of {t} tokens pads an idle rank's dummy batch to {n} "
                             "tokens, which raises when that rank's last real step staged a "
                             "cached prefix, and whether traffic stages it depends on "
                             "host-tier timing")
            if t % q == 0 and t // q <= s and _dummy_sync(p, (q,) * (t // q), True, True)[1][5]:
                notes.append(f"a uniform decode step of {t} tokens pads an idle rank's dummy "
                             f"batch to {n} tokens, which raises, and the model has no "
                             "traffic built for it")
        if hit:
            found = _dummy_forms(p, n, *hit)
            if not found:
                notes.append(f"a step of {hit[0]} tokens pads an idle rank's dummy batch to "
                             f"{n} tokens, which raises, and the model has no traffic built "
                             "for it that rank 0 itself survives")
            kinds += found
            continue
        reachable = [t for t in steps if t <= reach]
        if not steps:
            whys.append(f"no step pads it to {n} tokens: the DP sync pads a PIECEWISE dummy "
                        f"to a CUDA-graph capture size ({_captures_near(p, n)}), {n} is none, "
                        f"and an eager dummy runs its own q = {q} tokens")
        elif not reachable:
            whys.append(f"only a step of {_span(steps)} tokens would pad it to {n}, but no "
                        "step computes more than min(B, S*(max_model_len - 1)) = "
                        f"{reach} tokens")
        else:
            how = " or ".join(
                ([f"the DP sync agrees on eager (NONE), where a dummy runs its own q = {q} "
                  + "tokens"] if "NONE" in modes else [])
                + (["the dummy replays a FULL graph, which routes nothing"]
                   if "FULL" in modes else [])) or "the dummy does not raise"
            which = ("such a step" if reachable == steps
                     else f"one of {_span(reachable)} tokens (a larger one no step computes)")
            whys.append(f"only a step of {_span(steps)} tokens would pad it to {n}, but "
                        f"{which} leaves it unpadded: {how}")
    why = ("an idle rank's dummy batch (one request of the padded count) raises only with "
           f"{' or '.join(map(str, raising))} tokens: " + "; ".join(whys))
    return kinds, why, notes


def _span(steps: list[int]) -> str:
    return str(steps[0]) if len(steps) == 1 else f"{steps[0]}..{steps[-1]}"


def _captures_near(p: Plan, n: int) -> str:
    """The capture sizes either side of ``n``, for a reason (``n`` is none of them)."""
    near = ([x for x in p.capture_sizes if x < n][-1:] + ["..."]
            + [x for x in p.capture_sizes if x > n][:1])
    return ", ".join(map(str, near))


def _dummy_forms(p: Plan, n: int, t: int, lens: list[int], busy: tuple,
                 dummy: tuple) -> list[ExposedStep]:
    """The traffic that makes rank 0 compute ``t`` tokens in a step while every other rank
    has nothing scheduled, its dummy batch padded to ``n`` tokens, which raises (``busy``,
    ``dummy``: :func:`_dummy_sync` of that step)."""
    k = p.knobs
    if busy[5]:  # rank 0 raises itself: a one-rank kind, not the dummy's
        return []
    dp, top, s = k.data_parallel_size, k.max_model_len - 1, k.max_num_seqs
    own = (f"rank 0 routes only its decode part ({busy[6]} of {t} tokens)" if busy[6]
           else f"rank 0 routes its {busy[3]} tokens, at most C = {p.swap_capacity}")
    tail = (f" while the other ranks have nothing scheduled; {own}, but the DP sync pads an "
            f"idle rank's dummy batch to the {dummy[0]} graph of {n} tokens: one request, a "
            "prefill the routing gets whole")
    head = f"an idle rank's dummy batch padded to exactly {n} tokens"
    lens = sorted(lens)
    out = [ExposedStep(
        "dummy_burst", f"{head}: {len(lens)} prompts arriving together at rank 0 "
        f"({' + '.join(map(str, lens))} = {t} tokens){tail}", n,
        {"requests": [example_request(x, dp, arrival_step=IDLE_FROM) for x in lens]}, dummy[5])]
    # one request decoding while a (t - 1)-token prompt arrives: the same step of [1, t - 1]
    if 2 <= t - 1 <= top and s >= 2:  # max_model_len >= 3: the one-token request decodes
        out.append(ExposedStep(
            "dummy_decode", f"{head}: a {t - 1}-token prompt arriving at rank 0 while a "
            f"request decodes there (a step of 1 + {t - 1} = {t} tokens){tail}", n,
            {"requests": [example_request(1, dp, arrival_step=IDLE_FROM),
                          example_request(t - 1, dp, arrival_step=IDLE_FROM + 1)]}, dummy[5]))
    return out
