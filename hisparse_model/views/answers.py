"""The answers to each notebook's "Try this", computed by the model from the question's start.

An answer is a function of the controls its question starts from (``start``: control name
-> value, as the dashboard shows it) and returns an :class:`Answer`: the ``values`` it
states (what tests/test_exercises.py recomputes), its ``text``, and ``given``: the knobs and
inputs it was computed for, as the notebook's dashboard keys its state, so a test can check
that the answer is for the state the question's controls put the dashboard in.
"""

from __future__ import annotations

import shlex
from typing import NamedTuple

from ..text import chart_data as cd
from ..answers.advice import ranges
from ..answers.exposure import exposure
from ..model.knobs import Knobs
from ..model.plan import plan
from ..inputs.launch import from_command
from ..answers.predict import predict
from ..answers.simulate import simulate
from ..answers.server_verdict import NEVER_STARTS, server_verdict
from ..schedule.workload import synthetic
from .controls import SPECS, UI_RANGE, knob_value, parse_prompt_lens
from .first_request import prompt_name


class Answer(NamedTuple):
    values: dict  # what the answer states, for a test to recompute
    text: str
    given: dict  # the state it answers for, as the notebook's dashboard keys its state


def start_knobs(start: dict, **fixed) -> Knobs:
    """The knobs ``start``'s controls say, as a dashboard reads its controls (0 and "default"
    mean not set), over the knobs' defaults and ``fixed`` (what a dashboard fixes)."""
    values = {n: knob_value(SPECS[n], v) for n, v in start.items() if n in SPECS}
    return Knobs(**{**fixed, **values})


def _given(knobs: Knobs, **inputs) -> dict:
    return {**knobs.as_dict(), **inputs}


def _crash_sizes(knobs: Knobs) -> list[int]:
    s = predict(knobs).sizes
    lanes = cd.route_lanes(s.swap_capacity, max_tokens=s.max_num_batched_tokens)
    return lanes["crash_sizes"][next(iter(cd.OFF_BY_ONE_LANES))]


def _by_outcome(strip: dict, keys) -> dict:
    """A max_num_seqs strip as ``{outcome: [max_num_seqs with it]}`` for ``keys``."""
    return {k: [s for s, o in zip(strip["max_num_seqs"], strip["outcome"]) if o == k]
            for k in keys}


# --------------------------------------------------------------------------
# notebook 1
# --------------------------------------------------------------------------


def mtp_sizes(start: dict) -> Answer:
    knobs = start_knobs(start)
    s, crash = predict(knobs).sizes, _crash_sizes(knobs)
    q = s.max_decode_query_len
    return Answer({"q": q, "C": s.swap_capacity, "W": s.workspace_rows, "crash": crash},
                  f"q = 1 + {knobs.num_speculative_tokens or 0} = {q}, C = min(B = "
                  f"{s.max_num_batched_tokens}, {knobs.max_num_seqs} · {q}) = "
                  f"{s.swap_capacity}, W = C + 1 = {s.workspace_rows}: the batch of exactly "
                  f"n = {', '.join(map(str, crash))} routed tokens crashes 0.31.0.",
                  _given(knobs))


def c_equals_b(start: dict) -> Answer:
    knobs = start_knobs(start)
    s = predict(knobs).sizes
    crash = _crash_sizes(knobs)
    return Answer({"C": s.swap_capacity, "B": s.max_num_batched_tokens, "crash": crash},
                  f"C = min(B, {knobs.max_num_seqs} · {s.max_decode_query_len}) = "
                  f"{s.swap_capacity} = B, so W = {s.workspace_rows} > B "
                  f"= {s.max_num_batched_tokens}: no step holds W tokens, and "
                  + ("no batch crashes." if not crash else f"n = {crash} crashes."),
                  _given(knobs))


def model_len_range() -> tuple[int, int]:
    """max_model_len's slider range (the dashboards' controls)."""
    return UI_RANGE["max_model_len"]


