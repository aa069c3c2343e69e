"""What the verdict for all traffic answers with: each step kind that kills, and the verdict.

:class:`ExposedStep` is one kind of engine step that raises, with a minimal example
workload that makes it; :class:`Exposure` the verdict (exposed, never, undecided).
``exposure.py`` builds them for one engine, ``exposure_dp.py`` for an idle rank's dummy
batch under data parallelism.
"""

from __future__ import annotations

from typing import NamedTuple

from ..model.knobs import Knobs
from ..model.reproduction import MAX_TOKENS

# An idle rank's placeholder (one token, MAX_TOKENS outputs, from step 0) is done after step
# MAX_TOKENS - 1: the DP examples' traffic arrives at rank 0 from this step on
IDLE_FROM = MAX_TOKENS


class ExposedStep(NamedTuple):
    """One kind of engine step that kills the server, with traffic that makes it."""

    kind: str  # "startup", "lone_prompt", "last_chunk", "burst"; DP: "dummy_burst", "dummy_decode"
    what: str  # in words a person acts on
    tokens: int | None  # tokens of the step (None: start-up)
    example: dict  # a Workload JSON ({"requests": [...]}) that crashes
    error: str  # the exact ValueError text

    def as_json(self) -> dict:
        return {"kind": self.kind, "what": self.what, "tokens": self.tokens,
                "example": self.example, "error": self.error}


class Exposure(NamedTuple):
    """The verdict for all traffic: exposed (with every step kind), never (why), or undecided."""

    knobs: Knobs
    exposed: bool | None  # None: undecided, or the server never starts
    steps: tuple[ExposedStep, ...]
    never_because: str | None
    undecided: str | None = None
    # start-up dies of an error that is not the HiSparse overflow: the error and where
    never_starts: str | None = None

    def as_json(self) -> dict:
        return {"exposed": self.exposed, "steps": [s.as_json() for s in self.steps],
                "never_because": self.never_because, "undecided": self.undecided,
                "never_starts": self.never_starts}

    @property
    def headline(self) -> str:
        """One line: the verdict for all traffic (``server_verdict`` renders it everywhere)."""
        if self.never_starts:
            return (f"NEVER STARTS: {self.never_starts}, before any traffic (not the HiSparse "
                    "swap-row overflow: no traffic is served at all)")
        if self.exposed and self.steps[0].kind == "startup":
            return (f"CRASHES AT START-UP: {self.steps[0].what} (the HiSparse swap-row "
                    "overflow, so every workload is exposed)")
        if self.exposed:
            first = self.steps[0]
            return f"EXPOSED: some traffic kills this server ({first.what})"
        if self.exposed is None:
            return f"UNDECIDED: {self.undecided}"
        return f"NOT EXPOSED: no traffic can kill this server ({self.never_because})"


def example_request(n: int, dp: int, **more) -> dict:
    """One request of an example workload: ``n`` tokens (on rank 0 under DP), ``more`` keys."""
    return {"prompt_len": n, **more, **({"dp_rank": 0} if dp > 1 else {})}


def crash_kind(st, workload, seen=frozenset()) -> str:
    """The exposure kind of a crash step (``exposed_steps.ExposedStep.kind``): ``lone_prompt``
    (one prompt computed whole), ``last_chunk`` (the rest of a prompt chunked before: a
    request in ``seen``, those earlier steps scheduled), ``cached_prefix`` (the rest of a
    prompt whose first blocks were a prefix-cache hit), ``burst`` (several prompts or
    pieces, no decode), ``mixed`` (with decodes)."""
    if any(k != "prefill" for k in st.kinds.values()):
        return "mixed"
    if len(st.scheduled) > 1:
        return "burst"
    (i,) = st.scheduled
    if not st.num_computed_before[i]:
        return "lone_prompt"
    return "last_chunk" if i in seen else "cached_prefix"
