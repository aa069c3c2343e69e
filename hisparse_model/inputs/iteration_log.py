"""Each engine step's composition and wall time, read from a server log vLLM wrote with
``--enable-logging-iteration-details``: the served clock's calibration.

vLLM times every step that schedules tokens (vllm/v1/engine/core.py:556@0.31.0
`capture_iteration_details`: from the step's scheduling to its outputs) and counts the
step's requests and tokens by phase (vllm/v1/utils.py:833@0.31.0
`compute_iteration_details`: a request whose output is still empty, a later chunk of a
chunked prefill included, is a *context* request); the front end's logger writes one line a
step (vllm/v1/metrics/loggers.py:177@0.31.0 `_log_iteration_details`)::

    Iteration(12): 1 context requests, 144 context tokens, 0 generation requests,
    0 generation tokens, iteration elapsed time: 14.41 ms, KV cache usage: 0.3%

(one line in the log).  Steps of no tokens are not logged.

What the elapsed time is not: with async scheduling (vLLM's default here) the timed span is
the scheduling of a step, not its GPU work.  Measured on the H100 warm replays
(tests/recorded/serve/h100-warm-2026-12-06/): 0.02-0.19 ms a step, while the same servers ran
up to 229 steps in one second of the log's clock.  So these lines give each step's
*composition* (the scheduler's own record, step by step), and the log's one-second timestamps
how many steps each second held; a step's wall time must come from elsewhere.

:func:`busy_seconds` is where it comes from: the steps of each second of the log's clock inside
a busy stretch (a second whose neighbours also logged steps: the engine loop ran the whole
second, as it does while work is queued), what they computed, and that they took 1,000 ms
together. ``answers/clock_fit.py`` fits a step's cost to them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_STAMP = re.compile(r" (\d\d):(\d\d):(\d\d)(?:[.,]\d+)? \[")  # vLLM: "INFO 12-06 09:12:01 [file.py:1]"

ITERATION_LOG_FLAG = "--enable-logging-iteration-details"  # vllm serve's flag for the lines

_LINE = re.compile(
    r"Iteration\((\d{1,12})\): (\d{1,9}) context requests, (\d{1,9}) context tokens, "
    r"(\d{1,9}) generation requests, (\d{1,9}) generation tokens, iteration elapsed time: "
    r"(\d{1,9}(?:\.\d{1,6})?) ms( \(dummy\))?")


@dataclass(frozen=True)
class Iteration:
    """One logged engine step."""

    index: int
    context_requests: int
    context_tokens: int
    generation_requests: int
    generation_tokens: int
    elapsed_ms: float
    dummy: bool = False

    @property
    def tokens(self) -> int:
        return self.context_tokens + self.generation_tokens


def read_iterations(log: str) -> list[Iteration]:
    """Every step line of ``log``, in the log's order (dummy steps of data parallelism kept,
    marked)."""
    out = []
    for m in _LINE.finditer(log):
        i, cr, ct, gr, gt, ms, dummy = m.groups()
        out.append(Iteration(int(i), int(cr), int(ct), int(gr), int(gt), float(ms),
                             dummy is not None))
    return out


def count_iterations(log: str) -> int:
    """How many steps ``log`` times."""
    return sum(1 for _ in _LINE.finditer(log))


@dataclass(frozen=True)
class Second:
    """The logged steps of one second of the log's clock."""

    at: str  # HH:MM:SS as logged
    steps: int
    prefill_tokens: int  # vLLM's "context tokens": prompt chunks
    decode_tokens: int  # "generation tokens"


def busy_seconds(log: str) -> list[Second]:
    """Each second of ``log`` that logged steps and whose second before and after did too
    (module docstring), in the log's order; DP dummy steps left out. Lines without a
    ``HH:MM:SS [`` stamp before the step text are not counted."""
    per: dict[int, list] = {}
    for line in log.splitlines():
        m = _LINE.search(line)
        if m is None or m.group(7):
            continue
        stamp = _STAMP.search(line, 0, m.start())
        if stamp is None:
            continue
        h, mi, se = (int(x) for x in stamp.groups())
        key = h * 3600 + mi * 60 + se
        row = per.setdefault(key, [stamp.group(0).strip(" ["), 0, 0, 0])
        row[1] += 1
        row[2] += int(m.group(3))
        row[3] += int(m.group(5))
    day = 86400  # a replay may cross midnight
    return [Second(*row) for key, row in per.items()
            if (key - 1) % day in per and (key + 1) % day in per]
