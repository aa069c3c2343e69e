"""One engine step as the routing sees it, on every rank: the record ``simulate`` returns.

An engine step is one iteration of the ranks' lockstep loop; with one rank
(``data_parallel_size`` = 1) it is the engine's step.  :class:`StepResult`
holds the mode the ranks agreed on and one :class:`RankStep` per rank: what
the rank scheduled (or its dummy batch), how it was dispatched and padded, and
what its forward handed to the HiSparse routing.  A step of one rank reads as
that rank (``step.scheduled`` is ``step.ranks[0].scheduled``).

:func:`route_step` is one rank's own forward: its scheduled batch, in the
model runner's order, dispatched (``dispatch.dispatch``) and routed
(``routing.route_batch``); a FULL replay routes nothing anew; the drafter's
K - 1 draft steps follow when no error stopped it (``draft_steps.py``).  With
more ranks, ``data_parallel.synced_step`` builds the records after the DP sync.
"""

from __future__ import annotations

from typing import NamedTuple

from .dispatch import step_dispatch
from .draft_steps import DraftSteps, draft_steps
from .plan import Plan
from .routing import route_batch


class RankStep(NamedTuple):
    """One rank's forward in one engine step (after the DP sync when there are several)."""

    rank: int
    scheduled: dict  # request index -> tokens computed this step ({} for a dummy batch)
    num_tokens: int  # tokens the rank asked to run (a dummy: q)
    num_decode_tokens: int  # of which decode tokens (runner order, threshold q)
    dispatch: str  # the mode it runs: FULL (replay), PIECEWISE or NONE (eager)
    padded: int  # tokens the forward runs, padding included
    dummy: tuple | None  # a dummy batch's query lengths, else None
    resident: bool  # all_context_pages_resident as the routing reads it
    routed_tokens: int  # tokens handed to the routing (0: none, or a FULL replay)
    route: str | None  # swap_in / all_resident / None
    error: str | None  # the exact ValueError text, or None
    draft: DraftSteps | None = None  # the drafter's K - 1 draft steps after it (K >= 2)

    def as_dict(self) -> dict:
        return {"rank": self.rank, "scheduled": {str(r): n for r, n in self.scheduled.items()},
                "num_tokens": self.num_tokens, "num_decode_tokens": self.num_decode_tokens,
                "dispatch": self.dispatch, "padded": self.padded,
                "dummy": None if self.dummy is None else list(self.dummy),
                "resident": self.resident, "routed_tokens": self.routed_tokens,
                "route": self.route, "error": self.error,
                "draft": self.draft._asdict() if self.draft else None}


def _one_rank(name: str) -> property:
    """``step.<name>`` of a one-rank step: its rank's; with several ranks read ``ranks``."""
    def get(self):
        if len(self.ranks) != 1:
            raise AttributeError(f"StepResult.{name}: {len(self.ranks)} ranks; read .ranks")
        return getattr(self.ranks[0], name)
    return property(get, doc=f"The one rank's ``{name}`` (data_parallel_size = 1).")


class StepResult(NamedTuple):
    """One engine step: the mode the ranks agreed on and each rank's forward."""

    step: int  # engine step number (iteration of the ranks' lockstep loop)
    mode: str  # the mode the ranks agreed on (one rank: its own dispatch)
    ranks: tuple  # RankStep per rank

    @property
    def error(self) -> str | None:
        """The first rank's error in this step, or None."""
        for r in self.ranks:
            if r.error:
                return r.error
        return None

    scheduled = _one_rank("scheduled")
    num_tokens = _one_rank("num_tokens")
    num_decode_tokens = _one_rank("num_decode_tokens")
    dispatch = _one_rank("dispatch")
    padded = _one_rank("padded")
    resident = _one_rank("resident")
    routed_tokens = _one_rank("routed_tokens")
    route = _one_rank("route")
    draft = _one_rank("draft")


def step_error(p: Plan, st) -> str | None:
    """The error serving scheduler step ``st`` raises under ``p`` (rank 0), or None: the one
    crash test of every serving loop (``traffic_risk.first_crash``, ``stream_replay.
    serve_stream``, ``finish_times.serve_on_clock``).  Only a version whose routing can send
    more than C rows to ``swap_in`` crashes (``VersionRules.crashes``), and a step routes at
    most its tokens, so one of C tokens or fewer is not routed here at all."""
    if not p.rules.crashes or st.num_tokens <= p.swap_capacity:
        return None
    return route_step(p, st).error


def route_step(p: Plan, st, rank: int = 0) -> RankStep:
    """Dispatch and route one rank's own scheduler step
    (a :class:`~hisparse_model.schedule.step.Step`) as rank ``rank``."""
    qlens = st.runner_query_lens()
    n = sum(qlens)
    d = step_dispatch(p, st)
    dec, routed, path, error = route_batch(p, qlens, st.resident)
    if d.mode == "FULL":  # a replay: the routing of the capture is reused, nothing new
        routed, path, error = 0, None, None
    # the drafter runs after the target's forward, so not when it raised; 0.33.0 skips
    # the draft steps when no request of the step can use them (Step.drafts)
    draft = None if error or not st.drafts else draft_steps(p, len(qlens), st.resident)
    return RankStep(rank, dict(st.scheduled), n, dec, d.mode, d.padded, None, st.resident,
                    routed, path, error, draft)
