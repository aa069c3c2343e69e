"""Notebook 2: every start-up batch, each prompt, a strip over max_num_seqs 1 ... 256."""

from __future__ import annotations


from ..text.plural import count
from ..text import chart_data as cd
from ..answers.advice import ranges
from ..answers.predict import predict
from .charts import strip_chart
from .controls import SPECS, knob_control, parse_prompt_lens, text_control
from .buffers import is_swap_overflow, picture_for_prediction, picture_html
from .dashboard import Dashboard, Screen
from .svg import LABELS, PALETTE
from .tables import (BATCH_HEADERS, batch_rows, chunk_groups, cite_html, esc, formulas_html,
                     outcome_html, static_html, table)

KNOBS = ("vllm_version", "attention_backend", "max_num_seqs", "num_speculative_tokens",
         "max_num_batched_tokens", "max_model_len", "enforce_eager", "cudagraph_mode")
DEFAULT_PROMPTS = "2, 3, 200"  # the fix PR's reproduction loop
# the strip's cells, each a verdict on the server at that max_num_seqs (server_verdict.py)
STRIP_KINDS = (cd.INVALID, cd.NEVER_STARTS, cd.STARTUP_CRASH, cd.RUNTIME_CRASH, cd.EXPOSED,
               cd.UNDECIDED, cd.SAFE)
PROMPTS_HELP = "prompt lengths in tokens, comma-separated; each is served alone"


def ranges_text(parts) -> str:
    """``[("safe", [4, 5, 6]), ("refused", [])]`` -> ``"safe: 4-6"``: the caption under a strip."""
    return " · ".join(f"{label}: {ranges(values)}" for label, values in parts if values)


def prompt_name(i: int, n: int) -> str:
    """Prompt ``i`` (from 0 in a list) as every dashboard names it: from 1, with its length."""
    return f"prompt {i + 1} ({count(n, 'token')})"


def prompt_word(p) -> str:
    """``ok``, ``crash`` or ``not_run`` (the engine died at start-up or on an earlier prompt)."""
    return "not_run" if not p.ran else ("ok" if p.ok else "crash")


def _numbers_html(pred) -> str:
    s, cites = pred.sizes, pred.plan.rules.cites
    return (f"<div class='hs-big'>B = <b>{s.max_num_batched_tokens}</b>, C = <b class='hs-C'>"
            f"{s.swap_capacity}</b>, W = <b class='hs-W'>{s.workspace_rows}</b>; capture "
            f"sizes <b class='hs-captures'>{esc(pred.capture_sizes)}</b> "
            f"({cite_html(cites['capture_sizes'])}); cudagraph_mode "
            f"<b>{esc(pred.cudagraph_mode)}</b></div>{formulas_html(pred)}")


def _startup_html(pred) -> str:
    s, cites, crash_b = pred.sizes, pred.plan.rules.cites, pred.startup_crash_batch
    if crash_b is None:
        verdict = (f"<b style='color:{PALETTE['ok']}'>start-up survives</b>: no start-up "
                   f"batch hands W = {s.workspace_rows} tokens to swap_in.")
    elif not is_swap_overflow(crash_b.error):  # not the overflow: no n = W to speak of
        verdict = (f"<b style='color:{PALETTE[cd.NEVER_STARTS]}'>start-up dies</b> at its "
                   f"{esc(crash_b.label)} ({count(crash_b.num_tokens, 'token')}, the last "
                   f"row), with an error that is not the swap-row overflow "
                   f"(routed tokens: n = {crash_b.routed or 0}):<br>"
                   f"<code>{esc(pred.startup_error)}</code>")
    else:
        verdict = (f"<b style='color:{PALETTE[cd.CRASH]}'>start-up dies</b> at the "
                   f"{esc(crash_b.label)} of {count(crash_b.num_tokens, 'token')} (the red row, pinned "
                   f"at the bottom of the table): it hands n = {crash_b.routed} = W tokens to "
                   f"the routing, which takes swap_in ({cite_html(cites['predicate'])}); "
                   f"swap_in has only C = {s.swap_capacity} rows:<br>"
                   f"<code>{esc(pred.startup_error)}</code>")
    if not pred.startup:
        table_html = ("<div class='hs-note hs-empty-startup'><i>No start-up batch reaches "
                      "the routing: with enforce_eager (or cudagraph_mode NONE and no "
                      "warmup) there are no CUDA-graph captures and no JIT warmup, so the "
                      "first batch the routing sees is the first prompt's.</i></div>")
    else:
        shown = list(pred.startup)
        if crash_b is not None:  # the engine stops at the crash: later batches never run
            shown = shown[:shown.index(crash_b) + 1]
        rows, classes = batch_rows(shown)
        table_html = ("<div class='hs-scroll'>"
                      + table(BATCH_HEADERS, rows, raw=True, row_classes=classes) + "</div>")
    return (f"<div class='hs-note'>{verdict}</div><details open><summary>start-up "
            f"batches in engine order ({cite_html(cites['memory_profile'])}, then "
            f"{cite_html(cites['startup'])})</summary>{table_html}</details>")