def model_len_moves_c(start: dict) -> Answer:
    lo, hi = model_len_range()
    knobs = start_knobs(start)
    cs = {m: predict(knobs.replace(max_model_len=m)).sizes.swap_capacity for m in (lo, 320, hi)}
    still = len(set(cs.values())) == 1
    c = cs[lo]
    return Answer({"C": sorted(set(cs.values())), "range": (lo, hi)},
                  f"max_model_len {lo} … {hi} gives C = {', '.join(map(str, sorted(set(cs.values()))))}"
                  + (": C does not move. B = min(2 · max_model_len, 16384) is at least "
                     f"{2 * lo} here, never below max_num_seqs · q = {c}, so C = min(B, {c}) "
                     f"= {c}." if still else "."), _given(knobs))


def b_moves_c(start: dict) -> Answer:
    knobs = start_knobs(start)
    out = {}
    for b in range(2, 8):
        try:
            out[b] = predict(knobs.replace(max_num_batched_tokens=b)).sizes.swap_capacity
        except ValueError:
            out[b] = None
    refused = [b for b, c in out.items() if c is None]
    moving = {b: c for b, c in out.items() if c is not None}
    never = [b for b in moving if server_verdict(knobs.replace(  # the one verdict's kind
        max_num_batched_tokens=b)).kind == NEVER_STARTS]
    top = knobs.max_num_seqs * (1 + (k := knobs.num_speculative_tokens or 0))  # S · q
    return Answer({"C": out, "never_starts": never},
                  ("vLLM refuses B = " + ", ".join(map(str, refused)) + " (too few tokens for "
                   "the speculative ones); " if refused else "")
                  + "; ".join(f"B = {b}: C = {c}" for b, c in moving.items())
                  + f". C = min(B, max_num_seqs · q) follows B until B reaches {top}."
                  + (f" But at B = {' and '.join(map(str, never))} the server never starts: "
                     f"with K = {k} the JIT warmup needs B ≥ K + 2 = {k + 2} (else start-up "
                     "dies of an IndexError, not the swap-row overflow)." if never else ""),
                  _given(knobs))


# --------------------------------------------------------------------------
# notebook 2
# --------------------------------------------------------------------------


def first_prompt_crash(start: dict) -> Answer:
    knobs, lens = start_knobs(start), parse_prompt_lens(start["prompt_lens"])
    pred = predict(knobs, lens)
    bad = next(i for i, p in enumerate(pred.prompts) if p.ran and not p.ok)
    return Answer({"prompt": bad + 1, "length": pred.prompts[bad].n,
                   "startup_ok": pred.startup_ok},
                  f"Start-up {'survives' if pred.startup_ok else 'dies'} (the captures "
                  f"{pred.capture_sizes} skip W = {pred.sizes.workspace_rows}); "
                  f"{prompt_name(bad, pred.prompts[bad].n)} is the first that crashes: its "
                  f"prefill is n = W = {pred.sizes.workspace_rows} routed tokens.",
                  _given(knobs, prompt_lens=lens))


def eager_moves_crash(start: dict) -> Answer:
    knobs, lens = start_knobs(start), parse_prompt_lens(start["prompt_lens"])
    pred = predict(knobs, lens)
    bad = [i for i, p in enumerate(pred.prompts) if p.ran and not p.ok]
    first = bad[0] if bad else None
    return Answer({"startup_ok": pred.startup_ok, "prompt": None if first is None else first + 1},
                  f"With enforce_eager there are {len(pred.startup)} start-up batches, so "
                  f"start-up {'survives' if pred.startup_ok else 'dies'}; "
                  + (f"{prompt_name(first, pred.prompts[first].n)} crashes: W = "
                     f"{pred.sizes.workspace_rows} = its length." if bad else
                     "no prompt crashes."), _given(knobs, prompt_lens=lens))


