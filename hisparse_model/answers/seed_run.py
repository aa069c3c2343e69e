"""One seed's traffic served until its first crash (:class:`SeedRun`), and the prompt the
model serves as each accepted request (:func:`prompt_of`): what ``traffic_risk.py`` and a
streamed replay (``stream_replay.py``) both give back for a seed."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..model.host_pool import HostPoolShort
from ..schedule.shared_prompts import BlockPrompt
from ..schedule.workload import DistinctPrompt, Request, Workload

REPLAY = "the trace's replay"  # what a refusal calls a trace replayed at its own times


def served_what(traffic, minutes: float, seed: int) -> str:
    """What a host pool's refusal calls the traffic one seed served: a Poisson seed's traffic,
    a trace's replay, or (a replay stopped at ``--minutes`` with rows left) the trace's first
    minutes, whose peak is all that the pool it suggests covers."""
    if getattr(traffic, "what", None):  # Poisson traffic made as it is served (stream_replay)
        return traffic.what
    if not traffic.replayed:
        return f"seed {seed}'s traffic"
    cut = traffic.past_minutes if getattr(traffic, "streamed", False) else bool(
        traffic.arrivals_s) and traffic.arrivals_s[-1] >= minutes * 60
    if not cut:
        return REPLAY
    return (f"the trace's first {minutes:g} min replayed (--minutes; the rows after them, "
            "not replayed, may need more)")


@dataclass
class SeedRun:
    """One seed's traffic, served until its first crash or its end."""

    seed: int
    requests: tuple  # (arrival_step, prompt_len, max_tokens) of every accepted request
    refused: int  # requests the server refuses at its door (refused_at_door)
    crash_step: int | None = None  # engine step of the first crash (None: no serving crash)
    error: str | None = None
    kind: str | None = None  # exposure kind of the crash step
    tokens: int | None = None  # tokens the crash step computed
    startup: bool = False  # the engine died at start-up, before any traffic
    blocks: tuple = ()  # each accepted request's shared prompt blocks (a trace's hash_ids)
    short: HostPoolShort | None = None  # the host pool may run short: the model declines
    evicted: int = 0  # cached prefix blocks the host pool evicted (schedule/host_cache.py)
    evicted_from: int | None = None  # the engine step of the first eviction

    def cached_from(self, cache) -> None:
        """What the host pool's cache (``HostCache`` or None) evicted while this was served."""
        if cache is not None:
            self.evicted, self.evicted_from = cache.evicted, cache.first_step

    @property
    def crashed(self) -> bool:
        return self.startup or self.crash_step is not None

    @property
    def served(self) -> int:
        """Requests accepted (every arrival the door let in, up to the crash and after)."""
        return len(self.requests)

    @property
    def arrived(self) -> int:
        """Requests that arrived by the crash step (all of them without a crash)."""
        return len(self.workload())

    def minute(self, step_ms: float) -> float | None:
        """When it crashed, in minutes from the first request (0 at start-up)."""
        if self.startup:
            return 0.0
        return None if self.crash_step is None else self.crash_step * step_ms / 60000

    def workload(self) -> Workload:
        """The requests that arrived by the crash step (all of them without a crash), as a
        workload ``simulate --workload`` serves to the same crash."""
        cut = self.crash_step if self.crash_step is not None else math.inf
        blocks = self.blocks or (None,) * len(self.requests)
        return Workload(tuple(
            Request(prompt_of(i, n, b), m, a)
            for i, ((a, n, m), b) in enumerate(zip(self.requests, blocks)) if a <= cut))

    def as_json(self, step_ms: float) -> dict:
        return {"seed": self.seed, "crashed": self.crashed, "minute": self.minute(step_ms),
                "crash_step": self.crash_step, "kind": self.kind, "tokens": self.tokens,
                "error": self.error, "requests": self.served, "refused": self.refused,
                "host_evicted": {"blocks": self.evicted, "from_step": self.evicted_from}}


def prompt_of(i: int, n: int, blocks=None):
    """The token ids the model serves as accepted request ``i`` of ``n`` tokens: its own
    prompt, or the shared content blocks a trace's ``hash_ids`` name."""
    return DistinctPrompt(i, n) if blocks is None else BlockPrompt(blocks, n)