ENDS = 3  # groups of batches written at each end of a prompt's cell; the rest counted


def _routed(b) -> str:
    return f"n={b.routed} → {b.route}" if b.routed else "not routed"


def batches_text(batches) -> str:
    """A prompt's batches in a line or two however long the prompt: consecutive chunks routed
    alike are one group ("prefill chunks 1-99/100: n=2 → swap_in each"), and past
    2 · :data:`ENDS` groups the first and last :data:`ENDS` are written, the rest counted."""
    said = [_routed(b) for b in batches]
    groups = chunk_groups([b.label for b in batches], said)
    words = [f"{label}: {said[start]}" if first is None else
             f"{label} chunk {first}/{of}: {said[start]}" if first == last else
             f"{label} chunks {first}–{last}/{of}: {said[start]} each"
             for start, _, label, first, last, of in groups]
    if len(words) > 2 * ENDS:
        left = sum(end - start for start, end, *_ in groups[ENDS:-ENDS])
        words = words[:ENDS] + [f"… {count(left, 'more batch', 'more batches')} …"] + words[-ENDS:]
    return ", ".join(words)


def prompt_batches_text(p) -> str:
    """A prompt's cell: the batches that ran (to its crash), then how many never ran, as
    ``hisparse predict`` says them; a prompt not run has no batches ("–")."""
    if not p.ran:
        return "–"
    later = len(p.batches) - len(p.ran_batches)
    return batches_text(p.ran_batches) + (
        f"; not run: {count(later, 'later batch', 'later batches')} (the engine died)"
        if later else "")


def _prompts_html(pred) -> str:
    rows = [[esc(prompt_name(i, p.n)), esc(prompt_batches_text(p)),
             outcome_html("ok" if p.ok else p.error, p.ran, f": the engine died at {p.died_at}")]
            for i, p in enumerate(pred.prompts)]
    return ("<div class='hs-note'><b>prompts</b>, each served alone (8 output tokens)</div>"
            + table(["prompt", "batches: routed n → route", "outcome"], rows, raw=True))


def headline_html(pred) -> str:
    """The one answer first: does start-up survive, and which prompt (from 1) crashes."""
    crash_b = pred.startup_crash_batch
    if crash_b is not None and not is_swap_overflow(crash_b.error):
        text = (f"<b style='color:{PALETTE[cd.NEVER_STARTS]}'>Start-up dies</b> on its "
                f"{esc(crash_b.label)} ({count(crash_b.num_tokens, 'token')}), with "
                f"<code>{esc(crash_b.error)}</code>, before any token reaches the HiSparse "
                "routing: not the swap-row overflow.")
    elif crash_b is not None:
        text = (f"<b style='color:{PALETTE[cd.CRASH]}'>Start-up dies</b> on its {esc(crash_b.label)}: "
                f"n = {crash_b.routed} = W routed tokens, C = {pred.sizes.swap_capacity} swap rows.")
    else:
        bad = [i + 1 for i, p in enumerate(pred.prompts) if p.ran and not p.ok]
        text = (f"<b style='color:{PALETTE['ok']}'>Start-up survives</b>; "
                + (f"<b style='color:{PALETTE[cd.CRASH]}'>prompt {bad[0]}</b> (of "
                   f"{pred.prompts[bad[0] - 1].n} tokens) is the first request that crashes."
                   if bad else "every prompt is served."))
    return f"<div class='hs-headline'>{text}</div>"


