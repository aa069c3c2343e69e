"""Each notebook's "Try this": a question, and an answer the model computes (d2l-style).

Every answer is a function of the model (``predict``, ``simulate``, the strips), run when
the notebook shows it, so an answer cannot go stale when the model or a default changes;
tests/test_exercises.py recomputes each one's numbers another way.  An answer is an
:class:`Answer`: the ``values`` it states (what a test compares) and its ``text``.
:func:`try_this_html` shows a notebook's questions with each answer folded away in a
``<details>``, one click to reveal.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from .. import chart_data as cd
from ..advice import ranges
from ..exposure import exposure
from ..knobs import Knobs
from ..launch import from_command
from ..predict import predict
from ..simulate import simulate
from ..workload import synthetic
from .controls import UI_RANGE
from .first_request import prompt_name
from .tables import CSS, esc


class Answer(NamedTuple):
    values: dict  # what the answer states, for a test to recompute
    text: str


class Exercise(NamedTuple):
    question: str
    answer: Callable[[], Answer]


def _knobs(**kw) -> Knobs:
    return Knobs(**{"vllm_version": "0.31.0", **kw})


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


def mtp_sizes() -> Answer:
    knobs = _knobs(max_num_seqs=2, num_speculative_tokens=2)
    s, crash = predict(knobs).sizes, _crash_sizes(knobs)
    return Answer({"q": s.max_decode_query_len, "C": s.swap_capacity, "W": s.workspace_rows,
                   "crash": crash},
                  f"q = 1 + 2 = {s.max_decode_query_len}, C = min(B = "
                  f"{s.max_num_batched_tokens}, 2 · {s.max_decode_query_len}) = "
                  f"{s.swap_capacity}, W = C + 1 = {s.workspace_rows}: the batch of exactly "
                  f"n = {', '.join(map(str, crash))} routed tokens crashes 0.31.0.")


def c_equals_b() -> Answer:
    knobs = _knobs(max_num_seqs=4, max_num_batched_tokens=4)
    s = predict(knobs).sizes
    crash = _crash_sizes(knobs)
    return Answer({"C": s.swap_capacity, "B": s.max_num_batched_tokens, "crash": crash},
                  f"C = min(B, 4 · 1) = {s.swap_capacity} = B, so W = {s.workspace_rows} > B "
                  f"= {s.max_num_batched_tokens}: no step holds W tokens, and "
                  + ("no batch crashes." if not crash else f"n = {crash} crashes."))


def model_len_range() -> tuple[int, int]:
    """max_model_len's slider range (the dashboards' controls)."""
    return UI_RANGE["max_model_len"]


def model_len_moves_c() -> Answer:
    lo, hi = model_len_range()
    cs = {m: predict(_knobs(max_num_seqs=2, max_model_len=m)).sizes.swap_capacity
          for m in (lo, 320, hi)}
    still = len(set(cs.values())) == 1
    return Answer({"C": sorted(set(cs.values())), "range": (lo, hi)},
                  f"max_model_len {lo} … {hi} gives C = {', '.join(map(str, sorted(set(cs.values()))))}"
                  + (": C does not move. B = min(2 · max_model_len, 16384) is at least "
                     f"{2 * lo} here, never below max_num_seqs · q = 2, so C = min(B, 2) = 2."
                     if still else "."))


def b_moves_c() -> Answer:
    out = {}
    for b in range(2, 8):
        try:
            out[b] = predict(_knobs(max_num_seqs=2, num_speculative_tokens=2,
                                    max_num_batched_tokens=b)).sizes.swap_capacity
        except ValueError:
            out[b] = None
    refused = [b for b, c in out.items() if c is None]
    moving = {b: c for b, c in out.items() if c is not None}
    return Answer({"C": out},
                  ("vLLM refuses B = " + ", ".join(map(str, refused)) + " (too few tokens for "
                   "the speculative ones); " if refused else "")
                  + "; ".join(f"B = {b}: C = {c}" for b, c in moving.items())
                  + ". C = min(B, 2 · 3) follows B until B reaches max_num_seqs · q = 6.")


# --------------------------------------------------------------------------
# notebook 2
# --------------------------------------------------------------------------


def first_prompt_crash() -> Answer:
    pred = predict(_knobs(max_num_seqs=2), [2, 3, 200])
    bad = next(i for i, p in enumerate(pred.prompts) if p.ran and not p.ok)
    return Answer({"prompt": bad + 1, "length": pred.prompts[bad].n,
                   "startup_ok": pred.startup_ok},
                  f"Start-up {'survives' if pred.startup_ok else 'dies'} (the captures "
                  f"{pred.capture_sizes} skip W = {pred.sizes.workspace_rows}); "
                  f"{prompt_name(bad, pred.prompts[bad].n)} is the first that crashes: its "
                  f"prefill is n = W = {pred.sizes.workspace_rows} routed tokens.")


def eager_moves_crash() -> Answer:
    pred = predict(_knobs(max_num_seqs=1, enforce_eager=True), [2, 3, 200])
    bad = [i for i, p in enumerate(pred.prompts) if p.ran and not p.ok]
    first = bad[0] if bad else None
    return Answer({"startup_ok": pred.startup_ok, "prompt": None if first is None else first + 1},
                  f"With enforce_eager there are {len(pred.startup)} start-up batches, so "
                  f"start-up {'survives' if pred.startup_ok else 'dies'}; "
                  + (f"{prompt_name(first, pred.prompts[first].n)} crashes: W = "
                     f"{pred.sizes.workspace_rows} = its length." if bad else
                     "no prompt crashes."))


def strip_with_b64() -> Answer:
    said = ((cd.STARTUP_CRASH, "start-up crashes at max_num_seqs"),
            (cd.RUNTIME_CRASH, "a prompt crashes at"), (cd.SAFE, "safe at"),
            (cd.INVALID, "refused (B < max_num_seqs) at"))
    by = _by_outcome(cd.seqs_strip(_knobs(max_num_batched_tokens=64)), [k for k, _ in said])
    return Answer(by, "With B = 64: " + "; ".join(f"{words} {ranges(by[k]) or 'none'}"
                                                  for k, words in said) + ".")


# --------------------------------------------------------------------------
# notebook 3
# --------------------------------------------------------------------------


def chunked_67() -> Answer:
    knobs = _knobs(max_num_seqs=2, max_num_batched_tokens=64)
    p = predict(knobs, [67]).prompts[0]
    chunks = [b.num_tokens for b in p.batches if b.phase != "decode" and "decode" not in b.label]
    crashes = cd.prompt_lanes(knobs)["crash_sizes"]["0.31.0"]
    return Answer({"chunks": chunks, "crashes": not p.ok, "crash_lengths": crashes},
                  f"A 67-token prompt is prefilled as {' + '.join(map(str, chunks))} tokens; "
                  + (f"the last chunk is W = {chunks[-1]} tokens and 0.31.0 crashes. "
                     if not p.ok else "0.31.0 serves it. ")
                  + f"Prompt lengths that crash 0.31.0 with these knobs: {ranges(crashes)}.")


def fix_matches_032() -> Answer:
    knobs = _knobs(max_num_seqs=2, routing="fix")
    lens = [2, 3, 200]
    fixed = predict(knobs, lens)
    new = predict(cd.version_knobs(knobs.replace(routing="stock"), "0.32.0"), lens)
    same = [(a.ok, a.error) for a in fixed.prompts] == [(b.ok, b.error) for b in new.prompts]
    return Answer({"same": same}, ("Yes: " if same else "No: ") + "with routing = fix, 0.31.0 "
                  + ("serves every prompt as 0.32.0 does (both check n ≤ C)." if same else
                     "and 0.32.0 differ on some prompt."))


def flashmla_routes() -> Answer:
    pred = predict(_knobs(max_num_seqs=2, attention_backend="FLASHMLA_SPARSE"), [2, 3, 200])
    routed = [(i, b.label, b.routed) for i, p in enumerate(pred.prompts) for b in p.batches
              if b.routed and "decode" not in b.label]
    return Answer({"routed_prefills": routed},
                  "Prefills still routed: " + (", ".join(
                      f"{prompt_name(i, pred.prompts[i].n)}'s {label} (n = {n}, at most q "
                      "tokens, so it counts as decode)" for i, label, n in routed) or "none")
                  + "; every other prefill is staged, so n ≤ C always.")


def mtp_workload() -> Answer:
    lens = [2, 4, 5, 6]
    pred = predict(_knobs(max_num_seqs=2, num_speculative_tokens=1), lens)
    bad = [i for i, p in enumerate(pred.prompts) if p.ran and not p.ok]
    return Answer({"W": pred.sizes.workspace_rows, "prompts": [i + 1 for i in bad]},
                  f"q = 2, C = {pred.sizes.swap_capacity}, W = {pred.sizes.workspace_rows}: "
                  + (", ".join(prompt_name(i, lens[i]) for i in bad) + " crashes"
                     if bad else "no prompt crashes") + " in 0.31.0.")


# --------------------------------------------------------------------------
# notebook 4
# --------------------------------------------------------------------------


def recordings_agree() -> Answer:
    from ..recordings import load_all, summary_row
    rows = [summary_row(r) for r in load_all()]
    agree = sum(r["agrees"] for r in rows)
    return Answer({"agree": agree, "total": len(rows)},
                  f"{agree} of {len(rows)} recordings agree with the model, sizes, outcomes and "
                  "every routing call included.")


def stop_3_at_b64() -> Answer:
    p = predict(_knobs(max_num_seqs=2, max_num_batched_tokens=64), [67]).prompts[0]
    last = [b for b in p.batches if b.error][0]
    return Answer({"routed": last.routed, "label": last.label},
                  f"B = 64, so the 67-token prompt is chunked; its {last.label} has "
                  f"{last.num_tokens} tokens, n = {last.routed} = W routed to swap_in, which "
                  f"has C = 2 rows: stop={last.routed}.")


# --------------------------------------------------------------------------
# notebooks 5 and 6
# --------------------------------------------------------------------------


def default_traffic() -> Answer:
    sched = simulate(_knobs(max_num_seqs=4), synthetic(2, [3, 2], 0, 8))
    step = sched.steps[-1]
    return Answer({"step": sched.crash["step"], "routed": step.routed_tokens},
                  f"Both prompts arrive together: step {sched.crash['step']} prefills "
                  f"{' + '.join(map(str, step.scheduled.values()))} = {step.num_tokens} tokens, n = {step.routed_tokens} = W = C + 1 routed, and "
                  "0.31.0 crashes.")


def traffic_map() -> Answer:
    by = _by_outcome(cd.traffic_seqs_strip(_knobs(max_num_seqs=4), synthetic(2, [3, 2], 0, 8)),
                     (cd.STARTUP_CRASH, cd.RUNTIME_CRASH, cd.SAFE))
    dead = by[cd.STARTUP_CRASH]
    why = ""
    if dead:
        b = predict(_knobs(max_num_seqs=dead[0])).startup_crash_batch
        why = f" (at max_num_seqs = {dead[0]} its {b.label} routes n = {b.routed} = W)"
    return Answer(by, f"Start-up crash at {ranges(dead) or 'none'}{why}; the traffic crashes at "
                  f"{ranges(by[cd.RUNTIME_CRASH]) or 'none'}; safe at "
                  f"{ranges(by[cd.SAFE]) or 'none'}.")


def spaced_traffic() -> Answer:
    sched = simulate(_knobs(max_num_seqs=4), synthetic(2, [3, 2], 1, 8))
    most = max(s.routed_tokens for s in sched.steps)
    return Answer({"crash": sched.crash is not None, "most": most},
                  f"One step apart, the two prefills never share a step: the most any step "
                  f"routes is n = {most}, W = {sched.plan.workspace_rows}: "
                  + ("it still crashes." if sched.crash else "it does not crash."))


def dp_crash(seqs: int = 7, version: str = "0.31.0") -> Answer:
    from .two_gpus import two_rank_workload
    sched = simulate(_knobs(max_num_seqs=seqs, data_parallel_size=2, vllm_version=version),
                     two_rank_workload(seqs))
    crash = sched.crash
    if crash is None:
        return Answer({"crash": None}, f"vLLM {version}, max_num_seqs = {seqs}: no rank crashes.")
    whose = "its own batch" if crash["scheduled"] else "a dummy batch (it scheduled nothing)"
    return Answer({"crash": (crash["step"], crash["rank"], bool(crash["scheduled"]))},
                  f"vLLM {version}, max_num_seqs = {seqs}: rank {crash['rank']} dies at step "
                  f"{crash['step']} on {whose}.")


def dp_crashing_seqs() -> Answer:
    crashing = [s for s in range(2, 17) if dp_crash(s).values["crash"] is not None]
    captured = [s for s in range(2, 17) if s + 1 in predict(
        _knobs(max_num_seqs=s, data_parallel_size=2)).capture_sizes]
    why = (": exactly those where S + 1 = W is a CUDA-graph capture size, so the idle rank's "
           "dummy batch pads to W tokens" if captured == crashing else "")
    return Answer({"crashing": crashing}, f"Of max_num_seqs 2 … 16, these crash: "
                  f"{ranges(crashing) or 'none'}{why}.")


# --------------------------------------------------------------------------
# notebook 7
# --------------------------------------------------------------------------

SERVE = ["vllm", "serve", "deepseek-ai/DeepSeek-V3.2",
         "--attention-config", '{"hisparse_config": {}}']  # notebook 7's command, as argv


def served(extra: str = "", version: str = "0.31.0") -> Answer:
    """The verdict for all traffic of ``vllm serve`` (HiSparse on) with ``extra`` flags."""
    return _verdict(exposure(from_command(SERVE + extra.split(), version).knobs))


def fix_pr_knobs() -> Answer:
    return _verdict(exposure(_knobs(max_num_seqs=2)))


def fix_pr_b2() -> Answer:
    return _verdict(exposure(_knobs(max_num_seqs=2, max_num_batched_tokens=2)))


def _verdict(exp) -> Answer:
    tokens = sorted({st.tokens for st in exp.steps if st.tokens})
    kinds = [st.kind for st in exp.steps]
    if exp.exposed:
        text = (f"Exposed: {len(exp.steps)} kind(s) of step kill it ("
                + "; ".join(st.what for st in exp.steps) + ").")
    else:
        text = f"Safe for all traffic: {exp.never_because}."
    return Answer({"exposed": exp.exposed, "tokens": tokens, "kinds": kinds}, text)


EXERCISES: dict[str, list[Exercise]] = {
    "off_by_one": [
        Exercise("Set num_speculative_tokens = 2 with max_num_seqs = 2. Predict q, C, W and "
                 "the crashing size before looking.", mtp_sizes),
        Exercise("Set max_num_batched_tokens = 4 with max_num_seqs = 4 and "
                 "num_speculative_tokens = 0 (C = B). Which batch crashes now?", c_equals_b),
        Exercise("Set max_num_seqs = 2, num_speculative_tokens = 0 and max_num_batched_tokens "
                 "= 0 (not set), then drag max_model_len across its whole range: does C move?",
                 model_len_moves_c),
        Exercise("With max_num_seqs = 2 and num_speculative_tokens = 2, type B = 2 … 7 into "
                 "max_num_batched_tokens: where does C follow B?", b_moves_c),
    ],
    "startup": [
        Exercise("With the fix PR's prompts 2, 3, 200 at max_num_seqs = 2, which prompt "
                 "crashes first, and why not start-up?", first_prompt_crash),
        Exercise("Set max_num_seqs = 1 and tick enforce_eager: where does the crash move?",
                 eager_moves_crash),
        Exercise("Set max_num_batched_tokens = 64: which max_num_seqs crash at start-up, "
                 "which at a prompt, which are safe, which refused?", strip_with_b64),
    ],
    "versions": [
        Exercise("Set max_num_batched_tokens = 64 and add 67 to prompt_lens: how is the "
                 "67-token prompt chunked, and which other lengths crash 0.31.0?", chunked_67),
        Exercise("Select 0.31.0 with routing = fix: does it now serve every prompt as 0.32.0?",
                 fix_matches_032),
        Exercise("Switch attention_backend to FLASHMLA_SPARSE: which prefills are still "
                 "routed?", flashmla_routes),
        Exercise("Set num_speculative_tokens = 1 and prompt_lens 2, 4, 5, 6: which prompt "
                 "crashes 0.31.0?", mtp_workload),
    ],
    "recordings": [
        Exercise("How many recorded runs does the model match exactly?", recordings_agree),
        Exercise("Pick v0.31.0-stock-s2-b64: why does the 67-token prompt crash with stop=3?",
                 stop_3_at_b64),
    ],
    "traffic": [
        Exercise("Before running it: at which step does the default traffic (prompts of 3 and 2 "
                 "tokens arriving together, max_num_seqs = 4) crash, and with what n?",
                 default_traffic),
        Exercise("In the map: which max_num_seqs serve the default traffic?", traffic_map),
        Exercise("Set arrival_spacing = 1: does the default traffic still crash?",
                 spaced_traffic),
    ],
    "two_gpus": [
        Exercise("Set max_num_seqs = 7: which rank dies, at which step, on whose batch?",
                 dp_crash),
        Exercise("Which max_num_seqs from 2 to 16 crash this scenario under 0.31.0?",
                 dp_crashing_seqs),
        Exercise("Select vLLM 0.32.0 with max_num_seqs = 7: does any rank crash?",
                 lambda: dp_crash(7, "0.32.0")),
    ],
    "exposure": [
        Exercise("Add --attention-backend FLASHMLA_SPARSE to the command: is the server still "
                 "exposed, and why?", lambda: served("--attention-backend FLASHMLA_SPARSE")),
        Exercise("Add --max-num-batched-tokens 1024 instead: safe? (and what does a step "
                 "lose?)", lambda: served("--max-num-batched-tokens 1024")),
        Exercise("Set vllm_version to 0.32.0 with the command as it was.",
                 lambda: served(version="0.32.0")),
        Exercise("Add --max-model-len 1000: no prompt of 1025 tokens fits any more. Which "
                 "traffic still kills the server?", lambda: served("--max-model-len 1000")),
        Exercise("Empty the command box, then set the fix PR's knobs: vllm_version 0.31.0, "
                 "max_num_seqs = 2, max_model_len = 320, max_num_batched_tokens = 0 (not set; "
                 "the knobs show the last command's values until you move them). Which step "
                 "size kills it?", fix_pr_knobs),
        Exercise("With those knobs, set max_num_batched_tokens = 2: is it still exposed?",
                 fix_pr_b2),
    ],
}


def try_this_html(notebook: str) -> str:
    """The notebook's "Try this": each question, its computed answer folded away."""
    items = "".join(
        f"<li>{esc(ex.question)}<details class='hs-answer'><summary>Show the answer"
        f"</summary>{esc(ex.answer().text)}</details></li>" for ex in EXERCISES[notebook])
    return (f"{CSS}<div class='hisparse-dashboard hs-try-this'><h3>Try this</h3>"
            f"<ol>{items}</ol><div class='hs-note'>Each answer is computed by the model when "
            f"this cell runs (hisparse_model.views.exercises), so it is never stale.</div></div>")
