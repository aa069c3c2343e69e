"""When each request of a traffic finishes, on the engine's clock (``schedule/clock.py``).

``simulate --traffic --json`` reports a crash and its time; this is the rest of the replay:
every accepted request's arrival and the end of the batch that finishes it, served under the
knobs until the first crash (requests unfinished then have no finish). The scheduler is the
model's (``schedule/scheduler.py``), the batches' cost a :class:`~..schedule.clock.StepCost`.

No vLLM import. Assumptions: the scheduler's (prefix caching as configured, no preemption,
MTP drafts accepted as ``accepted`` says) and the clock's (its module docstring).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..model.knobs import Knobs
from ..schedule.clock import StepCost, TimedArrivals
from .arrivals import accepted_arrivals
from .traffic_risk import SeedRun, Traffic, TrafficError


@dataclass(frozen=True)
class Served:
    """One seed's requests on the clock."""

    cost: StepCost
    arrivals_s: tuple  # accepted request i's arrival
    finish_s: dict  # request -> finish (absent: not finished by the crash or the end)
    crash_s: float | None  # when the crash step started (None: no crash)
    crash_scheduled: dict  # request -> tokens of the crash step
    batches: int  # batches scheduled (the crash step included; not engine step numbers)
    engine_s: float  # the batches' costs together (the clock's busy time)

    def latency_s(self, i: int) -> float | None:
        f = self.finish_s.get(i)
        return None if f is None else f - self.arrivals_s[i]

    @property
    def mean_step_ms(self) -> float | None:
        """The mean cost of a batch over the replay (None: no batch)."""
        return self.engine_s * 1000 / self.batches if self.batches else None

    def assumed(self) -> str:
        """What the replay on this clock assumes, in words (the text's ``assumed:`` line and
        ``--json``'s ``on_the_clock.assumed``)."""
        return ("the batches run back to back, each for its cost, while work is queued; a "
                "request is done when its last batch ends (HTTP not counted)"
                + ("; one GPU, whose engine core launches each next batch itself (its launch "
                   "priced by how that batch runs on this server's CUDA graphs)"
                   if self.cost.launches else "")
                + ("; the host as fast as when the batches were measured (on the H100 of "
                   "2026-12-07 the same replay run twice differed by a median 14 % a request: "
                   "docs/simulate.md)" if self.cost.measured else ""))

    def as_json(self) -> dict:
        return {"clock": self.cost.as_json(), "clock_line": self.cost.line(),
                "assumed": self.assumed(),
                "crash_s": self.crash_s, "batches": self.batches,
                "crash_scheduled": {str(i): n for i, n in self.crash_scheduled.items()},
                "requests": [{"i": i, "arrival_s": round(a, 6),
                              "finish_s": None if i not in self.finish_s
                              else round(self.finish_s[i], 6)}
                             for i, a in enumerate(self.arrivals_s)]}


def serve_on_clock(knobs: Knobs, traffic: Traffic, minutes: float, cost: StepCost,
                   seed: int = 0, accepted=None) -> Served:
    """Serve one seed of ``traffic`` over ``minutes`` on ``cost``'s clock (module docstring)."""
    from ..model.dispatch import step_dispatch
    from ..model.host_pool import HostUse
    from ..model.plan import plan
    from ..model.step_record import step_error
    from ..schedule.scheduler import _Sim
    from ..schedule.scheduler_config import acceptance, scheduler_config

    rows, refused = accepted_arrivals(traffic, minutes, seed, knobs.max_model_len)
    if not rows:  # as the traffic estimate says it (traffic_risk.check_traffic_knobs)
        raise TrafficError(f"traffic {getattr(traffic, 'source', 'traffic')}: every request "
                           f"within --minutes {minutes:g} ({refused:,}) is refused at the "
                           "server's door (its prompt and max_tokens together past "
                           f"max_model_len {knobs.max_model_len:,}): nothing is served")
    blocks = tuple(b for *_, b in rows) if traffic.blocks else ()
    work = SeedRun(seed, tuple((0, n, m) for _, n, m, _ in rows), refused,
                   blocks=blocks).workload()
    p = plan(knobs)
    sim = _Sim(scheduler_config(knobs, p), work, acceptance(accepted))
    clock = TimedArrivals([t for t, *_ in rows], cost, lambda st: step_dispatch(p, st).mode)
    host = HostUse(knobs, [r.prompt_len for r in work.requests], sim.evicting())  # evicts
    crash_s, crash_scheduled, batches = None, {}, 0
    for st, start in clock.steps(sim, work):
        batches += 1
        del sim.steps[:]  # nothing reads the list: memory stays flat over a long replay
        host.step(st)
        if step_error(p, st):
            crash_s, crash_scheduled = start, dict(st.scheduled)
            break
    finish = clock.finish_s
    if crash_s is not None:  # outputs of batches that ended after the crash never came back
        finish = {i: f for i, f in finish.items() if f <= crash_s}
    return Served(cost, tuple(t for t, *_ in rows), finish, crash_s, crash_scheduled, batches,
                  clock.busy_s)
