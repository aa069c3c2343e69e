"""Which requests of a traffic reach the engine, in what order: the server's door and the
arrivals of one seed (``simulate --traffic``, the served replay's runner).

No vLLM import: the door is vLLM's OpenAI server's rule, modelled and cited.
"""

from __future__ import annotations

import random

from ..inputs.traffic_file import Traffic, TrafficError


def refused_at_door(prompt_len: int, max_tokens: int, max_model_len: int) -> bool:
    """Whether vLLM's OpenAI server answers the request HTTP 400 before it reaches the
    engine: its prompt may hold at most ``max_model_len - max_tokens`` tokens
    (vllm/renderers/params.py:209@0.31.0 `max_input_tokens`, checked at
    vllm/renderers/params.py:485@0.31.0 `_token_len_check`), which also refuses every prompt
    the engine itself refuses, one not shorter than max_model_len (workload.py validate).
    Measured: a served replay's 7,935-token prompt asking 375 tokens of an 8,192-token
    server was answered 400 ("... for a total of 8310 tokens")."""
    return prompt_len + max_tokens > max_model_len or prompt_len >= max_model_len


def accepted_arrivals(traffic: Traffic, minutes: float, seed: int,
                      max_model_len: int, most: int | None = None) -> tuple[list[tuple], int]:
    """``([(seconds, prompt_len, max_tokens, blocks), ...], refused)``: the requests of one
    seed that arrive within ``minutes`` and that vLLM accepts, in arrival order (request
    ``i`` of a workload is the ``i``-th of them), and how many it refuses at the door.
    ``most``: a TrafficError as soon as more requests than that are accepted (the rest is
    not generated)."""
    rng = random.Random(seed)
    end = minutes * 60.0
    out, refused = [], 0
    for t, n, m, b in _arrivals(traffic, rng):
        if t >= end:
            break
        if refused_at_door(n, m, max_model_len):
            refused += 1
            continue
        out.append((t, n, m, b))
        if most is not None and len(out) > most:
            raise too_many(minutes, most, t)
    return out, refused


def too_many(minutes: float, most: int, t: float) -> TrafficError:
    """The refusal of a seed that accepted more than ``most`` requests by ``t`` seconds."""
    return TrafficError(f"--minutes {minutes:g}: more than {most:,} requests by "
                        f"{t / 60:,.1f} minutes, more than the {most:,} distinct "
                        "prompts a workload can name; serve fewer minutes")


def _arrivals(traffic: Traffic, rng: random.Random):
    """(seconds, prompt_len, max_tokens) of each arrival in time order: a trace's own, or
    Poisson arrivals at the rate with lengths drawn by ``rng``."""
    if traffic.replayed:
        yield from zip(traffic.arrivals_s, traffic.prompt_len.samples,
                       traffic.max_tokens.samples, traffic.blocks or
                       (None,) * len(traffic.arrivals_s))
        return
    t = 0.0
    while True:
        t += rng.expovariate(traffic.rate_per_s)
        yield t, traffic.prompt_len.draw(rng), traffic.max_tokens.draw(rng), None
