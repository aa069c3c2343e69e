"""The one verdict on a configuration: every view, page and command renders this, words nothing.

:func:`server_verdict` answers, once, for one :class:`~hisparse_model.model.knobs.Knobs`:

* **refused**: vLLM refuses the configuration (``plan``), in vLLM's words;
* **never starts**: start-up dies of an error that is not the HiSparse overflow (the MTP
  warmup's ``IndexError`` when ``max_num_batched_tokens < K + 2``), with its own advice,
  itself answered by this function (so the advice is checked like every other);
* **crashes at start-up**: a start-up batch routes C + 1 tokens to ``swap_in`` (the
  off-by-one, before any traffic);
* **exposed**, **not exposed** or **undecided** for all traffic (``exposure.exposure``).

A *kind* (:data:`KINDS`) is what tests and colours read; the *headline* is the one sentence
every view shows; *detail* says why.  Nothing else in the package may word a verdict on a
configuration: views take these strings as they are.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

from ..boundary.numbers import count
from ..model.knobs import Knobs
from ..model.plan import plan
from ..model.startup import WARMUP_NO_REQUEST_ERROR
from .exposed_steps import Exposure
from .exposure import exposure

REFUSED, NEVER_STARTS, STARTUP_CRASH = "refused", "never_starts", "startup_crash"
EXPOSED, NOT_EXPOSED, UNDECIDED = "exposed", "not_exposed", "undecided"
KINDS = (REFUSED, NEVER_STARTS, STARTUP_CRASH, EXPOSED, NOT_EXPOSED, UNDECIDED)
# what a strip or a badge paints for each kind
COLOUR = {REFUSED: "grey", NEVER_STARTS: "brown", STARTUP_CRASH: "red", EXPOSED: "red",
          NOT_EXPOSED: "green", UNDECIDED: "amber"}


class ServerVerdict(NamedTuple):
    """The verdict on one configuration (see the module docstring)."""

    knobs: Knobs
    kind: str  # one of KINDS
    headline: str  # the one sentence every view shows
    detail: str  # why, in a sentence or two
    error: str | None  # vLLM's refusal, or the error start-up dies of
    advice: str | None  # never starts: what makes it start, and what it then is
    exposure: Exposure | None  # for all traffic, where the server starts

    @property
    def colour(self) -> str:
        return COLOUR[self.kind]

    def as_json(self) -> dict:
        return {"kind": self.kind, "headline": self.headline, "detail": self.detail,
                "error": self.error, "advice": self.advice}


def _never_starts_advice(knobs: Knobs, b: int) -> str | None:
    """The MTP warmup's IndexError: B >= K + 2 gives the warmup its request; the verdict on
    that change, answered here like any configuration."""
    k = knobs.num_speculative_tokens
    if not k or b >= k + 2:
        return None
    then = server_verdict(knobs.replace(max_num_batched_tokens=k + 2))
    fewer = f" (or at most {count(b - 2, 'speculative token')})" if b >= 3 else ""
    return (f"raise max_num_batched_tokens to at least K + 2 = {k + 2}{fewer}, so the "
            f"warmup has a request; then, with max_num_batched_tokens {k + 2}: {then.headline}")


@functools.lru_cache(maxsize=4096)
def server_verdict(knobs: Knobs) -> ServerVerdict:
    """The verdict for ``knobs`` (never raises for knobs vLLM refuses: that is a verdict)."""
    try:
        p = plan(knobs)
    except ValueError as exc:
        text = str(exc)
        return ServerVerdict(knobs, REFUSED, f"REFUSED: vLLM refuses to start it ({text})",
                             "vLLM checks the configuration before it builds the engine",
                             text, None, None)
    exp = exposure(knobs)
    if exp.never_starts:
        b, k = p.max_num_batched_tokens, knobs.num_speculative_tokens
        why = (f"with MTP (K = {k}) and max_num_batched_tokens = {b} < K + 2 = {k + 2} the JIT "
               "warmup has no request, yet its spec-decode step takes request 0"
               if exp.never_starts.startswith(WARMUP_NO_REQUEST_ERROR) else
               "start-up dies before serving")
        return ServerVerdict(knobs, NEVER_STARTS, exp.headline, why,
                             exp.never_starts.split(" at start-up")[0],
                             _never_starts_advice(knobs, b), exp)
    if exp.exposed and exp.steps[0].kind == "startup":
        return ServerVerdict(knobs, STARTUP_CRASH, exp.headline,
                             f"0.31.0 sends a batch of W = C + 1 = {p.workspace_rows} tokens "
                             f"to swap_in ({p.rules.predicate_text})", exp.steps[0].error,
                             None, exp)
    kind = EXPOSED if exp.exposed else UNDECIDED if exp.exposed is None else NOT_EXPOSED
    detail = (exp.steps[0].what if exp.exposed else exp.undecided if exp.exposed is None
              else exp.never_because)
    return ServerVerdict(knobs, kind, exp.headline, detail or "", None, None, exp)
