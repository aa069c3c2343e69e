"""Explain an error text from a log: ``hisparse explain "…stop=3, capacity=2."``.

Two crashes are this model's business:

* the off-by-one: ``ValueError: HiSparse swap rows exceed the configured
  speculative decode capacity: stop=C+1, capacity=C.``  ``capacity`` is
  C = min(B, S * q), the swap rows; ``stop`` is how many tokens one forward
  handed to ``swap_in``.  vLLM raises it when stop > C
  (vllm/v1/hisparse/runtime.py:900-901 `if stop >`), and only 0.31.0's routing
  (on W = C + 1) sends more than C tokens there, then exactly C + 1.  Any other
  pair is not this bug, and gets no fix advice.
* the MTP start-up crash: ``IndexError: list index out of range`` when the
  JIT warmup has no request (B < K + 2) yet its spec-decode step takes request 0
  (vllm/v1/worker/gpu/warmup.py:441-443 `decode_steps.append(([0], [False]))`).

A log shows them wrapped.  The engine core logs ``EngineCore failed to start.``
(a start-up crash) or ``EngineCore encountered a fatal error.`` (while serving)
above the traceback (vllm/v1/engine/core.py:1431-1435 `EngineCore failed to start.`);
the multiprocessing executor re-raises a worker's error as
``Worker failed with error '<the error's text>', please check the stack trace above
for the root cause`` (vllm/v1/executor/multiproc_executor.py:438-442 `Worker failed with error`,
without the exception's class name); and the offline caller under vLLM's default
multiprocessing sees only ``EngineDeadError``, whose text names no cause
(vllm/v1/engine/exceptions.py:12-18 `EngineCore encountered an issue`).
"""

from __future__ import annotations

import re
from typing import NamedTuple

from ..model.parallel import ENGINE_DEAD as _DEAD_TEXT
from ..model.parallel import ENGINE_INIT_FAILED as _INIT_TEXT

# ASCII digits only: vLLM formats its ints so (a full-width "３" is not its text)
_STOP_CAPACITY = re.compile(r"stop=([0-9]+),\s*capacity=([0-9]+)")
# the executor's wrapper: the quoted text ends at the first "', please check" after the
# opening (found with str.find, so a log of 40,000 unclosed openings is one pass, where a
# lazy regex rescanned to the end of the text from each of them)
_OPEN, _CLOSE = "Worker failed with error '", "', please check"
# Swap rows are GPU tensor rows: a count of more digits than this is no engine's
_MAX_DIGITS = 18
_INDEX_ERROR = "list index out of range"
_STARTUP = "EngineCore failed to start"
_SERVING = "EngineCore encountered a fatal error"


def _fixed_part(text: str) -> str:
    """``Type: First sentence. ...`` -> ``First sentence``: what a pasted caller's text keeps."""
    return text.split(": ", 1)[1].split(".")[0]


# What the caller sees under vLLM's default multiprocessing (parallel.py declares the whole
# texts): neither names the cause.  Serving: EngineDeadError; start-up: the engine core's
# initialization failure.
_ENGINE_DEAD = ("EngineDeadError", _fixed_part(_DEAD_TEXT))  # "EngineCore encountered an issue"
_ENGINE_INIT = _fixed_part(_INIT_TEXT)  # "Engine core initialization failed"

# What a diagnosis is (the command line's exit status follows from it).
OFF_BY_ONE = "off_by_one"  # stop = capacity + 1: vLLM 0.31.0's routing
WARMUP_INDEX_ERROR = "warmup_index_error"  # MTP with B < K + 2: the warmup has no request
ENGINE_DEAD = "engine_dead"  # the caller's view: the cause is elsewhere in the log
NOT_THIS_BUG = "not_this_bug"  # anything else: no fix advice
COVERED = (OFF_BY_ONE, WARMUP_INDEX_ERROR)


class Diagnosis(NamedTuple):
    kind: str  # one of OFF_BY_ONE, WARMUP_INDEX_ERROR, ENGINE_DEAD, NOT_THIS_BUG
    lines: list[str]  # what to print


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


def _when(text: str) -> str | None:
    """"start-up" or "serving" when the engine core's log line (or the caller's start-up
    text) says which, else None."""
    if _STARTUP in text or _ENGINE_INIT in text:
        return "start-up"
    if _SERVING in text:
        return "serving"
    return None


def _worker(text: str) -> str | None:
    """The worker's error text inside the executor's wrapper (the first opening's; the text
    up to the first closing after it, newlines included), None when not wrapped.  Linear:
    if the first opening has no closing after it, no later opening has one either."""
    start = text.find(_OPEN)
    if start < 0:
        return None
    start += len(_OPEN)
    end = text.find(_CLOSE, start)
    return None if end < 0 else text[start:end]


def _wrapped(text: str) -> list[str]:
    """How the text reached the user, when it is wrapped."""
    out = []
    if _worker(text) is not None:
        out.append("The multiprocessing executor re-raised a worker's error as "
                   "\"Worker failed with error '...'\": the quoted text is the worker's.")
    when = _when(text)
    if _ENGINE_INIT in text:
        out.append(f"\"{_ENGINE_INIT}\": what the caller sees when the engine core, in its own "
                   "process (vLLM's default), died while starting, before serving any request.")
    elif when == "start-up":
        out.append("\"EngineCore failed to start.\": the engine died while starting, before "
                   "serving any request.")
    elif when == "serving":
        out.append("\"EngineCore encountered a fatal error.\": the engine died while serving.")
    return out