def strip_with_b64(start: dict) -> Answer:
    said = ((cd.STARTUP_CRASH, "start-up crashes at max_num_seqs"),
            (cd.RUNTIME_CRASH, "a lone prompt crashes at"),
            (cd.EXPOSED, "only requests arriving together crash it at"),
            (cd.SAFE, "no traffic crashes it at"),
            (cd.INVALID, "vLLM refuses it (B < max_num_seqs) at"))
    knobs = start_knobs(start)
    by = _by_outcome(cd.seqs_strip(knobs), [k for k, _ in said])
    return Answer(by, f"With B = {knobs.max_num_batched_tokens}: " + "; ".join(
        f"{words} {ranges(by[k])}" if by[k] else  # "at none" would read as a value
        "none where " + words.removesuffix(" at max_num_seqs").removesuffix(" at")
        for k, words in said) + ".", _given(knobs))


# --------------------------------------------------------------------------
# notebook 3
# --------------------------------------------------------------------------


def chunked_67(start: dict) -> Answer:
    knobs, lens = start_knobs(start), parse_prompt_lens(start["prompt_lens"])
    i = lens.index(67)
    p = predict(knobs, lens).prompts[i]
    chunks = [b.num_tokens for b in p.batches if b.phase != "decode" and "decode" not in b.label]
    crashes = cd.prompt_lanes(knobs)["crash_sizes"]["0.31.0"]
    return Answer({"chunks": chunks, "crashes": not p.ok, "crash_lengths": crashes},
                  f"A 67-token prompt is prefilled as {' + '.join(map(str, chunks))} tokens; "
                  + (f"the last chunk is W = {chunks[-1]} tokens and 0.31.0 crashes. "
                     if not p.ok else "0.31.0 serves it. ")
                  + f"Prompt lengths that crash 0.31.0 with these knobs: {ranges(crashes)}.",
                  _given(knobs, prompt_lens=lens))


def fix_matches_032(start: dict) -> Answer:
    knobs, lens = start_knobs(start), parse_prompt_lens(start["prompt_lens"])
    fixed = predict(knobs, lens)
    new = predict(cd.version_knobs(knobs.replace(routing="stock"), "0.32.0"), lens)
    same = [(a.ok, a.error) for a in fixed.prompts] == [(b.ok, b.error) for b in new.prompts]
    return Answer({"same": same}, ("Yes: " if same else "No: ") + "with routing = fix, 0.31.0 "
                  + ("serves every prompt as 0.32.0 does (both check n ≤ C)." if same else
                     "and 0.32.0 differ on some prompt."), _given(knobs, prompt_lens=lens))


def flashmla_routes(start: dict) -> Answer:
    knobs, lens = start_knobs(start), parse_prompt_lens(start["prompt_lens"])
    pred = predict(knobs, lens)
    routed = [(i, b.label, b.routed) for i, p in enumerate(pred.prompts) for b in p.batches
              if b.routed and "decode" not in b.label]
    return Answer({"routed_prefills": routed},
                  ("Prefills still routed: " + ", ".join(
                      f"{prompt_name(i, pred.prompts[i].n)}'s {label} (n = {n}, at most q "
                      "tokens, so it counts as decode)" for i, label, n in routed)
                   + "; every other prefill is staged" if routed else
                   f"None: {knobs.attention_backend} stages every prefill and routes decode "
                   "tokens only") + ", so n ≤ C always.", _given(knobs, prompt_lens=lens))


def mtp_workload(start: dict) -> Answer:
    knobs, lens = start_knobs(start), parse_prompt_lens(start["prompt_lens"])
    pred = predict(knobs, lens)
    bad = [i for i, p in enumerate(pred.prompts) if p.ran and not p.ok]
    return Answer({"W": pred.sizes.workspace_rows, "prompts": [i + 1 for i in bad]},
                  f"q = {pred.sizes.max_decode_query_len}, C = {pred.sizes.swap_capacity}, "
                  f"W = {pred.sizes.workspace_rows}: "
                  + (", ".join(prompt_name(i, lens[i]) for i in bad) + " crashes"
                     if bad else "no prompt crashes") + " in 0.31.0.",
                  _given(knobs, prompt_lens=lens))


# --------------------------------------------------------------------------
# notebook 4
# --------------------------------------------------------------------------


def _recording_rows() -> list[dict]:
    from ..recorded.recordings import load_all, summary_row
    return [summary_row(r) for r in load_all()]