def startup_report(pred) -> str:
    """The headline, the buffers for the batch that matters, sizes with their formulas, every
    start-up batch (to the crash), and each prompt."""
    return (headline_html(pred) + picture_html(picture_for_prediction(pred))
            + _numbers_html(pred) + _startup_html(pred) + _prompts_html(pred))


def static_report(pred) -> str:
    """:func:`startup_report` for one fixed prediction, styled outside a dashboard."""
    return static_html(startup_report(pred))


class StartupDashboard(Dashboard):
    """Capture sizes, start-up batches in engine order, each prompt, and the max_num_seqs strip."""

    name = "startup"

    def __init__(self, prompt_lens: str = DEFAULT_PROMPTS, **initial):
        controls = {n: knob_control(SPECS[n], initial.get(n)) for n in KNOBS}
        controls["prompt_lens"] = text_control("prompt_lens", prompt_lens, PROMPTS_HELP)
        super().__init__(controls)

    def compute(self) -> Screen:
        knobs = self.knobs()
        lens = parse_prompt_lens(self.value("prompt_lens"))
        pred = predict(knobs, lens)
        s, crash_b = pred.sizes, pred.startup_crash_batch
        prompts = ",".join(f"{p.n}:{prompt_word(p)}" for p in pred.prompts)
        captures = ", ".join(map(str, pred.capture_sizes)) or "none"
        labels = {
            "B": str(s.max_num_batched_tokens), "q": str(s.max_decode_query_len),
            "C": str(s.swap_capacity), "W": str(s.workspace_rows),
            "capture_sizes": captures, "cudagraph_mode": pred.cudagraph_mode,
            "startup": "ok" if pred.startup_ok else pred.startup_error,
            "startup_crash_batch": "" if crash_b is None else
            f"{crash_b.label} of {count(crash_b.num_tokens, 'token')} ({crash_b.phase})",
            "prompts": prompts,
            "summary": (f"max_num_seqs={knobs.max_num_seqs} C={s.swap_capacity} "
                        f"W={s.workspace_rows} capture_sizes={captures.replace(', ', ',')} "
                        f"startup={'ok' if crash_b is None else f'crash(n={crash_b.routed})'} "
                        f"prompts={prompts or 'none'}"),
        }
        state = {**knobs.as_dict(), "prompt_lens": lens}
        return Screen(state, pred, labels, startup_report(pred), lambda: self._strip(knobs))

    def _strip(self, knobs) -> dict:
        """The strip's data (the vectorised sweep), and its one-line summary as a label."""
        strip = cd.seqs_strip(knobs)
        by_kind = {k: [v for v, o in zip(strip["max_num_seqs"], strip["outcome"]) if o == k]
                   for k in STRIP_KINDS}
        self.labels["sweep_summary"] = "sweep " + " ".join(
            f"{k}={ranges(v)}" for k, v in by_kind.items())
        caption = "max_num_seqs " + ranges_text((LABELS[k], v) for k, v in by_kind.items())
        # the version the strip is for travels with its data: a new version redraws the title
        return {**strip, "current": knobs.max_num_seqs, "caption": caption,
                "vllm_version": knobs.vllm_version}

    def draw(self) -> str:
        v = self.plot_data["vllm_version"]
        return strip_chart(self.plot_data, self.plot_data["current"],
                           title=f"vLLM {v}, the other knobs as set: what each max_num_seqs does",
                           caption=self.plot_data["caption"])


def startup_dashboard(**initial) -> StartupDashboard:
    """Notebook 2: start-up batches and prompts; a strip over max_num_seqs 1 ... 256."""
    return StartupDashboard(**initial)