def _off_by_one(stop: int, c: int, when: str | None) -> list[str]:
    lines = [f"capacity={c}: the swap rows C = min(B, S * q) = {c}.",
             f"stop={stop}: one forward handed {stop} tokens to swap_in = C + 1, the "
             f"off-by-one of vLLM 0.31.0 (it routes on W = C + 1 = {c + 1} workspace rows).",
             f"Knobs that give C = {c}:"]
    lines += [f"  {w}" for w in ways_to_get(c)]
    lines.append(f"Where a batch of {stop} routed tokens comes from:")
    if when != "serving":
        lines.append(f"  - start-up: a PIECEWISE capture of {stop} tokens spread over fewer "
                     f"requests than tokens (prefill-like), or the JIT warmup prefill of "
                     f"{stop} tokens;")
    if when != "start-up":
        lines.append(f"  - serving: a prompt (or its last prefill chunk) of {stop} tokens, or "
                     f"several requests' prefills scheduled in one step that add up to {stop} "
                     "tokens;")
        lines.append(f"  - data parallel (-dp N): on a rank that scheduled nothing, its dummy "
                     f"batch, one request padded to the graph of the busiest rank's step when "
                     f"that graph holds {stop} tokens (`simulate -dp N` finds such steps).")
    lines += [
        "What to change, in order:",
        "  1. upgrade to vLLM 0.32.0 (the fix: it routes on C, so swap_in never gets C + 1);",
        "  2. or keep 0.31.0 and move C away from your batches: "
        "`hisparse check -- <your vllm serve command>` (or `predict` with "
        "your knobs) lists the changes that avoid every crash, each with its cost.",
    ]
    return lines


def _not_off_by_one(stop: int, c: int) -> list[str]:
    if stop <= c:
        why = (f"swap_in got {stop} tokens and has {c} rows: that fits, and vLLM raises "
               "this error only when stop > capacity, so the text is not vLLM's report of "
               "an overflow.")
    else:
        why = (f"stop = capacity + {stop - c}: the off-by-one always gives stop = capacity + 1 "
               "(0.31.0 routes at most W = C + 1 tokens to swap_in).")
    return [f"stop={stop}, capacity={c}: this is not the off-by-one this package models. {why}",
            "No fix advice: the model does not cover this error."]


def _warmup_index_error(when: str | None) -> list[str]:
    where = {"start-up": "raised at start-up, where the warmup crash happens",
             "serving": "while serving, so it is NOT the warmup crash this model covers",
             None: "if it was raised at start-up (EngineCore failed to start)"}[when]
    lines = [
        f"IndexError: list index out of range, {where}.",
    ]
    if when == "serving":
        return lines + ["No fix advice: the model does not cover this error."]
    return lines + [
        "The model covers one start-up IndexError: with MTP (num_speculative_tokens K >= 1) "
        "and max_num_batched_tokens B < K + 2, the JIT warmup has no request "
        "(R = min(S, B // (K + 2)) = 0), yet its spec-decode step still takes request 0, "
        "in every version modelled (0.31.0, 0.32.0, 0.33.0, 0.34.0).",
        "What to change: max_num_batched_tokens >= K + 2 (e.g. K = 1: B >= 3); check your "
        "command with `hisparse check -- <your vllm serve command>`.",
        "If MTP is off or B >= K + 2, this IndexError is something else: the model does "
        "not cover it.",
    ]


def diagnose(text: str) -> Diagnosis:
    """What ``text`` (a log line, a traceback, or several lines) says about the crash."""
    if not text.strip():
        raise ValueError("error text: empty (paste the error line from the log)")
    worker = _worker(text)
    inner = text if worker is None else worker
    when = _when(text)
    head = _wrapped(text)
    # the first anywhere: in a log, the first HiSparse error is the one that killed the engine
    m = _STOP_CAPACITY.search(text)
    if m and max(len(m.group(1)), len(m.group(2))) > _MAX_DIGITS:
        return Diagnosis(NOT_THIS_BUG, head + [
            f"stop and capacity of up to {max(len(m.group(1)), len(m.group(2)))} digits: no "
            "engine allocates that many swap rows (C = min(B, S * q) rows of a GPU tensor), "
            "so the text is not vLLM's report.",
            "No fix advice: the model does not cover this error."])
    if m:
        stop, c = int(m.group(1)), int(m.group(2))
        if c == 0:
            return Diagnosis(NOT_THIS_BUG, head + [
                f"stop={stop}, capacity=0: C = min(B, S * q) is at least 1 (B, S and q are), "
                "so no engine has 0 swap rows and the text is not vLLM's report; the "
                "off-by-one needs C >= 1.",
                "No fix advice: the model does not cover this error."])
        if stop == c + 1:
            return Diagnosis(OFF_BY_ONE, head + _off_by_one(stop, c, when))
        return Diagnosis(NOT_THIS_BUG, head + _not_off_by_one(stop, c))
    if _INDEX_ERROR in inner:
        kind = NOT_THIS_BUG if when == "serving" else WARMUP_INDEX_ERROR
        return Diagnosis(kind, head + _warmup_index_error(when))
    if any(s in text for s in _ENGINE_DEAD) or when:
        return Diagnosis(ENGINE_DEAD, head + [
            "The engine died, but this text does not say why: with the engine core in its own "
            f"process (vLLM's default) the caller sees EngineDeadError while serving and "
            f"\"{_ENGINE_INIT}\" at start-up.",
            "The cause is above it in the log: look for \"HiSparse swap rows exceed\", "
            "\"Worker failed with error\" or the engine core's traceback, and paste that line.",
        ])
    return Diagnosis(NOT_THIS_BUG, [
        "This text is not one of the crashes this model covers: HiSparse's "
        "\"swap rows exceed ... stop=C+1, capacity=C.\" (vLLM 0.31.0's off-by-one) or the "
        "MTP start-up IndexError (B < K + 2).",
        "No fix advice: the model does not cover this error.",
    ])