def recordings_agree(start: dict) -> Answer:
    rows = _recording_rows()
    agree = sum(r["agrees"] for r in rows)
    return Answer({"agree": agree, "total": len(rows)},
                  f"{agree} of {len(rows)} recordings agree with the model, sizes, outcomes and "
                  "every routing call included.", {})


def stop_at_w(start: dict) -> Answer:
    row = next(r for r in _recording_rows() if r["name"] == start["recording"])
    pred = predict(row["knobs"], row["prompt_lens"])
    bad = next(p for p in pred.prompts if not p.ok)
    last = next(b for b in bad.batches if b.error)
    s = pred.sizes
    return Answer({"routed": last.routed, "label": last.label, "length": bad.n},
                  f"B = {s.max_num_batched_tokens}, so the {bad.n}-token prompt is chunked; its "
                  f"{last.label} has {last.num_tokens} tokens, n = {last.routed} = W routed to "
                  f"swap_in, which has C = {s.swap_capacity} rows: stop={last.routed}.",
                  {"recording": row["name"]})


# --------------------------------------------------------------------------
# notebooks 5 and 6
# --------------------------------------------------------------------------


def _traffic(start: dict) -> tuple[Knobs, object]:
    """The traffic dashboard's knobs and workload for ``start``: ``synthetic``, lengths cycled."""
    work = synthetic(start["requests"], parse_prompt_lens(start["prompt_lens"]),
                     start["arrival_spacing"], start["max_tokens"])
    return start_knobs(start), work


def _traffic_given(knobs: Knobs, work) -> dict:
    return _given(knobs, requests=len(work.requests), workload=work.as_json()["requests"])


def default_traffic(start: dict) -> Answer:
    knobs, work = _traffic(start)
    sched = simulate(knobs, work)
    step = sched.steps[-1]
    return Answer({"step": sched.crash["step"], "routed": step.routed_tokens},
                  f"Both prompts arrive together: step {sched.crash['step']} prefills "
                  f"{' + '.join(map(str, step.scheduled.values()))} = {step.num_tokens} tokens, "
                  f"n = {step.routed_tokens} = W = C + 1 routed, and 0.31.0 crashes.",
                  _traffic_given(knobs, work))


def traffic_map(start: dict) -> Answer:
    knobs, work = _traffic(start)
    by = _by_outcome(cd.traffic_seqs_strip(knobs, work),
                     (cd.STARTUP_CRASH, cd.RUNTIME_CRASH, cd.SAFE))
    dead = by[cd.STARTUP_CRASH]
    why = ""
    if dead:
        b = predict(knobs.replace(max_num_seqs=dead[0])).startup_crash_batch
        why = f" (at max_num_seqs = {dead[0]} its {b.label} routes n = {b.routed} = W)"
    return Answer(by, f"Start-up crash at {ranges(dead) or 'none'}{why}; the traffic crashes at "
                  f"{ranges(by[cd.RUNTIME_CRASH]) or 'none'}; safe at "
                  f"{ranges(by[cd.SAFE]) or 'none'}.", _traffic_given(knobs, work))


def spaced_traffic(start: dict) -> Answer:
    knobs, work = _traffic(start)
    sched = simulate(knobs, work)
    most = max(s.routed_tokens for s in sched.steps)
    return Answer({"crash": sched.crash is not None, "most": most},
                  f"One step apart, the two prefills never share a step: the most any step "
                  f"routes is n = {most}, W = {sched.plan.workspace_rows}: "
                  + ("it still crashes." if sched.crash else "it does not crash."),
                  _traffic_given(knobs, work))


