"""The served replay's warm-up: requests that compile the server's kernels for the shapes a
replay meets before it is timed, and that can never reach C + 1 tokens in a step themselves.

The waves go out over HTTP (:func:`.serve_process.http`) before the replay (``--warm-passes``);
their prompt ids count from :data:`WARM_ID`, none of a replay's.
"""

from __future__ import annotations

import threading
import time

from ..model.knobs import Knobs
from ..model.plan import plan
from .serve_cli import SERVED_NAME
from .serve_process import http

WARM_ID = 900_000  # warm-up prompts' ids: none of a replay's (which count from 0)
WARM_TOKENS = 24  # output tokens of each warm-up request
WARM_PASS_IDS = 1000  # prompt ids one warm-up pass may take (its waves hold far fewer)


def warm_waves(knobs: Knobs) -> list[tuple[int, int]]:
    """``[(prompt_len, count), ...]``: warm-up waves that cannot reach C + 1 tokens in a step.

    Every prompt is longer than C + 1, and a wave's tokens (prompts and one decode token
    each) fit one step's budget B, so no prompt is ever chunked: a step that computes any
    prompt computes all of it (more than C + 1 tokens), and a step of decodes alone
    computes at most S <= C of them."""
    c1 = plan(knobs).swap_capacity + 1
    budget = knobs.max_num_batched_tokens
    waves = []
    for p in (2 * c1, 500, 2000, 7000):
        p = max(p, c1 + 1)
        k = min(knobs.max_num_seqs, budget // (p + WARM_TOKENS))
        if k >= 1 and p + WARM_TOKENS <= knobs.max_model_len:
            waves.append((p, k))
    return waves


def chunk_wave(knobs: Knobs) -> tuple[int, int] | None:
    """``(prompt_len, 3)``: three prompts that make the scheduler chunk one (chunked prefill:
    a prompt's second part computed against its first part's cache), none of whose steps
    can compute C + 1 tokens; None where the knobs leave no such wave.

    With ``2p + 1 <= B < 3p`` two prompts and a decode fit a step and three prompts do not:
    a prompt is chunked only when all three are scheduled in one step (an engine step that
    already holds one prompt's decode fits the other two whole), its first part is
    ``B - 2p`` and its tail ``3p - B`` is computed beside the two other requests' decodes:
    ``3p - B + 2`` tokens.  Every other step computes a whole prompt (more than C + 1
    tokens) or at most three decodes.  So ``3p - B > C`` keeps every step off C + 1."""
    c = plan(knobs).swap_capacity
    budget = knobs.max_num_batched_tokens
    p = (budget - 1) // 2
    if knobs.max_num_seqs < 3 or 3 * p - budget <= c or p + WARM_TOKENS > knobs.max_model_len:
        return None
    return p, 3


def warm_requests(knobs: Knobs) -> list[tuple[int, int]]:
    """Every warm-up wave: :func:`warm_waves` then :func:`chunk_wave` where there is one."""
    chunked = chunk_wave(knobs)
    return warm_waves(knobs) + ([chunked] if chunked else [])


def warm(base: str, knobs: Knobs, passes: int, tag: str, first: int = 0) -> float:
    """Serve :func:`warm_requests` ``passes`` times (kernels compile on first use of a
    shape: not in what the replay meets); seconds taken.  Prompt ids count from ``WARM_ID +
    first``, so a later pass (another ``first``) computes its prompts rather than finding
    them in the prefix cache.  Raises if a request fails."""
    from ..schedule.workload import DistinctPrompt

    t = time.monotonic()
    k = 0
    for _ in range(passes):
        for p, count in warm_requests(knobs):
            threads, bad = [], []
            for _ in range(count):
                body = {"model": SERVED_NAME, "max_tokens": WARM_TOKENS, "ignore_eos": True,
                        "prompt": list(DistinctPrompt(WARM_ID + first + k, p)),
                        "temperature": 0.0}
                rid = {"X-Request-Id": f"{tag}-{k}"}
                threads.append(threading.Thread(target=lambda b=body, h=rid: bad.append(
                    http(f"{base}/v1/completions", b, h)[0]), daemon=True))
                k += 1
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            if any(code != 200 for code in bad):
                raise RuntimeError(f"warm-up wave of {count} x {p} tokens: HTTP {bad}")
    return time.monotonic() - t
