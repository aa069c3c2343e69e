"""What ``simulate --traffic`` prints: the odds, the curve, each crash and how to replay it."""

from __future__ import annotations

from ..answers.simulate import SIMULATE_ASSUMPTIONS
from .plural import count
from ..answers.traffic_risk import TRAFFIC_ASSUMPTIONS, Estimate

KIND_WORDS = {  # exposure.py's kinds, and the two a served step adds
    "startup": "start-up, before any traffic",
    "lone_prompt": "a prompt computed whole with no decode running",
    "last_chunk": "the last chunk of a chunked prompt with no decode running",
    "cached_prefix": "a prompt's uncached rest after a prefix-cache hit, no decode running",
    "burst": "prompts arriving together, no decode running",
    "mixed": "a step mixing decodes with prefill",
}
CURVE_MINUTES = (1, 5, 10, 30, 60)  # the text's table of P(crash by t), within --minutes
ASSUMPTIONS = SIMULATE_ASSUMPTIONS[:3] + TRAFFIC_ASSUMPTIONS


def _minutes(m: float) -> str:
    return f"{m:.1f} min" if m >= 1 else f"{m * 60:.0f} s"


def _replay_words(est: Estimate) -> str:
    """What a replay served: the trace's first --minutes, or the whole of a shorter one."""
    t = est.traffic
    if getattr(t, "streamed", False):
        return t.served_words(est.minutes, bool(est.crashed))
    whole = t.arrivals_s[-1] < est.minutes * 60
    span = (f"the whole trace ({len(t.arrivals_s):,} requests over "
            f"{_minutes(t.arrivals_s[-1] / 60)}, within --minutes {est.minutes:g})" if whole
            else f"the first {_minutes(est.minutes)} of the trace (--minutes)")
    cut = ", up to the crash (the rest not served)" if est.crashed else ""
    return (f"Served: {span}{cut}, one replay (the trace fixes every arrival and length: a "
            "seed has nothing to vary)")


def estimate_lines(est: Estimate, replay: str | None = None, served=None) -> list[str]:
    """The answer in words: traffic, odds, median, curve, kinds, the first crashes, and the
    replay on the engine's clock when ``served`` (:func:`clock_lines`)."""
    k, t = est.knobs, est.traffic
    n = len(est.runs)
    seeds = f"seeds {est.runs[0].seed}..{est.runs[-1].seed}" if n > 1 else f"seed {est.runs[0].seed}"
    lines = [f"vLLM {k.vllm_version}{' + upstream fix' if k.routing == 'fix' else ''}  "
             f"S={k.max_num_seqs} B={k.max_num_batched_tokens} max_model_len={k.max_model_len}"
             f"  {k.attention_backend}",
             f"Traffic {t.source}: {t.rate_per_s:g} requests/s ({t.arrivals_words()}), "
             f"prompt_len {t.prompt_len.describe()}, max_tokens {t.max_tokens.describe()}",
             (_replay_words(est) if t.replayed else
              f"Served: {_minutes(est.minutes)} per seed, {n} {seeds}")
             + f", one engine step = {est.step_ms:.3g} ms",
             est.step_said or f"Step time: {est.step_ms:.3g} ms per engine step (assumed)"]
    arrived = est.served + est.refused
    if est.refused:  # arrivals.refused_at_door: vLLM's server answers them HTTP 400
        lines.append(f"Refused: {est.refused:,} of {arrived:,} requests "
                     f"({100 * est.refused / arrived:.0f} %): prompt and max_tokens together "
                     f"past max_model_len {k.max_model_len:,}, which vLLM's server answers "
                     f"HTTP 400; the rest served")
    evicting = [r for r in est.runs if r.evicted]
    if evicting:  # schedule/host_cache.py: where the model's hits may part from vLLM's
        first = min(evicting, key=lambda r: r.evicted_from)
        if t.replayed:
            where = (f"the replay evicted {first.evicted:,} cached blocks from engine step "
                     f"{first.evicted_from:,}")
        else:
            most = max(r.evicted for r in evicting)
            where = (f"{count(len(evicting), 'seed')} of {n} evicted "
                     f"{sum(r.evicted for r in evicting):,} cached blocks in all (at most "
                     f"{most:,} in one), the first at engine step {first.evicted_from:,} (seed "
                     f"{first.seed})")
        lines.append(f"Host pool: full of cached prefixes, {where}, least recently freed "
                     "first; the model decides when from its bound on the blocks in use, so "
                     "a prefix hit near that edge may be one vLLM still had")
    lines.append("")
    crashed = est.crashed
    lines.append(f"Crashed within {_minutes(est.minutes)}: {len(crashed)} of {n} seeds "
                 f"({100 * est.share:.0f} %)")
    if est.never_because:
        lines.append(f"  no traffic can crash this server ({est.never_because}): no seed was "
                     "served")
    median = est.median_minutes
    if crashed:
        first = min(r.minute(est.step_ms) for r in crashed)
        lines.append("Time to first crash: median " + (
            _minutes(median) if median is not None
            else f"over {_minutes(est.minutes)} (half the seeds or more survived)")
            + f", earliest {_minutes(first)}")
        points = [m for m in CURVE_MINUTES if m < est.minutes] + [est.minutes]
        lines.append("P(crashed by t): " + "   ".join(
            f"{_minutes(m)} {100 * est.by(m):.0f} %" for m in points))
        lines.append("By kind of step: " + ", ".join(
            f"{kind} {count} ({KIND_WORDS.get(kind, kind)})" for kind, count in est.kinds.items()))
        lines.append("")
        for r in sorted(crashed, key=lambda r: r.minute(est.step_ms))[:5]:
            where = "at start-up" if r.startup else (
                f"at {_minutes(r.minute(est.step_ms))} (engine step {r.crash_step}, a "
                f"{r.tokens}-token {r.kind} step, after {r.arrived} requests)")
            lines.append(f"  seed {r.seed}: crashed {where}")
            lines.append(f"    {r.error}")
    if replay:
        lines.append(f"  {replay}")
    lines += clock_lines(served)
    lines += ["", "Assumptions:"] + [f"  - {a}" for a in ASSUMPTIONS]
    return lines


def estimate_json(est: Estimate) -> dict:
    return {**est.as_json(), "assumptions": list(ASSUMPTIONS)}


def clock_lines(served) -> list[str]:
    """The replay on the engine's clock (``answers/finish_times.py``), when one was served:
    its clock, the crash on it, the requests finished and their median latency."""
    if served is None:
        return []
    import statistics

    done = [served.latency_s(i) for i in sorted(served.finish_s)]
    n = len(served.arrivals_s)
    crash = (f", crash at {served.crash_s:.3f} s on the clock" if served.crash_s is not None
             else "")
    lines = ["", f"On the engine's clock: {served.cost.line()}",
             f"  {len(done):,} of {count(n, 'request')} finished{crash}"
             + (f"; median latency {statistics.median(done):.3f} s, arrival to the end of "
                "the batch that finishes it" if done else "")
             + " (each request's finish: --json, on_the_clock)",
             "  assumed: " + served.assumed()]
    return lines