def dp_crash(start: dict) -> Answer:
    from .two_gpus import DP, scenario
    knobs = start_knobs(start, data_parallel_size=DP)
    seqs, version = knobs.max_num_seqs, knobs.vllm_version
    work = scenario(knobs, start["joining_prompt"])
    given = _given(knobs, workload=work.as_json()["requests"])
    crash = simulate(knobs, work).crash
    if crash is None:
        return Answer({"crash": None}, f"vLLM {version}, max_num_seqs = {seqs}: no rank "
                      "crashes.", given)
    whose = "its own batch" if crash["scheduled"] else "a dummy batch (it scheduled nothing)"
    return Answer({"crash": (crash["step"], crash["rank"], bool(crash["scheduled"]))},
                  f"vLLM {version}, max_num_seqs = {seqs}: rank {crash['rank']} dies at step "
                  f"{crash['step']} on {whose}.", given)


def dp_crashing_seqs(start: dict) -> Answer:
    from .two_gpus import DP, by_outcome, dp_strip, scenario
    knobs = start_knobs(start, data_parallel_size=DP)
    strip = dp_strip(knobs, start["joining_prompt"])
    by = by_outcome(strip)
    crashing = by.get(cd.RUNTIME_CRASH, [])
    started = sorted(by.get(cd.SAFE, []) + crashing)  # start-up survived
    captured = [s for s in started
                if s + 1 in predict(knobs.replace(max_num_seqs=s)).capture_sizes]
    why = (": of those whose start-up survives, exactly the ones where S + 1 = W is a "
           "CUDA-graph capture size, so the idle rank's dummy batch pads to W tokens"
           if captured == crashing else "")
    work = scenario(knobs, start["joining_prompt"])
    return Answer({"crashing": crashing}, f"Of max_num_seqs {strip['max_num_seqs'][0]} … "
                  f"{strip['max_num_seqs'][-1]}, a rank crashes at {ranges(crashing) or 'none'}"
                  f"{why}.", _given(knobs, workload=work.as_json()["requests"]))


# --------------------------------------------------------------------------
# notebook 7
# --------------------------------------------------------------------------


def exposed_and_what_a_step_loses(start: dict) -> Answer:
    """:func:`exposed`, and what the command's B costs against vllm serve's default B for
    the same server: tokens a step computes, and the steps of its longest prompt."""
    base = exposed(start)
    knobs = from_command(shlex.split(start["command"]), start["vllm_version"]).knobs
    default = from_command(_without_b(shlex.split(start["command"])),
                           start["vllm_version"]).knobs
    b, b0 = plan(knobs).max_num_batched_tokens, plan(default).max_num_batched_tokens
    longest = knobs.max_model_len - 1  # the longest prompt vLLM serves
    steps, steps0 = -(-longest // b), -(-longest // b0)
    text = (f"{base.text} What a step loses: B = {b} tokens a step instead of vllm serve's "
            f"default {b0}, {b0 // b} times fewer, so the longest prompt ({longest:,} "
            f"tokens) is computed in {steps:,} steps instead of {steps0:,}, each decode step "
            f"still serving up to max_num_seqs requests.")
    return Answer({**base.values, "tokens_per_step": (b, b0), "longest_prompt_steps":
                   (steps, steps0)}, text, base.given)


def _without_b(words: list[str]) -> list[str]:
    """A command's words less its --max-num-batched-tokens (both spellings)."""
    out, skip = [], False
    for w in words:
        if skip:
            skip = False
            continue
        if w == "--max-num-batched-tokens":
            skip = True
            continue
        if w.startswith("--max-num-batched-tokens="):
            continue
        out.append(w)
    return out


def exposed(start: dict) -> Answer:
    """The verdict for all traffic of the start's pasted command (else its knobs)."""
    if start["command"]:
        knobs = from_command(shlex.split(start["command"]), start["vllm_version"]).knobs
    else:
        knobs = start_knobs(start)
    exp = exposure(knobs)
    tokens = sorted({st.tokens for st in exp.steps if st.tokens})
    kinds = [st.kind for st in exp.steps]
    if exp.exposed:
        text = (f"Exposed: {len(exp.steps)} kind(s) of step kill it ("
                + "; ".join(st.what for st in exp.steps) + ").")
    else:
        text = f"Safe for all traffic: {exp.never_because}."
    return Answer({"exposed": exp.exposed, "tokens": tokens, "kinds": kinds}, text,
                  _given(knobs))
